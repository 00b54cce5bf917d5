"""One work item -> one record, or one row of the error report.

``Converter`` is what the shard step and the conversion pool use: one
item in, one output out. ``ImageConverter`` turns one source file (or
archive member, or manifest row) into a :class:`Record`; ``ClipConverter``
turns one clip folder of frames into a ``tf.train.SequenceExample`` record
the same way. Each call gives exactly one output: ``(None, record)`` or
``(ERRORS, error row)``. Both also say, before converting, which split an
item belongs to (``split_of``) and which relpath keys it (``relpath_of``):
the shard step groups items, never records (``transforms/write_shards.py``).

No Beam and no TensorFlow: these objects are pickled into the conversion
worker processes (``conversion/pool.py``), which then import only this
module, Pillow and protobuf.
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import posixpath
import re
from typing import Any, Dict, Generic, List, Optional, Sequence, Tuple, TypeVar

from img2tfrecord import faults
from img2tfrecord.conversion.examples import (
    StoredObject,
    encode_detection_example,
    encode_example,
    encode_pixel_sums,
    encode_sequence_example,
)
from img2tfrecord.conversion.seeded_hashes import Splits, assign_split
from img2tfrecord.images.convert import convert_image
from img2tfrecord.images.geometry import BOX_OUTSIDE_IMAGE, CLIPPED_TO_IMAGE, ImageTransform, clip_to_source, map_box
from img2tfrecord.images.options import ConvertedImage, ImageError, ImageOptions
from img2tfrecord.images.statistics import pixel_sums
from img2tfrecord.model import (
    ERRORS,
    Annotation,
    Clip,
    DetectionPlacement,
    DetectionRecord,
    Record,
    WorkItem,
    error_row,
)
from img2tfrecord.schemas import labels as label_map
from img2tfrecord.sources.files import is_permanent_read_error, read_source
from img2tfrecord.sources.layout import PlacementError, placement

Output = Tuple[Optional[str], Any]  # (None, Record) | (ERRORS, error row)
ItemT = TypeVar("ItemT")  # what one call converts: a WorkItem, or a Clip

_DIGITS = re.compile(r"(\d+)")


def _rejected(path: str, relpath: str, reason: str, message: str) -> Output:
    return ERRORS, error_row(path, relpath, reason, message)


def natural_key(name: str) -> Tuple[List[Any], str]:
    """Sort key putting ``frame_2`` before ``frame_10`` (digit runs compare as numbers)."""
    parts = _DIGITS.split(name)
    return [int(p) if i % 2 else p.lower() for i, p in enumerate(parts)], name


class Converter(abc.ABC, Generic[ItemT]):
    """One item -> ``(None, Record)`` or ``(ERRORS, error row)``; the common part of the converters.

    ``label_names`` is the sorted class list of the whole input, so a class
    seen only in one split still gets its id from the one list. Thread-safe.
    A non-permanent read failure (a cloud storage hiccup) is raised, not
    reported: the runner retries the bundle. Plain objects, pickled into the
    conversion worker processes.
    """

    def __init__(self, options: ImageOptions, layout: str, splits: Splits, seed: int):
        self.options = options
        self.layout = layout
        self.splits = splits
        self.seed = seed
        self._ids: Optional[Dict[str, int]] = None
        self._ids_of: Optional[List[str]] = None

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_ids"] = state["_ids_of"] = None  # a cache, rebuilt where it is unpickled
        return state

    def label_ids(self, names: List[str]) -> Dict[str, int]:
        ids, ids_of = self._ids, self._ids_of
        if ids is None or (ids_of is not names and ids_of != names):
            ids = label_map.label_ids(names)
            self._ids, self._ids_of = ids, names
        return ids

    def read_and_convert(self, source: WorkItem, keep_pixels: bool = False) -> ConvertedImage:
        """The converted image, or ImageError; a transient read failure is raised as it is."""
        try:
            return convert_image(read_source(source, self.options.max_file_bytes), self.options, keep_pixels)
        except ImageError:
            raise
        except Exception as e:  # pylint: disable=broad-except
            if not is_permanent_read_error(e):
                raise  # a transient fault: the runner retries the bundle
            raise ImageError("unreadable", f"{type(e).__name__}: {e}") from None

    def crashed(self, item: ItemT, message: str) -> Output:
        """The error output for an item whose conversion killed its worker process."""
        return _rejected(self.path_of(item), self.relpath_of(item), "worker_crashed", message)

    def convert_all(self, items: Sequence[ItemT], label_names: List[str]) -> List[Output]:
        """The outputs of ``items``, in order (a converter that waits on the network overlaps them)."""
        return [self(item, label_names) for item in items]

    @abc.abstractmethod
    def relpath_of(self, item: ItemT) -> str:
        """The relative path that keys an item's split, shard and position."""

    @abc.abstractmethod
    def path_of(self, item: ItemT) -> str:
        """What the error report names an item by."""

    @abc.abstractmethod
    def split_of(self, item: ItemT) -> str:
        """The split an item's record goes to; PlacementError when it has no place (rejected)."""

    @abc.abstractmethod
    def __call__(self, item: ItemT, label_names: List[str]) -> Output:
        """The item's one output: ``(None, Record)`` or ``(ERRORS, error row)``."""


