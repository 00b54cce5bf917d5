"""Detection annotations as inputs, without Beam: Pascal VOC XML, COCO JSON and manifests of boxes.

Every box becomes a :class:`~img2tfrecord.model.Box` in source pixels, as
continuous edges with the origin at the top-left corner of the top-left
pixel: COCO's ``[x, y, width, height]`` and a manifest's
``xmin,ymin,xmax,ymax`` are such edges already; VOC numbers pixels from 1
with ``xmax`` inclusive, so its ``xmin``/``ymin`` move by one. A box that
cannot be used is a :class:`~img2tfrecord.model.DroppedBox` of its image;
an annotation that cannot be used at all is an error row.

COCO and manifests of boxes are read here, Pascal VOC in ``sources/voc.py``,
what they share in ``sources/detection_common.py``; :func:`read_items` reads
any of them, and every name of those modules is imported back here.
"""

from __future__ import annotations

import io
import json
import posixpath
import re
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from img2tfrecord.model import Annotation, Box, DetectionPlacement, DroppedBox, WorkItem, error_row
from img2tfrecord.sources.detection_common import (
    AnnotationError,
    Exists,
    Output,
    Reader,
    checked_box,
    exists,
    finite_number,
    join,
    list_files,
    read_annotation_file,
    rel,
    split_boxes,
)
from img2tfrecord.sources.files import open_raw
from img2tfrecord.sources.manifests import (
    ManifestError,
    canonical_split,
    csv_head,
    csv_rows,
    first_line,
    jsonl_objects,
    manifest_format,
    resolve_row_path,
)
from img2tfrecord.sources.split_folders import split_of_folder
from img2tfrecord.sources.voc import (
    MAX_ANNOTATION_BYTES,
    VOC_ANNOTATIONS,
    VOC_IMAGE_SETS,
    VOC_IMAGES,
    VOC_SET_SPLITS,
    parse_image_sets,
    parse_voc,
    parse_xml,
    voc_image_sets,
    voc_item,
    voc_root,
    voc_split_names,
)

VOC = "voc"
COCO = "coco"
BOXES = "boxes"  # a CSV/JSONL manifest with one row per box
FORMATS = (VOC, COCO, BOXES)

BOX_COLUMNS = ("path", "label", "xmin", "ymin", "xmax", "ymax", "split")
MAX_COCO_BYTES = 4 * 1024 * 1024 * 1024  # one COCO JSON file (read whole)
_COCO_PREFIX = re.compile(r"^(instances|annotations?)_", re.IGNORECASE)


# ---------------------------------------------------------------------------
# COCO.


def coco_split(json_path: str) -> Optional[str]:
    """The split a COCO file's name gives (``instances_val2017.json`` -> validation), or None."""
    stem = posixpath.splitext(posixpath.basename(json_path))[0]
    name = re.sub(r"\d+$", "", _COCO_PREFIX.sub("", stem)).strip("_-").lower()
    return split_of_folder(name)


def coco_image_dir(json_path: str, first_file: Optional[str], exists_fn: Exists = exists) -> str:
    """The folder a COCO file's ``file_name``s are relative to (ending with ``/``).

    Tried in order, keeping the first that holds ``first_file``: ROOT/STEM/,
    ROOT/images/STEM/, ROOT/images/, ROOT/, where STEM is the file's name
    without ``instances_`` (train2017) and ROOT the folder above ``annotations/``.
    """
    directory = json_path.rsplit("/", 1)[0]
    root = directory.rsplit("/", 1)[0] if directory.rsplit("/", 1)[-1].lower() == "annotations" else directory
    stem = _COCO_PREFIX.sub("", posixpath.splitext(posixpath.basename(json_path))[0])
    candidates = [join(root, stem), join(root, f"images/{stem}"), join(root, "images"), root, directory]
    if first_file:
        for candidate in candidates:
            if exists_fn(join(candidate, first_file)):
                return candidate.rstrip("/") + "/"
    return root.rstrip("/") + "/"


