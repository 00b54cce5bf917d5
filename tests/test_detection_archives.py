"""Detection inputs inside zip / tar / tar.gz archives: the records, splits and error rows of the same tree
converted from a folder (the writers of helpers/detection_inputs.py draw the pictures and write the annotations)."""

from __future__ import annotations

import json
import os
import zipfile
from typing import Dict, List, Tuple

import pytest
from conftest import IN_MEMORY, shard_digests
from gcs_emulator import gcs_fixture, upload_file  # noqa: F401 - the gcs fixture
from helpers.cli import run_in_process
from helpers.detection_inputs import RECTS, RESIZE, pack, picture, write_coco
from helpers.detection_outputs import check_boxes_frame_rectangles, records, values
from helpers.shared_builds import (
    BAD_VOC_ARCHIVES,
    COCO_SPLITS,
    ONE_PROCESS,
    bad_voc,
    box_manifest,
    conversion,
    split_coco,
    voc_with_link_and_twin,
)

from img2tfrecord.readers.records import read_manifest
from img2tfrecord.schemas import features as keys


def error_rows(output: str) -> List[Tuple[str, str]]:
    with open(os.path.join(output, "errors.jsonl")) as f:
        return sorted((row["relpath"], row["reason"]) for row in map(json.loads, f))


def facts(output: str) -> tuple:
    """What dataset.json says of the records (splits: counts, boxes, shards and their sha256) and the inputs."""
    doc = read_manifest(output)
    return doc.task, doc.labels, doc.accounting, doc.splits


def records_by_name(output: str) -> Dict[str, tuple]:
    """image/filename -> (source_id, image bytes, every object feature) of every record."""
    found = {}
    for e in records(output):
        name = values(e, keys.FILENAME)[0].decode()
        assert name not in found
        found[name] = tuple(values(e, k) for k in (keys.SOURCE_ID, keys.IMAGE_ENCODED, *keys.OBJECT_FEATURES))
    return found


def assert_same_conversion(archived: str, folder: str) -> None:
    assert facts(archived) == facts(folder)
    assert error_rows(archived) == error_rows(folder)
    assert records_by_name(archived) == records_by_name(folder)
    assert shard_digests(archived) == shard_digests(folder) and shard_digests(folder)


# ---------------------------------------------------------------------------
# Pascal VOC: image sets, bad annotations, and every archive kind.


@pytest.fixture(scope="module")
def voc_folder_output(tmp_path_factory) -> str:
    out = bad_voc(tmp_path_factory).output
    doc = read_manifest(out)
    acc = doc.accounting
    assert doc.is_detection and set(doc.splits) == {"train", "validation"}
    assert acc.rejected_by_reason == {"bad_annotation": 2, "not_found": 1, "not_in_image_sets": 1}
    assert acc.inputs == 9 and acc.written == 5 and acc.inputs == acc.written + acc.rejected
    assert doc.splits["train"].num_examples == 2 and doc.splits["validation"].num_examples == 3
    return out


@pytest.mark.parametrize("name", list(BAD_VOC_ARCHIVES))
def test_voc_archive_gives_the_records_of_its_folder(tmp_path_factory, voc_folder_output, name):
    archived = bad_voc(tmp_path_factory, name)
    archive, out, root = archived.input, archived.output, BAD_VOC_ARCHIVES[name][2]
    assert_same_conversion(out, voc_folder_output)
    assert sum(check_boxes_frame_rectangles(e, skip_truncated=True) for e in records(out)) == 4 * len(RECTS)
    with open(os.path.join(out, "errors.jsonl")) as f:
        rows = {row["relpath"]: row for row in map(json.loads, f)}
    assert rows["JPEGImages/missing.jpg"]["path"] == f"{archive}!/{root}JPEGImages/missing.jpg"
    assert "DTD" in rows["Annotations/bomb.xml"]["error"]


def test_voc_members_that_cannot_be_read_are_rejected_by_name(tmp_path_factory):
    """A link, a name held twice: the annotation naming it is rejected; the rest converts."""
    out = voc_with_link_and_twin(tmp_path_factory).output
    acc = read_manifest(out).accounting
    assert acc.written == 1 and acc.inputs == 3
    assert error_rows(out) == [
        ("JPEGImages/linked.jpg", "unsupported_member"),
        ("JPEGImages/twice.jpg", "duplicate_member"),
    ]


