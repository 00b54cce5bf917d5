"""Detection inputs: Pascal VOC, COCO JSON and manifests of boxes beside their images; their plan, source,
ledger (one entry per annotated image) and converter.

The splits come from VOC image sets, COCO file names or a manifest's split column (else ``--splits``),
the shard counts from the image bytes. Annotations packed in archives: ``archived_detection.py``.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from img2tfrecord.conversion.converter import Converter, DetectionConverter
from img2tfrecord.conversion.record_sizes import RECORD_OVERHEAD_BYTES, estimated_record_bytes
from img2tfrecord.model import Annotation, DetectionPlacement, Item, WorkItem
from img2tfrecord.option_values import TASK_CLASSIFICATION, TASK_DETECTION
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.kinds.base import InputKind, run_splits
from img2tfrecord.pipeline.kinds.common import named_splits, rows_split_bytes
from img2tfrecord.pipeline.kinds.folder import folder_files
from img2tfrecord.pipeline.kinds.ledger import InputLedger, ReadAtLaunch, file_stamps
from img2tfrecord.pipeline.listing import digest, file_pattern, list_input
from img2tfrecord.pipeline.plan_model import InputPlan, Plan, PlanError
from img2tfrecord.pipeline.sizing import estimate_size_ratio, sampled_sizes, sized
from img2tfrecord.schemas.ledger import LedgerEntry, row_text
from img2tfrecord.sources import detection, input_paths, manifests
from img2tfrecord.sources import layout as layouts
from img2tfrecord.sources.inputs import InputSource, discover
from img2tfrecord.sources.inputs.detection import DetectionSource


class AnnotationKind(InputKind):
    """What every kind of detection input shares: TF Object Detection API records, not analysed, their
    inputs counted once the annotations are read."""

    task = TASK_DETECTION
    analysable = False
    analysis_note = "detection: no tf.Transform analysis (its features are those of classification records)"
    counts_known_at_launch = False
    discover_step = "DiscoverAnnotations"

    def converter(self, config: ConvertConfig, plan: Plan) -> Converter[Any]:
        return DetectionConverter(
            config.image, plan.input.layout, run_splits(config), config.seed, config.require_boxes
        )

    def class_noun(self, plan: Plan) -> str:
        return "class(es) of objects"


class Detection(AnnotationKind):
    """Pascal VOC or COCO JSON beside the images of a folder, COCO JSON files, or manifests of boxes."""

    name = "detection"

    def claims(self, config: ConvertConfig) -> bool:
        return config.task != TASK_CLASSIFICATION

    def plan(self, config: ConvertConfig, whole: bool) -> Optional[Plan]:
        if input_paths.input_form(config.input) == input_paths.INPUT_MANIFEST:
            return plan_manifest_of_boxes(config)
        if config.input.lower().endswith(".json"):
            return plan_coco_files(config)
        base, _, files, _ = folder_files(config)
        forced = config.task == TASK_DETECTION
        found_layout = detection_layout(files.by_folder(), forced)
        if found_layout is not None:
            return plan_folder_detection(config, found_layout, base, files)
        if forced:
            raise PlanError(
                f"--task detection: {config.input} holds neither a Pascal VOC layout (Annotations/*.xml, "
                "JPEGImages/) nor COCO JSON (instances_*.json)"
            )
        return None

    def source(self, config: ConvertConfig, plan: Plan) -> InputSource:
        return DetectionSource(
            plan.input.annotations,
            plan.input.patterns,
            plan.input.base,
            plan.input.split_names,
            plan.input.has_split_column,
        )

    def ledger(self, config: ConvertConfig, plan: Plan) -> Optional[InputLedger]:
        return None if config.sequence else AnnotationLedger(config, plan, self)


def plan_manifest_of_boxes(config: ConvertConfig) -> Optional[Plan]:
    """The plan of ``--input`` as manifests of boxes (``--task detection``, or the first manifest has box
    columns), or None: plain manifests."""
    base, pattern = file_pattern(config.input)
    found = sorted(p for p, _ in list_input(pattern) if manifests.manifest_format(p))
    if found and (config.task == TASK_DETECTION or detection.is_box_manifest(found[0])):
        return plan_box_manifest(config, base, pattern, found)
    return None


def plan_coco_files(config: ConvertConfig) -> Plan:
    """The plan of COCO JSON files given as ``--input`` (one, or a glob of them)."""
    _, pattern = file_pattern(config.input)
    found = sorted(p for p, _ in list_input(pattern))
    if not found:
        raise PlanError(f"no COCO JSON files match {pattern}")
    return plan_detection(config, detection.COCO, coco_base(found), list(found), [], tuple(found))


def is_image_name(relpath: str) -> bool:
    return not relpath.lower().endswith((".xml", ".json", ".txt", ".csv", ".jsonl", ".pbtxt"))


def detection_layout(folders: Iterable[Tuple[str, Sequence[str]]], forced: bool) -> Optional[str]:
    """voc, coco or None: a folder's annotation layout, from ``(folder relpath, "" for the root; its files'
    names)`` of every folder (a folder's parts looked at once, not once per file)."""
    voc_xml = voc_images = coco = False
    for folder, names in folders:
        parts = folder.split("/") if folder else []
        lower = [name.lower() for name in names]
        voc_xml = voc_xml or (
            bool(parts) and parts[-1] == detection.VOC_ANNOTATIONS and any(n.endswith(".xml") for n in lower)
        )
        voc_images = voc_images or (detection.VOC_IMAGES in parts and bool(names))
        coco = coco or any(n.endswith(".json") and (forced or n.startswith("instances")) for n in lower)
    if voc_xml and voc_images:
        return detection.VOC
    return detection.COCO if coco else None


def coco_base(jsons: List[str]) -> str:
    """The input root of COCO files given directly: the folder above ``annotations/``, else their folder."""
    directory = jsons[0].rsplit("/", 1)[0]
    if directory.rsplit("/", 1)[-1].lower() == "annotations":
        directory = directory.rsplit("/", 1)[0]
    return directory + "/"


def plan_folder_detection(config: ConvertConfig, annotation_format: str, base: str, files: Sequence[WorkItem]) -> Plan:
    if annotation_format == detection.VOC:
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
    images = [f for f in files if is_image_name(f.relpath)]
    return plan_detection(config, annotation_format, base, annotations, images, patterns)


def annotation_splits(
    config: ConvertConfig,
    annotation_format: str,
    annotations: List[str],
    voc_splits: Callable[[str], Tuple[str, ...]] = detection.voc_split_names,
) -> Tuple[str, ...]:
    """The splits VOC image sets (``voc_splits(root)``) or COCO file names give, sorted; () for none."""
    if annotation_format == detection.VOC:
        roots = sorted({detection.voc_root(a) for a in annotations})
        return tuple(sorted({s for root in roots for s in voc_splits(root)}))
    by_file = [detection.coco_split(a) for a in annotations]
    if all(by_file) and len(set(by_file)) == len(by_file) and (len(by_file) > 1 or not config.splits):
        return tuple(sorted(s for s in by_file if s))
    return ()


def plan_detection(
    config: ConvertConfig,
    annotation_format: str,
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
        named = annotation_splits(config, annotation_format, annotations)
    split_names = named_splits(config, named, "the annotations name the splits")
    ratio = estimate_size_ratio(config, images if sample is None else sample)
    input_bytes = sum(f.size for f in images)
    per_split = (input_bytes * ratio + RECORD_OVERHEAD_BYTES * len(images)) / len(split_names)
    return Plan(
        InputPlan(
            base=base,
            pattern=patterns[0] if patterns else base,
            layout=layouts.LAYOUT_DETECTION,
            split_names=split_names,
            has_split_column=bool(named),
            listing_digest=digest([(a,) for a in annotations] + [(f.relpath, f.size) for f in images]),
            annotations=annotation_format,
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
                split = row_split(path, number, row)
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
    split_names = named_splits(config, named, "the manifest has a split column")
    listed = [(image, detection.rel(base, image)) for image in paths]
    mean_size, ratio = sampled_sizes(config, listed)  # as the graph samples image references
    record_bytes = estimated_record_bytes(mean_size, ratio)
    split_bytes = rows_split_bytes(
        config, split_names, ((paths[image], relpath) for image, relpath in listed), record_bytes
    )
    return Plan(
        InputPlan(
            base=base,
            pattern=pattern,
            layout=layouts.LAYOUT_DETECTION,
            split_names=split_names,
            has_split_column=bool(named),
            listing_digest=digest(digest_rows),
            annotations=detection.BOXES,
            patterns=tuple(found),
        ),
        sized(config, split_names, split_bytes, len(listed), int(mean_size * len(listed)), ratio),
    )


def row_split(path: str, number: int, row: Dict) -> Optional[str]:
    """The split a row of a manifest of boxes names (canonical), None for none; PlanError for a bad name."""
    if not row.get("split"):
        return None
    problem = manifests.check_split_name(str(row["split"]))
    if problem:
        raise PlanError(f"{path}:{number}: {problem}")
    return manifests.canonical_split(str(row["split"]))


class AnnotationLedger(ReadAtLaunch):
    """The images detection annotations name (Pascal VOC, COCO, manifests of boxes), read at launch.

    An image is keyed by its relpath, with its size and change marker, and, as its row, a digest of
    its objects and its split: an image whose file or annotation changed is a changed input.
    """

    noun = "annotated image(s)"

    def __init__(self, config: ConvertConfig, plan: Plan, kind: InputKind):
        super().__init__(config, plan)
        found = discover(kind.source(config, plan), list_input)
        stamps = file_stamps([item.path for item in found.files])
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


def _objects_digest(item: WorkItem) -> str:
    """16 hex digits of what an annotation says of an image: its objects and the boxes dropped."""
    return hashlib.sha256(repr(item.row).encode("utf-8")).hexdigest()[:16]
