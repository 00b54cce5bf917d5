"""Pascal VOC annotations as inputs, without Beam: XML parsed without DTDs, image sets as splits, one item per file.

VOC numbers pixels from 1 with ``xmax`` inclusive, so a box's ``xmin``/``ymin``
move by one to become continuous edges (``sources/detection_common.py``).
"""

from __future__ import annotations

import posixpath
from typing import Any, Callable, Dict, List, Optional, Tuple, Union
from xml.etree import ElementTree
from xml.parsers import expat

from img2tfrecord.model import Annotation, Box, DetectionPlacement, DroppedBox, WorkItem, error_row
from img2tfrecord.sources.detection_common import (
    AnnotationError,
    Output,
    Reader,
    checked_box,
    finite_number,
    join,
    list_files,
    read_annotation_file,
    rel,
    split_boxes,
)

VOC_ANNOTATIONS = "Annotations"
VOC_IMAGES = "JPEGImages"
VOC_IMAGE_SETS = "ImageSets/Main"
# ImageSets/Main/<name>.txt -> split; trainval is used only when train.txt and val.txt are absent.
VOC_SET_SPLITS = {"train": "train", "val": "validation", "test": "test", "trainval": "train"}
MAX_ANNOTATION_BYTES = 64 * 1024 * 1024  # one VOC XML file


def _refuse(*unused: Any) -> Any:
    raise AnnotationError("the XML declares a DTD or entities, which annotations never need")


def parse_xml(data: bytes) -> ElementTree.Element:
    """The root element of an XML document; AnnotationError for malformed XML or any DTD/entity declaration.

    Built on expat directly so that a document type declaration is refused
    before any entity could expand (no billion laughs, no external entities).
    """
    parser = expat.ParserCreate()
    builder = ElementTree.TreeBuilder()
    parser.StartElementHandler = lambda tag, attrs: builder.start(tag, attrs)
    parser.EndElementHandler = lambda tag: builder.end(tag)
    parser.CharacterDataHandler = builder.data
    parser.StartDoctypeDeclHandler = _refuse
    parser.EntityDeclHandler = _refuse
    parser.ExternalEntityRefHandler = _refuse
    try:
        parser.Parse(data, True)
        return builder.close()
    except expat.ExpatError as e:
        raise AnnotationError(f"malformed XML: {e}") from None


def _text(element: Optional[ElementTree.Element], default: str = "") -> str:
    return (element.text or "").strip() if element is not None else default


def _flag(element: ElementTree.Element, name: str) -> bool:
    return _text(element.find(name)) in ("1", "true", "True")


def parse_voc(data: bytes, xml_name: str) -> Tuple[str, Annotation]:
    """``(image file name, annotation)`` of one VOC XML; AnnotationError when it is not one."""
    root = parse_xml(data)
    if root.tag != "annotation":
        raise AnnotationError(f"the root element is <{root.tag}>, not <annotation>")
    stem = posixpath.splitext(posixpath.basename(xml_name))[0]
    filename = _text(root.find("filename")) or stem + ".jpg"
    if "/" in filename or "\\" in filename or filename in (".", ".."):
        raise AnnotationError(f"<filename> {filename!r} is not a file name")
    found: List[Union[Box, DroppedBox]] = []
    for obj in root.iter("object"):
        label = _text(obj.find("name"))
        bndbox = obj.find("bndbox")
        if bndbox is None:
            found.append(DroppedBox(label, "bad_box", "<object> has no <bndbox>"))
            continue
        edges = [_text(bndbox.find(k)) for k in ("xmin", "ymin", "xmax", "ymax")]
        try:  # VOC pixels are 1-based and inclusive: pixel edges are (xmin - 1, ymin - 1, xmax, ymax)
            edges[0], edges[1] = str(finite_number(edges[0]) - 1), str(finite_number(edges[1]) - 1)
        except (TypeError, ValueError):
            pass  # checked_box reports it
        found.append(
            checked_box(
                label,
                *edges,
                difficult=_flag(obj, "difficult"),
                truncated=_flag(obj, "truncated"),
                view=_text(obj.find("pose")),
            )
        )
    boxes, dropped = split_boxes(found)
    return filename, Annotation(boxes, posixpath.splitext(filename)[0], dropped)


def voc_root(annotation_path: str) -> str:
    """The dataset root of ``ROOT/Annotations/NAME.xml`` (ending with ``/``)."""
    return annotation_path.rsplit("/", 2)[0] + "/"


def voc_image_sets(root: str) -> Dict[str, str]:
    """Image id -> split from ``ROOT/ImageSets/Main/{train,val,trainval,test}.txt`` ({} when there are none)."""
    paths = {
        posixpath.splitext(posixpath.basename(path))[0]: path
        for path in list_files(join(root, VOC_IMAGE_SETS + "/*.txt"))
    }
    return parse_image_sets(lambda name: read_annotation_file(paths[name], MAX_ANNOTATION_BYTES), paths)


def parse_image_sets(read: Callable[[str], bytes], names) -> Dict[str, str]:
    """Image id -> split from the image set files ``names`` (file names without ``.txt``), read by ``read(name)``.

    Only the files of :data:`VOC_SET_SPLITS` count; ``trainval`` only without ``train`` and ``val``.
    """
    sets = {name for name in names if name in VOC_SET_SPLITS}
    if "train" in sets or "val" in sets:
        sets.discard("trainval")
    splits: Dict[str, str] = {}
    for name in sorted(sets):
        text = read(name).decode("utf-8", "replace")
        for line in text.splitlines():
            parts = line.split()
            if len(parts) == 1 or (len(parts) == 2 and parts[1] != "-1"):  # per-class files mark absence with -1
                splits.setdefault(parts[0], VOC_SET_SPLITS[name])
    return splits


def voc_split_names(root: str) -> Tuple[str, ...]:
    """The splits the image sets of a VOC root name, sorted; () without image sets."""
    return tuple(sorted(set(voc_image_sets(root).values())))


def voc_item(
    annotation_path: str,
    base: str,
    image_sets: Dict[str, str],
    limit: int = MAX_ANNOTATION_BYTES,
    read: Reader = read_annotation_file,
) -> Output:
    """The work item of one VOC annotation file (its bytes from ``read``), or its error row."""
    relpath = rel(base, annotation_path)
    try:
        filename, annotation = parse_voc(read(annotation_path, limit), annotation_path)
    except AnnotationError as e:
        return error_row(annotation_path, relpath, "bad_annotation", str(e))
    except Exception as e:  # pylint: disable=broad-except  (unreadable, over the limit)
        return error_row(annotation_path, relpath, "bad_annotation", f"{type(e).__name__}: {e}")
    root = voc_root(annotation_path)
    image_path = join(root, f"{VOC_IMAGES}/{filename}")
    split: Optional[str] = None
    if image_sets:
        split = image_sets.get(annotation.source_id)
        if split is None:
            return error_row(
                image_path,
                rel(base, image_path),
                "not_in_image_sets",
                f"{annotation.source_id} is in none of {VOC_IMAGE_SETS}/{{train,val,trainval,test}}.txt",
            )
    return WorkItem(image_path, rel(base, image_path), 0, row=DetectionPlacement(split, annotation))
