"""A folder or glob of images at launch: its plan (layout, splits, sizes, the folders of earlier outputs
left out) and its ledger (one entry per file). A folder holding detection annotations is planned as
such (``detection.py``); a glob that matches only archives, as archives (``archive.py``)."""

from __future__ import annotations

import os
from typing import List, Optional, Sequence

from img2tfrecord import faults
from img2tfrecord.model import ErrorRow, Item, WorkItem
from img2tfrecord.option_values import TASK_CLASSIFICATION, TASK_DETECTION
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.kinds.archive import plan_archives
from img2tfrecord.pipeline.kinds.common import check_images, layout_of, skip_outputs, split_bytes
from img2tfrecord.pipeline.kinds.detection import detection_layout, plan_folder_detection
from img2tfrecord.pipeline.kinds.ledger import InputLedger, Listed
from img2tfrecord.pipeline.listing import digest, is_file, list_input, list_stamped, resolve_input, unlistable_folders
from img2tfrecord.pipeline.plan_model import InputPlan, Plan, PlanError
from img2tfrecord.pipeline.sizing import estimate_size_ratio, sized
from img2tfrecord.schemas.ledger import LedgerEntry
from img2tfrecord.sources import archives, kinds
from img2tfrecord.sources import layout as layouts
from img2tfrecord.sources.inputs import ERRORS, FILES
from img2tfrecord.sources.inputs.folder import FolderSource


def plan_folder(config: ConvertConfig, whole: bool = True) -> Plan:
    """The plan of a folder or glob of images (``make_plan``)."""
    detect = config.task != TASK_CLASSIFICATION
    forced = config.task == TASK_DETECTION
    base, pattern = resolve_input(config.input)
    if not kinds.GLOB_CHARS.search(config.input) and is_file(base.rstrip("/")):
        raise PlanError(
            f"--input {config.input} is a file; give a folder of class folders, a glob, an archive "
            f"(.zip, .tar, .tar.gz, .tgz) or a manifest (.csv, .jsonl)"
        )
    listing = list_input(pattern)
    faults.pause_at("listing")
    if kinds.GLOB_CHARS.search(config.input) and listing and all(archives.archive_kind(p) for p, _ in listing):
        return plan_archives(config, whole)  # a glob such as 'shards/*' that matches only archives
    listed = [(path, layouts.relative_path(base, path), size) for path, size in listing if path.startswith(base)]
    outputs = skip_outputs(config, [relpath for _, relpath, _ in listed])
    files = [
        WorkItem(path, relpath, size)
        for path, relpath, size in listed
        if not layouts.is_junk(relpath) and not layouts.in_folders(relpath, outputs)
    ]
    if not files:
        if not listing and not kinds.GLOB_CHARS.search(config.input) and "://" not in base:
            _check_root(config, base.rstrip("/") or "/")
        raise PlanError(f"no input files match {pattern}")
    files.sort(key=lambda f: f.relpath)
    if detect:
        found_kind = detection_layout(files, forced)
        if found_kind is not None:
            return plan_folder_detection(config, found_kind, base, files)
    if forced:
        raise PlanError(
            f"--task detection: {config.input} holds neither a Pascal VOC layout (Annotations/*.xml, "
            "JPEGImages/) nor COCO JSON (instances_*.json)"
        )
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


class FolderLedger(InputLedger):
    """The files of a folder plan's launch listing; files inside earlier outputs are neither inputs nor junk."""

    def __init__(self, config: ConvertConfig, plan: Plan):
        super().__init__(config, plan)
        self._source = FolderSource(plan.input.pattern, plan.input.base, plan.input.skipped_outputs)
        found, junk = [], []
        for path, size, mtime in list_stamped(plan.input.pattern):
            if not path.startswith(plan.input.base):
                continue
            relpath = layouts.relative_path(plan.input.base, path)
            if layouts.in_folders(relpath, plan.input.skipped_outputs):
                continue
            if layouts.is_junk(relpath):
                junk.append(layouts.printable(relpath))
            else:
                found.append(LedgerEntry(relpath, size, mtime))
        found.extend(unlistable_entries(plan))
        self.entries, self.junk = sorted(found), sorted(junk)

    def work_items(self, entries: Sequence[LedgerEntry]) -> Listed:
        items: List[Item] = []
        rejected: List[ErrorRow] = []
        for entry in entries:
            for tag, found in self._source.read(self._source.base + entry.relpath, entry.size):
                if tag == FILES:
                    items.append(found)
                elif tag == ERRORS:
                    rejected.append(found)
        return items, rejected

    def placed_item(self, entry: LedgerEntry) -> Optional[Item]:
        items, _ = self.work_items([entry._replace(size=0)])
        return items[0] if items else None
