"""A folder or glob of images (the kind every other input falls back to): its plan (layout, splits, sizes, the
folders of earlier outputs left out), its source and its ledger (one entry per file)."""

from __future__ import annotations

import os
from array import array
from typing import Iterator, List, NamedTuple, Optional, Sequence, Tuple, TypeVar

from img2tfrecord import faults, storage
from img2tfrecord.model import ErrorRow, Item, SkippedEntry, WorkItem
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.file_table import FileTable
from img2tfrecord.pipeline.inputs import LocalInputReport, check_local_input
from img2tfrecord.pipeline.kinds.base import InputKind
from img2tfrecord.pipeline.kinds.common import check_images, layout_of, skip_outputs, split_bytes
from img2tfrecord.pipeline.kinds.ledger import InputLedger, ListedItems, Picked
from img2tfrecord.pipeline.listing import digest, is_file, list_stamped, read_once, resolve_input, unlistable_folders
from img2tfrecord.pipeline.plan_model import InputPlan, Plan, PlanError
from img2tfrecord.pipeline.sizing import estimate_size_ratio, sized
from img2tfrecord.schemas.ledger import LedgerEntry
from img2tfrecord.sources import input_paths
from img2tfrecord.sources import layout as layouts
from img2tfrecord.sources.inputs import ERRORS, FILES, InputSource
from img2tfrecord.sources.inputs.folder import FolderSource
from img2tfrecord.sources.layout import folder_entry


class FolderFiles(NamedTuple):
    """A folder input's launch listing: its root and pattern, its files (junk and earlier outputs left out,
    sorted by relpath) and the folders of earlier outputs."""

    base: str
    pattern: str
    files: FolderWorkItems  # made as they are read
    outputs: Tuple[str, ...]


class FolderListing(NamedTuple):
    """The files under a folder input's root that are inputs (sorted by relpath), and the junk names left out
    (printable, sorted)."""

    files: FileTable
    junk: List[str]


def folder_files(config: ConvertConfig) -> FolderFiles:
    """The files of a folder or glob input, listed once per launch; PlanError for a file, an earlier
    output, a missing path or nothing listed."""
    return read_once("folder_files", config.input, lambda unused: _list_folder(config))


def folder_listing(base: str, pattern: str, outputs: Tuple[str, ...]) -> FolderListing:
    """The inputs of the folder ``base`` that ``pattern`` lists, without the ``outputs`` folders (relative
    to ``base``); listed once per launch (the plan and the ledger share it)."""
    key = "\0".join((base, pattern, *outputs))
    return read_once("folder_listing", key, lambda unused: _folder_listing(base, pattern, outputs))


def _folder_listing(base: str, pattern: str, outputs: Tuple[str, ...]) -> FolderListing:
    junk: List[str] = []

    def is_input(path: str) -> bool:
        if not path.startswith(base):
            return False
        relpath = layouts.relative_path(base, path)
        if outputs and layouts.in_folders(relpath, outputs):
            return False
        if layouts.is_junk(relpath):
            junk.append(layouts.printable(relpath))
            return False
        return True

    files = list_stamped(pattern).filtered(is_input).sorted_by(lambda path: layouts.relative_path(base, path))
    return FolderListing(files, sorted(junk))


def _list_folder(config: ConvertConfig) -> FolderFiles:
    base, pattern = resolve_input(config.input)
    if not input_paths.GLOB_CHARS.search(config.input) and is_file(base.rstrip("/")):
        raise PlanError(
            f"--input {config.input} is a file; give a folder of class folders, a glob, an archive "
            f"(.zip, .tar, .tar.gz, .tgz) or a manifest (.csv, .jsonl)"
        )
    listing = list_stamped(pattern)
    faults.pause_at("listing")
    faults.fail_at("listing", base)
    outputs = skip_outputs(config, (layouts.relative_path(base, p) for p in listing.paths() if p.startswith(base)))
    files = folder_listing(base, pattern, outputs).files
    if not files:
        if not listing and not input_paths.GLOB_CHARS.search(config.input) and "://" not in base:
            _check_root(config, base.rstrip("/") or "/")
        raise PlanError(f"no input files match {pattern}")
    return FolderFiles(base, pattern, FolderWorkItems(files, base), outputs)


T = TypeVar("T")


def relative_rows(files: FileTable, base: str) -> Iterator[Tuple[str, str, int, float]]:
    """``(path, relpath, size, mtime)`` of the files under ``base``: ``layout.relative_path`` of each, its
    folder's part worked out once per folder (a name holds no separator)."""
    for prefix, names, sizes, mtimes in files.folders():
        folder = layouts.relative_path(base, prefix)
        for name, size, mtime in zip(names, sizes, mtimes):
            yield prefix + name, folder + name, size, mtime


class _FolderRows(Sequence[T]):
    """The files of a folder listing as one element each (:meth:`_row`), made as they are read."""

    def __init__(self, files: FileTable, base: str):
        self.files, self.base = files, base

    def _row(self, path: str, relpath: str, size: int, mtime: float) -> T:
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self.files)

    def __iter__(self) -> Iterator[T]:
        for path, relpath, size, mtime in relative_rows(self.files, self.base):
            yield self._row(path, relpath, size, mtime)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        path, size, mtime = self.files[index]
        return self._row(path, layouts.relative_path(self.base, path), size, mtime)


class FolderWorkItems(_FolderRows[WorkItem]):
    """The files of a folder listing as ``WorkItem(path, relpath, size)``."""

    def _row(self, path: str, relpath: str, size: int, mtime: float) -> WorkItem:
        return WorkItem(path, relpath, size)

    def by_folder(self) -> Iterator[Tuple[str, List[str]]]:
        """``(folder relative to the input root, "" for the root; its files' names)`` of every folder."""
        for prefix, names, _, _ in self.files.folders():
            yield layouts.relative_path(self.base, prefix).rstrip("/"), names


