"""Launch plans: ``make_plan`` chooses the planner of the input's kind (``pipeline/kinds/``).

The launcher takes one metadata listing of the input (``listing.py``), which also detects the
split-folder layout and reports "no matches" before any pipeline starts, and sizes the splits from it
(``sizing.py``). An input that can give no record (no images, or none inside a class folder) is
refused there, before anything starts. Detection inputs (VOC, COCO, manifests of boxes) are planned as
such with ``--task detection`` or when their annotations show.
"""

from __future__ import annotations

from img2tfrecord.option_values import TASK_CLASSIFICATION
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.kinds.archive import plan_archives
from img2tfrecord.pipeline.kinds.detection import plan_coco_files, plan_manifest_of_boxes
from img2tfrecord.pipeline.kinds.folder import plan_folder
from img2tfrecord.pipeline.kinds.manifest import plan_manifest
from img2tfrecord.pipeline.plan_model import Plan
from img2tfrecord.sources import kinds


def make_plan(config: ConvertConfig, whole: bool = True) -> Plan:
    """The launch plan of ``config``; ``whole`` False: a plan without what only a run over all of the
    input needs (the size sample; a folder's listing digest), for an append, which sizes its new inputs."""
    kind = kinds.input_kind(config.input)
    detect = config.task != TASK_CLASSIFICATION
    if kind == kinds.INPUT_ARCHIVES:
        return plan_archives(config, whole)
    if kind == kinds.INPUT_MANIFEST:
        boxes = plan_manifest_of_boxes(config) if detect else None
        return boxes or plan_manifest(config, whole)
    if detect and config.input.lower().endswith(".json"):
        return plan_coco_files(config)
    return plan_folder(config, whole)
