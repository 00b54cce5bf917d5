"""``--sequence`` clips of a folder or manifest at launch: their ledger, one entry per clip (the plan is
the folder's or the manifest's)."""

from __future__ import annotations

import hashlib
import posixpath
from typing import List, Optional, Union

from img2tfrecord.conversion.converter import natural_key
from img2tfrecord.model import Clip, ErrorRow, Item, RowPlacement, WorkItem
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.kinds.folder import FolderLedger
from img2tfrecord.pipeline.kinds.ledger import ReadAtLaunch
from img2tfrecord.pipeline.kinds.manifest import ManifestLedger
from img2tfrecord.pipeline.plan_model import Plan
from img2tfrecord.schemas.ledger import LedgerEntry, row_text
from img2tfrecord.sources import kinds
from img2tfrecord.sources import layout as layouts
from img2tfrecord.sources.clips import clip_key, group_clips


class ClipLedger(ReadAtLaunch):
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
