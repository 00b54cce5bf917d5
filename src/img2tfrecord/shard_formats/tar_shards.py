"""WebDataset shards: tar files of one sample per record, written as a stream and read back as records.

Members are plain ustar entries with fixed owner, mode and time, so the same records give the same
bytes on every run. Each sample's members are contiguous; the index line of a sample is the byte
offset of its first member's header and the length up to the end of its last member's padding, so
a reader fetches one sample with one ranged read. Tar has header checksums but none over the data:
a record's own ``image/key/sha256`` is what ``verify`` checks its image against.
"""

from __future__ import annotations

import io
import tarfile
from typing import BinaryIO, Dict, Iterator, List, Optional, Tuple

from img2tfrecord.shard_formats import webdataset_samples
from img2tfrecord.tfrecord_codec import IndexEntry, Record, RecordError, TruncatedRecordError

_MODE = 0o444
_MTIME = 0  # the same bytes on every run
_NUL = b"\0"
_OWN_WRITE = 64 << 10  # a member this large is written on its own (small ones are joined)


def sample_key(shard_stem: str, index: int) -> str:
    """The key of record ``index`` of the shard whose file name without ``.tar`` is ``shard_stem``:
    unique across the output, free of dots, in record order."""
    return f"{shard_stem}-{index:06d}"


