"""Archives as inputs (zip, tar, tar.gz), without Beam: kinds, member names, listing, and a launch-time peek.

A member becomes a work item whose ``member`` locator says how to read its bytes (``sources/files.py``):
a zip member by seeking to its local header, an uncompressed tar member by seeking to its data, a tar.gz
member (which cannot be seeked to) by carrying its bytes. Members are never extracted to disk. Member
names lose a leading ``./`` and, when every file of an archive sits under one folder that wraps the
dataset, that folder (:func:`top_folder_to_strip`), so an archive gives the relpaths, and so the records,
of its unpacked folder. Zip member names are UTF-8 whenever their bytes are, whatever the archive's flags
say (:func:`zip_member_name`).
"""

from __future__ import annotations

import stat
import struct
import tarfile
import zipfile
import zlib
from typing import Callable, Generator, Iterator, List, Optional, Sequence, Tuple

from img2tfrecord.model import (
    ArchiveEntry,
    ErrorEntry,
    InlineMember,
    MemberEntry,
    SkippedEntry,
    TarMember,
    WorkItem,
    ZipMember,
)
from img2tfrecord.sources.files import open_raw
from img2tfrecord.sources.layout import is_junk, is_text, printable
from img2tfrecord.sources.split_folders import split_of_folder

# Longest suffix first: "x.tar.gz" is a tar.gz, not a ".gz".
ARCHIVE_SUFFIXES = ((".tar.gz", "tgz"), (".tgz", "tgz"), (".tar", "tar"), (".zip", "zip"))
MEMBER_SEPARATOR = "!/"

# Path parts of a file inside a class folder under a wrapping top folder:
# TOP/<class>/<file> for images, TOP/<class>/<clip>/<frame> for sequences.
MIN_DEPTH_IMAGES = 3
MIN_DEPTH_SEQUENCES = 4

_TAR_BLOCK = tarfile.BLOCKSIZE

NOT_AN_ARCHIVE = "not_an_archive"  # named like an archive, its bytes no archive of that kind
NESTED_ARCHIVE = "nested_archive"  # a member that is itself an archive
NESTED_MESSAGE = (
    "an archive inside an archive is not unpacked: unpack the outer one, or give the inner one as an --input of its own"
)


def suffix_format(path: str, table) -> Optional[str]:
    lower = path.lower()
    for suffix, fmt in table:
        if lower.endswith(suffix):
            return fmt
    return None


def archive_format(path: str) -> Optional[str]:
    """``zip``, ``tar``, ``tgz`` (gzip-compressed tar) or None, by the file name."""
    return suffix_format(path, ARCHIVE_SUFFIXES)


def member_path(archive: str, name: str) -> str:
    return f"{archive}{MEMBER_SEPARATOR}{name}"


def member_item(archive: str, entry: MemberEntry, prefix: str) -> WorkItem:
    """The work item of one listed member, its relpath without the archive's wrapping folder ``prefix``."""
    relpath = entry.name[len(prefix) :] if prefix and entry.name.startswith(prefix) else entry.name
    return WorkItem(member_path(archive, entry.name), relpath, entry.size, entry.member)


# ---------------------------------------------------------------------------
# Member names.


def normalise_member_name(name: str) -> str:
    """``./a/b.jpg`` -> ``a/b.jpg``: no leading ``./`` or ``/``, no empty or ``.`` parts."""
    return "/".join(part for part in name.replace("\\", "/").split("/") if part not in ("", "."))


_MIXED = "/"  # not a folder name: files under more than one top folder (or at the top)
_Acc = Tuple[Optional[str], int, int]  # (common top folder, files deep enough, files)


def merge_top(a: _Acc, b: _Acc) -> _Acc:
    if a[0] is None:
        return b
    if b[0] is None:
        return a
    return (a[0] if a[0] == b[0] else _MIXED), a[1] + b[1], a[2] + b[2]


def top_of(name: str, min_depth: int) -> _Acc:
    parts = name.split("/")
    return (parts[0] if len(parts) > 1 else _MIXED), int(len(parts) >= min_depth), 1


def prefix_of(acc: _Acc) -> str:
    top, deep, total = acc
    if top in (None, _MIXED) or 2 * deep <= total or split_of_folder(top) is not None:
        return ""
    return top + "/"