class ImageConverter(Converter[WorkItem]):
    """WorkItem -> ``(None, Record)`` or ``(ERRORS, error row)``.

    ``sums_split`` names the split whose records carry pixel sums (the
    analysed one), None for none; ``exact_sums``: those of a re-encoded JPEG
    come from its stored bytes decoded again, not from the pixels given to
    the encoder (``images.pixel_sums``).
    """

    def __init__(
        self,
        options: ImageOptions,
        layout: str,
        splits: Splits,
        seed: int,
        sums_split: Optional[str] = None,
        exact_sums: bool = False,
    ):
        super().__init__(options, layout, splits, seed)
        self.sums_split = sums_split
        self.exact_sums = exact_sums

    def relpath_of(self, source: WorkItem) -> str:
        """The relative path that keys a work item's split, shard and position."""
        return source.relpath

    def path_of(self, source: WorkItem) -> str:
        """What the error report names a work item by."""
        return source.path

    def split_of(self, source: WorkItem) -> str:
        """The split a work item's record goes to; PlacementError when it has no place (rejected)."""
        split_folder, _ = placement(source, self.layout)
        return split_folder or assign_split(source.relpath, self.seed, self.splits)

    def __call__(self, source: WorkItem, label_names: List[str]) -> Output:
        path, relpath = source.path, source.relpath
        try:
            split_folder, class_name = placement(source, self.layout)
        except PlacementError as e:
            return _rejected(path, relpath, e.reason, str(e))
        split = split_folder or assign_split(relpath, self.seed, self.splits)
        with_sums = split == self.sums_split
        try:
            image = self.read_and_convert(source, keep_pixels=with_sums)
        except ImageError as e:
            return _rejected(path, relpath, e.reason, e.message)
        ids = self.label_ids(label_names)
        if class_name is not None and class_name not in ids:  # the file appeared after classes were listed
            return _rejected(path, relpath, "unknown_class", f"class {class_name!r} is not in the label map")
        label = None if class_name is None else ids[class_name]
        analysis = None
        if with_sums:
            try:
                sums = encode_pixel_sums(*pixel_sums(image, self.exact_sums))
            except ImageError as e:
                return _rejected(path, relpath, e.reason, e.message)
            # Serialized messages merge when concatenated: the row parses as the record
            # (image bytes left out) with the two analysis features added.
            stripped = dataclasses.replace(image, encoded=b"", pixels=None)
            analysis = encode_example(stripped, label, class_name, relpath) + sums
        # class_name None: a row of an unlabeled manifest, written without label features.
        example = encode_example(image, label, class_name, relpath, source.metadata)
        return None, Record(split, class_name, example, analysis)


