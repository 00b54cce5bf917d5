"""The TFRecord file format: framing, checksums, sequential and random-access reads, offsets, index files.

Each record of a TFRecord file is framed as::

    uint64 length            (little endian)
    uint32 masked_crc32c(length bytes)
    bytes  data[length]
    uint32 masked_crc32c(data)

with ``masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2**32)``.
A ``.tfrecord.gz`` file is that byte stream gzip-compressed as a whole. The
index file of an uncompressed file (DALI's ``tfrecord2idx`` format) holds one
``offset length`` line per record, ``length`` covering the whole framing.

Callers open the files: sequential reads take a binary stream (the file, or a
``gzip.GzipFile`` over it), random access anything with ``size`` and
``read_at``. Neither Beam nor TensorFlow is imported here.
"""

from __future__ import annotations

import dataclasses
import gzip
import struct
import zlib
from typing import BinaryIO, Iterable, Iterator, List, Optional, Protocol, Tuple

import google_crc32c

_HEADER = struct.Struct("<QI")  # length, masked CRC32C of the length bytes
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8

IndexEntry = Tuple[int, int]  # (offset of a record's header, length of its whole framing)


def masked_crc32c(data: bytes) -> int:
    """The CRC32C of ``data``, masked as TFRecord stores it."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def framed_length(data_length: int) -> int:
    """Bytes one record of ``data_length`` data bytes takes in a file (header, data, footer)."""
    return _HEADER.size + data_length + _CRC.size


def encode_record(data: bytes) -> bytes:
    """``data`` framed as one record, as ``tf.io.TFRecordWriter`` writes it."""
    length = _LENGTH.pack(len(data))
    return b"".join((length, _CRC.pack(masked_crc32c(length)), data, _CRC.pack(masked_crc32c(data))))


# ---------------------------------------------------------------------------
# Errors.


class RecordError(Exception):
    """A file whose framing cannot be followed, or whose data fails its checksum.

    ``index`` is the 0-based record number (-1 when unknown), ``offset`` the
    byte offset of the record's header in the (uncompressed) record stream.
    """

    def __init__(self, index: int, offset: int, message: str):
        super().__init__(f"record {index} at byte {offset}: {message}")
        self.index = index
        self.offset = offset
        self.message = message


class TruncatedRecordError(RecordError):
    """The file ends inside this record: its header, data or footer is cut short."""


class MisframedRecordError(RecordError):
    """No record of the expected length starts at the given offset (an index that disagrees with its file)."""


# ---------------------------------------------------------------------------
# Sequential reads.


@dataclasses.dataclass(frozen=True)
class Record:
    """One record read in sequence: its number, the offset of its header, its data and whether that data checked."""

    index: int
    offset: int
    data: bytes
    data_crc_ok: bool = True


def _read_exactly(f: BinaryIO, n: int) -> bytes:
    """``n`` bytes from ``f``, fewer only when it ends first."""
    chunks = []
    while n > 0:
        chunk = f.read(n)
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks) if len(chunks) != 1 else chunks[0]


def read_records(stream: BinaryIO, check_crc: bool = True, size: Optional[int] = None) -> Iterator[Record]:
    """Every record of the uncompressed record stream ``stream``, in order, from its current position.

    A record whose data fails its checksum is yielded with
    ``data_crc_ok=False`` (its framing is intact, so the walk goes on).
    Anything that loses the framing -- a truncated header, data or footer,
    a length that fails its checksum, a broken gzip stream, a failed read --
    raises :class:`RecordError` and ends the walk. ``check_crc=False`` skips
    both checksums (lengths are then trusted). ``size``, when known, is the
    stream's length: a record that would run past it is reported before its
    data is read. The stream is not closed.
    """
    index = offset = 0
    while True:
        try:
            header = _read_exactly(stream, _HEADER.size)
            if not header:
                return
            if len(header) < _HEADER.size:
                raise TruncatedRecordError(index, offset, f"truncated header: {len(header)} of {_HEADER.size} bytes")
            length, length_crc = _HEADER.unpack(header)
            if check_crc and masked_crc32c(header[: _LENGTH.size]) != length_crc:
                raise RecordError(index, offset, "length checksum mismatch (corrupt record header)")
            if size is not None and offset + framed_length(length) > size:
                raise TruncatedRecordError(
                    index, offset, f"truncated: record of {length} bytes runs past the end of the file ({size} bytes)"
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
        offset += framed_length(length)


# ---------------------------------------------------------------------------
# Random access to an uncompressed file.


class RangeReader(Protocol):
    """An open uncompressed file read by byte ranges (``readers.records.RandomAccessFile``)."""

    size: int

    def read_at(self, offset: int, n: int) -> bytes:
        """Up to ``n`` bytes from ``offset`` (fewer only at the end of the file)."""
        ...


def read_record_at(f: RangeReader, index: int, offset: int, length: Optional[int] = None) -> bytes:
    """The data of the record whose header is at ``offset``, both checksums checked.

    ``length`` is the record's whole framing as an index lists it; None
    reads it from the header. Raises :class:`TruncatedRecordError` when the
    file ends first, :class:`MisframedRecordError` when no record (of that
    length) starts at ``offset``, and :class:`RecordError` when the data
    fails its checksum (``index`` numbers the record in the messages).
    """
    if length is None:
        header = f.read_at(offset, _HEADER.size)
        if len(header) < _HEADER.size:
            raise TruncatedRecordError(index, offset, f"truncated header: {len(header)} of {_HEADER.size} bytes")
        data_length, length_crc = _HEADER.unpack(header)
        if masked_crc32c(header[: _LENGTH.size]) != length_crc:
            raise MisframedRecordError(index, offset, "no record header here (length checksum mismatch)")
        length = framed_length(data_length)
    framed = f.read_at(offset, length)
    if len(framed) < length:
        raise TruncatedRecordError(
            index, offset, f"truncated: {len(framed)} of the record's {length} bytes are in the file ({f.size} bytes)"
        )
    if length < framed_length(0):
        raise MisframedRecordError(index, offset, f"a record takes at least {framed_length(0)} bytes, not {length}")
    data_length, length_crc = _HEADER.unpack_from(framed)
    if masked_crc32c(framed[: _LENGTH.size]) != length_crc:
        raise MisframedRecordError(index, offset, "no record header here (length checksum mismatch)")
    if framed_length(data_length) != length:
        raise MisframedRecordError(
            index, offset, f"the record here takes {framed_length(data_length)} bytes, not {length}"
        )
    data = framed[_HEADER.size : _HEADER.size + data_length]
    if masked_crc32c(data) != _CRC.unpack_from(framed, _HEADER.size + data_length)[0]:
        raise RecordError(index, offset, "data checksum mismatch (corrupt record data)")
    return data


def walk_offsets(f: RangeReader, check_crc: bool = True) -> List[IndexEntry]:
    """``(offset, framed length)`` of every record of an uncompressed file, reading only the headers.

    Raises :class:`TruncatedRecordError` when the file ends inside a record,
    :class:`RecordError` when a length fails its checksum.
    """
    entries: List[IndexEntry] = []
    offset = 0
    while offset < f.size:
        index = len(entries)
        header = f.read_at(offset, _HEADER.size)
        if len(header) < _HEADER.size:
            raise TruncatedRecordError(index, offset, f"truncated header: {len(header)} of {_HEADER.size} bytes")
        length, length_crc = _HEADER.unpack(header)
        if check_crc and masked_crc32c(header[: _LENGTH.size]) != length_crc:
            raise RecordError(index, offset, "length checksum mismatch (corrupt record header)")
        framed = framed_length(length)
        if offset + framed > f.size:
            raise TruncatedRecordError(
                index, offset, f"truncated: record of {length} bytes runs past the end of the file ({f.size} bytes)"
            )
        entries.append((offset, framed))
        offset += framed
    return entries


# ---------------------------------------------------------------------------
# Index files.


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


__all__ = [
    "IndexEntry",
    "MisframedRecordError",
    "RangeReader",
    "Record",
    "RecordError",
    "TruncatedRecordError",
    "encode_record",
    "framed_length",
    "index_text",
    "masked_crc32c",
    "parse_index",
    "read_record_at",
    "read_records",
    "walk_offsets",
]