# ---------------------------------------------------------------------------
# COCO: splits from several JSON files.


def test_coco_archive_with_split_files_gives_the_records_of_its_folder(tmp_path_factory):
    """helpers/shared_builds.write_split_coco as ``coco.tar``, under ``coco/``."""
    out = split_coco(tmp_path_factory, "coco.tar").output
    assert_same_conversion(out, split_coco(tmp_path_factory).output)
    doc = read_manifest(out)
    assert {s: info.num_examples for s, info in doc.splits.items()} == COCO_SPLITS
    assert doc.accounting.rejected_by_reason == {"bad_annotation": 1, "not_found": 1, "unknown_image": 1}
    assert doc.splits["train"].dropped_boxes == {"unknown_category": 1}
    assert sum(check_boxes_frame_rectangles(e, skip_truncated=True) for e in records(out)) == 8 * len(RECTS)


def write_coco_tgz(folder: str) -> str:
    """``coco.tgz``: a COCO JSON of any name (``labels.json``) twice the --max-file-mb below, and a malformed one."""
    root = os.path.join(folder, "coco")
    write_coco(root, {"a": 1, "b": 6}, change=lambda doc: doc.update(info={"description": "x" * 40_000}))
    os.rename(
        os.path.join(root, "annotations", "instances_data.json"), os.path.join(root, "annotations", "labels.json")
    )
    with open(os.path.join(root, "annotations", "broken.json"), "w") as f:
        f.write("{not json")
    return pack(root, os.path.join(folder, "coco.tgz"))


@pytest.fixture(scope="module")
def coco_tgz(tmp_path_factory) -> str:
    """:func:`write_coco_tgz` converted with ``--task detection --max-file-mb 0.02`` (20 KB: the JSON is 40 KB)."""
    return conversion(
        tmp_path_factory, "archives-coco-tgz", write_coco_tgz, "--task", "detection", "--max-file-mb", "0.02"
    ).output


def test_coco_json_over_the_image_limit_is_read_from_a_tar_gz(coco_tgz):
    """A tar.gz carries its members' bytes, up to --max-file-mb for images; annotation files have their own limit."""
    acc = read_manifest(coco_tgz).accounting
    assert read_manifest(coco_tgz).is_detection
    assert acc.written == 2


def test_task_detection_reads_any_coco_json_in_an_archive(coco_tgz, tmp_path):
    acc = read_manifest(coco_tgz).accounting
    assert acc.written == 2 and acc.rejected_by_reason == {"bad_annotation": 1} and acc.inputs == 3

    flowers = str(tmp_path / "flowers.zip")
    with zipfile.ZipFile(flowers, "w") as z:
        z.writestr("rose/a.jpg", picture())
    proc = run_in_process(
        "convert", "--input", flowers, "--output", str(tmp_path / "out2"), "--task", "detection", *IN_MEMORY
    )
    assert proc.returncode == 2
    assert "--task detection" in proc.stderr and "holds neither" in proc.stderr


# ---------------------------------------------------------------------------
# A manifest of boxes next to its images.


def test_box_manifest_archive_gives_the_records_of_its_folder(tmp_path_factory):
    out = box_manifest(tmp_path_factory, "zip").output
    assert_same_conversion(out, box_manifest(tmp_path_factory, "folder").output)
    acc = read_manifest(out).accounting
    assert acc.rejected_by_reason == {"bad_manifest_row": 1, "not_found": 1}
    assert acc.written == 9 and acc.inputs == 11


# ---------------------------------------------------------------------------
# Cloud Storage.


def test_gs_voc_archive_gives_the_records_of_the_local_one(gcs, tmp_path_factory, voc_folder_output, tmp_path):
    source = gcs.url("detection", "voc.zip")
    upload_file(bad_voc(tmp_path_factory, "voc.zip").input, source)
    out = str(tmp_path / "out")
    proc = run_in_process(
        "convert", "--input", source, "--output", out, *RESIZE, *IN_MEMORY, "--no-analyze", *ONE_PROCESS
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert facts(out) == facts(voc_folder_output)
    assert error_rows(out) == error_rows(voc_folder_output)
    assert shard_digests(out) == shard_digests(voc_folder_output)