class ClipConverter(Converter[Clip]):
    """Clip -> one SequenceExample record, or one error row.

    See ``transforms/sequence.py`` for the layout and the rules.
    """

    def relpath_of(self, element: Clip) -> str:
        return element.relpath

    def path_of(self, element: Clip) -> str:
        return posixpath.dirname(element.frames[0].path)

    def split_of(self, element: Clip) -> str:
        """The split of a clip: its first frame's split folder, else the seeded hash of the clip's relpath."""
        first = min(element.frames, key=lambda s: natural_key(posixpath.basename(s.relpath)))
        split_folder, _ = placement(first, self.layout)
        return split_folder or assign_split(element.relpath, self.seed, self.splits)

    def __call__(self, element: Clip, label_names: List[str]) -> Output:
        clip, is_clip = element.relpath, element.is_clip
        frames: Sequence[WorkItem] = sorted(element.frames, key=lambda s: natural_key(posixpath.basename(s.relpath)))
        first = frames[0]
        try:
            split_folder, class_name = placement(first, self.layout)
        except PlacementError as e:
            return _rejected(first.path, first.relpath, e.reason, str(e))
        if not is_clip:
            return _rejected(
                first.path,
                first.relpath,
                "no_clip_folder",
                f"{first.relpath!r} is not inside a clip folder SRC/<class>/<clip>/",
            )
        for source in frames[1:]:
            if placement(source, self.layout) != (split_folder, class_name):
                return _rejected(
                    source.path,
                    clip,
                    "inconsistent_clip",
                    f"frame {posixpath.basename(source.relpath)}: its label/split differ from the clip's other frames",
                )
        converted = []
        for source in frames:
            try:
                converted.append(self.read_and_convert(source))
            except ImageError as e:
                return _rejected(
                    source.path, clip, e.reason, f"frame {posixpath.basename(source.relpath)}: {e.message}"
                )
        shape = lambda image: (image.width, image.height, image.channels, image.format)  # noqa: E731
        for source, image in zip(frames, converted):
            if shape(image) != shape(converted[0]):
                w, h, c, f = shape(image)
                w0, h0, c0, f0 = shape(converted[0])
                return _rejected(
                    source.path,
                    clip,
                    "inconsistent_frames",
                    f"frame {posixpath.basename(source.relpath)} is {w}x{h}x{c} {f}, "
                    f"the first frame {w0}x{h0}x{c0} {f0} "
                    f"(convert with --image-size and a fixed --format)",
                )
        ids = self.label_ids(label_names)
        if class_name is not None and class_name not in ids:
            clip_path = posixpath.dirname(first.path)
            return _rejected(clip_path, clip, "unknown_class", f"class {class_name!r} is not in the label map")
        split = split_folder or assign_split(clip, self.seed, self.splits)
        label = None if class_name is None else ids[class_name]
        return None, Record(split, class_name, encode_sequence_example(converted, label, class_name, clip))


