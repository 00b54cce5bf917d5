"""The one module that touches Beam's file sink internals: temp shard files, their handles, the commit by rename.

A split's shards go through Beam's ``FileBasedSink`` (the base of the sink
``WriteToTFRecord`` wraps), driven one shard at a time instead of by
``WriteToTFRecord``'s own graph, whatever the file format (``--file-format``):

* ``open_writer(init_result, uid)`` opens a temp file
  ``<temp_dir>/<uid><suffix>``, through :meth:`ShardSink.open`; the
  writer's ``temp_handle`` is what ``open`` returned, ``write`` hands a record
  to the format's writer through :meth:`ShardSink.write_encoded_record`,
  ``close`` returns the temp path;
* ``finalize_write(init_result, temp_paths, None)`` renames a split's temp
  files to their final names, numbering them in the order of the sorted temp
  paths (skipping those a previous commit already renamed), then deletes
  ``init_result``.

The record writers are the file formats' adapters (:mod:`img2tfrecord.shard_formats`): a
format that streams writes into the temp file (gzip shards compressed by Beam's
``CompressedFile``); one whose writer opens local paths only writes a local file, which
is the temp file of a local output and is copied to the temp path of a remote one when closed.
``tests/test_beam_adapter.py`` checks each of these against the installed Beam.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import uuid
from typing import Any, BinaryIO, List, NamedTuple, Optional, Protocol, Sequence, cast

from apache_beam import coders
from apache_beam.io.filebasedsink import FileBasedSink
from apache_beam.io.filesystem import CompressedFile, CompressionTypes
from apache_beam.io.filesystems import FileSystems

from img2tfrecord import shard_formats, storage
from img2tfrecord.schemas import output_files
from img2tfrecord.tfrecord_codec import IndexEntry

MIME_TYPE = "application/octet-stream"  # what WriteToTFRecord's sink declares
_COPY_CHUNK = 8 << 20


def _scratch_path(suffix: str) -> str:
    """A new local file for a shard on its way to a remote output (removed once copied)."""
    fd, path = tempfile.mkstemp(prefix="img2tfrecord-", suffix=suffix)
    os.close(fd)
    return path


class _DigestingFile:
    """A binary file being written, with the count and sha256 of the bytes that reach it."""

    mode = "wb"

    def __init__(self, raw: Any):
        self._raw = raw
        self._hash = hashlib.sha256()
        self.bytes_written = 0

    def write(self, data: bytes) -> None:
        self._hash.update(data)
        self.bytes_written += len(data)
        self._raw.write(data)

    def tell(self) -> int:
        return self.bytes_written

    def flush(self) -> None:
        self._raw.flush()

    def close(self) -> None:
        self._raw.close()

    @property
    def closed(self) -> bool:
        return self._raw.closed

    def hexdigest(self) -> str:
        return self._hash.hexdigest()

    def __enter__(self) -> _DigestingFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class WrittenShard(NamedTuple):
    """A closed temp shard: its path, its size as stored and the sha256 of those bytes."""

    temp_path: str
    num_bytes: int
    sha256: str


class _ShardHandle:
    """The temp handle of one shard: the file as stored, what records are written to, and the format's writer."""

    def __init__(self, file: _DigestingFile, stream: Any, records: shard_formats.RecordWriter):
        self.file = file
        self.stream = stream  # the file itself, or a gzip stream over it
        self.records = records
        self.last_entry: Optional[IndexEntry] = None  # where the last record written lies

    @property
    def bytes_written(self) -> int:
        return self.file.bytes_written

    def close(self) -> None:
        self.records.close()
        self.stream.close()

    def written(self, temp_path: str) -> WrittenShard:
        return WrittenShard(temp_path, self.file.bytes_written, self.file.hexdigest())