def top_folder_to_strip(names: Sequence[str], min_depth: int = MIN_DEPTH_IMAGES) -> str:
    """The prefix ``TOP/`` that wraps a dataset in an archive, or ``""``.

    An archive's files are taken to be wrapped in a folder when all of them
    sit under that one folder, the folder is not a split name, and most
    files are still inside a class folder once it is removed (at least
    ``min_depth`` path parts with it). So ``flowers/cat/a.jpg`` becomes
    ``cat/a.jpg`` (a stray ``flowers/LICENSE`` then is a file outside any
    class folder, as in the unpacked folder), while ``cat/a.jpg`` (a single
    class) and ``train/cat/a.jpg`` stay as they are.
    """
    acc: _Acc = (None, 0, 0)
    for name in names:
        acc = merge_top(acc, top_of(name, min_depth))
    return prefix_of(acc)


# ---------------------------------------------------------------------------
# Listing archives: MemberEntry, SkippedEntry or ErrorEntry (model.py), names normalised.


_ZIP_UTF8_FLAG = 0x800  # general purpose bit 11: the name is UTF-8
# What zipfile raises for an archive whose directory cannot be read.
ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, OSError, struct.error)


def zip_member_name(info: zipfile.ZipInfo) -> str:
    """A zip member's name as its archiver meant it: UTF-8 when its bytes are valid UTF-8, else cp437.

    Info-ZIP's ``zip -r`` on Linux stores UTF-8 names without the UTF-8 flag, which ``zipfile``
    then reads as cp437 (``chaton_été.jpg`` as ``chaton_├⌐t├⌐.jpg``). Info-ZIP's ``unzip`` takes
    such bytes as UTF-8 when they are valid UTF-8, and so does this: a zipped folder gives the
    records, names and splits of the folder.
    """
    name = info.filename
    if info.flag_bits & _ZIP_UTF8_FLAG:
        return name
    try:
        return name.encode("cp437").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):  # cp437 bytes that are not UTF-8: cp437 it is
        return name


def read_zip_directory(f) -> List[Tuple[str, zipfile.ZipInfo]]:
    """``(member name, ZipInfo)`` of every entry of the zip open as ``f``, names by :func:`zip_member_name`.

    Every reader of zip archives lists them through this function. Raises what ``zipfile`` raises
    for a damaged archive (see :data:`ZIP_ERRORS`).
    """
    return [(zip_member_name(info), info) for info in zipfile.ZipFile(f).infolist()]


def _list_zip(path: str) -> Iterator[ArchiveEntry]:
    with open_raw(path) as f:
        try:
            infos = read_zip_directory(f)
        except ZIP_ERRORS as e:
            yield ErrorEntry("", "corrupt_archive", f"not a readable zip archive: {type(e).__name__}: {e}")
            return
    for raw_name, info in infos:
        if info.is_dir():
            continue
        name = normalise_member_name(raw_name)
        unsafe = unsafe_path(raw_name)
        if unsafe:
            yield ErrorEntry(name or raw_name, "bad_name", unsafe)
            continue
        if not name or is_junk(name):
            yield SkippedEntry(name or raw_name)
            continue
        if stat.S_ISLNK(info.external_attr >> 16):
            yield ErrorEntry(name, "unsupported_member", "a symbolic link: links in archives are not followed")
            continue
        yield MemberEntry(
            name,
            info.file_size,
            ZipMember(
                path,
                info.header_offset,
                info.compress_type,
                info.compress_size,
                info.file_size,
                info.CRC,
                info.flag_bits,
            ),
        )


def _tar_members(tar: tarfile.TarFile) -> Iterator[Tuple[str, str, tarfile.TarInfo]]:
    """``(action, name, info)`` of each member to convert (``member``) or count as skipped (``skip``), in order.

    Directories are left out. Headers are read one at a time, as the
    caller asks for the next one, so a streamed archive is read once.
    """
    while True:
        info = tar.next()
        # TarFile keeps every header it reads in .members; a big archive must not fill memory.
        tar.members = []  # type: ignore[attr-defined]  # a real TarFile attribute that typeshed leaves out
        if info is None:
            return
        name, action = _classify_tar_member(info)
        if action != "ignore":
            yield action, name, info


def _classify_tar_member(info: tarfile.TarInfo) -> Tuple[str, str]:
    """``(name, action)`` of a tar member: ``member`` to convert, ``skip`` (junk, counted as
    skipped), ``unsafe`` (a path outside the archive's tree), ``unsupported`` (links, devices:
    never followed) or ``ignore`` (directories)."""
    name = normalise_member_name(info.name)
    if info.isdir():
        return name or info.name, "ignore"
    if unsafe_path(info.name):
        return name or info.name, "unsafe"
    if not name or is_junk(name):
        return name or info.name, "skip"
    if not info.isfile() or info.issparse():
        return name, "unsupported"
    return name, "member"


