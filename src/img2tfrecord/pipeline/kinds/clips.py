"""``--sequence``: one ``tf.train.SequenceExample`` per clip folder of frames, in a folder or manifest
(:class:`Clips`, its ledger one entry per clip) or in archives (:class:`ArchivedClips`, the archives'
ledger). The plan is the frames' container's."""

from __future__ import annotations

import hashlib
import logging
import posixpath
from typing import Any, List, Optional, Sequence, Union

from img2tfrecord.conversion.converter import ClipConverter, Converter, natural_key
from img2tfrecord.model import Clip, ErrorRow, Item, RowPlacement, WorkItem
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.inputs import LocalInputReport
from img2tfrecord.pipeline.kinds.archive import Archives, is_archive_input
from img2tfrecord.pipeline.kinds.base import InputKind, run_splits
from img2tfrecord.pipeline.kinds.folder import FolderLedger, check_local_folder, plan_folder
from img2tfrecord.pipeline.kinds.ledger import InputLedger, ReadAtLaunch
from img2tfrecord.pipeline.kinds.manifest import ManifestLedger, manifest_source, plan_manifest
from img2tfrecord.pipeline.plan_model import Plan
from img2tfrecord.schemas.ledger import LedgerEntry, row_text
from img2tfrecord.sources import input_paths
from img2tfrecord.sources import layout as layouts
from img2tfrecord.sources.clips import clip_key, group_clips
from img2tfrecord.sources.inputs import InputSource
from img2tfrecord.sources.inputs.folder import FolderSource


class ClipRecords(InputKind):
    """What the kinds of clips share: one record per clip, converted one clip per task, not analysed."""

    sequence = True
    analysable = False
    analysis_note = "--sequence records are SequenceExamples: skipping the tf.Transform analysis"
    analysis_note_level = logging.WARNING

    def converter(self, config: ConvertConfig, plan: Plan) -> Converter[Any]:
        return ClipConverter(config.image, plan.input.layout, run_splits(config), config.seed)

    def units(self, items: Sequence[Any], layout: str) -> Sequence[Any]:
        return group_clips(items, layout)


def _of_manifest(plan: Plan) -> bool:
    return plan.input.layout == layouts.LAYOUT_MANIFEST


class Clips(ClipRecords):
    """Clip folders of frames: ``SRC/<class>/<clip>/<frame>`` (or split folders of them), or manifest rows
    naming frames, grouped into clips by folder."""

    name = "clips"

    def claims(self, config: ConvertConfig) -> bool:
        return config.sequence

    def plan(self, config: ConvertConfig, whole: bool) -> Optional[Plan]:
        if input_paths.input_form(config.input) == input_paths.INPUT_MANIFEST:
            return plan_manifest(config, whole)
        return plan_folder(config, whole)

    def source(self, config: ConvertConfig, plan: Plan) -> InputSource:
        if _of_manifest(plan):
            return manifest_source(plan)
        return FolderSource(plan.input.pattern, plan.input.base, plan.input.skipped_outputs)

    def ledger(self, config: ConvertConfig, plan: Plan) -> Optional[InputLedger]:
        return ClipLedger(config, plan)

    def check_local(self, plan: Plan) -> Optional[LocalInputReport]:
        return None if _of_manifest(plan) else check_local_folder(plan)

    def class_noun(self, plan: Plan) -> str:
        return "label(s)" if _of_manifest(plan) else "class folder(s)"


class ArchivedClips(ClipRecords, Archives):
    """Clip folders of frames packed in archives (one ledger entry per archive)."""

    name = "archived_clips"

    def claims(self, config: ConvertConfig) -> bool:
        return config.sequence and is_archive_input(config)


class ClipLedger(ReadAtLaunch):
    """``--sequence``: the clips the frames of a folder or manifest make, one entry each: their frames'
    total size and latest change marker, and as its row a digest of every frame's entry and the split
    its first frame names (what ``ClipConverter.split_of`` reads): a clip that gained, lost or changed
    a frame is a changed input."""

    noun = "clip(s)"

    def __init__(self, config: ConvertConfig, plan: Plan):
        super().__init__(config, plan)
        of_frames = ManifestLedger if _of_manifest(plan) else FolderLedger
        listed = of_frames(config, plan)
        layout = plan.input.layout
        self._frames, self._layout = listed, layout
        items = listed.work_items(listed.entries)
        rejected = items.rejected
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
