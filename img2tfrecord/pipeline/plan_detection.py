"""Launch plans of detection inputs: Pascal VOC, COCO JSON and manifests of boxes, in folders or archives.

The splits come from VOC image sets, COCO file names or a manifest's split column (else ``--splits``),
the shard counts from the image bytes. Archives holding annotations are listed whole: VOC image sets,
COCO file names and box manifests name the splits, wherever they sit in them.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable, Dict, List, Optional, Set, Tuple

from img2tfrecord.conversion.sharding import DEFAULT_SPLIT, assign_split
from img2tfrecord.images import ImageError
from img2tfrecord.model import MemberEntry, WorkItem
from img2tfrecord.option_values import TASK_DETECTION
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.listing import digest
from img2tfrecord.pipeline.plan_model import InputPlan, Plan, PlanError
from img2tfrecord.pipeline.sizing import (
    RECORD_OVERHEAD_BYTES,
    estimate_size_ratio,
    estimated_record_bytes,
    sampled_sizes,
    sized,
)
from img2tfrecord.sources import archives, detection, kinds, manifests
from img2tfrecord.sources import detection_archives as archived
from img2tfrecord.sources import layout as layouts


def _is_image_name(relpath: str) -> bool:
    return not relpath.lower().endswith((".xml", ".json", ".txt", ".csv", ".jsonl", ".pbtxt"))


def detection_layout(files: List[WorkItem], forced: bool) -> Optional[str]:
    """voc, coco or None: a folder's annotation layout, from its relpaths."""
    parts = [f.relpath.split("/") for f in files]
    if any(
        len(p) >= 2 and p[-2] == detection.VOC_ANNOTATIONS and p[-1].lower().endswith(".xml") for p in parts
    ) and any(detection.VOC_IMAGES in p[:-1] for p in parts):
        return detection.VOC
    if any(p[-1].lower().endswith(".json") and (forced or p[-1].lower().startswith("instances")) for p in parts):
        return detection.COCO
    return None


def coco_base(jsons: List[str]) -> str:
    """The input root of COCO files given directly: the folder above ``annotations/``, else their folder."""
    directory = jsons[0].rsplit("/", 1)[0]
    if directory.rsplit("/", 1)[-1].lower() == "annotations":
        directory = directory.rsplit("/", 1)[0]
    return directory + "/"


def plan_folder_detection(config: ConvertConfig, kind: str, base: str, files: List[WorkItem]) -> Plan:
    if kind == detection.VOC:
        folders = sorted(
            {f.path.rsplit("/", 1)[0] for f in files if f.relpath.split("/")[-2:-1] == [detection.VOC_ANNOTATIONS]}
        )
        patterns = tuple(folder + "/*.xml" for folder in folders)
        annotations = [f.path for f in files if f.path.rsplit("/", 1)[0] in folders and f.path.endswith(".xml")]
    else:
        wanted = [f for f in files if f.relpath.lower().endswith(".json")]
        instances = [f for f in wanted if f.relpath.rsplit("/", 1)[-1].lower().startswith("instances")]
        annotations = [f.path for f in instances or wanted]
        patterns = tuple(annotations)
    images = [f for f in files if _is_image_name(f.relpath)]
    return plan_detection(config, kind, base, annotations, images, patterns)


def _named_splits(
    config: ConvertConfig,
    kind: str,
    annotations: List[str],
    voc_splits: Callable[[str], Tuple[str, ...]] = detection.voc_split_names,
) -> Tuple[str, ...]:
    """The splits VOC image sets (``voc_splits(root)``) or COCO file names give, sorted; () for none."""
    if kind == detection.VOC:
        roots = sorted({detection.voc_root(a) for a in annotations})
        return tuple(sorted({s for root in roots for s in voc_splits(root)}))
    by_file = [detection.coco_split(a) for a in annotations]
    if all(by_file) and len(set(by_file)) == len(by_file) and (len(by_file) > 1 or not config.splits):
        return tuple(sorted(s for s in by_file if s))
    return ()


def plan_detection(
    config: ConvertConfig,
    kind: str,
    base: str,
    annotations: List[str],
    images: List[WorkItem],
    patterns: Tuple[str, ...],
    named: Optional[Tuple[str, ...]] = None,
    sample: Optional[List[WorkItem]] = None,
) -> Plan:
    """The plan of a VOC or COCO input: splits from the image sets / file names (or ``named``),
    shards from the image bytes (output/input ratio measured on ``sample``, else ``images``)."""
    if named is None:
        named = _named_splits(config, kind, annotations)
    if named and config.splits:
        logging.warning("the annotations name the splits (%s); --splits is ignored", ", ".join(named))
    split_names = named or (tuple(name for name, _ in config.splits) if config.splits else (DEFAULT_SPLIT,))
    ratio = estimate_size_ratio(config, images if sample is None else sample)
    input_bytes = sum(f.size for f in images)
    per_split = (input_bytes * ratio + RECORD_OVERHEAD_BYTES * len(images)) / len(split_names)
    return Plan(
        InputPlan(
            base=base,
            pattern=patterns[0] if patterns else base,
            layout=layouts.LAYOUT_DETECTION,
            split_names=split_names,
            input_kind=kinds.INPUT_DETECTION,
            has_split_column=bool(named),
            listing_digest=digest([(a,) for a in annotations] + [(f.relpath, f.size) for f in images]),
            annotations=kind,
            patterns=patterns,
        ),
        sized(
            config,
            split_names,
            {name: per_split for name in split_names},
            len(images) or len(annotations),
            input_bytes,
            ratio,
        ),
    )