def _not_a_member(action: str, name: str, info: tarfile.TarInfo) -> ArchiveEntry:
    if action == "unsafe":
        return ErrorEntry(name, "bad_name", unsafe_path(info.name) or "unsafe member path")
    if action == "unsupported":
        return ErrorEntry(
            name, "unsupported_member", f"{_member_type(info)}: links and devices in archives are not followed"
        )
    return SkippedEntry(name)


def _list_tar(path: str, size: int) -> Iterator[ArchiveEntry]:
    """An uncompressed tar: only the member headers are read (the data is seeked over)."""
    truncated = False
    with open_raw(path) as f:
        try:
            tar = tarfile.open(fileobj=f, mode="r:")
        except (tarfile.TarError, EOFError, OSError) as e:
            yield ErrorEntry("", "corrupt_archive", f"not a readable tar archive: {type(e).__name__}: {e}")
            return
        try:
            for action, name, info in _tar_members(tar):
                if action != "member":
                    yield _not_a_member(action, name, info)
                    continue
                if info.offset_data + info.size > size:
                    truncated = True
                    yield ErrorEntry(
                        name,
                        "truncated_archive",
                        (
                            f"archive ends inside this member: it needs bytes up to {info.offset_data + info.size}, "
                            f"the archive has {size}"
                        ),
                    )
                    break
                yield MemberEntry(name, info.size, TarMember(path, info.offset_data, info.size))
        except (tarfile.TarError, EOFError, OSError) as e:
            if not truncated:
                yield ErrorEntry(
                    "",
                    "truncated_archive" if "end of" in str(e) else "corrupt_archive",
                    (f"cannot read the archive past byte {tar.offset}: {type(e).__name__}: {e}"),
                )
            return
        if not truncated and size - tar.offset < _TAR_BLOCK:
            yield ErrorEntry(
                "",
                "truncated_archive",
                (f"archive ends at byte {size} without the end-of-archive marker: members after it may be missing"),
            )


def _list_tgz(path: str, limit: int, member_limit: Optional[Callable[[str], int]] = None) -> Iterator[ArchiveEntry]:
    """A compressed tar, streamed once: every member comes with its bytes (at most ``member_limit(name)``
    when given, else ``limit``, the image limit)."""
    current = ""
    with open_raw(path) as f:
        try:
            tar = tarfile.open(fileobj=f, mode="r|*")
            for action, name, info in _tar_members(tar):
                if action != "member":
                    yield _not_a_member(action, name, info)
                    continue
                cap = member_limit(name) if member_limit else limit
                if info.size > cap:
                    flag = " (--max-file-mb)" if cap == limit else ""
                    yield ErrorEntry(
                        name, "file_too_large", f"member is {info.size} bytes, over the limit of {cap} bytes{flag}"
                    )
                    continue
                current = name
                stream = tar.extractfile(info)
                if stream is None:  # never: _classify_tar_member passes regular files only
                    raise tarfile.TarError(f"member {name} has no data")
                data = stream.read()
                if len(data) != info.size:
                    raise EOFError(f"member data ends after {len(data)} of {info.size} bytes")
                yield MemberEntry(name, info.size, InlineMember(data))
                current = ""  # a failure from here on is in the next header, not in this member
        except (tarfile.TarError, EOFError, OSError, zlib.error) as e:
            text = str(e).lower()
            cut = isinstance(e, EOFError) or "end of" in text or "ended before" in text or "truncated" in text
            yield ErrorEntry(
                current,
                "truncated_archive" if cut else "corrupt_archive",
                (f"cannot read the compressed archive{' in this member' if current else ''}: {type(e).__name__}: {e}"),
            )


def list_archive(
    path: str, size: int, limit: int, member_limit: Optional[Callable[[str], int]] = None
) -> Generator[ArchiveEntry, None, None]:
    """Every entry of one archive, in archive order; problems are ``error`` entries, never exceptions.

    ``limit`` bounds the bytes a tar.gz member is listed with; ``member_limit(name)``, when given, instead.
    """
    fmt = archive_format(path)
    listers = {
        "zip": lambda: _list_zip(path),
        "tar": lambda: _list_tar(path, size),
        "tgz": lambda: _list_tgz(path, limit, member_limit),
    }
    if fmt not in listers:
        yield ErrorEntry("", NOT_AN_ARCHIVE, "not a .zip, .tar, .tar.gz or .tgz file")
        return
    try:
        with open_raw(path) as f:
            head = f.read(_TAR_BLOCK)
        unlike = _unlike_archive(fmt, head)
        if unlike:
            yield ErrorEntry("", NOT_AN_ARCHIVE, unlike)
            return
        for entry in listers[fmt]():
            problem = _name_problem(entry.name)
            if problem and isinstance(entry, MemberEntry):
                yield ErrorEntry(printable(entry.name), "bad_name", problem)
            elif isinstance(entry, MemberEntry) and archive_format(entry.name):
                yield ErrorEntry(entry.name, NESTED_ARCHIVE, NESTED_MESSAGE)
            elif problem:
                yield entry._replace(name=printable(entry.name))
            else:
                yield entry
    except (OSError, EOFError) as e:  # the archive itself cannot be opened
        yield ErrorEntry("", "unreadable", f"{type(e).__name__}: {e}")


