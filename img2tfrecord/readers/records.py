"""Read an output directory without Beam or TensorFlow: files, manifest, TFRecord framing, Examples.

Used by ``inspect``, ``verify`` and the TensorFlow-free readers of
:mod:`img2tfrecord.readers.datasource`. Local paths are read with plain Python
file objects; paths with a scheme (``gs://...``) go through Beam's
FileSystems (:mod:`img2tfrecord.readers.storage`), imported only then.

TFRecord framing, per record::

    uint64 length            (little endian)
    uint32 masked_crc32c(length bytes)
    bytes  data[length]
    uint32 masked_crc32c(data)

with ``masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2**32)``.
A ``.tfrecord.gz`` shard is that byte stream gzip-compressed as a whole.
An uncompressed shard's index file (DALI's ``tfrecord2idx`` format) holds
one ``offset length`` line per record, ``length`` covering the whole framing.

``tf.train.Example`` messages are parsed with the TensorFlow-free message
classes of :mod:`img2tfrecord.schemas.example_proto`.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import struct
import threading
import zlib
from typing import Any, BinaryIO, Dict, Iterable, Iterator, List, Mapping, Tuple, Union

import google_crc32c

from img2tfrecord.readers import storage
from img2tfrecord.schemas import example_proto, features, manifest

_HEADER = struct.Struct("<QI")  # length, masked CRC32C of the length bytes
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8


# ---------------------------------------------------------------------------
# Files: local paths with the standard library, anything with a scheme via Beam (readers/storage.py).

is_remote = storage.is_remote
exists = storage.exists
isdir = storage.isdir
listdir = storage.listdir
file_size = storage.file_size
open_binary = storage.open_binary
read_text = storage.read_text


def join(directory: str, name: str) -> str:
    return storage.join(directory, name)


# ---------------------------------------------------------------------------
# The manifest.


def read_manifest(directory: str) -> Dict[str, Any]:
    """The parsed ``dataset.json`` of an output directory.

    Raises FileNotFoundError naming the path when the directory or its
    manifest does not exist, ValueError when the manifest is not one this
    version reads. Does not look at ``_SUCCESS`` (see :func:`is_complete`).
    """
    if not isdir(directory):
        raise FileNotFoundError(f"no such directory: {directory}")
    path = join(directory, manifest.MANIFEST_FILE)
    if not exists(path):
        raise FileNotFoundError(
            f"{path} not found: {directory} is not an img2tfrecord output directory "
            f"(or its conversion has not finished)"
        )
    return manifest.loads(read_text(path))


def is_complete(directory: str) -> bool:
    """True when the writer finished: ``_SUCCESS`` exists."""
    return exists(join(directory, manifest.SUCCESS_FILE))


def shard_paths(directory: str, doc: Mapping[str, Any], split: str) -> List[Tuple[str, int]]:
    """``(path, num_records)`` of every shard of ``split`` listed in the manifest, in order."""
    return [(join(directory, s["file"]), int(s["num_records"])) for s in doc["splits"][split]["shards"]]


# ---------------------------------------------------------------------------
# TFRecord framing.


def masked_crc32c(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


class RecordError(Exception):
    """A shard whose framing cannot be followed, or whose data fails its checksum.

    ``index`` is the 0-based record number, ``offset`` the byte offset of the
    record's header in the (uncompressed) record stream.
    """

    def __init__(self, index: int, offset: int, message: str):
        super().__init__(f"record {index} at byte {offset}: {message}")
        self.index = index
        self.offset = offset
        self.message = message


class TruncatedRecordError(RecordError):
    """The shard ends inside this record: its header, data or footer is cut short."""


class MisframedRecordError(RecordError):
    """No record of the expected length starts at the given offset (an index that disagrees with its shard)."""


@dataclasses.dataclass(frozen=True)
class Record:
    index: int
    offset: int
    data: bytes
    data_crc_ok: bool = True


_Stream = Union[BinaryIO, gzip.GzipFile]  # a shard's records: the file itself, or its gzip stream


def _read_exactly(f: _Stream, n: int) -> bytes:
    chunks = []
    while n > 0:
        chunk = f.read(n)
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks) if len(chunks) != 1 else chunks[0]


def _stream(path: str, compression: str) -> Tuple[_Stream, BinaryIO, int | None]:
    """(record stream, underlying file, size bound of the stream or None when unknown)."""
    raw = open_binary(path)
    if compression == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb"), raw, None
    if compression != "none":
        raw.close()
        raise ValueError(f"unknown compression {compression!r}; expected one of {', '.join(manifest.COMPRESSIONS)}")
    return raw, raw, file_size(path)


def scan_records(path: str, compression: str = "none", check_crc: bool = True) -> Iterator[Record]:
    """Every record of one shard, in order.

    A record whose data fails its checksum is yielded with
    ``data_crc_ok=False`` (its framing is intact, so the walk goes on).
    Anything that loses the framing -- a truncated header, data or footer,
    a length that fails its checksum, a broken gzip stream -- raises
    :class:`RecordError` and ends the walk. ``check_crc=False`` skips both
    checksums (lengths are then trusted).
    """
    stream, raw, size = _stream(path, compression)
    index = offset = 0
    try:
        with raw, stream:
            while True:
                try:
                    header = _read_exactly(stream, _HEADER.size)
                    if not header:
                        return
                    if len(header) < _HEADER.size:
                        raise TruncatedRecordError(
                            index, offset, f"truncated header: {len(header)} of {_HEADER.size} bytes"
                        )
                    length, length_crc = _HEADER.unpack(header)
                    if check_crc and masked_crc32c(header[:8]) != length_crc:
                        raise RecordError(index, offset, "length checksum mismatch (corrupt record header)")
                    if size is not None and offset + _HEADER.size + length + _CRC.size > size:
                        raise TruncatedRecordError(
                            index,
                            offset,
                            f"truncated: record of {length} bytes runs past the end of the file ({size} bytes)",
                        )
                    data = _read_exactly(stream, length)
                    if len(data) < length:
                        raise TruncatedRecordError(index, offset, f"truncated data: {len(data)} of {length} bytes")
                    footer = _read_exactly(stream, _CRC.size)
                    if len(footer) < _CRC.size:
                        raise TruncatedRecordError(index, offset, "truncated: data checksum missing")
                except EOFError as e:  # gzip: the compressed stream ends before its end marker
                    raise TruncatedRecordError(index, offset, f"broken gzip stream: {e}") from None
                except (zlib.error, gzip.BadGzipFile) as e:
                    raise RecordError(index, offset, f"broken gzip stream: {e}") from None
                except OSError as e:
                    raise RecordError(index, offset, f"read error: {e}") from None
                ok = not check_crc or masked_crc32c(data) == _CRC.unpack(footer)[0]
                yield Record(index, offset, data, ok)
                index += 1
                offset += _HEADER.size + length + _CRC.size
    except OSError as e:  # closing a broken gzip stream
        raise RecordError(index, offset, f"read error: {e}") from None


def iter_records(path: str, compression: str = "none", check_crc: bool = True) -> Iterator[Tuple[int, int, bytes]]:
    """``(index, offset, data)`` of every record; any problem, a bad data checksum included, raises RecordError."""
    for record in scan_records(path, compression, check_crc):
        if not record.data_crc_ok:
            raise RecordError(record.index, record.offset, "data checksum mismatch (corrupt record data)")
        yield record.index, record.offset, record.data


# ---------------------------------------------------------------------------
# Record offsets of uncompressed shards: index files and header walks.

IndexEntry = Tuple[int, int]  # (offset of the record's header, length of its whole framing)


def framed_length(data_length: int) -> int:
    """Bytes one record of ``data_length`` data bytes takes in a shard (header, data, footer)."""
    return _HEADER.size + data_length + _CRC.size


def index_text(entries: Iterable[IndexEntry]) -> str:
    """An index file's content: one ``offset length`` line per record, as DALI's ``tfrecord2idx`` writes it."""
    return "".join(f"{offset} {length}\n" for offset, length in entries)


def parse_index(text: str, path: str = "index") -> List[IndexEntry]:
    """The entries of an index file; ValueError naming ``path`` and the line for anything but two integers per line."""
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        try:
            offset, length = (int(v) for v in fields)
        except ValueError:
            raise ValueError(f"{path}: line {number} is not 'offset length': {line[:80]!r}") from None
        if offset < 0 or length < framed_length(0):
            raise ValueError(f"{path}: line {number} is not a record's offset and length: {line[:80]!r}")
        entries.append((offset, length))
    return entries


class RandomAccessFile:
    """Reads of byte ranges of one file, safe to share between threads.

    Local files use ``os.pread`` (no shared file position); remote ones a
    seek and read under a lock. Not picklable: each process opens its own.
    """

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        if is_remote(path):
            self._fd = -1
            self._file: BinaryIO | None = open_binary(path)
        else:
            self._fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
            self._file = None
        self.size = file_size(path)

    def read_at(self, offset: int, n: int) -> bytes:
        """Up to ``n`` bytes from ``offset`` (fewer only at the end of the file)."""
        if self._file is None:
            chunks = []
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
            return _read_exactly(self._file, n)

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


def walk_offsets(path: str, check_crc: bool = True) -> List[IndexEntry]:
    """``(offset, framed length)`` of every record of an uncompressed shard, reading only the headers.

    Raises :class:`TruncatedRecordError` when the file ends inside a record,
    :class:`RecordError` when a length fails its checksum.
    """
    entries: List[IndexEntry] = []
    with RandomAccessFile(path) as f:
        offset = 0
        while offset < f.size:
            index = len(entries)
            header = f.read_at(offset, _HEADER.size)
            if len(header) < _HEADER.size:
                raise TruncatedRecordError(index, offset, f"truncated header: {len(header)} of {_HEADER.size} bytes")
            length, length_crc = _HEADER.unpack(header)
            if check_crc and masked_crc32c(header[:8]) != length_crc:
                raise RecordError(index, offset, "length checksum mismatch (corrupt record header)")
            framed = framed_length(length)
            if offset + framed > f.size:
                raise TruncatedRecordError(
                    index, offset, f"truncated: record of {length} bytes runs past the end of the file ({f.size} bytes)"
                )
            entries.append((offset, framed))
            offset += framed
    return entries


def read_record_at(f: RandomAccessFile, index: int, offset: int, length: int) -> bytes:
    """The data of the record framed in ``length`` bytes at ``offset``, both checksums checked.

    Raises :class:`TruncatedRecordError` when the file ends first,
    :class:`MisframedRecordError` when no record of that length starts at
    ``offset``, and :class:`RecordError` when the data fails its checksum
    (``index`` numbers the record in the messages).
    """
    framed = f.read_at(offset, length)
    if len(framed) < length:
        raise TruncatedRecordError(
            index, offset, f"truncated: {len(framed)} of the record's {length} bytes are in the file ({f.size} bytes)"
        )
    if length < framed_length(0):
        raise MisframedRecordError(index, offset, f"a record takes at least {framed_length(0)} bytes, not {length}")
    data_length, length_crc = _HEADER.unpack_from(framed)
    if masked_crc32c(framed[:8]) != length_crc:
        raise MisframedRecordError(index, offset, "no record header here (length checksum mismatch)")
    if framed_length(data_length) != length:
        raise MisframedRecordError(
            index, offset, f"the record here takes {framed_length(data_length)} bytes, not {length}"
        )
    data = framed[_HEADER.size : _HEADER.size + data_length]
    if masked_crc32c(data) != _CRC.unpack_from(framed, _HEADER.size + data_length)[0]:
        raise RecordError(index, offset, "data checksum mismatch (corrupt record data)")
    return data


def compression_of(doc: Mapping[str, Any]) -> str:
    compression = doc.get("compression", "none")
    if compression not in manifest.COMPRESSIONS:
        raise ValueError(f"dataset.json: unknown compression {compression!r}")
    return compression


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


__all__ = [
    "ExampleError",
    "MisframedRecordError",
    "RandomAccessFile",
    "Record",
    "RecordError",
    "TruncatedRecordError",
    "compression_of",
    "framed_length",
    "index_text",
    "iter_records",
    "masked_crc32c",
    "parse_example",
    "parse_index",
    "read_manifest",
    "read_record_at",
    "scan_records",
    "walk_offsets",
]