def _member(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = _MODE
    info.mtime = _MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _octal(number: int, width: int) -> bytes:
    """A ustar number field: ``width - 1`` octal digits and a NUL."""
    return b"%0*o\0" % (width - 1, number)


# The fields of a member's ustar header around its name and size, as ``tarfile.TarInfo.tobuf`` writes
# them for :func:`_member`: mode, uid, gid | mtime, the checksum as spaces, a regular file, no link name,
# the ustar magic, empty user and group names, no device numbers, no prefix, the block's padding.
_BEFORE_SIZE = _octal(_MODE, 8) + 2 * _octal(0, 8)
_AFTER_SIZE = (
    _octal(_MTIME, 12)
    + b" " * 8
    + tarfile.REGTYPE
    + _NUL * 100
    + tarfile.POSIX_MAGIC
    + _NUL * (32 + 32 + 8 + 8 + 155 + 12)
)
_FIXED_SUM = sum(_BEFORE_SIZE) + sum(_AFTER_SIZE)
_NAME_LENGTH = 100
_MAX_SIZE = 8**11  # what 11 octal digits hold


def member_header(name: str, size: int) -> bytes:
    """The ustar header of a member ``name`` of ``size`` bytes: ``_member(name, size).tobuf(USTAR)``'s
    bytes, built directly (``tobuf`` costs more than the rest of a small sample's writing)."""
    encoded = name.encode("utf-8")
    if len(encoded) > _NAME_LENGTH or not 0 <= size < _MAX_SIZE:  # a prefix field, or tarfile's refusal
        return _member(name, size).tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict")
    size_field = _octal(size, 12)
    checksum = _FIXED_SUM + sum(encoded) + sum(size_field)  # the checksum field counted as spaces
    return b"".join(
        (
            encoded,
            _NUL * (_NAME_LENGTH - len(encoded)),
            _BEFORE_SIZE,
            size_field,
            _AFTER_SIZE[:12],
            b"%06o\0" % checksum,  # 7 of the field's 8 bytes, as tarfile writes it
            _AFTER_SIZE[19:],
        )
    )


class TarShardWriter:
    """Records written as samples into the tar stream ``stream`` (any binary file object; not closed).

    Each member is its ustar header (:func:`member_header`), its data and the padding to the next
    block; ``close`` ends the archive as ``tarfile`` does (two zero blocks, padded to a record).
    """

    def __init__(self, stream: BinaryIO, shard_stem: str, sequence: bool = False):
        if "." in shard_stem:
            raise ValueError(f"a WebDataset key has no dots: {shard_stem!r}")
        self._stream = stream
        self._stem = shard_stem
        self._sequence = sequence
        self._count = 0
        self._offset = 0

    def _write(self, data: bytes) -> None:
        self._stream.write(data)
        self._offset += len(data)

    def write(self, record: bytes) -> IndexEntry:
        """Write the sample of ``record``; -> its ``(offset, length)`` in the tar file.

        Members under :data:`_OWN_WRITE` bytes are joined with the headers and padding into one write
        (a photo's whole sample); a larger image is written as it is, never copied."""
        key = sample_key(self._stem, self._count)
        start = self._offset
        pending: List[bytes] = []
        for extension, data in webdataset_samples.sample_members(record, self._sequence):
            pending.append(member_header(f"{key}.{extension}", len(data)))
            if len(data) >= _OWN_WRITE:
                self._write(b"".join(pending))
                self._write(data)
                pending = []
            else:
                pending.append(data)
            pending.append(_NUL * (-len(data) % tarfile.BLOCKSIZE))
        self._write(b"".join(pending))
        self._count += 1
        return start, self._offset - start

    def close(self) -> None:
        """Write the end-of-archive blocks."""
        self._write(_NUL * (2 * tarfile.BLOCKSIZE))
        self._write(_NUL * (-self._offset % tarfile.RECORDSIZE))


def _key_and_extension(name: str) -> Tuple[str, str]:
    base = name.rsplit("/", 1)[-1]
    if "." not in base:
        return name, ""
    stem, extension = base.split(".", 1)
    return name[: len(name) - len(base)] + stem, extension


def _samples(tar: tarfile.TarFile) -> Iterator[Tuple[int, Dict[str, bytes]]]:
    """``(offset of its first header, extension -> data)`` of each sample, members grouped by key."""
    key: Optional[str] = None
    start = 0
    members: Dict[str, bytes] = {}
    for info in tar:
        if not info.isfile():
            continue
        member_key, extension = _key_and_extension(info.name)
        if member_key != key:
            if key is not None:
                yield start, members
            key, start, members = member_key, info.offset, {}
        extracted = tar.extractfile(info)
        data = extracted.read() if extracted is not None else b""
        if len(data) < info.size:
            raise TruncatedRecordError(-1, info.offset, f"{info.name}: {len(data)} of its {info.size} bytes")
        members[extension] = data
    if key is not None:
        yield start, members


def read_records(stream: BinaryIO, sequence: bool = False, first_index: int = 0) -> Iterator[Record]:
    """Every sample of the tar stream ``stream`` as its record, in order: :class:`RecordError` for a tar
    that cannot be read on, or a sample that is not one this format writes."""
    index = first_index
    offset = 0
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for offset, members in _samples(tar):
                try:
                    data = webdataset_samples.record_from_members(members, sequence)
                except webdataset_samples.SampleError as e:
                    raise RecordError(index, offset, f"not a sample of this output: {e}") from None
                yield Record(index, offset, data)
                index += 1
    except TruncatedRecordError as e:
        raise TruncatedRecordError(index, e.offset, e.message) from None
    except (tarfile.ReadError, EOFError) as e:
        message = str(e) or type(e).__name__
        if "unexpected end" in message or isinstance(e, EOFError):
            raise TruncatedRecordError(index, offset, f"truncated tar: {message}") from None
        raise RecordError(index, offset, f"broken tar: {message}") from None
    except OSError as e:
        raise RecordError(index, offset, f"read error: {e}") from None


def record_in_range(chunk: bytes, index: int, offset: int, sequence: bool = False) -> bytes:
    """The record of the one sample whose members are the bytes ``chunk`` (an index line's range)."""
    found = list(read_records(io.BytesIO(chunk), sequence, index))
    if len(found) != 1:
        raise RecordError(index, offset, f"the index's range holds {len(found)} samples, not one")
    return found[0].data


def walk_samples(stream: BinaryIO) -> List[IndexEntry]:
    """``(offset, length)`` of every sample of a tar stream, as the writer's index lists them."""
    entries: List[IndexEntry] = []
    with tarfile.open(fileobj=stream, mode="r:") as tar:
        key: Optional[str] = None
        start = end = 0
        for info in tar:
            member_key, _ = _key_and_extension(info.name)
            if member_key != key:
                if key is not None:
                    entries.append((start, end - start))
                key, start = member_key, info.offset
            end = info.offset_data + -(-info.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
        if key is not None:
            entries.append((start, end - start))
    return entries


__all__ = ["TarShardWriter", "read_records", "record_in_range", "sample_key", "walk_samples"]
