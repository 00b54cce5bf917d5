"""The launch listing of the input: its paths resolved, its files listed once (names and sizes), its digest.

``list_input`` reads metadata only, nothing is read; inside ``listing_once()`` each pattern is listed
once and that listing reused. A local folder is listed with the standard library, as Beam's
``LocalFileSystem.match`` lists it (same files, order and change markers; one ``stat`` per file), so a
launch over a local folder loads no Beam; globs and remote paths go through ``FileSystems.match``.
A listing the filesystem refuses is a ``PlanError``; a pattern that matches nothing lists nothing.
A listing is held as a ``file_table.FileTable`` (names per folder in one string, sizes and change
markers in arrays), and a walk keeps each folder's names as one string: a million files are not
millions of Python objects.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import math
import os
import re
from typing import Any, Callable, Dict, FrozenSet, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

from img2tfrecord import storage
from img2tfrecord.pipeline.file_table import FileTable, joined
from img2tfrecord.pipeline.plan_model import PlanError
from img2tfrecord.sources import input_paths


def digest(entries) -> str:
    """sha256 of a listing: one JSON line per entry, in the given (sorted) order."""
    h = hashlib.sha256()
    for entry in entries:
        h.update(_json_line(entry).encode("utf-8", "surrogateescape") + b"\n")
    return h.hexdigest()


def _json_line(entry) -> str:
    """``json.dumps(entry, sort_keys=True, default=str)``; a tuple of names and numbers (a listing's
    entry) formatted directly, with the same bytes: one encoder per call is most of a large digest."""
    if type(entry) is tuple and all(type(v) is str or type(v) is int or _finite(v) for v in entry):
        return "[" + ", ".join(_ascii_string(v) if type(v) is str else repr(v) for v in entry) + "]"
    return json.dumps(entry, sort_keys=True, default=str)


def _finite(value) -> bool:
    return type(value) is float and math.isfinite(value)


_ascii_string = json.encoder.encode_basestring_ascii  # what json.dumps writes for a str (ensure_ascii)


def _is_uri(path: str) -> bool:
    return "://" in path


def resolve_input(path: str) -> Tuple[str, str]:
    """``(input root ending with '/', glob pattern)`` for a directory or a glob."""
    path = input_paths.absolute_input(path)
    if input_paths.GLOB_CHARS.search(path):
        parts = path.split("/")
        base = "/".join(parts[: input_paths.first_glob_part(parts)]) + "/"
        return base, path
    root = path.rstrip("/")
    return root + "/", root + "/**"


def local_matcher(pattern: str) -> Optional[Callable[[str], Any]]:
    """The test a local path must pass to match ``pattern`` (Beam's glob syntax), or None when every file
    under the pattern's folder matches (``folder/**``, the pattern of a folder input)."""
    if pattern.endswith("/**") and not _GLOB_PREFIX.sub("", pattern[:-3]):
        return None
    return re.compile(glob_regex(pattern)).match


def glob_regex(pattern: str) -> str:
    """The regular expression of a glob as Beam's ``FileSystem.translate_pattern`` writes it (``*`` stops
    at ``/``, ``**`` does not; fnmatch's ``?`` and ``[...]``), without importing Beam (seconds) to list a
    local glob. ``tests/test_beam_adapter.py`` checks it against Beam's own."""
    i, n, out = 0, len(pattern), ""
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if i < n and pattern[i] == "*":
                out += ".*"
                i += 1
            else:
                out += r"[^/\\]*"
        elif c == "?":
            out += "."
        elif c == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out += r"\["
            else:
                stuff = pattern[i:j].replace("\\", "\\\\")
                i = j + 1
                if stuff[0] == "!":
                    stuff = "^" + stuff[1:]
                elif stuff[0] == "^":
                    stuff = "\\" + stuff
                out += f"[{stuff}]"
        else:
            out += re.escape(c)
    return r"(?ms)" + out + r"\Z"


def is_file(path: str) -> bool:
    if not _is_uri(path):
        return os.path.isfile(path)
    try:
        return any(m.path == path for m in storage.beam_filesystems().match([path])[0].metadata_list)
    except Exception:
        return False


class Listing(NamedTuple):
    """A pattern's listing: its files, and the local files its walk found that it could not stat (broken links,
    files gone since)."""

    files: FileTable
    unlisted: FrozenSet[str]


# pattern -> listing, inside listing_once(); None outside it, where every call lists again.
_LISTINGS: contextvars.ContextVar[Optional[Dict[str, Listing]]] = contextvars.ContextVar(
    "img2tfrecord_listings", default=None
)


class FolderWalk:
    """``os.walk`` of a local folder, top-down, nothing pruned, links to folders not followed. Each folder's
    file names are kept as one string (``file_table.joined``): a walk of a million files is not a million
    strings."""

    def __init__(self, root: str):
        self.unlistable: List[OSError] = []  # the folders it could not list
        self._folders = [
            (folder, subfolders, joined(files))
            for folder, subfolders, files in os.walk(root, onerror=self.unlistable.append)
        ]

    @property
    def entries(self) -> Iterator[Tuple[str, List[str], List[str]]]:
        """``(folder, its sub-folders, its files)``, as ``os.walk`` gave them."""
        for folder, subfolders, files in self._folders:
            yield folder, subfolders, _names(files)

    def folders(self) -> Iterator[Tuple[str, Union[str, Tuple[str, ...]]]]:
        """``(folder, its files as file_table.joined gave them)``."""
        for folder, _, files in self._folders:
            yield folder, files


def _names(files: Union[str, Tuple[str, ...]]) -> List[str]:
    if isinstance(files, tuple):
        return list(files)
    return files.split("\0") if files else []


# root folder -> its walk, inside listing_once(), where the listing and the local check share it.
_WALKS: contextvars.ContextVar[Optional[Dict[str, FolderWalk]]] = contextvars.ContextVar(
    "img2tfrecord_walks", default=None
)


# (what, path) -> what reading it gave, inside listing_once(): a manifest parsed by the plan and the ledger.
_READS: contextvars.ContextVar[Optional[Dict[Tuple[str, str], Any]]] = contextvars.ContextVar(
    "img2tfrecord_reads", default=None
)


@contextlib.contextmanager
def listing_once() -> Iterator[None]:
    """Inside the block each pattern is listed once and that listing reused (the plan, then ``--plan``'s
    count of every input), a local folder walked once (the listing, then the local check), and a file
    read through :func:`read_once` read once: a bucket of a million objects is not listed twice, nor a
    folder of a million files walked twice, nor a manifest of a million rows parsed twice."""
    if _LISTINGS.get() is not None:  # inside an outer block: share its listings
        yield
        return
    token = _LISTINGS.set({})
    walks = _WALKS.set({})
    reads = _READS.set({})
    try:
        yield
    finally:
        _READS.reset(reads)
        _WALKS.reset(walks)
        _LISTINGS.reset(token)


def read_once(what: str, path: str, read: Callable[[str], Any]) -> Any:
    """``read(path)``, or what it gave for the same ``what`` and ``path`` earlier in this ``listing_once()``
    block. Callers must not change what it returns."""
    reads = _READS.get()
    if reads is None:
        return read(path)
    key = (what, path)
    if key not in reads:
        reads[key] = read(path)
    return reads[key]


def walk_folder(root: str) -> FolderWalk:
    """The walk of the local folder ``root`` (the one this ``listing_once()`` block made already, if any).
    Callers must not change its lists."""
    walks = _WALKS.get()
    if walks is not None and root in walks:
        return walks[root]
    found = FolderWalk(root)
    if walks is not None:
        walks[root] = found
    return found


def unlistable_folders(base: str, pattern: str) -> List[Tuple[str, float]]:
    """``(path ending with '/', its change marker)`` of each folder under a local folder input's root ``base``
    that its walk could not list (no permission, an I/O error), when ``pattern`` is the whole folder's; the
    root itself is not among them (a root that cannot be listed lists no file)."""
    if _is_uri(base) or pattern != base + "**":
        return []
    root = base.rstrip("/") or "/"
    found = []
    for error in walk_folder(root).unlistable:
        folder = str(error.filename).rstrip("/")
        if folder == root or not folder.startswith(base):
            continue
        stamped = _stat(folder)
        found.append((folder + "/", stamped[2] if stamped is not None else 0.0))
    return sorted(found)


class SizedFiles(Sequence[Tuple[str, int]]):
    """``(path, size)`` of the files of a :class:`FileTable`, made as they are read."""

    def __init__(self, files: FileTable):
        self._files = files

    def __len__(self) -> int:
        return len(self._files)

    def __iter__(self) -> Iterator[Tuple[str, int]]:
        for path, size, _ in self._files:
            yield path, size

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [(path, size) for path, size, _ in self._files[index]]
        path, size, _ = self._files[index]
        return path, size


def list_input(pattern: str) -> Sequence[Tuple[str, int]]:
    """``(path, size)`` of every file matching ``pattern`` (metadata only); nothing matched is empty."""
    return SizedFiles(list_stamped(pattern))


def list_stamped(pattern: str) -> FileTable:
    """``(path, size, mtime)`` of every file matching ``pattern``: ``mtime`` is the filesystem's change
    marker (a file's modification time, an object's update time)."""
    return _listing(pattern).files


def _listing(pattern: str) -> Listing:
    listings = _LISTINGS.get()
    if listings is None:
        return _list(pattern)
    if pattern not in listings:
        listings[pattern] = _list(pattern)
    return listings[pattern]


_GLOB_PREFIX = re.compile(r"^[^[*?]*")  # what Beam's match takes for the literal part of a pattern


def unlisted_paths(pattern: str) -> Optional[FrozenSet[str]]:
    """The local files the walk of ``pattern``'s listing found but could not stat, when this
    ``listing_once()`` block has made that listing; None when it has not."""
    listing = (_LISTINGS.get() or {}).get(pattern)
    return listing.unlisted if listing is not None else None


def _list(pattern: str) -> Listing:
    if _is_uri(pattern):
        return Listing(_list_remote(pattern), frozenset())
    literal = _GLOB_PREFIX.match(pattern).group(0)  # type: ignore[union-attr]
    if literal == pattern:  # no glob: the path itself
        return Listing(FileTable.of_rows(found for found in (_stat(pattern),) if found is not None), frozenset())
    matches = local_matcher(pattern)
    listed = FileTable()
    unlisted = []
    for folder, files in walk_folder(os.path.dirname(literal)).folders():
        prefix = os.path.join(folder, "")
        names, sizes, mtimes = [], [], []
        for name in _names(files):
            path = prefix + name
            if matches is None or matches(path):
                found = _stat(path)
                if found is None:
                    unlisted.append(path)
                else:
                    names.append(name)
                    sizes.append(found[1])
                    mtimes.append(found[2])
        listed.add_folder(prefix, files if len(names) == _count(files) else names, sizes, mtimes)
    return Listing(listed, frozenset(unlisted))


def _count(files: Union[str, Tuple[str, ...]]) -> int:
    """How many names a folder of a walk holds."""
    if isinstance(files, tuple):
        return len(files)
    return files.count("\0") + 1 if files else 0


def _stat(path: str) -> Optional[Tuple[str, int, float]]:
    """``(path, size, mtime)`` of a local file (links followed); None when it is gone or unreadable."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return path, stat.st_size, stat.st_mtime


def _list_remote(pattern: str) -> FileTable:
    from apache_beam.io.filesystem import BeamIOError

    try:
        result = storage.beam_filesystems().match([pattern])[0]
    except BeamIOError as e:  # the filesystem refused the listing (permissions, a missing bucket)
        details = [v for v in (e.exception_details or {}).values() if v is not None]
        if details and all(isinstance(v, FileNotFoundError) for v in details):
            return FileTable()
        raise PlanError(f"cannot list {pattern}: {details[0] if details else e}") from e
    return FileTable.of_rows(
        (m.path, m.size_in_bytes, float(m.last_updated_in_seconds or 0.0)) for m in result.metadata_list
    )


def file_pattern(path: str) -> Tuple[str, str]:
    """``(folder ending with '/', pattern)`` of an archive or manifest path or glob."""
    if not _is_uri(path):
        path = os.path.abspath(path)
    return path.rsplit("/", 1)[0] + "/", path


def file_size(path: str) -> Optional[int]:
    """The size of the file ``path``; None when there is none or it cannot be read."""
    try:
        return storage.file_size(path)
    except Exception:
        return None
