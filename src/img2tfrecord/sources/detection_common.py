"""What the detection annotation formats share: their files, paths relative to the input, and checked boxes.

Every box becomes a :class:`~img2tfrecord.model.Box` in source pixels, as
continuous edges with the origin at the top-left corner of the top-left
pixel; a box that cannot be used is a :class:`~img2tfrecord.model.DroppedBox`
of its image (:func:`checked_box`).
"""

from __future__ import annotations

import math
import os
from typing import Any, Callable, List, Sequence, Tuple, Union

from img2tfrecord import storage
from img2tfrecord.model import Box, DroppedBox, ErrorRow, WorkItem
from img2tfrecord.sources.files import open_raw, read_capped
from img2tfrecord.sources.layout import relative_path

Output = Union[WorkItem, ErrorRow]
Reader = Callable[[str, int], bytes]  # (path, limit) -> the bytes of an annotation file
Exists = Callable[[str], bool]


class AnnotationError(ValueError):
    """An annotation file that cannot be read as one (malformed XML or JSON, a forbidden DTD)."""


# ---------------------------------------------------------------------------
# Files.


def _is_uri(path: str) -> bool:
    return "://" in path


def list_files(pattern: str) -> List[str]:
    """Sorted paths matching a glob, local or on any Beam filesystem."""
    if not _is_uri(pattern):
        import glob

        return sorted(p for p in glob.glob(pattern) if os.path.isfile(p))
    return sorted(m.path for m in storage.beam_filesystems().match([pattern])[0].metadata_list)


def exists(path: str) -> bool:
    if not _is_uri(path):
        return os.path.isfile(path)
    return storage.beam_filesystems().exists(path)


def read_annotation_file(path: str, limit: int) -> bytes:
    with open_raw(path) as f:
        return read_capped(f, limit)


def join(directory: str, name: str) -> str:
    """``name`` (relative, with ``/``) under ``directory``, local or URI."""
    return directory.rstrip("/") + "/" + name.lstrip("/")


def rel(base: str, path: str) -> str:
    """``path`` relative to the input root ``base``, or (outside it) :func:`outside_relpath`."""
    if path.startswith(base):
        return relative_path(base, path)
    return outside_relpath(path)


def outside_relpath(path: str) -> str:
    """The relpath of an annotated image outside the input root: its path without scheme or leading ``/``."""
    return path.split("://", 1)[-1].lstrip("/")


# ---------------------------------------------------------------------------
# Boxes.


def finite_number(value: Any) -> float:
    """``float(value)``; ValueError when it is not a finite number."""
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{value!r} is not finite")
    return number


def checked_box(label: str, xmin: Any, ymin: Any, xmax: Any, ymax: Any, **extra: Any) -> Union[Box, DroppedBox]:
    """A box from four edge values, or why it cannot be one (``bad_box``, ``empty_box``, ``bad_label``)."""
    if not label or "\n" in label or "\r" in label:
        return DroppedBox(label, "bad_label", f"class name {label!r} is empty or has a line break")
    try:
        x0, y0, x1, y1 = (finite_number(v) for v in (xmin, ymin, xmax, ymax))
    except (TypeError, ValueError) as e:
        return DroppedBox(label, "bad_box", f"box coordinates are not numbers: {e}")
    if x0 >= x1 or y0 >= y1:
        return DroppedBox(label, "empty_box", f"box ({x0:g}, {y0:g}, {x1:g}, {y1:g}) has xmin >= xmax or ymin >= ymax")
    return Box(label, x0, y0, x1, y1, **extra)


def split_boxes(found: Sequence[Union[Box, DroppedBox]]) -> Tuple[Tuple[Box, ...], Tuple[DroppedBox, ...]]:
    """``(boxes, dropped boxes)`` of ``found``, each in its order."""
    return (
        tuple(b for b in found if isinstance(b, Box)),
        tuple(b for b in found if isinstance(b, DroppedBox)),
    )
