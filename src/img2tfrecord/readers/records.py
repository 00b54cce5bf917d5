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

import gzip
import os
import tarfile
import threading
from typing import Any, BinaryIO, Dict, Iterator, List, Mapping, Sequence, Tuple, cast

from img2tfrecord import storage, tfrecord_codec
from img2tfrecord.schemas import dataset_json, example_proto, features, output_files
from img2tfrecord.schemas.dataset_json import DatasetManifest
from img2tfrecord.shard_formats import array_records, tar_shards
from img2tfrecord.tfrecord_codec import (
    IndexEntry,
    Record,
    RecordError,
    TruncatedRecordError,
    framed_length,
    read_record_at,
)

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
# TFRecord files: the format is tfrecord_codec's; here, the files are opened.


def _stream(path: str, compression: str) -> Tuple[BinaryIO, BinaryIO, int | None]:
    """(record stream, underlying file, size bound of the stream or None when unknown)."""
    raw = storage.open_binary(path)
    if compression == "gzip":
        return cast(BinaryIO, gzip.GzipFile(fileobj=raw, mode="rb")), raw, None
    if compression != "none":
        raw.close()
        raise ValueError(f"unknown compression {compression!r}; expected one of {', '.join(output_files.COMPRESSIONS)}")
    return raw, raw, storage.file_size(path)


def scan_records(
    path: str,
    compression: str = "none",
    check_crc: bool = True,
    *,
    file_format: str = output_files.FILE_FORMAT_TFRECORD,
    sequence: bool = False,
) -> Iterator[Record]:
    """Every record of one shard, in order, whatever its file format (``file_format``; ``sequence``: the
    records are SequenceExamples, which a WebDataset sample stores as frames).

    TFRecord: :func:`tfrecord_codec.read_records` over the shard's file; a record whose data fails
    its checksum is yielded with ``data_crc_ok=False``. ArrayRecord: its records, read through a
    local copy of a remote shard (``Record.offset`` is the record's number). WebDataset: each
    sample's record (``shard_formats/webdataset_samples.py``), ``offset`` its first header's.
    Anything that loses the framing raises :class:`RecordError` and ends the walk.
    """
    if file_format == output_files.FILE_FORMAT_ARRAY_RECORD:
        with array_records.local_copy(path, storage.is_remote, storage.open_binary) as local:
            yield from array_records.read_records(local)
        return
    if file_format == output_files.FILE_FORMAT_WEBDATASET:
        with storage.open_binary(path) as raw:
            yield from tar_shards.read_records(raw, sequence)
        return
    output_files.check_file_format(file_format)
    stream, raw, size = _stream(path, compression)
    index = offset = 0  # where the next record starts
    try:
        with raw, stream:
            for record in tfrecord_codec.read_records(stream, check_crc, size):
                yield record
                index, offset = record.index + 1, record.offset + framed_length(len(record.data))
    except OSError as e:  # closing a broken gzip stream
        raise RecordError(index, offset, f"read error: {e}") from None


def iter_records(
    path: str,
    compression: str = "none",
    check_crc: bool = True,
    *,
    file_format: str = output_files.FILE_FORMAT_TFRECORD,
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
    path: str, check_crc: bool = True, file_format: str = output_files.FILE_FORMAT_TFRECORD
) -> List[IndexEntry]:
    """``(offset, length)`` of every record of an uncompressed shard (:func:`tfrecord_codec.walk_offsets`), or of
    every sample of a tar shard (:func:`tar_shards.walk_samples`; ``RecordError`` for a tar that does not read)."""
    if file_format == output_files.FILE_FORMAT_WEBDATASET:
        with storage.open_binary(path) as raw:
            try:
                return tar_shards.walk_samples(raw)
            except (tarfile.TarError, EOFError, OSError) as e:
                raise TruncatedRecordError(-1, 0, f"broken tar: {e}") from None
    with RandomAccessFile(path) as f:
        return tfrecord_codec.walk_offsets(f, check_crc)


def shard_records(path: str, compression: str = "none", check_crc: bool = True) -> Iterator[Record]:
    """Every record of the Example shard ``path``, in order, in the file format its name says
    (:func:`scan_records`)."""
    file_format = output_files.file_format_of(path) or output_files.FILE_FORMAT_TFRECORD
    return scan_records(path, compression, check_crc, file_format=file_format)


def records_at(path: str, compression: str, wanted: Sequence[Tuple[int, int]]) -> Iterator[Tuple[int, bytes]]:
    """``(index, data)`` of the wanted records ``(index, offset)`` of the Example shard ``path`` that read
    (others are left out): at their offsets in uncompressed TFRecord shards, by number in ArrayRecord
    shards, else from a scan up to the last one."""
    file_format = output_files.file_format_of(path) or output_files.FILE_FORMAT_TFRECORD
    if not wanted:
        return
    if file_format == output_files.FILE_FORMAT_TFRECORD and compression == output_files.COMPRESSION_NONE:
        with RandomAccessFile(path) as f:
            for index, offset in wanted:
                try:
                    yield index, read_record_at(f, index, offset)
                except RecordError:
                    continue
        return
    if file_format == output_files.FILE_FORMAT_ARRAY_RECORD:
        with (
            array_records.local_copy(path, storage.is_remote, storage.open_binary) as local,
            array_records.ArrayRecordShard(local) as shard,
        ):
            for index, _ in wanted:
                if 0 <= index < len(shard):
                    yield index, shard.read([index])[0]
        return
    indices = {index for index, _ in wanted}
    last = max(indices)
    for record in scan_records(path, compression, file_format=file_format):
        if record.index in indices and record.data_crc_ok:
            yield record.index, record.data
        if record.index >= last:
            break


def read_record(
    f: RandomAccessFile, index: int, offset: int, length: int, file_format: str = output_files.FILE_FORMAT_TFRECORD
) -> bytes:
    """The data of the record an index entry ``(offset, length)`` places in the open shard ``f`` (TFRecord:
    :func:`tfrecord_codec.read_record_at`, checksums checked; tar: the sample in that range, rebuilt)."""
    if file_format == output_files.FILE_FORMAT_WEBDATASET:
        chunk = f.read_at(offset, length)
        if len(chunk) < length:
            raise TruncatedRecordError(index, offset, f"truncated: {len(chunk)} of the sample's {length} bytes")
        return tar_shards.record_in_range(chunk, index, offset)
    return read_record_at(f, index, offset, length)


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