_FORMAT_NAMES = {"zip": "zip", "tar": "tar", "tgz": "compressed tar (.tar.gz, .tgz)"}
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08")  # a member, an empty zip, a spanned zip
# What tarfile's "r|*" opens: gzip, bzip2 and xz streams (and an uncompressed tar, checked apart).
_COMPRESSED_MAGIC = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00")
_TAR_MAGIC_AT = 257  # "ustar" (POSIX and GNU tar headers)


def _unlike_archive(fmt: str, head: bytes) -> Optional[str]:
    """Why the first bytes ``head`` (up to a tar block) of a file named as a ``fmt`` archive are no archive of
    that kind at all (an empty file, text, an HTML error page, an image); None when they may be one.

    A damaged or cut archive starts like one, and is ``corrupt_archive`` or ``truncated_archive`` once listed.
    """
    if not head:
        return f"not a {_FORMAT_NAMES[fmt]} archive: the file is empty"
    if fmt == "zip" and head.startswith(_ZIP_MAGIC):
        return None
    is_tar = head[_TAR_MAGIC_AT : _TAR_MAGIC_AT + 5] == b"ustar" or _old_tar_header(head)
    if fmt == "tar" and is_tar:
        return None
    if fmt == "tgz" and (head.startswith(_COMPRESSED_MAGIC) or is_tar):
        return None
    return f"not a {_FORMAT_NAMES[fmt]} archive: the file starts with {head[:16]!r}"


def _old_tar_header(head: bytes) -> bool:
    """True for a whole tar header block whose checksum holds (a pre-POSIX tar has no magic)."""
    if len(head) < _TAR_BLOCK:
        return False
    try:
        tarfile.TarInfo.frombuf(head, tarfile.ENCODING, "surrogateescape")
    except tarfile.HeaderError:
        return False
    return True


def _name_problem(name: str) -> Optional[str]:
    """Why a member name cannot be carried as text (records, labels.txt, errors.jsonl), or None."""
    if "\n" in name or "\r" in name:
        return "member name contains a line break"
    if not is_text(name):  # tar names that are not UTF-8 decode to surrogates
        return "member name is not valid UTF-8"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return "member name contains control characters"
    return None


def unsafe_path(raw_name: str) -> Optional[str]:
    """Why a member's path points outside the archive's own tree (absolute, a drive, ``..``), or None.

    Members are never extracted, but such a name would still become a record name and a class.
    """
    name = raw_name.replace("\\", "/")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":" and name[0].isalpha()):
        return f"member path is absolute ({printable(raw_name)!r})"
    if ".." in name.split("/"):
        return f"member path climbs out of the archive with '..' ({printable(raw_name)!r})"
    return None


def _member_type(info: tarfile.TarInfo) -> str:
    if info.issym():
        return "a symbolic link"
    if info.islnk():
        return "a hard link"
    if info.isdev():
        return "a device or FIFO"
    if info.issparse():
        return "a sparse file"
    return f"a tar entry of type {info.type!r}"


def peek_archive(path: str, size: int, limit: int, max_members: int, max_bytes: int) -> Tuple[List[ArchiveEntry], bool]:
    """The first entries of an archive (up to ``max_members`` members or ``max_bytes``
    of member data) and whether that was all of it.

    A zip's listing is its central directory (cheap); a tar's costs a read
    per member header; a tar.gz is decompressed as far as it is read.
    """
    entries: List[ArchiveEntry] = []
    members = data_bytes = 0
    listing = list_archive(path, size, limit)
    try:
        for entry in listing:
            if members >= max_members or data_bytes > max_bytes:
                return entries, False
            entries.append(entry)
            if isinstance(entry, MemberEntry):
                members += 1
                if isinstance(entry.member, InlineMember):
                    data_bytes += entry.size
    finally:
        listing.close()
    return entries, True
