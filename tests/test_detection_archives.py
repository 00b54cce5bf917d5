"""Detection inputs inside zip / tar / tar.gz archives: the records, splits and error rows of the same tree
converted from a folder (the writers of helpers/detection_inputs.py draw the pictures and write the annotations)."""

from __future__ import annotations

import json
import os
import zipfile
from typing import Dict, List, Tuple

import pytest
from conftest import IN_MEMORY, convert, manifest_doc, shard_digests
from gcs_emulator import gcs_fixture, upload_file  # noqa: F401 - the gcs fixture
from helpers.cli import run_in_process
from helpers.detection_inputs import (
    RECTS,
    RESIZE,
    VOC_TOP,
    H,
    W,
    pack,
    picture,
    write_bad_voc,
    write_coco,
    write_csv,
    write_voc_tar_with_link_and_twin,
)
from helpers.detection_outputs import check_boxes_frame_rectangles, records, values

from img2tfrecord.schemas import features as keys


def error_rows(output: str) -> List[Tuple[str, str]]:
    with open(os.path.join(output, "errors.jsonl")) as f:
        return sorted((row["relpath"], row["reason"]) for row in map(json.loads, f))


def facts(output: str) -> dict:
    """What dataset.json says of the records (splits: counts, boxes, shards and their sha256) and the inputs."""
    doc = manifest_doc(output)
    return {key: doc[key] for key in ("task", "labels", "accounting", "splits")}


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