def coco_items(
    json_path: str, base: str, split: Optional[str], data: bytes, exists_fn: Exists = exists
) -> Iterator[Output]:
    """The work items of one COCO detection file (one per image), and error rows.

    An image listed without annotations is an item without boxes; annotations
    of an image id that ``images`` does not list give one ``unknown_image``
    row per id; a box whose category is missing from ``categories`` is dropped.
    """
    try:
        doc = json.loads(data)
        images = doc["images"]
        annotations = doc.get("annotations") or []
        categories = {c["id"]: str(c["name"]) for c in doc.get("categories") or []}
        if not isinstance(images, list) or not isinstance(annotations, list):
            raise TypeError("images and annotations must be lists")
    except (ValueError, KeyError, TypeError) as e:
        yield error_row(json_path, rel(base, json_path), "bad_annotation", f"not COCO JSON: {e}")
        return
    by_image: Dict[Any, List[Union[Box, DroppedBox]]] = {}
    for a in annotations:
        try:
            image_id = a["image_id"]
            x, y, w, h = a["bbox"]
        except (KeyError, TypeError, ValueError):
            by_image.setdefault(a.get("image_id") if isinstance(a, dict) else None, []).append(
                DroppedBox("", "bad_box", "annotation without image_id or a 4-number bbox")
            )
            continue
        name = categories.get(a.get("category_id"))
        if name is None:
            by_image.setdefault(image_id, []).append(
                DroppedBox("", "unknown_category", f"category_id {a.get('category_id')!r} is not in categories")
            )
            continue
        try:
            area = float(a["area"]) if a.get("area") is not None else None
            box = checked_box(name, x, y, x + w, y + h, is_crowd=bool(a.get("iscrowd")), area=area)
        except (TypeError, ValueError) as e:
            box = DroppedBox(name, "bad_box", f"bbox {a.get('bbox')!r}: {e}")
        by_image.setdefault(image_id, []).append(box)
    files = [i.get("file_name") for i in images if isinstance(i, dict)]
    image_dir = coco_image_dir(json_path, next((f for f in files if isinstance(f, str)), None), exists_fn)
    for image in images:
        if not isinstance(image, dict) or not isinstance(image.get("file_name"), str) or "id" not in image:
            yield error_row(json_path, "", "bad_annotation", f"image entry without id or file_name: {image!r:.200}")
            continue
        path = join(image_dir, image["file_name"])
        boxes, dropped = split_boxes(by_image.pop(image["id"], []))
        annotation = Annotation(boxes, str(image["id"]), dropped)
        yield WorkItem(path, rel(base, path), 0, row=DetectionPlacement(split, annotation))
    for image_id, found in sorted(by_image.items(), key=lambda kv: str(kv[0])):
        yield error_row(
            f"{json_path}#image_id={image_id}",
            "",
            "unknown_image",
            f"{len(found)} annotation(s) name image id {image_id!r}, which images does not list",
        )


# ---------------------------------------------------------------------------
# Manifests of boxes: one row per box.


def is_box_manifest(path: str, data: Optional[bytes] = None) -> bool:
    """True when a CSV/JSONL manifest has box columns (``xmin`` ... in its header or first object).

    ``data``: the manifest's bytes (else its head is read from ``path``).
    """
    fmt = manifest_format(path)
    try:
        if data is None:
            with open_raw(path) as f:
                data = f.read(64 * 1024)
    except OSError:
        return False
    head = data[: 64 * 1024].decode("utf-8-sig", "replace")
    first = next((line for line in head.splitlines() if line.strip()), "")
    if fmt == "jsonl":
        try:
            obj = json.loads(first)
        except ValueError:
            return False
        return isinstance(obj, dict) and "xmin" in obj
    try:
        return csv_head(first, path, "xmin").header  # comma-, semicolon- or tab-delimited
    except ManifestError:
        return False


def box_rows(path: str, data: Optional[bytes] = None) -> Iterator[Tuple[int, Dict[str, Any]]]:
    """``(line number, row)`` of a manifest of boxes; a row that cannot be read is ``{"error": message}``.

    CSV needs a header naming ``path,label,xmin,ymin,xmax,ymax`` (``split``
    optional, other columns ignored); JSONL one object per line with those keys.
    A row whose label and coordinates are all empty names an image without boxes.
    ``data``: the manifest's bytes (else it is streamed from ``path``).
    """
    with open_raw(path) if data is None else io.BytesIO(data) as raw:
        lines = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
        if manifest_format(path) == "jsonl":
            for number, obj in jsonl_objects(lines):
                if isinstance(obj, str):
                    yield number, {"error": obj}
                    continue
                yield number, {k: obj[k] for k in BOX_COLUMNS if obj.get(k) is not None}
            return
        columns: Optional[Dict[str, int]] = None
        first, again = first_line(lines)
        for number, cells in csv_rows(again, csv_head(first, path, "xmin").delimiter):
            if columns is None:
                lowered = [c.strip().lower() for c in cells]
                columns = {name: lowered.index(name) for name in BOX_COLUMNS if name in lowered}
                continue
            yield number, {k: cells[i].strip() for k, i in columns.items() if i < len(cells) and cells[i].strip()}


