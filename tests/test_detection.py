"""Detection end to end: VOC, COCO and box manifests in, TF OD API records out, boxes on their rectangles."""

from __future__ import annotations

import json
import os
from typing import List

import pytest
from conftest import convert, manifest_doc
from helpers.detection_inputs import (
    RECTS,
    H,
    W,
    picture,
    write_coco,
    write_csv,
    write_voc,
    write_voc_with_bad_annotations,
)
from helpers.detection_outputs import check_boxes_frame_rectangles, records, values

from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import labels as label_map
from img2tfrecord.schemas.example_proto import Example

ORIENTATIONS = range(1, 9)


def names(n: int) -> List[str]:
    return [f"img{i}" for i in range(n)]


GEOMETRY_CASES = [
    ("keep", ()),
    ("stretch", ("--image-size", "64x48", "--resize", "stretch")),
    ("fit", ("--image-size", "64", "--resize", "fit")),
    ("fill", ("--image-size", "64", "--resize", "fill")),
    ("fill-wide", ("--image-size", "40x20", "--resize", "fill")),
]


@pytest.mark.parametrize("case,options", GEOMETRY_CASES, ids=[c for c, _ in GEOMETRY_CASES])
def test_voc_boxes_frame_their_rectangles_after_orientation_and_resize(tmp_path, case, options):
    root = str(tmp_path / "voc")
    write_voc(root, {f"o{o}": o for o in ORIENTATIONS})
    out = str(tmp_path / "out")
    proc = convert(root, out, "--format", "png", *options)
    assert proc.returncode == 0, proc.stderr
    doc = manifest_doc(out)
    assert doc["task"] == "detection"
    assert doc["accounting"]["inputs"] == doc["accounting"]["written"] == 8
    found = records(out)
    assert len(found) == 8
    boxes = sum(check_boxes_frame_rectangles(e) for e in found)
    dropped = sum(sum(info["dropped_boxes"].values()) for info in doc["splits"].values())
    written = sum(sum(info["boxes_per_class"].values()) for info in doc["splits"].values())
    assert written == boxes and written + dropped == 8 * len(RECTS)
    if case.startswith("fill"):  # the crop removes the bird in the corner and cuts other boxes
        assert doc["splits"]["train"]["dropped_boxes"] == {"cropped_away": 8}
        assert any(1 in values(e, keys.OBJECT_TRUNCATED) for e in found)
    else:
        assert dropped == 0
    with open(os.path.join(out, label_map.LABEL_MAP_FILE)) as f:
        assert label_map.parse_label_map_pbtxt(f.read()) == {1: "bird", 2: "cat", 3: "dog"}
    ids = {"bird": 1, "cat": 2, "dog": 3}
    for e in found:
        texts = [t.decode() for t in values(e, keys.OBJECT_CLASS_TEXT)]
        assert values(e, keys.OBJECT_CLASS_LABEL) == [ids[t] for t in texts]


def _comparable(example: Example) -> tuple:
    keep = [k for k in keys.OBJECT_FEATURES] + [keys.IMAGE_ENCODED, keys.IMAGE_WIDTH, keys.IMAGE_HEIGHT]
    name = os.path.basename(values(example, keys.FILENAME)[0].decode())
    return name, tuple((k, tuple(round(v, 5) if isinstance(v, float) else v for v in values(example, k))) for k in keep)


def test_voc_coco_and_csv_give_the_same_records(tmp_path):
    images = {f"o{o}": o for o in (1, 3, 6, 8)}
    write_voc(str(tmp_path / "voc"), images)
    write_coco(str(tmp_path / "coco"), images)
    manifest = write_csv(str(tmp_path / "csv"), images)
    results = {}
    for name, source in (("voc", str(tmp_path / "voc")), ("coco", str(tmp_path / "coco")), ("csv", manifest)):
        out = str(tmp_path / f"out-{name}")
        proc = convert(source, out, "--image-size", "64", "--resize", "fit", "--format", "png")
        assert proc.returncode == 0, (name, proc.stderr)
        results[name] = sorted(_comparable(e) for e in records(out))
        assert manifest_doc(out)["task"] == "detection"
    assert results["voc"] == results["coco"] == results["csv"]
    assert len(results["voc"]) == 4


