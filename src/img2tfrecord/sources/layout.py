"""Where a work item belongs: its class and, for the split layout, its split.

No Beam import: conversion worker processes (conversion/pool.py) load
this module, and start faster without Beam.
"""

from __future__ import annotations

import os
from typing import Iterable, List, Optional, Sequence, Tuple, Union

from img2tfrecord.model import DetectionPlacement, ErrorRow, SkippedEntry, WorkItem, error_row
from img2tfrecord.schemas.output_files import MANIFEST_FILE, RUN_FOLDER_PREFIX, SUCCESS_FILE
from img2tfrecord.sources.split_folders import split_of_folder

LAYOUT_CLASS = "class"  # SRC/<class>/<file>
LAYOUT_SPLIT = "split"  # SRC/<split>/<class>/<file>
LAYOUT_MANIFEST = "manifest"  # label and split come from the rows of a CSV/JSONL manifest
LAYOUT_DETECTION = "detection"  # split and boxes come from annotations (VOC, COCO, a manifest of boxes)
LAYOUTS = (LAYOUT_CLASS, LAYOUT_SPLIT)
UNLISTABLE = "unlistable"  # the reason of a folder of the input that cannot be listed


def is_text(name: str) -> bool:
    """True when ``name`` is valid UTF-8 text (a local name of other bytes holds surrogates)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable(name: str) -> str:
    """``name`` as one line of text: bytes that are not UTF-8 shown as ``\\xNN``, line breaks as ``\\n``/``\\r``.

    Local names and tar member names carry such bytes as surrogates; never raises.
    """
    try:
        text = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate that stands for no byte (e.g. from a manifest): \udNNN
        text = name.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\n", "\\n").replace("\r", "\\r")


class PlacementError(ValueError):
    """A file that is not inside a class folder of the expected layout."""

    reason = "no_class_folder"


def parse_relpath(relpath: str, layout: str) -> Tuple[Optional[str], str]:
    """``(split folder or None, class name)`` of a file, or PlacementError."""
    parts = relpath.split("/")
    if layout == LAYOUT_SPLIT:
        if len(parts) < 3:
            raise PlacementError(f"{relpath!r} is not inside SRC/<split>/<class>/")
        split = split_of_folder(parts[0])
        if split is None:
            raise PlacementError(f"{parts[0]!r} is not a split folder (train, validation/val, test)")
        return split, parts[1]
    if len(parts) < 2:
        raise PlacementError(f"{relpath!r} is not inside a class folder SRC/<class>/")
    return None, parts[0]


def class_of(relpath: str, layout: str) -> Optional[str]:
    try:
        return parse_relpath(relpath, layout)[1]
    except PlacementError:
        return None


def placement(source: WorkItem, layout: str) -> Tuple[Optional[str], Optional[str]]:
    """``(split or None, class name)`` of any source: from a manifest row, else from its relpath.

    The class name is None for a row of an unlabeled manifest and for a detection image.
    """
    if isinstance(source.row, DetectionPlacement):
        return source.row.split, None
    if source.row is not None:
        return source.row.split, source.row.label
    return parse_relpath(source.relpath, layout)


BAD_NAME = "file name is not valid UTF-8; rename it (e.g. with convmv) to convert it"
# Files and folders that operating systems, file managers and NAS boxes leave next to
# pictures (compared lower-case). "@eadir" is where Synology keeps thumbnails of every
# photo: JPEGs that would otherwise become duplicate records.
_JUNK_NAMES = {
    "thumbs.db",
    "ehthumbs.db",
    "ehthumbs_vista.db",
    "desktop.ini",
    "icon\r",
    "__macosx",
    "@eadir",
    "$recycle.bin",
    "system volume information",
    "lost+found",
}


def relative_path(base: str, path: str) -> str:
    """``path`` relative to the input root ``base`` (which ends with a separator)."""
    if not path.startswith(base):
        raise ValueError(f"{path!r} is not under the input root {base!r}")
    return path[len(base) :].lstrip("/")


def is_junk(relpath: str) -> bool:
    if relpath.startswith(".") or "/." in relpath:  # a hidden file or folder at any depth
        return True
    return not _JUNK_NAMES.isdisjoint(relpath.lower().split("/"))


# An earlier output inside an input folder: the files and folder that mark it (schemas/output_files.py).
OUTPUT_MARKERS = (MANIFEST_FILE, SUCCESS_FILE, RUN_FOLDER_PREFIX + "*")


def marks_output(name: str, is_folder: bool = False) -> bool:
    """True for a folder entry that makes its folder an img2tfrecord output: a ``dataset.json`` or
    ``_SUCCESS`` file, or a run's ``.tmp-run-*`` staging folder."""
    return name.startswith(RUN_FOLDER_PREFIX) if is_folder else name in (MANIFEST_FILE, SUCCESS_FILE)


