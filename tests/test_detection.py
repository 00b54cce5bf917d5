"""Detection end to end: VOC, COCO and box manifests in, TF OD API records out, boxes on their rectangles."""

from __future__ import annotations

import io
import json
import os
from typing import Callable, Dict, List, Optional, Tuple

import pytest
from conftest import convert, manifest_doc
from PIL import Image

from img2tfrecord.readers import records as framing
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import labels as label_map
from img2tfrecord.schemas.example_proto import Example

W, H = 160, 120  # the stored pixel array of every generated image (before EXIF orientation)
BACKGROUND = (128, 128, 128)
RED, GREEN, BLUE = (255, 0, 0), (0, 255, 0), (0, 0, 255)
# Rectangles in the stored pixel array, as pixel edges (x0, y0, x1, y1).
RECTS: Dict[str, Tuple[Tuple[int, int, int, int], Tuple[int, int, int]]] = {
    "bird": ((2, 2, 14, 12), GREEN),  # in a corner: the fill crop removes it
    "cat": ((20, 15, 80, 75), RED),
    "dog": ((100, 40, 150, 110), BLUE),
}
ORIENTATIONS = range(1, 9)
MARGIN = 3  # stored pixels inside / outside an edge where the colour is checked


def picture(orientation: int = 1) -> bytes:
    img = Image.new("RGB", (W, H), BACKGROUND)
    for (x0, y0, x1, y1), color in RECTS.values():
        img.paste(color, (x0, y0, x1, y1))
    exif = Image.Exif()
    exif[0x0112] = orientation
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=100, exif=exif.tobytes())
    return out.getvalue()


def names(n: int) -> List[str]:
    return [f"img{i}" for i in range(n)]


def write_voc(root: str, images: Dict[str, int], extra_objects: str = "") -> None:
    os.makedirs(os.path.join(root, "JPEGImages"))
    os.makedirs(os.path.join(root, "Annotations"))
    for name, orientation in images.items():
        with open(os.path.join(root, "JPEGImages", name + ".jpg"), "wb") as f:
            f.write(picture(orientation))
        objects = "".join(
            f"<object><name>{label}</name><truncated>0</truncated><difficult>0</difficult>"
            f"<bndbox><xmin>{x0 + 1}</xmin><ymin>{y0 + 1}</ymin><xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object>"
            for label, ((x0, y0, x1, y1), _) in RECTS.items()
        )
        xml = (
            f"<annotation><filename>{name}.jpg</filename><size><width>{W}</width><height>{H}</height>"
            f"<depth>3</depth></size>{objects}{extra_objects}</annotation>"
        )
        with open(os.path.join(root, "Annotations", name + ".xml"), "w") as f:
            f.write(xml)


def write_coco(root: str, images: Dict[str, int], change: Optional[Callable[[dict], None]] = None) -> None:
    """A COCO folder of ``images`` (name -> EXIF orientation) and their boxes; ``change`` edits the JSON first."""
    os.makedirs(os.path.join(root, "annotations"))
    os.makedirs(os.path.join(root, "images"))
    doc: Dict[str, list] = {"images": [], "annotations": [], "categories": []}
    ids = {label: 10 + i for i, label in enumerate(RECTS)}  # COCO ids need not start at 1
    doc["categories"] = [{"id": i, "name": label} for label, i in ids.items()]
    for image_id, (name, orientation) in enumerate(images.items(), 1):
        with open(os.path.join(root, "images", name + ".jpg"), "wb") as f:
            f.write(picture(orientation))
        doc["images"].append({"id": image_id, "file_name": name + ".jpg", "width": W, "height": H})
        for label, ((x0, y0, x1, y1), _) in RECTS.items():
            doc["annotations"].append(
                {
                    "id": len(doc["annotations"]) + 1,
                    "image_id": image_id,
                    "category_id": ids[label],
                    "bbox": [x0, y0, x1 - x0, y1 - y0],
                    "area": (x1 - x0) * (y1 - y0),
                    "iscrowd": 0,
                }
            )
    if change is not None:
        change(doc)
    with open(os.path.join(root, "annotations", "instances_data.json"), "w") as f:
        json.dump(doc, f)


def write_csv(root: str, images: Dict[str, int], extra_rows: str = "") -> str:
    os.makedirs(os.path.join(root, "images"))
    lines = ["path,label,xmin,ymin,xmax,ymax"]
    for name, orientation in images.items():
        with open(os.path.join(root, "images", name + ".jpg"), "wb") as f:
            f.write(picture(orientation))
        for label, ((x0, y0, x1, y1), _) in RECTS.items():
            lines.append(f"images/{name}.jpg,{label},{x0},{y0},{x1},{y1}")
    path = os.path.join(root, "boxes.csv")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n" + extra_rows)
    return path


