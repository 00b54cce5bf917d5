"""Conversions more than one test reads, each built once per session (``conftest.built_once``, shared by
the xdist workers): the same input with the same options is converted once. Tests that change an
output work on a copy."""

from __future__ import annotations

import json
import os
from typing import Callable, Dict, Tuple

from conftest import built_once

from helpers.detection_inputs import (
    RESIZE,
    VOC_TOP,
    H,
    W,
    pack,
    picture,
    write_bad_voc,
    write_coco,
    write_csv,
    write_voc,
    write_voc_tar_with_link_and_twin,
)
from helpers.shared_outputs import Converted, converted_once

# Conversions here run in one process: the worker pool is tested where it is the point.
ONE_PROCESS = ("--processes", "1")
# Random splits of a detection input: the plan and the run must assign each image alike.
DETECTION_SPLITS = ("--splits", "train=0.6,validation=0.2,test=0.2", "--seed", "11")


def conversion(tmp_path_factory, name: str, write_input: Callable[[str], str], *args: str) -> Converted:
    """``write_input(folder)`` -> the input path, converted once with ``args`` (``--no-analyze``, one process)."""
    run = converted_once(tmp_path_factory, name, write_input, *args, *ONE_PROCESS)
    assert run.proc.returncode == 0, run.proc.stderr[-3000:]
    return run


# ---------------------------------------------------------------------------
# Pascal VOC with bad annotations, image sets and an image in none (helpers/detection_inputs.write_bad_voc).


def bad_voc_tree(tmp_path_factory) -> str:
    """A folder holding ``VOCdevkit/VOC2012/``."""
    return built_once(
        tmp_path_factory, "bad-voc-tree", lambda path: write_bad_voc(os.path.join(path, *VOC_TOP.split("/")))
    )


# archive name -> (folder packed into it, relative to the tree; top folder inside the archive; VOC root in it)
BAD_VOC_ARCHIVES: Dict[str, Tuple[str, str, str]] = {
    "voc.zip": ("", "", VOC_TOP + "/"),  # VOCdevkit/VOC2012/... as it is
    "voc.tar": (VOC_TOP, "", ""),  # the VOC root's content at the top of the archive
    "voc.tar.gz": (VOC_TOP, "./data", "data/"),  # under another top folder, names starting with ./
}


def bad_voc(tmp_path_factory, kind: str = "folder") -> Converted:
    """The bad VOC tree's root (``folder``) or one of :data:`BAD_VOC_ARCHIVES`, converted with ``RESIZE``."""
    tree = bad_voc_tree(tmp_path_factory)

    def write_input(folder: str) -> str:
        if kind == "folder":
            return os.path.join(tree, *VOC_TOP.split("/"))
        packed, top, _ = BAD_VOC_ARCHIVES[kind]
        return pack(os.path.join(tree, *packed.split("/")) if packed else tree, os.path.join(folder, kind), top)

    return conversion(tmp_path_factory, f"bad-voc-{kind}", write_input, *RESIZE)


def voc_with_link_and_twin(tmp_path_factory) -> Converted:
    """``voc.tar`` of helpers/detection_inputs.write_voc_tar_with_link_and_twin, ``--task detection``, random splits."""
    return conversion(
        tmp_path_factory, "voc-link-twin", write_voc_tar_with_link_and_twin, "--task", "detection", *DETECTION_SPLITS
    )


# ---------------------------------------------------------------------------
# Pascal VOC of the eight EXIF orientations, PNG records, in every geometry.

ORIENTATIONS = range(1, 9)
GEOMETRIES: Dict[str, Tuple[str, ...]] = {
    "keep": (),
    "stretch": ("--image-size", "64x48", "--resize", "stretch"),
    "fit": ("--image-size", "64", "--resize", "fit"),
    "fill": ("--image-size", "64", "--resize", "fill"),
    "fill-wide": ("--image-size", "40x20", "--resize", "fill"),
}


def orientation_images() -> Dict[str, int]:
    return {f"o{o}": o for o in ORIENTATIONS}