class DetectionConverter(Converter[WorkItem]):
    """An annotated image -> one TF Object Detection API record, or one error row.

    Boxes go through the transform ``convert_image`` applied to the pixels
    (``images.geometry``). A box is dropped, and counted by reason in the
    record (``DetectionRecord.dropped_boxes``), when its annotation was unusable, when
    it lies wholly outside the source image (``box_outside_image``), or when the
    ``fill`` crop removes it (``cropped_away``). A box partly outside the source
    image is clipped to it, marked truncated and counted as ``clipped_to_image``
    (``images.geometry.clip_to_source``); one the crop cuts is clipped and marked
    truncated. ``require_boxes``: an image left with no box is rejected
    (``no_boxes``) instead of written without boxes.
    """

    def __init__(self, options: ImageOptions, layout: str, splits: Splits, seed: int, require_boxes: bool = False):
        super().__init__(options, layout, splits, seed)
        self.require_boxes = require_boxes

    def relpath_of(self, source: WorkItem) -> str:
        return source.relpath

    def path_of(self, source: WorkItem) -> str:
        return source.path

    def split_of(self, source: WorkItem) -> str:
        split, _ = placement(source, self.layout)
        return split or assign_split(source.relpath, self.seed, self.splits)

    def __call__(self, source: WorkItem, label_names: List[str]) -> Output:
        path, relpath = source.path, source.relpath
        if not isinstance(source.row, DetectionPlacement):
            return _rejected(path, relpath, "no_annotation", "not an annotated detection image")
        annotation = source.row.annotation
        split = self.split_of(source)
        try:
            image = self.read_and_convert(source)
        except ImageError as e:
            return _rejected(path, relpath, e.reason, e.message)
        if image.transform is None:
            raise RuntimeError("convert_image gave no transform")
        objects, dropped = stored_objects(annotation, image.transform, label_map.detection_ids(label_names))
        if self.require_boxes and not objects:
            message = f"no box left of {len(annotation.boxes) + len(annotation.dropped)} annotated (--require-boxes)"
            return _rejected(path, relpath, "no_boxes", message)
        boxes = collections.Counter(o.class_name for o in objects)
        reasons = collections.Counter(reason for reason in dropped)
        example = encode_detection_example(image, relpath, annotation.source_id, objects, source.metadata)
        return None, DetectionRecord(split, example, tuple(sorted(boxes.items())), tuple(sorted(reasons.items())))


def stored_objects(
    annotation: Annotation, transform: ImageTransform, ids: Dict[str, int]
) -> Tuple[List[StoredObject], List[str]]:
    """``(the objects of a record, the reasons of its boxes dropped or clipped)`` of one annotated image."""
    dropped = [d.reason for d in annotation.dropped]
    objects = []
    w, h = transform.size
    sx, sy = transform.scale[0] / transform.draft, transform.scale[1] / transform.draft
    for box in annotation.boxes:
        if box.label not in ids:  # appeared after the classes were listed
            dropped.append("unknown_class")
            continue
        inside = clip_to_source(transform.source_size, box.xmin, box.ymin, box.xmax, box.ymax)
        if inside is None:
            dropped.append(BOX_OUTSIDE_IMAGE)
            continue
        mapped = map_box(transform, inside.xmin, inside.ymin, inside.xmax, inside.ymax)
        if mapped is None:
            dropped.append("cropped_away")
            continue
        if inside.clipped:
            dropped.append(CLIPPED_TO_IMAGE)
        if box.area is not None:
            area = box.area * sx * sy * inside.kept_fraction * mapped.kept_fraction
        else:
            area = (mapped.xmax - mapped.xmin) * (mapped.ymax - mapped.ymin)
        objects.append(
            StoredObject(
                ymin=mapped.ymin / h,
                xmin=mapped.xmin / w,
                ymax=mapped.ymax / h,
                xmax=mapped.xmax / w,
                label=ids[box.label],
                class_name=box.label,
                difficult=box.difficult,
                truncated=box.truncated or inside.clipped or mapped.clipped,
                view=box.view,
                is_crowd=box.is_crowd,
                area=area,
            )
        )
    return objects, dropped


# -- in a conversion worker process (conversion/pool.py) -------------------------------------------
# The pool's functions live here, not in pool.py, so that unpickling them
# in a worker imports no more than this module does.

_worker_converter: Optional[Converter[Any]] = None


def install_converter(converter: Converter[Any]) -> None:
    """The pool's initializer: the converter every task of this process uses."""
    global _worker_converter  # pylint: disable=global-statement
    _worker_converter = converter


def convert_batch(batch: List[Any], label_names: List[str]) -> List[Output]:
    faults.fail_at("worker")  # test-only: none unless IMG2TFRECORD_FAULT is set
    convert = _worker_converter
    if convert is None:
        raise RuntimeError("install_converter has not run in this process")
    return convert.convert_all(batch, label_names)
