"""The bytes of one work item: a local or remote file, or a member of an archive.

No Beam import at module level: conversion worker processes
(conversion/pool.py) load this module and start faster without Beam.
Paths with a scheme (``gs://...``) go through Beam's FileSystems, imported
on first use; local paths are opened directly.
"""

from __future__ import annotations

import bz2
import os
import stat
import struct
import zlib
from typing import Optional

from img2tfrecord import storage
from img2tfrecord.images.options import ImageError
from img2tfrecord.model import InlineMember, TarMember, WorkItem, ZipMember

_ZIP_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")
_ZIP_LOCAL_SIGNATURE = b"PK\x03\x04"
_ZIP_STORED, _ZIP_DEFLATED, _ZIP_BZIP2 = 0, 8, 12


def _filesystems():
    return storage.beam_filesystems()


def open_raw(path: str):
    """``path`` opened for binary reading, on any Beam filesystem.

    Never with Beam's AUTO compression: a .tar.gz must not be gunzipped behind our back.
    """
    if "://" not in path:
        return open(path, "rb")
    return _filesystems().open(path, compression_type="uncompressed")


def _open_local(path: str, limit: int):
    """A local file opened for reading, refused (ImageError) unless it is a regular file within ``limit``.

    Opened without blocking and checked on the open descriptor: a named pipe
    would block a plain ``open`` forever, and a device (``/dev/zero``) never
    ends. A regular file over the limit is refused without reading it.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ImageError("unreadable", "not a regular file (a named pipe, socket or device)")
        if st.st_size > limit:
            raise ImageError(
                "file_too_large", f"file is {st.st_size} bytes, over the limit of {limit} bytes (--max-file-mb)"
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_file(path: str, limit: int) -> bytes:
    """All bytes of ``path`` on any Beam filesystem; ImageError past ``limit`` bytes."""
    if "://" not in path:
        opened = _open_local(path, limit)
        size_hint = os.fstat(opened.fileno()).st_size
    else:
        opened = _filesystems().open(path, compression_type="uncompressed")
        size_hint = None
    with opened as f:
        data = read_capped(f, limit, size_hint)
    if len(data) > limit:
        raise ImageError("file_too_large", f"file is over the limit of {limit} bytes (--max-file-mb)")
    return data


_CHUNK = 1 << 20


def read_capped(f, limit: int, size_hint: Optional[int] = None) -> bytes:
    """The bytes of an open file up to ``limit + 1`` (more than ``limit``: the caller refuses it).

    Never asks for ``limit`` bytes at once: a buffered read allocates what it
    is asked for, and doing that per file (with limits of many MB) costs more
    than reading a photo. With ``size_hint`` (the file's size) one read does.
    """
    chunks = []
    total = 0
    want = size_hint + 1 if size_hint is not None else _CHUNK
    while total <= limit:
        request = min(want, limit + 1 - total)
        chunk = f.read(request)
        if chunk:
            chunks.append(chunk)
            total += len(chunk)
        if len(chunk) < request:  # a buffered read returns less only at the end of the file
            break
        want = _CHUNK
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def is_permanent_read_error(e: Exception) -> bool:
    """True for a read failure that retrying cannot fix: the file becomes an ``unreadable`` error row.

    Local files raise OSError (permission denied, gone since the listing,
    I/O error). Cloud storage raises its client's 4xx errors (forbidden, not
    found), except "too many requests", which is transient like any 5xx error,
    lost connection or time-out: those propagate and the runner retries the bundle.
    """
    if isinstance(e, OSError):
        return not isinstance(e, (ConnectionError, TimeoutError))
    try:
        from google.api_core import exceptions as google_errors
    except ImportError:  # pragma: no cover - apache-beam[gcp] is a dependency
        return False
    return isinstance(e, google_errors.ClientError) and not isinstance(e, google_errors.TooManyRequests)


def _too_large(size: int, limit: int) -> ImageError:
    return ImageError("file_too_large", f"member is {size} bytes, over the limit of {limit} bytes (--max-file-mb)")


def _read_zip_member(member: ZipMember, limit: int) -> bytes:
    archive, offset, method, compressed_size, size, crc, flags = member
    if flags & 0x1:
        raise ImageError("unsupported_member", "encrypted zip member")
    if method not in (_ZIP_STORED, _ZIP_DEFLATED, _ZIP_BZIP2):
        raise ImageError(
            "unsupported_member", f"zip compression method {method} is not supported (stored, deflate, bzip2 are)"
        )
    if size > limit:
        raise _too_large(size, limit)
    with open_raw(archive) as f:
        f.seek(offset)
        header = f.read(_ZIP_LOCAL_HEADER.size)
        if len(header) < _ZIP_LOCAL_HEADER.size or header[:4] != _ZIP_LOCAL_SIGNATURE:
            raise ImageError("corrupt_archive", f"no zip local header at byte {offset}")
        fields = _ZIP_LOCAL_HEADER.unpack(header)
        f.seek(offset + _ZIP_LOCAL_HEADER.size + fields[10] + fields[11])
        raw = f.read(compressed_size)
    if len(raw) < compressed_size:
        raise ImageError(
            "truncated_archive", f"archive ends inside this member ({len(raw)} of {compressed_size} bytes)"
        )
    try:
        if method == _ZIP_STORED:
            data = raw
        elif method == _ZIP_DEFLATED:
            data = zlib.decompressobj(-15).decompress(raw, limit + 1)
        else:
            data = bz2.BZ2Decompressor().decompress(raw, max_length=limit + 1)
    except (zlib.error, OSError, ValueError, EOFError) as e:
        raise ImageError("corrupt_archive", f"member does not decompress: {e}") from None
    if len(data) > limit:
        raise _too_large(len(data), limit)
    if len(data) != size or zlib.crc32(data) != crc:
        raise ImageError("corrupt_archive", "member fails its zip CRC-32 check")
    return data


def _read_tar_member(member: TarMember, limit: int) -> bytes:
    archive, offset, size = member
    if size > limit:
        raise _too_large(size, limit)
    with open_raw(archive) as f:
        f.seek(offset)
        data = f.read(size)
    if len(data) < size:
        raise ImageError("truncated_archive", f"archive ends inside this member ({len(data)} of {size} bytes)")
    return data


_NAMED_NOT_FOUND = "no such file (named by the manifest or the annotations)"
_GONE = "no such file: it was listed, then removed before it was read"


def _read_named_file(source: WorkItem, limit: int) -> bytes:
    """A plain file's bytes; ImageError ``not_found`` when it does not exist (on any filesystem)."""
    message = _NAMED_NOT_FOUND if source.row is not None else _GONE
    try:
        return read_file(source.path, limit)
    except FileNotFoundError:
        raise ImageError("not_found", message) from None
    except Exception:  # e.g. a cloud client's "not found": look before calling it unreadable
        try:
            missing = not _filesystems().exists(source.path)
        except Exception:  # pylint: disable=broad-except
            missing = False
        if missing:
            raise ImageError("not_found", message) from None
        raise


def read_source(source: WorkItem, limit: int) -> bytes:
    """The bytes of a work item (a plain file is read with :func:`read_file`).

    Raises ImageError (a reason for ``errors.jsonl``) or OSError.
    """
    member = source.member
    if member is None:
        return _read_named_file(source, limit)
    if isinstance(member, InlineMember):
        if len(member.data) > limit:
            raise _too_large(len(member.data), limit)
        return member.data
    if isinstance(member, ZipMember):
        return _read_zip_member(member, limit)
    if isinstance(member, TarMember):
        return _read_tar_member(member, limit)
    raise TypeError(f"unknown member locator {type(member).__name__}")
