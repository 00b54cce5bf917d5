"""Read an output directory without Beam or TensorFlow: files, manifest, TFRecord shards, Examples.

Used by ``inspect``, ``verify`` and the TensorFlow-free readers of
:mod:`img2tfrecord.readers.datasource`. Local paths are read with plain Python
file objects; paths with a scheme (``gs://...``) go through Beam's
FileSystems (:mod:`img2tfrecord.storage`), imported only then.

The TFRecord format -- framing, checksums, offsets, index files -- is
:mod:`img2tfrecord.tfrecord_codec`'s; this module opens the shards it reads
and turns its records into the readers' values. ``tf.train.Example`` messages are
parsed with the TensorFlow-free message classes of
:mod:`img2tfrecord.schemas.example_proto`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from typing import Any, BinaryIO, Dict, Iterator, List, Mapping, Sequence, Tuple

from img2tfrecord import shard_formats, storage
from img2tfrecord.schemas import dataset_json, example_proto, features, output_files
from img2tfrecord.schemas.dataset_json import DatasetManifest
from img2tfrecord.tfrecord_codec import IndexEntry, Record, RecordError, read_record_at

# ---------------------------------------------------------------------------
# The manifest.


def read_manifest(directory: str) -> DatasetManifest:
    """The ``dataset.json`` of an output directory.

    Raises FileNotFoundError naming the path when the directory or its
    manifest does not exist, ValueError when the manifest is not one this
    version reads (a ``dataset_json.DatasetJsonError`` naming the field).
    Does not look at ``_SUCCESS`` (see :func:`is_complete`).
    """
    if not storage.isdir(directory):
        raise FileNotFoundError(f"no such directory: {directory}")
    path = storage.join(directory, output_files.MANIFEST_FILE)
    if not storage.exists(path):
        raise FileNotFoundError(
            f"{path} not found: {directory} is not an img2tfrecord output directory "
            f"(or its conversion has not finished)"
        )
    return dataset_json.loads(storage.read_text(path))


def is_complete(directory: str) -> bool:
    """True when the writer finished: ``_SUCCESS`` exists."""
    return storage.exists(storage.join(directory, output_files.SUCCESS_FILE))


def shard_paths(directory: str, doc: DatasetManifest, split: str) -> List[Tuple[str, int]]:
    """``(path, num_records)`` of every shard of ``split`` listed in the manifest, in order."""
    return [(storage.join(directory, s.file), s.num_records) for s in doc.splits[split].shards]


# ---------------------------------------------------------------------------
# Shards: each format is its adapter's (shard_formats/); here, the files are opened.


def scan_records(
    path: str,
    compression: str = "none",
    check_crc: bool = True,
    *,
    file_format: str = output_files.DEFAULT_FILE_FORMAT,
    sequence: bool = False,
) -> Iterator[Record]:
    """Every record of one shard, in order, whatever its file format (``file_format``; ``sequence``: the
    records are SequenceExamples), read by the format's adapter (``shard_formats/``).

    TFRecord: a record whose data fails its checksum is yielded with ``data_crc_ok=False``; other
    formats give back the record the TFRecord run holds (``Record.offset``: where the format says;
    a record number for formats read by number). Anything that loses the framing raises
    :class:`RecordError` and ends the walk.
    """
    yield from shard_formats.adapter(file_format).scan(path, compression, check_crc, sequence)


def iter_records(
    path: str,
    compression: str = "none",
    check_crc: bool = True,
    *,
    file_format: str = output_files.DEFAULT_FILE_FORMAT,
    sequence: bool = False,
) -> Iterator[Tuple[int, int, bytes]]:
    """``(index, offset, data)`` of every record; any problem, a bad data checksum included, raises RecordError."""
    for record in scan_records(path, compression, check_crc, file_format=file_format, sequence=sequence):
        if not record.data_crc_ok:
            raise RecordError(record.index, record.offset, "data checksum mismatch (corrupt record data)")
        yield record.index, record.offset, record.data


class RandomAccessFile:
    """Reads of byte ranges of one file, safe to share between threads (a :class:`tfrecord_codec.RangeReader`).

    Local files use ``os.pread`` (no shared file position); remote ones a
    seek and read under a lock. Not picklable: each process opens its own.
    """

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        if storage.is_remote(path):
            self._fd = -1
            self._file: BinaryIO | None = storage.open_binary(path)
        else:
            self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
            self._file = None
        self.size = storage.file_size(path)

    def read_at(self, offset: int, n: int) -> bytes:
        """Up to ``n`` bytes from ``offset`` (fewer only at the end of the file)."""
        chunks = []
        if self._file is None:
            while n > 0:
                chunk = os.pread(self._fd, n, offset)
                if not chunk:
                    break
                chunks.append(chunk)
                offset += len(chunk)
                n -= len(chunk)
            return b"".join(chunks)
        with self._lock:
            self._file.seek(offset)
            while n > 0:
                chunk = self._file.read(n)
                if not chunk:
                    break
                chunks.append(chunk)
                n -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        elif self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> RandomAccessFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def walk_offsets(
    path: str, check_crc: bool = True, file_format: str = output_files.DEFAULT_FILE_FORMAT
) -> List[IndexEntry]:
    """``(offset, length)`` of every record of an uncompressed shard, as its index file lists them
    (the format's walk: record headers, a tar's samples; ``RecordError`` for what does not read)."""
    return shard_formats.adapter(file_format).walk_offsets(path, check_crc)


def _format_of(path: str) -> shard_formats.ShardFormat:
    return shard_formats.adapter_of_file(path) or shard_formats.adapter(output_files.DEFAULT_FILE_FORMAT)


def shard_records(path: str, compression: str = "none", check_crc: bool = True) -> Iterator[Record]:
    """Every record of the Example shard ``path``, in order, in the file format its name says
    (:func:`scan_records`)."""
    return scan_records(path, compression, check_crc, file_format=_format_of(path).name)


@contextlib.contextmanager
def numbered_shard(path: str, own: shard_formats.ShardFormat) -> Iterator[shard_formats.NumberedShard]:
    """The shard at ``path`` open for reads by record number (through a local copy where the format needs one)."""
    with contextlib.ExitStack() as stack:
        local = path
        if storage.is_remote(path) and not own.remote_random_access:
            local = stack.enter_context(local_copy(path, own.suffix))
        shard = own.open_numbered(local)
        stack.callback(shard.close)
        yield shard


@contextlib.contextmanager
def local_copy(path: str, suffix: str) -> Iterator[str]:
    """A temporary local copy of the remote file ``path``, removed afterwards."""
    fd, copy = tempfile.mkstemp(prefix="img2tfrecord-", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as target, storage.open_binary(path) as source:
            shutil.copyfileobj(source, target, 8 << 20)
        yield copy
    finally:
        os.remove(copy)


def records_at(path: str, compression: str, wanted: Sequence[Tuple[int, int]]) -> Iterator[Tuple[int, bytes]]:
    """``(index, data)`` of the wanted records ``(index, offset)`` of the Example shard ``path`` that read
    (others are left out): at their offsets in uncompressed shards of formats that place records by offset,
    by number in formats read so, else from a scan up to the last one."""
    own = _format_of(path)
    if not wanted:
        return
    if own.self_framed and compression == output_files.COMPRESSION_NONE:
        with RandomAccessFile(path) as f:
            for index, offset in wanted:
                try:
                    yield index, read_record_at(f, index, offset)
                except RecordError:
                    continue
        return
    if own.random_access == "numbered":
        with numbered_shard(path, own) as shard:
            for index, _ in wanted:
                if 0 <= index < len(shard):
                    yield index, shard.read([index])[0]
        return
    indices = {index for index, _ in wanted}
    last = max(indices)
    for record in scan_records(path, compression, file_format=own.name):
        if record.index in indices and record.data_crc_ok:
            yield record.index, record.data
        if record.index >= last:
            break


def read_record(
    f: RandomAccessFile,
    index: int,
    offset: int,
    length: int,
    file_format: str = output_files.DEFAULT_FILE_FORMAT,
    sequence: bool = False,
) -> bytes:
    """The data of the record an index entry ``(offset, length)`` places in the open shard ``f``, checked as its
    format can (TFRecord: both checksums; tar: the sample in that range, rebuilt)."""
    return shard_formats.adapter(file_format).read_indexed(f, index, offset, length, sequence)


# ---------------------------------------------------------------------------
# tf.train.Example without TensorFlow.


class ExampleError(ValueError):
    """A record that is not a ``tf.train.Example`` matching the declared feature spec."""


_KINDS = {"string": "bytes_list", "int64": "int64_list", "float32": "float_list", "float": "float_list"}


def parse_example(data: bytes, spec_json: Mapping[str, Mapping[str, Any]]) -> Dict[str, Any]:
    """Scalar values of a serialized ``tf.train.Example``, one per feature of ``spec_json``.

    ``spec_json`` is the ``feature_spec`` block of ``dataset.json`` (scalar
    ``FixedLenFeature``s; a ``VarLenFeature`` comes back as a list). Bytes features come back as
    ``bytes``, int64 as ``int``. Raises :class:`ExampleError` when the data
    is not an Example or a declared feature is missing, of another kind, or
    does not hold exactly one value. Features not in the spec are ignored,
    as ``tf.io.parse_example`` does.
    """
    try:
        example = example_proto.Example.FromString(data)
    except Exception as e:  # protobuf's DecodeError, or anything a fuzzed buffer triggers
        raise ExampleError(f"not a tf.train.Example: {e}") from None
    feature_map = example.features.feature
    values: Dict[str, Any] = {}
    for key, entry in spec_json.items():
        kind = _KINDS.get(entry.get("dtype", ""))
        if kind is None:
            raise ExampleError(f"{key}: unsupported dtype {entry.get('dtype')!r} in dataset.json")
        if key not in feature_map:
            raise ExampleError(f"feature {key} missing")
        feature = feature_map[key]
        actual = feature.WhichOneof("kind")
        if entry.get("kind") == features.VAR_LEN and actual in (kind, None):  # detection: a list per image
            values[key] = list(getattr(feature, kind).value)
            continue
        if actual != kind:
            raise ExampleError(f"feature {key}: expected {kind}, found {actual or 'an empty feature'}")
        items = getattr(feature, kind).value
        if len(items) != 1:
            raise ExampleError(f"feature {key}: expected 1 value, found {len(items)}")
        values[key] = items[0]
    return values


def decode_text(value: bytes) -> str:
    return value.decode("utf-8", errors="replace")


def record_source(
    data: bytes, spec_json: Mapping[str, Mapping[str, Any]], sequence: bool
) -> Tuple[str, str, Dict[str, Any]]:
    """``(the input a record was written from, its class name or "", an Example's values)``: an Example's
    ``image/filename`` (its values as ``parse_example`` gives them), a SequenceExample's ``clip/name`` (its
    context; no values). Raises :class:`ExampleError` for a record that is neither."""
    if not sequence:
        values = parse_example(data, spec_json)
        return (
            decode_text(values.get(features.FILENAME, b"")),
            decode_text(values.get(features.CLASS_TEXT, b"")),
            values,
        )
    try:
        context = example_proto.SequenceExample.FromString(data).context.feature
    except Exception as e:  # protobuf's DecodeError, or anything a damaged buffer triggers
        raise ExampleError(f"not a tf.train.SequenceExample: {e}") from None

    def text(key: str) -> str:
        found = context[key].bytes_list.value if key in context else []
        return decode_text(found[0]) if found else ""

    return text(features.CLIP_NAME), text(features.CLASS_TEXT), {}