def voc_orientations(tmp_path_factory, geometry: str) -> Converted:
    """The VOC folder of :func:`orientation_images`, PNG in ``geometry``, :data:`DETECTION_SPLITS`."""

    def write_input(folder: str) -> str:
        root = os.path.join(folder, "voc")
        write_voc(root, orientation_images())
        return root

    return conversion(
        tmp_path_factory,
        f"voc-orientations-{geometry}",
        write_input,
        "--format",
        "png",
        *GEOMETRIES[geometry],
        *DETECTION_SPLITS,
    )


# ---------------------------------------------------------------------------
# A manifest of boxes of the orientation images, with bad rows: a missing label and box (an image
# without boxes), an empty box, a row without a path and a missing image.

BOX_ROWS = "images/none.jpg,,,,,\nimages/o6.jpg,bird,10,10,5,20\n,cat,1,2,3,4\nimages/gone.jpg,cat,1,2,3,4\n"
BOX_SPLITS = ("--splits", "train=0.5,test=0.5", "--seed", "5")


def write_box_manifest(root: str) -> str:
    manifest = write_csv(root, orientation_images(), extra_rows=BOX_ROWS)
    with open(os.path.join(root, "images", "none.jpg"), "wb") as f:
        f.write(picture())
    return manifest


def box_manifest(tmp_path_factory, kind: str = "folder") -> Converted:
    """The manifest of boxes next to its images (``folder``) or ``boxes.zip`` of them under ``export/``,
    converted with ``RESIZE`` and :data:`BOX_SPLITS`."""

    def write_input(folder: str) -> str:
        manifest = write_box_manifest(os.path.join(folder, "csv"))
        if kind == "folder":
            return manifest
        return pack(os.path.dirname(manifest), os.path.join(folder, "boxes.zip"), "export")

    return conversion(tmp_path_factory, f"box-manifest-{kind}", write_input, *RESIZE, *BOX_SPLITS)


# ---------------------------------------------------------------------------
# COCO of the orientation images, split by its JSON files, with bad entries.

COCO_SPLITS = {"train": 6, "validation": 2, "test": 0}  # records per split file (the test file is malformed)


def write_split_coco(root: str) -> str:
    """``instances_train2017.json`` (o1..o6, an image that is not there, a box of an unknown image and
    one of an unknown category), ``instances_val2017.json`` (o7, o8) and a malformed ``instances_test2017.json``
    (every file names its split: one that names none would make the run ignore the files' splits)."""
    write_coco(root, orientation_images())
    ann = os.path.join(root, "annotations")
    with open(os.path.join(ann, "instances_data.json")) as f:
        doc = json.load(f)
    os.remove(os.path.join(ann, "instances_data.json"))
    n = COCO_SPLITS["train"]
    train = dict(doc, images=doc["images"][:n], annotations=[a for a in doc["annotations"] if a["image_id"] <= n])
    train["images"].append({"id": 99, "file_name": "nowhere.jpg", "width": W, "height": H})  # no such image
    train["annotations"].append({"id": 998, "image_id": 42, "category_id": 10, "bbox": [1, 1, 5, 5]})  # unknown image
    train["annotations"].append({"id": 999, "image_id": 1, "category_id": 77, "bbox": [1, 1, 5, 5]})  # unknown class
    val = dict(doc, images=doc["images"][n:], annotations=[a for a in doc["annotations"] if a["image_id"] > n])
    for name, part in (("instances_train2017.json", train), ("instances_val2017.json", val)):
        with open(os.path.join(ann, name), "w") as f:
            json.dump(part, f)
    with open(os.path.join(ann, "instances_test2017.json"), "w") as f:
        f.write("{not json")
    return root


def split_coco(tmp_path_factory, kind: str = "folder") -> Converted:
    """:func:`write_split_coco` as a folder or ``coco.tar`` (under ``coco/``), converted with ``RESIZE``."""

    def write_input(folder: str) -> str:
        root = write_split_coco(os.path.join(folder, "coco"))
        return root if kind == "folder" else pack(root, os.path.join(folder, kind), "coco")

    return conversion(tmp_path_factory, f"split-coco-{kind}", write_input, *RESIZE)
