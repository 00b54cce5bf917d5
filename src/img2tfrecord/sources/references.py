"""Image references given from Python (a user pipeline's rows): ``ImageRef`` and the work item of one.

A reference names an image by URI, with a class name for classification or boxes for detection;
one that cannot be a work item is an error row with its reason, never an exception.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from img2tfrecord.model import (
    Annotation,
    Box,
    DetectionPlacement,
    DroppedBox,
    ErrorRow,
    MetadataValue,
    RowPlacement,
    WorkItem,
    error_row,
)
from img2tfrecord.sources.detection_common import checked_box, outside_relpath, split_boxes
from img2tfrecord.sources.manifests import label_problem, relpath_below

BOX_KEYS = ("label", "xmin", "ymin", "xmax", "ymax")
METADATA_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-/]{0,127}$")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class MetadataError(ValueError):
    """A reference's metadata that cannot be copied into a record; the message names the value."""


class ImageRef(NamedTuple):
    """One image to convert: a URI on any Beam filesystem, its class name (an int is taken as its text),
    for detection its boxes — ``{"label", "xmin", "ymin", "xmax", "ymax"}`` mappings or 5-tuples in that
    order, edges in the source image's pixels (as in a manifest of boxes) — and ``metadata``, values
    copied into the record as ``metadata/<name>`` features (:func:`metadata_values`)."""

    uri: str
    label: Optional[Union[str, int]] = None
    boxes: Optional[Sequence[Any]] = None
    metadata: Optional[Mapping[str, Any]] = None


def _metadata_value(name: str, value: Any) -> MetadataValue:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if all(isinstance(v, (str, bytes)) for v in values):  # an empty list too
        return MetadataValue(name, "bytes", tuple(v.encode("utf-8") if isinstance(v, str) else v for v in values))
    if all(isinstance(v, int) for v in values):  # bool is an int: 0 or 1
        if any(not INT64_MIN <= v <= INT64_MAX for v in values):
            raise MetadataError(f"metadata {name!r}: {value!r:.80} does not fit in 64 bits")
        return MetadataValue(name, "int64", tuple(int(v) for v in values))
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return MetadataValue(name, "float", tuple(float(v) for v in values))
    raise MetadataError(
        f"metadata {name!r}: {value!r:.80} is not a string, bytes, number or bool, or a list of one of them"
    )


def metadata_values(metadata: Any) -> Tuple[MetadataValue, ...]:
    """A reference's metadata as the values its record carries, sorted by name; None values are left out.

    MetadataError for a mapping that is none, a name that is not ``[A-Za-z0-9_][A-Za-z0-9_.-/]*`` (at most
    128 characters) or a value that is not a string, bytes, number or bool, or a list of one of them.
    """
    if metadata is None:
        return ()
    if not isinstance(metadata, Mapping):
        raise MetadataError(f"metadata {metadata!r:.80} is not a mapping of names to values")
    found = []
    for name in sorted(metadata, key=str):
        if not isinstance(name, str) or not METADATA_NAME_RE.match(name):
            raise MetadataError(f"metadata name {name!r:.80} is not letters, digits and _ . - / (at most 128)")
        if metadata[name] is not None:
            found.append(_metadata_value(name, metadata[name]))
    return tuple(found)


def _box(value: Any) -> Union[Box, DroppedBox]:
    """A box of a reference, or why it is none (counted in the record's dropped boxes, as a bad manifest row)."""
    if isinstance(value, Mapping):
        return checked_box(str(value.get("label", "")), *(value.get(k) for k in BOX_KEYS[1:]))
    if isinstance(value, (list, tuple)) and len(value) == len(BOX_KEYS):
        return checked_box(str(value[0]), *value[1:])
    return DroppedBox("", "bad_box", f"a box is a mapping of {', '.join(BOX_KEYS)} or a 5-tuple, not {value!r:.80}")


def _fields(ref: Any) -> Optional[Dict[str, Any]]:
    if isinstance(ref, ImageRef):
        return ref._asdict()
    if isinstance(ref, Mapping):
        return {
            "uri": ref.get("uri", ref.get("path")),
            "label": ref.get("label"),
            "boxes": ref.get("boxes"),
            "metadata": ref.get("metadata"),
        }
    return None


def reference_item(
    ref: Union[ImageRef, Mapping[str, Any]], root: Optional[str] = None, labeled: bool = True, detection: bool = False
) -> Union[WorkItem, ErrorRow]:
    """The work item of an image reference, or the error row that says why it is none.

    Its relpath (what its split, its record's name and key come from) is the URI below ``root``, else
    the whole URI (detection: without its scheme, as a manifest of boxes names an image outside its
    folder). ``labeled`` False: labels are ignored and records have no label features. ``detection``:
    the record holds the reference's boxes (none is an image without boxes) and its label is ignored;
    otherwise a reference with boxes is refused.
    """
    fields = _fields(ref)
    if fields is None:
        return error_row(repr(ref)[:200], "", "bad_reference", f"not an ImageRef or a dict: {type(ref).__name__}")
    uri, label, boxes = fields["uri"], fields["label"], fields["boxes"]
    if not isinstance(uri, str) or not uri:
        return error_row(repr(ref)[:200], "", "bad_reference", "the reference has no uri")
    item = _item(uri, label, boxes, root, labeled, detection)
    if isinstance(item, WorkItem) and fields["metadata"] is not None:
        try:
            return item._replace(metadata=metadata_values(fields["metadata"]))
        except MetadataError as e:
            return error_row(uri, item.relpath, "bad_metadata", str(e))
    return item


def _item(
    uri: str, label: Any, boxes: Any, root: Optional[str], labeled: bool, detection: bool
) -> Union[WorkItem, ErrorRow]:
    if detection:
        below = relpath_below(root, uri) if root else uri
        relpath = below if below != uri else outside_relpath(uri)
        if boxes is not None and (isinstance(boxes, (str, bytes, Mapping)) or not isinstance(boxes, Sequence)):
            return error_row(uri, relpath, "bad_reference", f"boxes {boxes!r:.80} is not a list of boxes")
        found: List[Union[Box, DroppedBox]] = [_box(b) for b in boxes or ()]
        kept, dropped = split_boxes(found)
        source_id = posixpath.splitext(posixpath.basename(relpath))[0]
        return WorkItem(uri, relpath, 0, row=DetectionPlacement(None, Annotation(kept, source_id, dropped)))
    relpath = relpath_below(root, uri) if root else uri
    if boxes:
        message = "the reference has boxes, but the conversion writes classification records (task='detection')"
        return error_row(uri, relpath, "bad_reference", message)
    if not labeled:
        return WorkItem(uri, relpath, 0, row=RowPlacement(None, None))
    if label is not None and (isinstance(label, bool) or not isinstance(label, (str, int))):
        return error_row(uri, relpath, "bad_label", f"label {label!r} is not a string or an integer")
    name = "" if label is None else str(label)
    problem = label_problem(name)  # as a manifest row's label
    if problem:
        return error_row(uri, relpath, *problem)
    return WorkItem(uri, relpath, 0, row=RowPlacement(None, name))