def output_folder_of(relpath: str) -> Optional[str]:
    """The folder (relative to the input root, ``""`` for the root) that the listed file ``relpath``
    marks as an img2tfrecord output, or None."""
    parts = relpath.split("/")
    for depth, part in enumerate(parts[:-1]):
        if marks_output(part, is_folder=True):
            return "/".join(parts[:depth])
    return "/".join(parts[:-1]) if marks_output(parts[-1]) else None


def output_folders(relpaths: Iterable[str]) -> Tuple[str, ...]:
    """The folders of a listing that hold an img2tfrecord output, sorted, none inside another.

    Their files are never inputs: an output written into its input folder must not become a class.
    """
    found = {folder for folder in map(output_folder_of, relpaths) if folder is not None}
    return tuple(sorted(f for f in found if not any(g != f and in_folders(f, (g,)) for g in found)))


def in_folders(relpath: str, folders: Sequence[str]) -> bool:
    """True when ``relpath`` is one of ``folders`` or lies inside one (``""`` holds everything)."""
    return any(not folder or relpath == folder or relpath.startswith(folder + "/") for folder in folders)


def folder_entry(
    base: str, path: str, size: int, outputs: Sequence[str] = ()
) -> Union[None, WorkItem, SkippedEntry, ErrorRow]:
    """One listed file of an input folder: a work item, junk to skip (its printable relpath), a
    ``bad_name`` error row (a local name that is not UTF-8: records and errors.jsonl hold names as text),
    or None for a file inside one of the ``outputs`` folders (:func:`output_folders`): not an input."""
    relpath = relative_path(base, path)
    if outputs and in_folders(relpath, outputs):
        return None
    if is_junk(relpath):
        return SkippedEntry(printable(relpath))
    if relpath.endswith("/"):
        return unlistable_row(path, relpath)
    if not is_text(path):
        return error_row(printable(path), printable(relpath), "bad_name", BAD_NAME)
    return WorkItem(path, relpath, size)


def unlistable_row(path: str, relpath: str) -> ErrorRow:
    """The error row of a folder of a local input that cannot be listed (``relpath`` ends with ``/``): whatever
    it holds is no input, so it is one rejected input, counted against the error budget."""
    folder = path.rstrip("/") or "/"
    try:
        os.listdir(folder)
        why = "it could not be listed when the run started"
    except OSError as e:
        why = (e.strerror or type(e).__name__).lower()
    message = (
        f"folder cannot be listed ({why}): its files are not inputs; make it readable, then convert again "
        "(--append converts its files)"
    )
    return error_row(printable(folder), printable(relpath), UNLISTABLE, message)


def folder_classes(rows: Iterable[ErrorRow], layout: str) -> List[str]:
    """The classes of the unlistable folders among ``rows`` (``unlistable_row``): a class folder that
    cannot be listed is still a class, so its label id does not depend on its permissions."""
    found = set()
    for row in rows:
        name = class_of(row["relpath"], layout) if row["reason"] == UNLISTABLE else None
        if name:
            found.add(name)
    return sorted(found)


def classes_of_file(source: WorkItem, layout: str):
    """``[class name]`` of a work item (a detection image: its boxes' classes), or ``[]`` when it has none.

    The label map is built from these.
    """
    if isinstance(source.row, DetectionPlacement):
        return sorted({box.label for box in source.row.annotation.boxes})
    try:
        name = placement(source, layout)[1]
    except PlacementError:
        name = None
    return [name] if name is not None else []


def class_names(items: Iterable[WorkItem], layout: str) -> List[str]:
    """The sorted class names of ``items``: the label map the pipeline's class pass builds from them."""
    return sorted({name for item in items for name in classes_of_file(item, layout)})