def test_bad_input_is_reported_and_accounted(tmp_path):
    root = str(tmp_path / "voc")
    write_voc_with_bad_annotations(root, {"good": 1})
    out = str(tmp_path / "out")
    proc = convert(root, out)
    assert proc.returncode == 0, proc.stderr
    doc = manifest_doc(out)
    acc = doc["accounting"]
    assert acc["inputs"] == 5 and acc["written"] == 2 and acc["rejected"] == 3
    assert acc["rejected_by_reason"] == {"bad_annotation": 2, "not_found": 1}
    assert doc["splits"]["train"]["dropped_boxes"] == {"box_outside_image": 1, "clipped_to_image": 1, "empty_box": 1}
    assert doc["splits"]["train"]["boxes_per_class"] == {"bird": 1, "cat": 2, "dog": 1}
    assert "boxes partly outside their image, clipped to it: 1 (clipped_to_image)" in proc.stdout
    (good,) = [e for e in records(out) if values(e, keys.OBJECT_CLASS_TEXT)]
    truncated = values(good, keys.OBJECT_TRUNCATED)
    assert truncated.count(1) == 1  # only the clipped box: the others are inside and VOC marks none truncated
    i = truncated.index(1)
    edges = [values(good, k)[i] for k in (keys.BBOX_XMIN, keys.BBOX_YMIN, keys.BBOX_XMAX, keys.BBOX_YMAX)]
    assert edges == pytest.approx([(W - 20) / W, (H - 30) / H, 1.0, 1.0])
    with open(os.path.join(out, "errors.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    assert any("DTD" in r["error"] for r in rows)

    out2 = str(tmp_path / "out2")
    proc = convert(root, out2, "--require-boxes")
    assert proc.returncode == 0, proc.stderr
    acc = manifest_doc(out2)["accounting"]
    assert acc["written"] == 1 and acc["rejected_by_reason"]["no_boxes"] == 1
    assert acc["inputs"] == acc["written"] + acc["rejected"]


def test_coco_bad_input(tmp_path):
    root = str(tmp_path / "coco")

    def add_bad_entries(doc):
        doc["annotations"].append({"id": 99, "image_id": 1, "category_id": 77, "bbox": [1, 1, 5, 5]})
        doc["annotations"].append({"id": 98, "image_id": 42, "category_id": 10, "bbox": [1, 1, 5, 5]})
        doc["images"].append({"id": 3, "file_name": "nowhere.jpg", "width": W, "height": H})

    write_coco(root, {"a": 1, "b": 1}, change=add_bad_entries)
    with open(os.path.join(root, "annotations", "instances_broken.json"), "w") as f:
        f.write("{not json")
    out = str(tmp_path / "out")
    proc = convert(root, out)
    assert proc.returncode == 0, proc.stderr
    acc = manifest_doc(out)["accounting"]
    assert acc["rejected_by_reason"] == {"bad_annotation": 1, "not_found": 1, "unknown_image": 1}
    assert acc["written"] == 2 and acc["inputs"] == 5
    dropped = manifest_doc(out)["splits"]["train"]["dropped_boxes"]
    assert dropped == {"unknown_category": 1}


def test_csv_bad_rows(tmp_path):
    root = str(tmp_path / "csv")
    extra = "images/none.jpg,,,,,\nimages/img0.jpg,bird,10,10,5,20\n,cat,1,2,3,4\n"
    manifest = write_csv(root, {"img0": 6, "img1": 1}, extra_rows=extra)
    with open(os.path.join(root, "images", "none.jpg"), "wb") as f:
        f.write(picture())
    out = str(tmp_path / "out")
    proc = convert(manifest, out, "--image-size", "64", "--resize", "fit", "--splits", "train=0.5,test=0.5")
    assert proc.returncode == 0, proc.stderr
    doc = manifest_doc(out)
    acc = doc["accounting"]
    assert acc["inputs"] == 4 and acc["written"] == 3 and acc["rejected_by_reason"] == {"bad_manifest_row": 1}
    dropped = {}
    for info in doc["splits"].values():
        for reason, n in info["dropped_boxes"].items():
            dropped[reason] = dropped.get(reason, 0) + n
    assert dropped == {"empty_box": 1}
    assert doc["labels"] == ["bird", "cat", "dog"]  # a class whose only box was dropped is not in the label map