def records(output: str) -> List[Example]:
    doc = framing.read_manifest(output)
    out = []
    for split in doc.splits:
        for shard, _ in framing.shard_paths(output, doc, split):
            for _, _, raw in framing.iter_records(shard):
                example = Example()
                example.ParseFromString(raw)
                out.append(example)
    return out


def values(example: Example, key: str) -> list:
    feature = example.features.feature[key]
    kind = feature.WhichOneof("kind")
    return list(getattr(feature, kind).value) if kind else []


def is_color(pixel: Tuple[int, ...], color: Tuple[int, int, int]) -> bool:
    return all(abs(p - c) < 70 for p, c in zip(pixel, color))


def check_boxes_frame_rectangles(example: Example, skip_truncated: bool = False) -> int:
    """Every stored box's edges: its colour just inside, another just outside (unless at the border).

    ``skip_truncated``: leave out boxes marked truncated (a box of the annotation that was partly
    outside its image frames no drawn rectangle). -> the number of boxes checked.
    """
    img = Image.open(io.BytesIO(values(example, keys.IMAGE_ENCODED)[0])).convert("RGB")
    w, h = img.size
    checked = 0
    boxes = zip(*(values(example, k) for k in (keys.BBOX_XMIN, keys.BBOX_YMIN, keys.BBOX_XMAX, keys.BBOX_YMAX)))
    truncated = values(example, keys.OBJECT_TRUNCATED)
    for (x0, y0, x1, y1), text, cut in zip(boxes, values(example, keys.OBJECT_CLASS_TEXT), truncated):
        if skip_truncated and cut:
            continue
        color = RECTS[text.decode()][1]
        assert 0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1
        px0, py0, px1, py1 = x0 * w, y0 * h, x1 * w, y1 * h
        cx, cy = (px0 + px1) / 2, (py0 + py1) / 2
        inside = [(px0 + MARGIN, cy), (px1 - MARGIN, cy), (cx, py0 + MARGIN), (cx, py1 - MARGIN)]
        outside = [(px0 - MARGIN, cy), (px1 + MARGIN, cy), (cx, py0 - MARGIN), (cx, py1 + MARGIN)]
        thin = (px1 - px0 < 2 * MARGIN + 2, py1 - py0 < 2 * MARGIN + 2)  # a band left by the crop: no inside
        for i, (x, y) in enumerate(inside):
            if thin[i // 2]:
                continue
            assert is_color(img.getpixel((int(x), int(y))), color), (text, (x, y), img.getpixel((int(x), int(y))))
        for x, y in outside:
            if 0 <= x < w and 0 <= y < h:
                assert not is_color(img.getpixel((int(x), int(y))), color), (text, (x, y))
        checked += 1
    return checked


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


def write_voc_with_bad_annotations(root: str, images: Dict[str, int]) -> None:
    """A VOC folder of ``images`` whose boxes include two bad ones and one partly outside the image, plus a
    malformed annotation, a DTD bomb, an annotation of a missing image and ``empty.jpg`` annotated without boxes."""
    bad_boxes = (
        "<object><name>dog</name><bndbox><xmin>50</xmin><ymin>5</ymin><xmax>40</xmax><ymax>9</ymax></bndbox></object>"
        "<object><name>cat</name><bndbox><xmin>500</xmin><ymin>500</ymin><xmax>600</xmax><ymax>600</ymax></bndbox>"
        "</object>"
        f"<object><name>cat</name><bndbox><xmin>{W - 19}</xmin><ymin>{H - 29}</ymin><xmax>{W + 20}</xmax>"
        f"<ymax>{H + 30}</ymax></bndbox></object>"  # the bottom-right 20x30 of it is inside
    )
    write_voc(root, images, extra_objects=bad_boxes)
    ann = os.path.join(root, "Annotations")
    with open(os.path.join(ann, "broken.xml"), "w") as f:
        f.write("<annotation><filename>broken.jpg</filename>")  # malformed
    with open(os.path.join(ann, "bomb.xml"), "w") as f:
        f.write('<?xml version="1.0"?><!DOCTYPE a [<!ENTITY x "xxxxxxxx">]><annotation>&x;</annotation>')
    with open(os.path.join(ann, "missing.xml"), "w") as f:
        f.write("<annotation><filename>missing.jpg</filename></annotation>")  # no such image
    with open(os.path.join(ann, "empty.xml"), "w") as f:
        f.write("<annotation><filename>empty.jpg</filename></annotation>")  # an image without boxes
    with open(os.path.join(root, "JPEGImages", "empty.jpg"), "wb") as f:
        f.write(picture())


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
