"""Read an output directory without Beam or TensorFlow: files, manifest, TFRecord framing, Examples.

Used by ``inspect`` and ``verify``. Local paths are read with plain Python
file objects; paths with a scheme (``gs://...``) go through
``tf.io.gfile``, which is then the only reason TensorFlow gets imported.

TFRecord framing, per record::

    uint64 length            (little endian)
    uint32 masked_crc32c(length bytes)
    bytes  data[length]
    uint32 masked_crc32c(data)

with ``masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2**32)``.
A ``.tfrecord.gz`` shard is that byte stream gzip-compressed as a whole.

``tf.train.Example`` messages are parsed with the TensorFlow-free message
classes of :mod:`img2tfrecord.schemas.example_proto`.
"""
from __future__ import annotations

import dataclasses
import gzip
import os
import posixpath
import struct
import zlib
from typing import Any, BinaryIO, Dict, Iterator, List, Mapping, Tuple

import google_crc32c

from img2tfrecord.schemas import example_proto, manifest

_HEADER = struct.Struct("<QI")  # length, masked CRC32C of the length bytes
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8
_READ_BUFFER = 1 << 20


# ---------------------------------------------------------------------------
# Files: local paths with the standard library, anything with a scheme via tf.io.gfile.


def is_remote(path: str) -> bool:
    return "://" in path


def _gfile():
    import tensorflow as tf  # deferred: only remote paths need it

    return tf.io.gfile


def join(directory: str, name: str) -> str:
    if is_remote(directory):
        return posixpath.join(directory, name)
    return os.path.join(directory, name)


def exists(path: str) -> bool:
    return _gfile().exists(path) if is_remote(path) else os.path.exists(path)


def isdir(path: str) -> bool:
    return _gfile().isdir(path) if is_remote(path) else os.path.isdir(path)


def listdir(path: str) -> List[str]:
    """Base names in a directory (subdirectories without a trailing slash)."""
    if is_remote(path):
        return sorted(name.rstrip("/") for name in _gfile().listdir(path))
    return sorted(os.listdir(path))


def file_size(path: str) -> int:
    return _gfile().stat(path).length if is_remote(path) else os.path.getsize(path)


def open_binary(path: str) -> BinaryIO:
    if is_remote(path):
        return _gfile().GFile(path, "rb")
    return open(path, "rb", buffering=_READ_BUFFER)


def read_text(path: str) -> str:
    with open_binary(path) as f:
        return f.read().decode("utf-8")


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


@dataclasses.dataclass(frozen=True)
class Record:
    index: int
    offset: int
    data: bytes
    data_crc_ok: bool = True


def _read_exactly(f: BinaryIO, n: int) -> bytes:
    chunks = []
    while n > 0:
        chunk = f.read(n)
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks) if len(chunks) != 1 else chunks[0]


def _stream(path: str, compression: str) -> Tuple[BinaryIO, BinaryIO, int | None]:
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
                        raise RecordError(index, offset, f"truncated header: {len(header)} of {_HEADER.size} bytes")
                    length, length_crc = _HEADER.unpack(header)
                    if check_crc and masked_crc32c(header[:8]) != length_crc:
                        raise RecordError(index, offset, "length checksum mismatch (corrupt record header)")
                    if size is not None and offset + _HEADER.size + length + _CRC.size > size:
                        raise RecordError(
                            index, offset,
                            f"truncated: record of {length} bytes runs past the end of the file ({size} bytes)",
                        )
                    data = _read_exactly(stream, length)
                    if len(data) < length:
                        raise RecordError(index, offset, f"truncated data: {len(data)} of {length} bytes")
                    footer = _read_exactly(stream, _CRC.size)
                    if len(footer) < _CRC.size:
                        raise RecordError(index, offset, "truncated: data checksum missing")
                except (EOFError, zlib.error, gzip.BadGzipFile) as e:
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

    ``spec_json`` is the ``feature_spec`` block of ``dataset.json`` (every
    feature a scalar ``FixedLenFeature``). Bytes features come back as
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
        kind = _KINDS.get(entry.get("dtype"))
        if kind is None:
            raise ExampleError(f"{key}: unsupported dtype {entry.get('dtype')!r} in dataset.json")
        if key not in feature_map:
            raise ExampleError(f"feature {key} missing")
        feature = feature_map[key]
        actual = feature.WhichOneof("kind")
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
    "Record",
    "RecordError",
    "compression_of",
    "iter_records",
    "masked_crc32c",
    "parse_example",
    "read_manifest",
    "scan_records",
]
