"""``--sequence`` clips without Beam: which clip a frame belongs to, and frames grouped into clips.

A clip is the folder holding its frames (``SRC/<class>/<clip>/<frame>``, ``SRC/<split>/<class>/<clip>/
<frame>``, or a manifest's ``<clip>/<frame>``); a frame outside any clip folder is a clip of its own,
which the converter rejects. The pipeline (``transforms/sequence.py``), ``--plan`` and the launch's
ledger group frames with these.
"""

from __future__ import annotations

import posixpath
from typing import Dict, Iterable, List, Sequence, Tuple

from img2tfrecord.model import Clip, WorkItem
from img2tfrecord.sources.layout import LAYOUT_MANIFEST, LAYOUT_SPLIT

ClipKey = Tuple[str, bool]  # (clip relpath, is a clip folder)


def _min_depth(layout: str) -> int:
    """Path parts of a frame inside a clip: class/clip/frame, split/class/clip/frame, clip/frame."""
    return {LAYOUT_SPLIT: 4, LAYOUT_MANIFEST: 2}.get(layout, 3)


def clip_key(source: WorkItem, layout: str) -> Tuple[ClipKey, WorkItem]:
    """``((clip relpath, True), frame)``, or ``((relpath, False), frame)`` for a frame outside any clip."""
    relpath = source.relpath
    if len(relpath.split("/")) < _min_depth(layout):
        return (relpath, False), source
    return (posixpath.dirname(relpath), True), source


def clip_of(key: ClipKey, frames: Iterable[WorkItem]) -> Clip:
    """The work item ``ClipConverter`` takes: a clip's frames in name order."""
    relpath, is_clip = key
    return Clip(relpath, is_clip, tuple(sorted(frames, key=lambda s: s.relpath)))


def group_clips(frames: Sequence[WorkItem], layout: str) -> List[Clip]:
    """``frames`` grouped into clips, sorted by clip, as the pipeline's ``GroupClips`` groups them."""
    grouped: Dict[ClipKey, List[WorkItem]] = {}
    for frame in frames:
        key, _ = clip_key(frame, layout)
        grouped.setdefault(key, []).append(frame)
    return [clip_of(key, found) for key, found in sorted(grouped.items())]
