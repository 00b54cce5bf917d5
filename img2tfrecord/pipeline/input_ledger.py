"""The inputs a run's ledger records, listed at launch: files, manifest rows, archives, annotated images.

A folder, manifest, archive or detection run writes the ledger of its inputs (``schemas/ledger.py``);
an append compares a new listing with it. Each kind lists its inputs here once and makes the work
items of any subset of them (the whole run, or the inputs an append converts); ``placed_item`` makes,
from a ledger entry alone, a work item that a converter places in the split the entry's record went
to. An archive is one entry (its members are read by the pipeline), and so is a ``--sequence`` clip
of a folder or manifest (its frames grouped at launch).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import posixpath
from typing import Dict, List, Optional, Sequence, Tuple, Type, Union

from img2tfrecord.conversion.converter import natural_key
from img2tfrecord.model import Annotation, Clip, DetectionPlacement, ErrorRow, Item, RowPlacement, WorkItem, frames
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.listing import list_input, list_stamped, resolve_input
from img2tfrecord.pipeline.plan_model import Plan
from img2tfrecord.pipeline.sizing import SAMPLE_SIZE
from img2tfrecord.readers import storage
from img2tfrecord.schemas.ledger import LedgerEntry, row_text
from img2tfrecord.sources import archives, kinds
from img2tfrecord.sources import layout as layouts
from img2tfrecord.sources.clips import clip_key, group_clips
from img2tfrecord.sources.inputs import ERRORS, FILES, discover
from img2tfrecord.sources.inputs.archive import slim_members
from img2tfrecord.sources.inputs.folder import FolderSource
from img2tfrecord.sources.inputs.manifest import ManifestSource

Listed = Tuple[List[Item], List[ErrorRow]]  # work items (clips with --sequence), and the inputs rejected making them


class InputLedger:
    """The inputs of one listing, made by ``Kind(config, plan)``: ``entries`` (sorted by relpath) and the
    ``junk`` names it left out.

    ``places_at_launch``: its work items can be grouped by shard at launch (not an archive's, whose
    tar.gz members carry their bytes); ``unwithdrawable``: why a changed or removed entry's records
    cannot be withdrawn one by one ("" when they can); ``noun``: what one entry is, for messages.
    """

    places_at_launch = True
    unwithdrawable = ""
    noun = "input(s)"

    def __init__(self, config: ConvertConfig, plan: Plan):
        self.entries: List[LedgerEntry] = []
        self.junk: List[str] = []

    def work_items(self, entries: Sequence[LedgerEntry]) -> Listed:
        """The work items of ``entries`` (a subset of this listing's), and the rows rejected making them."""
        raise NotImplementedError

    def placed_item(self, entry: LedgerEntry) -> Optional[Item]:
        """A work item the converter places where the record of ``entry`` (as a ledger holds it) went."""
        raise NotImplementedError

    def repeated(self) -> List[str]:
        """The relpaths more than one input names (a manifest naming an image twice), sorted."""
        return []

    def key_of(self, found: Union[WorkItem, ErrorRow]) -> str:
        """The ledger key of the input a work item or early error row came from."""
        if isinstance(found, WorkItem):
            return found.relpath
        return found["relpath"] or found["path"]

    def units(self, entries: Sequence[LedgerEntry]) -> Tuple[str, ...]:
        """What the pipeline reads for ``entries`` instead of the plan's pattern (archives), or ()."""
        return ()


def ledger_kind(config: ConvertConfig, plan: Plan) -> Optional[Type[InputLedger]]:
    """The ledger of ``plan``'s input kind: every kind has one (folders, manifests, archives, detection
    annotations beside their images or in archives, clips); None for a combination no run makes."""
    kind = plan.input.input_kind
    if config.sequence and plan.input.annotations:
        return None
    if kind == kinds.INPUT_ARCHIVES:
        return ArchiveLedger
    if plan.input.annotations:
        return AnnotationLedger if kind == kinds.INPUT_DETECTION else None
    if kind not in (kinds.INPUT_FOLDER, kinds.INPUT_MANIFEST):
        return None
    if config.sequence:
        return ClipLedger
    return ManifestLedger if kind == kinds.INPUT_MANIFEST else FolderLedger


def keeps_ledger(config: ConvertConfig, plan: Plan) -> bool:
    """Whether a run writes an input ledger."""
    return ledger_kind(config, plan) is not None


def input_ledger(config: ConvertConfig, plan: Plan) -> Optional[InputLedger]:
    """The listing of ``plan``'s inputs, or None for an input that keeps no ledger."""
    kind = ledger_kind(config, plan)
    return kind(config, plan) if kind is not None else None


def places_at_launch(config: ConvertConfig, plan: Plan) -> bool:
    """Whether a run of ``plan`` groups its work items by shard at launch (``placing.place_listing``)."""
    kind = ledger_kind(config, plan)
    return kind is not None and kind.places_at_launch and not config.dedupe


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


class _ReadAtLaunch(InputLedger):
    """Inputs read whole at launch (manifest rows, annotated images, clips): each kept with its ledger
    entry, keyed by the entry's relpath (an image named twice has two)."""

    def __init__(self, config: ConvertConfig, plan: Plan):
        super().__init__(config, plan)
        self._by_key: Dict[str, List[Union[Item, ErrorRow]]] = {}

    def _add(self, entry: LedgerEntry, found: Union[Item, ErrorRow]) -> None:
        self.entries.append(entry)
        self._by_key.setdefault(entry.relpath, []).append(found)

    def work_items(self, entries: Sequence[LedgerEntry]) -> Listed:
        items: List[Item] = []
        rejected: List[ErrorRow] = []
        for key in sorted({e.relpath for e in entries}):
            for found in self._by_key.get(key, ()):
                if isinstance(found, (WorkItem, Clip)):
                    items.append(found)
                else:
                    rejected.append(found)
        return items, rejected

    def repeated(self) -> List[str]:
        return sorted(key for key, found in self._by_key.items() if len(found) > 1)


class ManifestLedger(_ReadAtLaunch):
    """The rows of every manifest a plan names, each with the size and change marker of its image.

    A row is keyed by the relpath of the image it names (a row naming none, by ``manifest:line``);
    its label and split are part of its entry, so a row relabelled or moved to another split is a
    changed input. Rows naming an image that cannot be listed get size -1: the run rejects them.
    """

    def __init__(self, config: ConvertConfig, plan: Plan):
        super().__init__(config, plan)
        source = ManifestSource(
            plan.input.pattern, plan.input.labeled, plan.input.has_split_column, plan.input.split_names
        )
        rows = [row for path, _ in source.units(list_input) for row in source.rows(path)]
        stamps = _stamps([row.found.path for row in rows if isinstance(row.found, WorkItem)])
        for row in rows:
            found = row.found
            size, mtime = stamps.get(found.path, (-1, 0.0)) if isinstance(found, WorkItem) else (-1, 0.0)
            placement = row_text(row.label, row.split) if (row.label, row.split) != (None, None) else ""
            self._add(LedgerEntry(self.key_of(found), size, mtime, placement), found)
        self.entries.sort()

    def placed_item(self, entry: LedgerEntry) -> Optional[Item]:
        label, split = entry.placement()
        return WorkItem(entry.relpath, entry.relpath, 0, row=RowPlacement(split, label))


class ArchiveLedger(InputLedger):
    """The archives a plan's pattern matches, each one entry (relative to the folder above the pattern's
    first glob), whatever they hold: images, clips' frames, or detection annotations with their images."""

    places_at_launch = False
    unwithdrawable = "the ledger does not list an archive's members, so its records cannot be withdrawn one by one"
    noun = "archive(s)"

    def __init__(self, config: ConvertConfig, plan: Plan):
        super().__init__(config, plan)
        # Relative to the folder above the pattern's first glob ('dumps/*/day.zip' -> 'dumps/'), or to
        # the archive's own folder.
        pattern = plan.input.pattern
        self._base = resolve_input(pattern)[0] if kinds.GLOB_CHARS.search(pattern) else plan.input.base
        self._config, self._plan = config, plan
        self.entries = sorted(
            LedgerEntry(layouts.relative_path(self._base, path), size, mtime)
            for path, size, mtime in list_stamped(plan.input.pattern)
            if path.startswith(self._base) and archives.archive_kind(path)
        )

    def work_items(self, entries: Sequence[LedgerEntry]) -> Listed:
        """The members of the archives ``entries`` name (clips of them with ``--sequence``), read in this
        process (most tar.gz members without their bytes: these items size and label an append, the
        pipeline converts from the archives)."""
        if not entries:
            return [], []
        source = dataclasses.replace(self._plan.input, units=self.units(entries)).source(self._config)
        found = discover(source, list_input, slim_members(4 * SAMPLE_SIZE))
        files = found.files
        items: List[Item] = list(group_clips(files, self._plan.input.layout) if self._config.sequence else files)
        return items, found.errors

    def placed_item(self, entry: LedgerEntry) -> Optional[Item]:
        return None

    def key_of(self, found: Union[WorkItem, ErrorRow]) -> str:
        path = found.path if isinstance(found, WorkItem) else found["path"]
        return layouts.relative_path(self._base, path.split(archives.MEMBER_SEPARATOR, 1)[0])

    def units(self, entries: Sequence[LedgerEntry]) -> Tuple[str, ...]:
        return tuple(self._base + e.relpath for e in entries)


class AnnotationLedger(_ReadAtLaunch):
    """The images detection annotations name (Pascal VOC, COCO, manifests of boxes), read at launch.

    An image is keyed by its relpath, with its size and change marker, and, as its row, a digest of
    its objects and its split: an image whose file or annotation changed is a changed input.
    """

    noun = "annotated image(s)"

    def __init__(self, config: ConvertConfig, plan: Plan):
        super().__init__(config, plan)
        found = discover(plan.input.source(config), list_input)
        stamps = _stamps([item.path for item in found.files])
        for item in found.files:
            size, mtime = stamps.get(item.path, (-1, 0.0))
            split = item.row.split if isinstance(item.row, DetectionPlacement) else None
            self._add(LedgerEntry(item.relpath, size, mtime, row_text(_objects_digest(item), split)), item)
        for row in found.errors:
            self._add(LedgerEntry(self.key_of(row), -1, 0.0), row)
        self.entries.sort()

    def placed_item(self, entry: LedgerEntry) -> Optional[Item]:
        split = entry.placement()[1]  # the split the annotations named (None: by the seeded hash)
        return WorkItem(entry.relpath, entry.relpath, 0, row=DetectionPlacement(split, Annotation((), "")))


class ClipLedger(_ReadAtLaunch):
    """``--sequence``: the clips the frames of a folder or manifest make, one entry each: their frames'
    total size and latest change marker, and as its row a digest of every frame's entry and the split
    its first frame names (what ``ClipConverter.split_of`` reads): a clip that gained, lost or changed
    a frame is a changed input."""

    noun = "clip(s)"

    def __init__(self, config: ConvertConfig, plan: Plan):
        super().__init__(config, plan)
        of_frames = ManifestLedger if plan.input.input_kind == kinds.INPUT_MANIFEST else FolderLedger
        listed = of_frames(config, plan)
        layout = plan.input.layout
        self._frames, self._layout = listed, layout
        items, rejected = listed.work_items(listed.entries)
        by_relpath = {e.relpath: e for e in listed.entries}
        for clip in group_clips([i for i in items if isinstance(i, WorkItem)], layout):
            own = [by_relpath[f.relpath] for f in clip.frames]
            digest = hashlib.sha256(repr(sorted(own)).encode("utf-8")).hexdigest()[:16]
            size, mtime = sum(e.size for e in own), max(e.mtime for e in own)
            first = min(clip.frames, key=lambda f: natural_key(posixpath.basename(f.relpath)))
            split = layouts.placement(first, layout)[0] if clip.is_clip else None
            self._add(LedgerEntry(clip.relpath, size, mtime, row_text(digest, split)), clip)
        for row in rejected:
            self._add(LedgerEntry(self.key_of(row), -1, 0.0), row)
        self.entries.sort()
        self.junk = listed.junk

    def placed_item(self, entry: LedgerEntry) -> Optional[Item]:
        split = entry.placement()[1]  # its first frame's split folder or row split (None: the seeded hash)
        frame = WorkItem(entry.relpath, entry.relpath, 0, row=RowPlacement(split, None))
        return Clip(entry.relpath, True, (frame,))

    def repeated(self) -> List[str]:
        return self._frames.repeated()

    def key_of(self, found: Union[WorkItem, ErrorRow]) -> str:
        if isinstance(found, WorkItem):  # a frame: the clip it belongs to
            return clip_key(found, self._layout)[0][0]
        return super().key_of(found)


def frames_of(items: Sequence[Item]) -> List[WorkItem]:
    """The files of work items (``model.frames``)."""
    return [frame for item in items for frame in frames(item)]


def _objects_digest(item: WorkItem) -> str:
    """16 hex digits of what an annotation says of an image: its objects and the boxes dropped."""
    return hashlib.sha256(repr(item.row).encode("utf-8")).hexdigest()[:16]


def _stamps(paths: Sequence[str]) -> Dict[str, Tuple[int, float]]:
    """path -> (size, change marker) of the files ``paths`` name that exist: a local file's stat, and
    on a remote filesystem one listing per folder holding them."""
    found: Dict[str, Tuple[int, float]] = {}
    remote: Dict[str, set] = {}
    for path in paths:
        if storage.is_remote(path):
            remote.setdefault(posixpath.dirname(path), set()).add(path)
            continue
        try:
            stat = os.stat(path)
        except OSError:
            continue
        found[path] = (stat.st_size, stat.st_mtime)
    for folder, wanted in sorted(remote.items()):
        for path, size, mtime in list_stamped(folder + "/*"):
            if path in wanted:
                found[path] = (size, mtime)
    return found
