"""The one module that touches Beam's file sink internals: temp shard files, their handles, the commit by rename.

A split's shards go through Beam's ``FileBasedSink`` (the base of the sink
``WriteToTFRecord`` wraps), driven one shard at a time instead of by
``WriteToTFRecord``'s own graph:

* ``open_writer(init_result, uid)`` opens a temp file
  ``<temp_dir>/<uid>.<split><suffix>``, through :meth:`ShardSink.open`; the
  writer's ``temp_handle`` is what ``open`` returned, ``write`` frames a record
  through :meth:`ShardSink.write_encoded_record`, ``close`` returns the temp path;
* ``finalize_write(init_result, temp_paths, None)`` renames a split's temp
  files to their final names, numbering them in the order of the sorted temp
  paths (skipping those a previous commit already renamed), then deletes
  ``init_result``.

Records are framed by :mod:`img2tfrecord.tfrecord_codec`, as ``WriteToTFRecord``
frames them; gzip shards are compressed by Beam's ``CompressedFile``.
``tests/test_beam_adapter.py`` checks each of these against the installed Beam.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any, BinaryIO, List, NamedTuple, Sequence, cast

from apache_beam import coders
from apache_beam.io.filebasedsink import FileBasedSink
from apache_beam.io.filesystem import CompressedFile, CompressionTypes
from apache_beam.io.filesystems import FileSystems

from img2tfrecord import tfrecord_codec
from img2tfrecord.schemas import manifest

MIME_TYPE = "application/octet-stream"  # what WriteToTFRecord's sink declares


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


class _ShardHandle(NamedTuple):
    """The temp handle of one shard: the file as stored, and what records are written to."""

    file: _DigestingFile
    stream: Any  # the file itself, or a gzip stream over it


class WrittenShard(NamedTuple):
    """A closed temp shard: its path, its size as stored and the sha256 of those bytes."""

    temp_path: str
    num_bytes: int
    sha256: str


class ShardSink(FileBasedSink):
    """The shards of one split: temp files in ``temp_dir``, committed to ``<output_dir>/<final_name(shard)>``.

    The temp folder is fixed (the run's, so a resumed run finds the shards
    it wrote) instead of a new ``beam-temp-*`` per run.
    """

    def __init__(
        self, output_dir: str, split: str, num_shards: int, compression: str, temp_dir: str, generation: int = 0
    ):
        super().__init__(
            file_path_prefix=FileSystems.join(output_dir, manifest.shard_prefix(split, generation)),
            coder=coders.BytesCoder(),
            file_name_suffix=manifest.shard_suffix(compression),
            num_shards=num_shards,
            shard_name_template=manifest.SHARD_NAME_TEMPLATE,
            mime_type=MIME_TYPE,
            compression_type=CompressionTypes.GZIP if compression == "gzip" else CompressionTypes.UNCOMPRESSED,
        )
        self.output_dir = output_dir
        self.split = split
        self.shard_count = num_shards
        self.compression = compression
        self.temp_dir = temp_dir
        self.generation = generation

    # -- the hooks Beam's writer calls ----------------------------------------------------------

    def initialize_write(self) -> str:
        if not FileSystems.exists(self.temp_dir):
            try:
                FileSystems.mkdirs(self.temp_dir)
            except OSError:  # made meanwhile by another worker
                pass
        return self.temp_dir

    def open(self, temp_path: str) -> _ShardHandle:
        raw = FileSystems.create(temp_path, self.mime_type, CompressionTypes.UNCOMPRESSED)
        digesting = _DigestingFile(raw)
        if self.compression_type == CompressionTypes.GZIP:
            gzipped = CompressedFile(cast(BinaryIO, digesting), compression_type=CompressionTypes.GZIP)
            return _ShardHandle(digesting, gzipped)
        return _ShardHandle(digesting, digesting)

    def write_encoded_record(self, file_handle: _ShardHandle, value: bytes) -> None:
        file_handle.stream.write(tfrecord_codec.encode_record(value))

    def close(self, file_handle: _ShardHandle) -> None:
        file_handle.stream.close()

    # -- what the shard step uses ---------------------------------------------------------------

    @property
    def indexed(self) -> bool:
        """Whether the split's shards get index files (uncompressed shards only)."""
        return self.compression_type != CompressionTypes.GZIP

    def final_name(self, shard: int) -> str:
        return manifest.shard_file_name(self.split, shard, self.shard_count, self.compression, self.generation)

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
    names the shards of an append (``manifest.shard_file_name``).
    """

    output_dir: str
    compression: str
    staging_dir: str
    generation: int = 0

    def initialize(self) -> None:
        """Make the staging folder (OSError when it cannot be made)."""
        if not FileSystems.exists(self.staging_dir):
            try:
                FileSystems.mkdirs(self.staging_dir)
            except OSError:
                if not FileSystems.exists(self.staging_dir):  # not made meanwhile by another worker
                    raise

    def sink(self, split: str, num_shards: int) -> ShardSink:
        return ShardSink(
            self.output_dir,
            split,
            num_shards,
            self.compression,
            FileSystems.join(self.staging_dir, split),
            self.generation,
        )


class ShardFile:
    """One shard's temp file, open for records: ``write``, ``bytes_written`` so far, ``close``."""

    def __init__(self, sink: ShardSink, shard: int):
        self._writer = sink.open_writer(sink.initialize_write(), f"{shard:05d}-{uuid.uuid4().hex}")
        self._handle: _ShardHandle = self._writer.temp_handle

    def write(self, record: bytes) -> None:
        """Frame ``record`` into the file."""
        self._writer.write(record)

    @property
    def bytes_written(self) -> int:
        """The bytes that reached the file (gzip: compressed, as they come), also after ``close``."""
        return self._handle.file.bytes_written

    def close(self) -> WrittenShard:
        temp_path = self._writer.close()
        return WrittenShard(temp_path, self._handle.file.bytes_written, self._handle.file.hexdigest())
