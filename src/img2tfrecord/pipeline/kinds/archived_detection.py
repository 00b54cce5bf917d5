"""Detection annotations packed in archives with their images: their plan, source, ledger and converter.
Such archives are listed whole (the splits may be named by a member near the end): VOC image sets, COCO
file names and box manifests name the splits, wherever they sit in them; the output/input ratio is
measured on the peeked images. Their ledger is the archives' (``archive.py``)."""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Set, Tuple

from img2tfrecord.images.options import ImageError
from img2tfrecord.model import MemberEntry, WorkItem
from img2tfrecord.option_values import TASK_CLASSIFICATION, TASK_DETECTION
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.kinds.archive import ArchiveLedger, Peek, is_archive_input, peek
from img2tfrecord.pipeline.kinds.detection import (
    AnnotationKind,
    annotation_splits,
    is_image_name,
    plan_detection,
    row_split,
)
from img2tfrecord.pipeline.kinds.ledger import InputLedger
from img2tfrecord.pipeline.listing import digest
from img2tfrecord.pipeline.plan_model import Plan, PlanError
from img2tfrecord.sources import archives, detection
from img2tfrecord.sources import detection_archives as archived
from img2tfrecord.sources.inputs import InputSource
from img2tfrecord.sources.inputs.archived_detection import ArchivedDetectionSource


class ArchivedDetection(AnnotationKind):
    """Pascal VOC, COCO or manifests of boxes packed in archives with their images (one entry per archive)."""

    name = "archived_detection"
    records_members = True

    def claims(self, config: ConvertConfig) -> bool:
        return config.task != TASK_CLASSIFICATION and is_archive_input(config)

    def plan(self, config: ConvertConfig, whole: bool) -> Optional[Plan]:
        return plan_archived_detection(config, peek(config))

    def source(self, config: ConvertConfig, plan: Plan) -> InputSource:
        found = archived.ArchivedAnnotations(plan.input.annotations, plan.input.patterns)
        return ArchivedDetectionSource(
            found,
            plan.input.pattern,
            plan.input.split_names,
            plan.input.has_split_column,
            config.image.max_file_bytes,
            plan.input.units,
        )

    def ledger(self, config: ConvertConfig, plan: Plan) -> Optional[InputLedger]:
        return None if config.sequence else ArchiveLedger(config, plan, self)

    def places_at_launch(self, config: ConvertConfig) -> bool:
        return False


def plan_archived_detection(config: ConvertConfig, seen: Peek) -> Optional[Plan]:
    """The plan of detection inputs inside archives; None (classification) unless the peek at their
    first members (``seen.peeked``; ``seen.peeked_names`` also names the entries it refused) shows a VOC,
    COCO or box-manifest layout, or ``--task detection`` forces it.

    Detection lists every archive whole (the splits may be named by a member near the end); the
    output/input ratio is measured on the peeked images.
    """
    forced = config.task == TASK_DETECTION
    base, pattern, found, _, peeked, peeked_names, complete, _ = seen

    def peeked_data(name: str) -> Optional[bytes]:
        for archive, entry in peeked:
            if entry.name == name:
                try:
                    return archived.member_reader(archive, entry)("", detection.MAX_COCO_BYTES)
                except (ImageError, OSError):
                    return None
        return None

    if not forced and archived.find_annotations(peeked_names, peeked_data, False, complete) is None:
        return None
    limit = config.image.max_file_bytes
    try:
        scans = [archived.scan_archive(path, size, limit) for path, size in found]
    except (ImageError, OSError) as e:
        raise PlanError(f"cannot read the annotations in {pattern}: {type(e).__name__}: {e}") from e
    data = {name: content for scan in scans for name, content in scan.data.items()}
    names = sorted({m.name for scan in scans for m in scan.members})
    annotations = archived.find_annotations(names, data.get, forced)
    if annotations is None:
        if forced:
            raise PlanError(
                f"--task detection: {config.input} holds neither a Pascal VOC layout (Annotations/*.xml, "
                "JPEGImages/), COCO JSON nor a CSV/JSONL manifest of boxes"
            )
        return None

    def voc_splits(root: str) -> Tuple[str, ...]:
        splits: Set[str] = set()
        for scan in scans:
            head = archives.member_path(scan.archive, "")
            if root.startswith(head):
                texts = {
                    archived.image_set_name(n): d
                    for n, d in scan.data.items()
                    if archived.image_set_root(n) == root[len(head) :]
                }
                splits.update(detection.parse_image_sets(texts.__getitem__, texts).values())
        return tuple(sorted(splits))

    annotation_format, patterns = annotations.annotation_format, annotations.patterns
    if annotation_format == detection.VOC:
        named = annotation_splits(
            config, annotation_format, [archives.member_path(a, p) for a, _ in found for p in patterns], voc_splits
        )
    elif annotation_format == detection.COCO:
        named = annotation_splits(config, annotation_format, list(patterns))
    else:
        box_splits: Set[str] = set()
        for name in patterns:
            try:
                for number, row in detection.box_rows(name, data[name]):
                    split = row_split(name, number, row)
                    if split is not None:
                        box_splits.add(split)
            except UnicodeDecodeError as e:
                raise PlanError(f"cannot read manifest {name}: {type(e).__name__}: {e}") from e
        named = tuple(sorted(box_splits))

    def image_items(listed: List[Tuple[str, MemberEntry]]) -> List[WorkItem]:
        items = [
            WorkItem(archives.member_path(a, e.name), annotations.relpath(e.name), e.size, e.member)
            for a, e in listed
            if is_image_name(e.name)
        ]
        return sorted(items, key=lambda f: f.relpath)

    images = image_items([(scan.archive, m) for scan in scans for m in scan.members])
    sample = image_items(peeked)
    plan = plan_detection(config, annotation_format, base, [], images, patterns, named=named, sample=sample)
    return dataclasses.replace(
        plan, input=dataclasses.replace(plan.input, pattern=pattern, listing_digest=digest(found))
    )