def converted(source: str, output: str, *extra: str) -> str:
    proc = convert(source, output, *extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return output


# ---------------------------------------------------------------------------
# Pascal VOC: image sets, bad annotations, and every archive kind.


@pytest.fixture(scope="module")
def voc_tree(tmp_path_factory) -> str:
    base = str(tmp_path_factory.mktemp("voc"))
    write_bad_voc(os.path.join(base, *VOC_TOP.split("/")))
    return base


@pytest.fixture(scope="module")
def voc_folder_output(voc_tree, tmp_path_factory) -> str:
    out = converted(os.path.join(voc_tree, *VOC_TOP.split("/")), str(tmp_path_factory.mktemp("voc-out") / "o"), *RESIZE)
    doc = manifest_doc(out)
    acc = doc["accounting"]
    assert doc["task"] == "detection" and set(doc["splits"]) == {"train", "validation"}
    assert acc["rejected_by_reason"] == {"bad_annotation": 2, "not_found": 1, "not_in_image_sets": 1}
    assert acc["inputs"] == 9 and acc["written"] == 5 and acc["inputs"] == acc["written"] + acc["rejected"]
    assert doc["splits"]["train"]["num_examples"] == 2 and doc["splits"]["validation"]["num_examples"] == 3
    return out


# (archive name, folder packed into it (relative to the tree), top folder inside the archive, VOC root in it)
VOC_ARCHIVES = [
    ("voc.zip", "", "", VOC_TOP + "/"),  # VOCdevkit/VOC2012/... as it is
    ("voc.tar", VOC_TOP, "", ""),  # the VOC root's content at the top of the archive
    ("voc.tar.gz", VOC_TOP, "./data", "data/"),  # under another top folder, names starting with ./
]


@pytest.mark.parametrize("name,packed,top,root", VOC_ARCHIVES, ids=[a[0] for a in VOC_ARCHIVES])
def test_voc_archive_gives_the_records_of_its_folder(voc_tree, voc_folder_output, tmp_path, name, packed, top, root):
    archive = pack(os.path.join(voc_tree, *packed.split("/")) if packed else voc_tree, str(tmp_path / name), top)
    out = converted(archive, str(tmp_path / "out"), *RESIZE)
    assert_same_conversion(out, voc_folder_output)
    assert sum(check_boxes_frame_rectangles(e, skip_truncated=True) for e in records(out)) == 4 * len(RECTS)
    with open(os.path.join(out, "errors.jsonl")) as f:
        rows = {row["relpath"]: row for row in map(json.loads, f)}
    assert rows["JPEGImages/missing.jpg"]["path"] == f"{archive}!/{root}JPEGImages/missing.jpg"
    assert "DTD" in rows["Annotations/bomb.xml"]["error"]


def test_voc_members_that_cannot_be_read_are_rejected_by_name(tmp_path):
    """A link, a name held twice: the annotation naming it is rejected; the rest converts."""
    archive = write_voc_tar_with_link_and_twin(str(tmp_path))
    out = converted(archive, str(tmp_path / "out"), "--task", "detection")
    acc = manifest_doc(out)["accounting"]
    assert acc["written"] == 1 and acc["inputs"] == 3
    assert error_rows(out) == [
        ("JPEGImages/linked.jpg", "unsupported_member"),
        ("JPEGImages/twice.jpg", "duplicate_member"),
    ]


# ---------------------------------------------------------------------------
# COCO: splits from several JSON files.


def test_coco_archive_with_split_files_gives_the_records_of_its_folder(tmp_path):
    root = str(tmp_path / "coco")
    write_coco(root, {"a": 1, "b": 6, "c": 3, "d": 8})
    ann = os.path.join(root, "annotations")
    with open(os.path.join(ann, "instances_data.json")) as f:
        doc = json.load(f)
    os.remove(os.path.join(ann, "instances_data.json"))
    train = dict(doc, images=doc["images"][:3], annotations=[a for a in doc["annotations"] if a["image_id"] <= 3])
    train["images"].append({"id": 9, "file_name": "nowhere.jpg", "width": W, "height": H})  # no such image
    train["annotations"].append({"id": 98, "image_id": 42, "category_id": 10, "bbox": [1, 1, 5, 5]})  # unknown image
    train["annotations"].append({"id": 99, "image_id": 1, "category_id": 77, "bbox": [1, 1, 5, 5]})  # unknown class
    val = dict(doc, images=doc["images"][3:], annotations=[a for a in doc["annotations"] if a["image_id"] > 3])
    for name, part in (("instances_train2017.json", train), ("instances_val2017.json", val)):
        with open(os.path.join(ann, name), "w") as f:
            json.dump(part, f)
    folder_out = converted(root, str(tmp_path / "out-folder"), *RESIZE)
    archive = pack(root, str(tmp_path / "coco.tar"), "coco")
    out = converted(archive, str(tmp_path / "out-tar"), *RESIZE)
    assert_same_conversion(out, folder_out)
    doc = manifest_doc(out)
    assert {s: info["num_examples"] for s, info in doc["splits"].items()} == {"train": 3, "validation": 1}
    assert doc["accounting"]["rejected_by_reason"] == {"not_found": 1, "unknown_image": 1}
    assert doc["splits"]["train"]["dropped_boxes"] == {"unknown_category": 1}
    assert sum(check_boxes_frame_rectangles(e, skip_truncated=True) for e in records(out)) == 4 * len(RECTS)


def test_coco_json_over_the_image_limit_is_read_from_a_tar_gz(tmp_path):
    """A tar.gz carries its members' bytes, up to --max-file-mb for images; annotation files have their own limit."""
    root = str(tmp_path / "coco")
    write_coco(root, {"a": 1, "b": 6}, change=lambda doc: doc.update(info={"description": "x" * 40_000}))
    archive = pack(root, str(tmp_path / "coco.tgz"))
    out = converted(archive, str(tmp_path / "out"), "--max-file-mb", "0.02")  # 20 KB: the JSON is 40 KB
    acc = manifest_doc(out)["accounting"]
    assert manifest_doc(out)["task"] == "detection"
    assert acc["written"] == 2 and acc["inputs"] == 2


def test_task_detection_reads_any_coco_json_in_an_archive(tmp_path):
    root = str(tmp_path / "coco")
    write_coco(root, {"a": 1, "b": 6})
    os.rename(
        os.path.join(root, "annotations", "instances_data.json"), os.path.join(root, "annotations", "labels.json")
    )
    with open(os.path.join(root, "annotations", "broken.json"), "w") as f:
        f.write("{not json")
    archive = pack(root, str(tmp_path / "coco.zip"))
    out = converted(archive, str(tmp_path / "out"), "--task", "detection")
    acc = manifest_doc(out)["accounting"]
    assert acc["written"] == 2 and acc["rejected_by_reason"] == {"bad_annotation": 1} and acc["inputs"] == 3

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


def test_box_manifest_archive_gives_the_records_of_its_folder(tmp_path):
    root = str(tmp_path / "csv")
    extra = "images/none.jpg,,,,,\nimages/img0.jpg,bird,10,10,5,20\n,cat,1,2,3,4\nimages/gone.jpg,cat,1,2,3,4\n"
    manifest = write_csv(root, {"img0": 6, "img1": 1, "img2": 3, "img3": 1}, extra_rows=extra)
    with open(os.path.join(root, "images", "none.jpg"), "wb") as f:
        f.write(picture())
    splits = ("--splits", "train=0.5,test=0.5", "--seed", "5")
    folder_out = converted(manifest, str(tmp_path / "out-folder"), *RESIZE, *splits)
    archive = pack(root, str(tmp_path / "boxes.zip"), "export")
    out = converted(archive, str(tmp_path / "out-zip"), *RESIZE, *splits)
    assert_same_conversion(out, folder_out)
    acc = manifest_doc(out)["accounting"]
    assert acc["rejected_by_reason"] == {"bad_manifest_row": 1, "not_found": 1}
    assert acc["written"] == 5 and acc["inputs"] == 7


# ---------------------------------------------------------------------------
# Cloud Storage.


def test_gs_voc_archive_gives_the_records_of_the_local_one(gcs, voc_tree, voc_folder_output, tmp_path):
    archive = pack(voc_tree, str(tmp_path / "voc.zip"))
    source = gcs.url("detection", "voc.zip")
    upload_file(archive, source)
    out = str(tmp_path / "out")
    proc = run_in_process("convert", "--input", source, "--output", out, *RESIZE, *IN_MEMORY, "--no-analyze")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert facts(out) == facts(voc_folder_output)
    assert error_rows(out) == error_rows(voc_folder_output)
    assert shard_digests(out) == shard_digests(voc_folder_output)
