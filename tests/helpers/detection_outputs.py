"""Reading detection records back: the parsed examples, their feature values, boxes on their rectangles."""

from __future__ import annotations

import io
from typing import List, Tuple

from PIL import Image

from helpers.detection_inputs import RECTS
from img2tfrecord.readers import records as framing
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas.example_proto import Example

MARGIN = 3  # stored pixels inside / outside an edge where the colour is checked


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