class _LocalFileHandle:
    """The temp handle of a shard whose writer opens local paths: its writer on a local file, copied to a
    remote temp path when closed (``target`` None: the local file is the temp file)."""

    def __init__(self, local_path: str, target: Optional[str], mime_type: str, records: Any):
        self.records = records
        self.local_path = local_path
        self.target = target
        self.mime_type = mime_type
        self.last_entry: Optional[IndexEntry] = None
        self._stored: Optional[WrittenShard] = None

    @property
    def bytes_written(self) -> int:
        if self._stored is not None:
            return self._stored.num_bytes
        try:
            return os.path.getsize(self.local_path)  # what the writer flushed so far
        except OSError:
            return 0

    def close(self) -> None:
        self.records.close()
        try:
            if self.target is None:
                digest = hashlib.sha256()
                with open(self.local_path, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        digest.update(chunk)
                self._stored = WrittenShard(self.local_path, os.path.getsize(self.local_path), digest.hexdigest())
                return
            copied = _DigestingFile(FileSystems.create(self.target, self.mime_type, CompressionTypes.UNCOMPRESSED))
            with copied, open(self.local_path, "rb") as source:
                shutil.copyfileobj(source, cast(BinaryIO, copied), _COPY_CHUNK)
            self._stored = WrittenShard(self.target, copied.bytes_written, copied.hexdigest())
        finally:
            if self.target is not None:
                os.remove(self.local_path)

    def written(self, temp_path: str) -> WrittenShard:
        assert self._stored is not None, "written before closed"
        return self._stored._replace(temp_path=temp_path)


class _Handle(Protocol):
    """What the sink's hooks and :class:`ShardFile` use of a temp handle, whatever the format."""

    records: Any  # the format's record writer: ``write(record)``
    last_entry: Optional[IndexEntry]

    @property
    def bytes_written(self) -> int: ...

    def close(self) -> None: ...

    def written(self, temp_path: str) -> WrittenShard: ...


class ShardSink(FileBasedSink):
    """The shards of one split: temp files in ``temp_dir``, committed to ``<output_dir>/<final_name(shard)>``.

    The temp folder is fixed (the run's, so a resumed run finds the shards
    it wrote) instead of a new ``beam-temp-*`` per run.
    """

    def __init__(
        self,
        output_dir: str,
        split: str,
        num_shards: int,
        compression: str,
        temp_dir: str,
        generation: int = 0,
        file_format: str = shard_formats.DEFAULT_FORMAT,
        sequence: bool = False,
        class_names: Sequence[str] = (),
    ):
        super().__init__(
            file_path_prefix=FileSystems.join(output_dir, output_files.shard_prefix(split, generation)),
            coder=coders.BytesCoder(),
            file_name_suffix=output_files.shard_suffix(compression, file_format),
            num_shards=num_shards,
            shard_name_template=output_files.shard_name_template(file_format),
            mime_type=MIME_TYPE,
            compression_type=CompressionTypes.GZIP if compression == "gzip" else CompressionTypes.UNCOMPRESSED,
        )
        self.output_dir = output_dir
        self.split = split
        self.shard_count = num_shards
        self.compression = compression
        self.temp_dir = temp_dir
        self.generation = generation
        self.file_format = file_format
        self.sequence = sequence  # the records are SequenceExamples (a WebDataset sample holds their frames)
        self.class_names = tuple(class_names)  # the run's classes, for formats that describe the label
        self.adapter = shard_formats.adapter(file_format)

    # -- the hooks Beam's writer calls ----------------------------------------------------------

    def initialize_write(self) -> str:
        if not FileSystems.exists(self.temp_dir):
            try:
                FileSystems.mkdirs(self.temp_dir)
            except OSError:  # made meanwhile by another worker
                pass
        return self.temp_dir

    def open(self, temp_path: str) -> _Handle:
        stem = self.final_name(_shard_of(temp_path))[: -len(self.suffix)]
        context = shard_formats.ShardContext(stem, self.sequence, self.class_names)
        if not self.adapter.streams:
            if storage.is_remote(temp_path):
                local = _scratch_path(self.suffix)
                return _LocalFileHandle(local, temp_path, self.mime_type, self.adapter.open_writer(local, context))
            return _LocalFileHandle(temp_path, None, self.mime_type, self.adapter.open_writer(temp_path, context))
        raw = FileSystems.create(temp_path, self.mime_type, CompressionTypes.UNCOMPRESSED)
        digesting = _DigestingFile(raw)
        stream: Any = digesting
        if self.compression_type == CompressionTypes.GZIP:
            stream = CompressedFile(cast(BinaryIO, digesting), compression_type=CompressionTypes.GZIP)
        return _ShardHandle(digesting, stream, self.adapter.open_writer(stream, context))

    def write_encoded_record(self, file_handle: _Handle, value: bytes) -> None:
        file_handle.last_entry = file_handle.records.write(value)

    def close(self, file_handle: _Handle) -> None:
        file_handle.close()

    # -- what the shard step uses ---------------------------------------------------------------

    @property
    def suffix(self) -> str:
        """The shards' file name suffix (``.tfrecord``, ``.tfrecord.gz``, ``.array_record``, ``.tar``)."""
        return output_files.shard_suffix(self.compression, self.file_format)

    @property
    def indexed(self) -> bool:
        """Whether the split's shards get index files (the format's adapter says; uncompressed only)."""
        return self.adapter.has_index_files(self.compression)

    def final_name(self, shard: int) -> str:
        return output_files.shard_file_name(
            self.split, shard, self.shard_count, self.compression, self.generation, self.file_format
        )

    def open_shard(self, shard: int) -> ShardFile:
        """A new temp file for shard ``shard``; a retried attempt gets its own."""
        return ShardFile(self, shard)

    def commit(self, temp_paths: Sequence[str]) -> List[str]:
        """Rename one temp file per shard to the final names; -> the final paths renamed now.

        ``temp_paths`` holds exactly ``shard_count`` paths; shard ``i`` is the
        ``i``-th in sorted order (the uid starts with the zero-padded shard).
        A path already renamed by an earlier commit is skipped; existing final
        files are kept (Beam's ``pre_finalize``, which deletes them, is not called).
        """
        return list(self.finalize_write(self.temp_dir, list(temp_paths), None))


class ShardSinks(NamedTuple):
    """Where an output's splits are written: ``sink(split, num_shards)`` is a split's ``ShardSink``.

    The shard counts may be known only inside the graph (a side input), so the sinks are made
    where they are used; each split's temp files go to ``<staging_dir>/<split>``. ``generation`` > 0
    names the shards of an append (``output_files.shard_file_name``); ``file_format`` is ``--file-format``.
    """

    output_dir: str
    compression: str
    staging_dir: str
    generation: int = 0
    file_format: str = shard_formats.DEFAULT_FORMAT
    sequence: bool = False  # SequenceExample records (convert --sequence)

    def initialize(self) -> None:
        """Make the staging folder (OSError when it cannot be made)."""
        if not FileSystems.exists(self.staging_dir):
            try:
                FileSystems.mkdirs(self.staging_dir)
            except OSError:
                if not FileSystems.exists(self.staging_dir):  # not made meanwhile by another worker
                    raise

    def sink(self, split: str, num_shards: int, class_names: Sequence[str] = ()) -> ShardSink:
        """``class_names``: the run's classes (label id ``i`` is ``class_names[i]``), for formats that store them."""
        return ShardSink(
            self.output_dir,
            split,
            num_shards,
            self.compression,
            FileSystems.join(self.staging_dir, split),
            self.generation,
            self.file_format,
            self.sequence,
            class_names,
        )


def _shard_of(temp_path: str) -> int:
    """The shard a temp file was opened for: its uid starts with the zero-padded shard (:class:`ShardFile`)."""
    return int(temp_path.rsplit("/", 1)[-1].split("-", 1)[0])


class ShardFile:
    """One shard's temp file, open for records: ``write``, ``bytes_written`` so far, ``close``."""

    def __init__(self, sink: ShardSink, shard: int):
        self._writer = sink.open_writer(sink.initialize_write(), f"{shard:05d}-{uuid.uuid4().hex}")
        self._handle: _Handle = self._writer.temp_handle

    def write(self, record: bytes) -> Optional[IndexEntry]:
        """Write ``record`` into the file; -> its ``(offset, length)`` there (None: the format keeps its own index)."""
        self._writer.write(record)
        return self._handle.last_entry

    @property
    def bytes_written(self) -> int:
        """The bytes that reached the file (gzip: compressed, as they come), also after ``close``."""
        return self._handle.bytes_written

    def close(self) -> WrittenShard:
        return self._handle.written(self._writer.close())