class FolderEntries(_FolderRows[LedgerEntry]):
    """The files of a folder listing as ledger entries ``LedgerEntry(relpath, size, mtime)``."""

    def _row(self, path: str, relpath: str, size: int, mtime: float) -> LedgerEntry:
        return LedgerEntry(relpath, size, mtime)


class FolderItems(ListedItems):
    """The work items of a folder listing, made as they are read; a file whose name cannot be a record's is
    rejected (``layout.folder_entry``: ``bad_name``)."""

    def __init__(self, files: FileTable, base: str):
        rejected: List[ErrorRow] = []
        kept = array("q")
        for index, (path, _, size, _) in enumerate(relative_rows(files, base)):
            found = folder_entry(base, path, size)
            if isinstance(found, WorkItem):
                kept.append(index)
            elif found is not None and not isinstance(found, SkippedEntry):
                rejected.append(found)
        items: Sequence[WorkItem] = FolderWorkItems(files, base)
        super().__init__(items if len(kept) == len(files) else Picked(items, kept), rejected)


def plan_folder(config: ConvertConfig, whole: bool = True) -> Plan:
    """The plan of a folder or glob of images."""
    base, pattern, files, outputs = folder_files(config)
    layout, split_names = layout_of(config, files)
    check_images(config, files, layout)
    ratio = estimate_size_ratio(config, files) if whole else 1.0
    # An append sizes the splits of its new inputs (append.sized_for), not of the whole input.
    per_split = split_bytes(config, layout, split_names, files, ratio) if whole else {}
    return Plan(
        InputPlan(
            base=base,
            pattern=pattern,
            layout=layout,
            split_names=split_names,
            listing_digest=digest((f.relpath, f.size) for f in files) if whole else "",
            skipped_outputs=outputs,
        ),
        sized(config, split_names, per_split, len(files), sum(f.size for f in files), ratio),
    )


def _check_root(config: ConvertConfig, root: str) -> None:
    """PlanError naming why the local input folder ``root``, which listed no file, cannot be read, if it cannot."""
    if not os.path.exists(root):
        raise PlanError(f"--input {config.input}: no such file or folder ({root}); check the path")
    try:
        os.listdir(root)
    except OSError as e:
        why = (e.strerror or type(e).__name__).lower()
        raise PlanError(
            f"--input {config.input}: {why}: the folder {root} cannot be listed; check its permissions"
        ) from None


def unlistable_entries(plan: Plan) -> List[LedgerEntry]:
    """Ledger entries of the folders of a local input that cannot be listed (relpaths ending with ``/``):
    each is one rejected input (``layout.unlistable_row``), so no class disappears without a word."""
    found = []
    for path, mtime in unlistable_folders(plan.input.base, plan.input.pattern):
        relpath = layouts.relative_path(plan.input.base, path)
        if not layouts.is_junk(relpath) and not layouts.in_folders(relpath.rstrip("/"), plan.input.skipped_outputs):
            found.append(LedgerEntry(relpath, 0, mtime))
    return found


def check_local_folder(plan: Plan) -> Optional[LocalInputReport]:
    """The launch check of a local folder input (None for a remote one)."""
    if storage.is_remote(plan.input.base):
        return None
    return check_local_input(plan.input.base, plan.input.pattern, plan.input.layout)


class Folder(InputKind):
    """A folder of class folders (or split folders of class folders), or a glob of images."""

    name = "folder"
    discovers_from_ledger = True  # the graph (with --dedupe) reads the files the launch listed

    def claims(self, config: ConvertConfig) -> bool:
        return True

    def plan(self, config: ConvertConfig, whole: bool) -> Optional[Plan]:
        return plan_folder(config, whole)

    def source(self, config: ConvertConfig, plan: Plan) -> InputSource:
        return FolderSource(plan.input.pattern, plan.input.base, plan.input.skipped_outputs)

    def ledger(self, config: ConvertConfig, plan: Plan) -> Optional[InputLedger]:
        return FolderLedger(config, plan)

    def check_local(self, plan: Plan) -> Optional[LocalInputReport]:
        return check_local_folder(plan)


class FolderLedger(InputLedger):
    """The files of a folder plan's launch listing; files inside earlier outputs are neither inputs nor junk."""

    def __init__(self, config: ConvertConfig, plan: Plan):
        super().__init__(config, plan)
        self._source = FolderSource(plan.input.pattern, plan.input.base, plan.input.skipped_outputs)
        listed = folder_listing(plan.input.base, plan.input.pattern, plan.input.skipped_outputs)
        self.entries: Sequence[LedgerEntry] = FolderEntries(listed.files, plan.input.base)
        unlistable = unlistable_entries(plan)
        if unlistable:  # folders that cannot be listed are rejected inputs too: a class never goes missing
            self.entries = sorted([*self.entries, *unlistable])
        self.junk = listed.junk

    def work_items(self, entries: Sequence[LedgerEntry]) -> ListedItems:
        if isinstance(entries, FolderEntries):  # the whole listing: its items are made as they are read
            return FolderItems(entries.files, entries.base)
        items: List[Item] = []
        rejected: List[ErrorRow] = []
        for entry in entries:
            for tag, found in self._source.read(self._source.base + entry.relpath, entry.size):
                if tag == FILES:
                    items.append(found)
                elif tag == ERRORS:
                    rejected.append(found)
        return ListedItems(items, rejected)

    def placed_item(self, entry: LedgerEntry) -> Optional[Item]:
        items = self.work_items([entry._replace(size=0)])
        return items[0] if items else None
