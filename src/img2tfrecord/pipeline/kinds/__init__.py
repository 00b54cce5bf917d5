"""The input kinds, one object each, in one table: the only place that asks which kind an input is.

    urls                 .parquet/.txt/CSV/JSONL lists of image URLs           UrlLedger: one entry per URL
    archived_detection   VOC, COCO or manifests of boxes packed in archives   ArchiveLedger: one entry per archive
    archived_clips       --sequence clip folders packed in archives           ArchiveLedger
    archives             .zip/.tar/.tar.gz/.tgz of class folders, or a glob   ArchiveLedger
    detection            VOC, COCO or manifests of boxes beside the images    AnnotationLedger: one per annotated image
    clips                --sequence clip folders in a folder or manifest      ClipLedger: one entry per clip
    manifest             CSV/JSONL rows naming images                          ManifestLedger: one entry per row
    folder               a folder or glob of images (everything else)         FolderLedger: one entry per file

An input is the first kind in :data:`KINDS` that claims it and plans it (a kind whose plan finds another
layout passes it on). Each kind is an :class:`InputKind` (``base.py``): its plan, its ``InputSource``
(``sources/inputs/``), its ledger and its converter. A new kind is one module here and one line in the table.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Tuple

from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.kinds.archive import Archives
from img2tfrecord.pipeline.kinds.archived_detection import ArchivedDetection
from img2tfrecord.pipeline.kinds.base import InputKind
from img2tfrecord.pipeline.kinds.clips import ArchivedClips, Clips
from img2tfrecord.pipeline.kinds.detection import Detection
from img2tfrecord.pipeline.kinds.folder import Folder
from img2tfrecord.pipeline.kinds.manifest import Manifest
from img2tfrecord.pipeline.kinds.urls import UrlList
from img2tfrecord.pipeline.listing import listing_once
from img2tfrecord.pipeline.plan_model import Plan

KINDS: Tuple[InputKind, ...] = (
    UrlList(),  # first: a .txt/.parquet, or a CSV/JSONL with a URL column and no path column
    ArchivedDetection(),
    ArchivedClips(),
    Archives(),
    Detection(),
    Clips(),
    Manifest(),
    Folder(),
)
_BY_NAME: Dict[str, InputKind] = {kind.name: kind for kind in KINDS}


def plan_input(config: ConvertConfig, whole: bool = True) -> Tuple[InputKind, Plan]:
    """The kind of ``config.input`` and its launch plan; PlanError for an input no run can convert.
    ``whole`` False: a plan without what only a run over all of the input needs (an append sizes its
    new inputs)."""
    with listing_once():  # the kinds that look at the input share one listing of it
        for kind in KINDS:
            if kind.claims(config):
                plan = kind.plan(config, whole)
                if plan is not None:
                    return kind, dataclasses.replace(plan, input=dataclasses.replace(plan.input, kind=kind.name))
    raise AssertionError("the folder kind claims every input")


def kind_of(plan: Plan) -> InputKind:
    """The kind a plan was made by."""
    return _BY_NAME[plan.input.kind]
