"""Each input kind at launch, one module each: how it is planned (layout, splits, sizes) and the ledger of
its inputs. ``make_plan`` (``pipeline/plan.py``) chooses the planner; :func:`ledger_kind` the ledger.

    folder       a folder or glob of images                     FolderLedger: one entry per file
    archive      .zip/.tar/.tar.gz/.tgz, or a glob of them      ArchiveLedger: one entry per archive
    manifest     CSV/JSONL rows naming images                   ManifestLedger: one entry per row
    detection    VOC, COCO, manifests of boxes, beside images   AnnotationLedger: one per annotated image
    archived_detection   the same packed in archives            ArchiveLedger
    clips        --sequence over a folder or manifest           ClipLedger: one entry per clip

How a kind's units are read (in the pipeline and by ``--plan``) is its ``InputSource`` in
``sources/inputs/``; ``ledger.py`` holds what the ledgers share, ``common.py`` what the planners share.
"""

from __future__ import annotations

from typing import Optional, Type

from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.kinds.archive import ArchiveLedger
from img2tfrecord.pipeline.kinds.clips import ClipLedger
from img2tfrecord.pipeline.kinds.detection import AnnotationLedger
from img2tfrecord.pipeline.kinds.folder import FolderLedger
from img2tfrecord.pipeline.kinds.ledger import InputLedger, Listed, frames_of
from img2tfrecord.pipeline.kinds.manifest import ManifestLedger
from img2tfrecord.pipeline.plan_model import Plan
from img2tfrecord.sources import kinds

__all__ = ["InputLedger", "Listed", "frames_of", "input_ledger", "keeps_ledger", "ledger_kind", "places_at_launch"]


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