def box_manifest_items(
    manifest_path: str, base: str, rows: Iterator[Tuple[int, Dict[str, Any]]], split_names: Sequence[str]
) -> Iterator[Output]:
    """One work item per image path of a manifest of boxes (its rows grouped), and error rows.

    A row without a path, or whose split is not one of ``split_names``, is an
    error row; rows of one image naming different splits reject the image.
    """
    images: Dict[str, List[Union[Box, DroppedBox]]] = {}
    splits: Dict[str, set] = {}
    where_of: Dict[str, str] = {}
    for number, row in rows:
        where = f"{manifest_path}:{number}"
        if "error" in row:
            yield error_row(where, "", "bad_manifest_row", row["error"])
            continue
        value = str(row.get("path", ""))
        if not value:
            yield error_row(where, "", "bad_manifest_row", "row has no path")
            continue
        path, _ = resolve_row_path(manifest_path, value)
        where_of.setdefault(path, where)
        found = images.setdefault(path, [])
        if "split" in row:
            splits.setdefault(path, set()).add(canonical_split(str(row["split"])))
        edges = [row.get(k) for k in ("xmin", "ymin", "xmax", "ymax")]
        label = str(row.get("label", ""))
        if not label and all(e in (None, "") for e in edges):
            continue  # an image without boxes
        found.append(checked_box(label, *edges))
    for path, found in images.items():
        relpath = rel(base, path)
        named = splits.get(path, set())
        if len(named) > 1:
            message = f"{where_of[path]}: rows of this image name different splits ({', '.join(sorted(named))})"
            yield error_row(path, relpath, "inconsistent_split", message)
            continue
        split = next(iter(named)) if named else None
        if split is not None and split not in split_names:
            message = f"{where_of[path]}: split {split!r} is not one of {', '.join(split_names)}"
            yield error_row(path, relpath, "unknown_split", message)
            continue
        boxes, dropped = split_boxes(found)
        source_id = posixpath.splitext(posixpath.basename(relpath))[0]
        yield WorkItem(path, relpath, 0, row=DetectionPlacement(split, Annotation(boxes, source_id, dropped)))


def read_items(
    annotation_format: str,
    path: str,
    base: str,
    split_names: Sequence[str],
    named_splits: bool,
    image_sets: Callable[[str], Dict[str, str]],
    read: Optional[Reader] = None,
    exists_fn: Exists = exists,
) -> Iterator[Output]:
    """Every work item and error row of one annotation file of ``annotation_format`` (voc, coco, boxes).

    ``named_splits``: the annotations name the splits (VOC image sets, COCO
    file names, a split column); otherwise every item's split is None
    (assigned by the seeded hash of its relpath). ``read`` and ``exists_fn``
    say where the annotation's bytes and its images are (an archive's
    members); by default, on the filesystem, a manifest of boxes streamed.
    """
    if annotation_format == VOC:
        yield voc_item(
            path, base, image_sets(voc_root(path)) if named_splits else {}, read=read or read_annotation_file
        )
        return
    data: Optional[bytes] = None
    if annotation_format == COCO or read is not None:
        try:
            data = (read or read_annotation_file)(path, MAX_COCO_BYTES)
        except Exception as e:  # pylint: disable=broad-except
            yield error_row(path, rel(base, path), "bad_annotation", f"{type(e).__name__}: {e}")
            return
    if annotation_format == COCO:
        assert data is not None
        yield from coco_items(path, base, coco_split(path) if named_splits else None, data, exists_fn)
    else:
        rows = box_rows(path, data)
        if not named_splits:
            rows = ((n, _without_split(r)) for n, r in rows)
        yield from box_manifest_items(path, base, rows, split_names)


def _without_split(row: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in row.items() if k != "split"}


__all__ = [
    "BOXES",
    "BOX_COLUMNS",
    "COCO",
    "FORMATS",
    "MAX_ANNOTATION_BYTES",
    "MAX_COCO_BYTES",
    "VOC",
    "VOC_ANNOTATIONS",
    "VOC_IMAGES",
    "VOC_IMAGE_SETS",
    "VOC_SET_SPLITS",
    "AnnotationError",
    "Exists",
    "Output",
    "Reader",
    "box_manifest_items",
    "box_rows",
    "checked_box",
    "coco_image_dir",
    "coco_items",
    "coco_split",
    "exists",
    "finite_number",
    "is_box_manifest",
    "join",
    "list_files",
    "parse_image_sets",
    "parse_voc",
    "parse_xml",
    "read_annotation_file",
    "read_items",
    "rel",
    "split_boxes",
    "voc_image_sets",
    "voc_item",
    "voc_root",
    "voc_split_names",
]
