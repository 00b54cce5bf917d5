"""A listing of many files, held compactly: :class:`FileTable`.

A launch lists every input file once and reads that listing several times (its plan, its ledger, its
work items, their placement). Held as a tuple of Python objects per file, a million files take some
250 MB; here each folder keeps its files' names as one string and their sizes and change markers as
arrays, about 17 bytes and the name per file, and a file's ``(path, size, mtime)`` is made when it is
read. Nothing here does I/O.
"""

from __future__ import annotations

import bisect
import itertools
from array import array
from typing import Callable, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union, overload

Row = Tuple[str, int, float]  # (path, size, change marker), as pipeline/listing.list_stamped gives them

_SEP = "\0"  # no local file name holds it


class _Folder(NamedTuple):
    """Files of one folder: a file's path is ``prefix + name``."""

    prefix: str
    names: Union[str, Tuple[str, ...]]  # joined by _SEP; a tuple when a (remote) name holds _SEP
    sizes: array
    mtimes: array

    def name_list(self) -> List[str]:
        if isinstance(self.names, tuple):
            return list(self.names)
        return self.names.split(_SEP) if self.sizes else []


def joined(names: Sequence[str]) -> Union[str, Tuple[str, ...]]:
    """The names of one folder as a :class:`FileTable` keeps them."""
    text = _SEP.join(names)
    return tuple(names) if text.count(_SEP) != max(0, len(names) - 1) else text


class FileTable(Sequence[Row]):
    """Files, folder by folder, in the order they were added; reads as a sequence of ``(path, size, mtime)``."""

    def __init__(self) -> None:
        self._folders: List[_Folder] = []
        self._starts = array("q")  # the index of each folder's first file
        self._length = 0
        self._offsets: List[Optional[array]] = []  # where each name starts in its folder's names, once read by index

    def add_folder(
        self, prefix: str, names: Union[str, Sequence[str]], sizes: Iterable[int], mtimes: Iterable[float]
    ) -> None:
        """Add the files ``prefix + name`` of one folder: ``names`` a list, or already :func:`joined`."""
        sizes, mtimes = array("q", sizes), array("d", mtimes)
        if not sizes:
            return
        folder = _Folder(prefix, names if isinstance(names, (str, tuple)) else joined(names), sizes, mtimes)
        if len(sizes) != len(mtimes) or len(folder.name_list()) != len(sizes):
            raise ValueError(f"folder {prefix!r}: names, sizes and change markers differ in number")
        self._folders.append(folder)
        self._offsets.append(None)
        self._starts.append(self._length)
        self._length += len(sizes)

    @classmethod
    def of_rows(cls, rows: Iterable[Row]) -> FileTable:
        """A table of ``rows`` in their order, a folder per run of paths with the same parent."""
        table = cls()
        for prefix, group in itertools.groupby(rows, key=lambda row: _prefix_of(row[0])):
            found = list(group)
            table.add_folder(
                prefix, [path[len(prefix) :] for path, _, _ in found], (r[1] for r in found), (r[2] for r in found)
            )
        return table

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[Row]:
        for folder in self._folders:
            prefix = folder.prefix
            for name, size, mtime in zip(folder.name_list(), folder.sizes, folder.mtimes):
                yield prefix + name, size, mtime

    @overload
    def __getitem__(self, index: int) -> Row: ...

    @overload
    def __getitem__(self, index: slice) -> List[Row]: ...

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._length))]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("file table index out of range")
        f = bisect.bisect_right(self._starts, index) - 1
        folder = self._folders[f]
        i = index - self._starts[f]
        if isinstance(folder.names, tuple):
            return folder.prefix + folder.names[i], folder.sizes[i], folder.mtimes[i]
        offsets = self._offsets[f]
        if offsets is None:
            offsets = array("I", itertools.accumulate((len(n) + 1 for n in folder.name_list()), initial=0))
            self._offsets[f] = offsets
        return folder.prefix + folder.names[offsets[i] : offsets[i + 1] - 1], folder.sizes[i], folder.mtimes[i]

    def folders(self) -> Iterator[Tuple[str, List[str], array, array]]:
        """``(prefix, names, sizes, change markers)`` of each folder, in order: a file's path is ``prefix + name``."""
        for folder in self._folders:
            yield folder.prefix, folder.name_list(), folder.sizes, folder.mtimes

    def paths(self) -> Iterator[str]:
        for folder in self._folders:
            prefix = folder.prefix
            for name in folder.name_list():
                yield prefix + name

    def filtered(self, keep: Callable[[str], bool]) -> FileTable:
        """The files whose path ``keep`` accepts, in the same order (this table when it keeps them all)."""
        table = FileTable()
        for folder in self._folders:
            names = folder.name_list()
            kept = [i for i, name in enumerate(names) if keep(folder.prefix + name)]
            if len(kept) == len(names):
                table.add_folder(folder.prefix, folder.names, folder.sizes, folder.mtimes)
            elif kept:
                table.add_folder(
                    folder.prefix,
                    [names[i] for i in kept],
                    (folder.sizes[i] for i in kept),
                    (folder.mtimes[i] for i in kept),
                )
        return self if len(table) == len(self) else table

    def sorted_by(self, key: Callable[[str], str]) -> FileTable:
        """The files sorted by ``key`` of their path (stable). Each folder is sorted alone and the folders
        put in order; only folders whose keys interleave (files beside sub-folders) are merged file by file."""
        runs = []  # (first key, last key, original folder number, the sorted folder)
        for number, folder in enumerate(self._folders):
            names = folder.name_list()
            keys = [key(folder.prefix + name) for name in names]
            order = sorted(range(len(names)), key=keys.__getitem__)
            if order != list(range(len(names))):
                folder = _Folder(
                    folder.prefix,
                    joined([names[i] for i in order]),
                    array("q", (folder.sizes[i] for i in order)),
                    array("d", (folder.mtimes[i] for i in order)),
                )
            runs.append((keys[order[0]], keys[order[-1]], number, folder))
        runs.sort(key=lambda run: (run[0], run[2]))
        table = FileTable()
        group: List[_Folder] = []
        last: Optional[str] = None
        for first, final, _, folder in runs:
            if group and last is not None and first <= last:  # interleaves with the group: merged below
                group.append(folder)
                last = max(last, final)
                continue
            _add_merged(table, group, key)
            group, last = [folder], final
        _add_merged(table, group, key)
        return table


def _add_merged(table: FileTable, group: List[_Folder], key: Callable[[str], str]) -> None:
    """Add the files of ``group`` (folders each sorted by ``key``) to ``table`` in the order of ``key``."""
    if len(group) == 1:
        folder = group[0]
        table.add_folder(folder.prefix, folder.names, folder.sizes, folder.mtimes)
        return
    rows = sorted(
        (
            (key(folder.prefix + name), number, folder.prefix, name, size, mtime)
            for number, folder in enumerate(group)
            for name, size, mtime in zip(folder.name_list(), folder.sizes, folder.mtimes)
        ),
        key=lambda row: (row[0], row[1]),
    )
    for prefix, found in itertools.groupby(rows, key=lambda row: row[2]):
        same = list(found)
        table.add_folder(prefix, [r[3] for r in same], (r[4] for r in same), (r[5] for r in same))


def _prefix_of(path: str) -> str:
    return path[: path.rfind("/") + 1]
