"""Detection end to end: VOC, COCO and box manifests in, TF OD API records out, boxes on their rectangles."""

from __future__ import annotations

import json
import os

import pytest
from conftest import convert
from helpers.detection_inputs import RECTS, H, W, write_voc_with_bad_annotations
from helpers.detection_outputs import check_boxes_frame_rectangles, records, values
from helpers.shared_builds import GEOMETRIES, ONE_PROCESS, ORIENTATIONS, box_manifest, split_coco, voc_orientations

from img2tfrecord.readers.records import read_manifest
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import labels as label_map
from img2tfrecord.schemas.dataset_json import DatasetManifest
from img2tfrecord.schemas.example_proto import Example


@pytest.mark.parametrize("case", list(GEOMETRIES))
def test_voc_boxes_frame_their_rectangles_after_orientation_and_resize(tmp_path_factory, case):
    out = voc_orientations(tmp_path_factory, case).output
    doc = read_manifest(out)
    assert doc.is_detection
    assert doc.accounting.inputs == doc.accounting.written == 8
    found = records(out)
    assert len(found) == 8
    boxes = sum(check_boxes_frame_rectangles(e) for e in found)
    dropped = sum(sum(info.dropped_boxes.values()) for info in doc.splits.values())
    written = sum(sum(info.boxes_per_class.values()) for info in doc.splits.values())
    assert written == boxes and written + dropped == 8 * len(RECTS)
    if case.startswith("fill"):  # the crop removes the bird in the corner and cuts other boxes
        assert dropped_boxes(doc) == {"cropped_away": 8}
        assert any(1 in values(e, keys.OBJECT_TRUNCATED) for e in found)
    else:
        assert dropped == 0
    with open(os.path.join(out, label_map.LABEL_MAP_FILE)) as f:
        assert label_map.parse_label_map_pbtxt(f.read()) == {1: "bird", 2: "cat", 3: "dog"}
    ids = {"bird": 1, "cat": 2, "dog": 3}
    for e in found:
        texts = [t.decode() for t in values(e, keys.OBJECT_CLASS_TEXT)]
        assert values(e, keys.OBJECT_CLASS_LABEL) == [ids[t] for t in texts]


def dropped_boxes(doc: DatasetManifest) -> dict:
    """reason -> boxes dropped, over every split."""
    dropped: dict = {}
    for info in doc.splits.values():
        for reason, n in info.dropped_boxes.items():
            dropped[reason] = dropped.get(reason, 0) + n
    return dropped


def _comparable(example: Example) -> tuple:
    keep = [k for k in keys.OBJECT_FEATURES] + [keys.IMAGE_ENCODED, keys.IMAGE_WIDTH, keys.IMAGE_HEIGHT]
    name = os.path.basename(values(example, keys.FILENAME)[0].decode())
    return name, tuple((k, tuple(round(v, 5) if isinstance(v, float) else v for v in values(example, k))) for k in keep)


def test_voc_coco_and_csv_give_the_same_records(tmp_path_factory):
    """The same images and boxes as VOC, COCO (split files, bad entries) and a box manifest (bad rows) give the
    same records: the bad entries and rows change no other record (test_coco_bad_input, test_csv_bad_rows)."""
    outputs = {
        "voc": voc_orientations(tmp_path_factory, "fit").output,
        "coco": split_coco(tmp_path_factory).output,
        "csv": box_manifest(tmp_path_factory).output,
    }
    results = {}
    for name, out in outputs.items():
        results[name] = sorted(_comparable(e) for e in records(out))
        assert read_manifest(out).is_detection
    (no_boxes,) = [r for r in results["csv"] if r[0] == "none.jpg"]  # the manifest's image without boxes
    results["csv"].remove(no_boxes)
    assert results["voc"] == results["coco"] == results["csv"]
    assert [name for name, _ in results["voc"]] == [f"o{o}.jpg" for o in ORIENTATIONS]


def test_bad_input_is_reported_and_accounted(tmp_path):
    root = str(tmp_path / "voc")
    write_voc_with_bad_annotations(root, {"good": 1})
    out = str(tmp_path / "out")
    proc = convert(root, out, *ONE_PROCESS)
    assert proc.returncode == 0, proc.stderr
    doc = read_manifest(out)
    acc = doc.accounting
    assert acc.inputs == 5 and acc.written == 2 and acc.rejected == 3
    assert acc.rejected_by_reason == {"bad_annotation": 2, "not_found": 1}
    assert doc.splits["train"].dropped_boxes == {"box_outside_image": 1, "clipped_to_image": 1, "empty_box": 1}
    assert doc.splits["train"].boxes_per_class == {"bird": 1, "cat": 2, "dog": 1}
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
    proc = convert(root, out2, "--require-boxes", *ONE_PROCESS)
    assert proc.returncode == 0, proc.stderr
    acc = read_manifest(out2).accounting
    assert acc.written == 1 and acc.rejected_by_reason["no_boxes"] == 1
    assert acc.inputs == acc.written + acc.rejected


def test_coco_bad_input(tmp_path_factory):
    """helpers/shared_builds.write_split_coco: an image that is not there, boxes of an unknown image and
    category, a malformed JSON file."""
    doc = read_manifest(split_coco(tmp_path_factory).output)
    acc = doc.accounting
    assert acc.rejected_by_reason == {"bad_annotation": 1, "not_found": 1, "unknown_image": 1}
    assert acc.written == 8 and acc.inputs == 11
    assert dropped_boxes(doc) == {"unknown_category": 1}


def test_csv_bad_rows(tmp_path_factory):
    """helpers/shared_builds.BOX_ROWS: an image without boxes, an empty box, a row without a path, a missing image."""
    doc = read_manifest(box_manifest(tmp_path_factory).output)
    acc = doc.accounting
    assert acc.inputs == 11 and acc.written == 9
    assert acc.rejected_by_reason == {"bad_manifest_row": 1, "not_found": 1}
    assert dropped_boxes(doc) == {"empty_box": 1}
    assert doc.labels == ("bird", "cat", "dog")