def plan_box_manifest(config: ConvertConfig, base: str, pattern: str, found: List[str]) -> Plan:
    """The plan of manifests of boxes: splits from a split column, shards from a sample of the images."""
    named: Set[str] = set()
    paths: Dict[str, Optional[str]] = {}  # image -> the split its rows name, None for none
    digest_rows = []
    for path in found:
        if not detection.is_box_manifest(path):
            raise PlanError(f"{path}: a manifest of boxes needs the columns path,label,xmin,ymin,xmax,ymax")
        try:
            for number, row in detection.box_rows(path):
                digest_rows.append((path, number, row))
                split = _row_split(path, number, row)
                if split is not None:
                    named.add(split)
                if row.get("path"):
                    image = manifests.resolve_row_path(path, str(row["path"]))[0]
                    if paths.get(image) is None:
                        paths[image] = split
        except (OSError, UnicodeDecodeError) as e:
            raise PlanError(f"cannot read manifest {path}: {type(e).__name__}: {e}") from e
    if not paths:
        raise PlanError(f"{', '.join(found)}: no rows naming an image (columns path,label,xmin,ymin,xmax,ymax)")
    if named and config.splits:
        logging.warning("the manifest has a split column (%s); --splits is ignored", ", ".join(sorted(named)))
    split_names = tuple(sorted(named)) or (
        tuple(name for name, _ in config.splits) if config.splits else (DEFAULT_SPLIT,)
    )
    listed = [(image, detection.rel(base, image)) for image in paths]
    mean_size, ratio = sampled_sizes(config, listed)  # as the graph samples image references
    record_bytes = estimated_record_bytes(mean_size, ratio)
    split_bytes = {name: 0.0 for name in split_names}
    for image, relpath in listed:
        split = paths[image] or assign_split(relpath, config.seed, config.splits or ((DEFAULT_SPLIT, 1.0),))
        if split in split_bytes:
            split_bytes[split] += record_bytes
    return Plan(
        InputPlan(
            base=base,
            pattern=pattern,
            layout=layouts.LAYOUT_DETECTION,
            split_names=split_names,
            input_kind=kinds.INPUT_DETECTION,
            has_split_column=bool(named),
            listing_digest=digest(digest_rows),
            annotations=detection.BOXES,
            patterns=tuple(found),
        ),
        sized(config, split_names, split_bytes, len(listed), int(mean_size * len(listed)), ratio),
    )


def _row_split(path: str, number: int, row: Dict) -> Optional[str]:
    """The split a row of a manifest of boxes names (canonical), None for none; PlanError for a bad name."""
    if not row.get("split"):
        return None
    problem = manifests.check_split_name(str(row["split"]))
    if problem:
        raise PlanError(f"{path}:{number}: {problem}")
    return manifests.canonical_split(str(row["split"]))


def plan_archived_detection(
    config: ConvertConfig,
    base: str,
    pattern: str,
    found: List[Tuple[str, int]],
    peeked: List[Tuple[str, MemberEntry]],
    peeked_names: List[str],
    complete: bool,
) -> Optional[Plan]:
    """The plan of detection inputs inside archives; None (classification) unless the peek at their
    first members (``peeked``; ``peeked_names`` also names the entries it refused) shows a VOC, COCO
    or box-manifest layout, or ``--task detection`` forces it.

    Detection lists every archive whole (the splits may be named by a member near the end); the
    output/input ratio is measured on the peeked images.
    """
    forced = config.task == TASK_DETECTION

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

    kind, patterns = annotations.kind, annotations.patterns
    if kind == detection.VOC:
        named = _named_splits(
            config, kind, [archives.member_path(a, p) for a, _ in found for p in patterns], voc_splits
        )
    elif kind == detection.COCO:
        named = _named_splits(config, kind, list(patterns))
    else:
        box_splits: Set[str] = set()
        for name in patterns:
            try:
                for number, row in detection.box_rows(name, data[name]):
                    split = _row_split(name, number, row)
                    if split is not None:
                        box_splits.add(split)
            except UnicodeDecodeError as e:
                raise PlanError(f"cannot read manifest {name}: {type(e).__name__}: {e}") from e
        named = tuple(sorted(box_splits))

    def image_items(listed: List[Tuple[str, MemberEntry]]) -> List[WorkItem]:
        items = [
            WorkItem(archives.member_path(a, e.name), annotations.relpath(e.name), e.size, e.member)
            for a, e in listed
            if _is_image_name(e.name)
        ]
        return sorted(items, key=lambda f: f.relpath)

    images = image_items([(scan.archive, m) for scan in scans for m in scan.members])
    plan = plan_detection(config, kind, base, [], images, patterns, named=named, sample=image_items(peeked))
    described = dataclasses.replace(
        plan.input, pattern=pattern, input_kind=kinds.INPUT_ARCHIVES, listing_digest=digest(found)
    )
    return dataclasses.replace(plan, input=described)
