"""Pictures of an output for ``inspect``: a contact sheet of sample images (with their boxes) and a class chart."""

from __future__ import annotations

import io
import math
from typing import Any, List, Mapping, NamedTuple, Sequence, Tuple

from img2tfrecord import storage
from img2tfrecord.inspection import STAT_KEYS, sample_records, spec_subset
from img2tfrecord.readers import records
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas.dataset_json import DatasetManifest


class DrawnBox(NamedTuple):
    """A detection box to draw: edges as fractions of the image, its class name and 1-based id."""

    xmin: float
    ymin: float
    xmax: float
    ymax: float
    class_name: str
    class_id: int


class Sample(NamedTuple):
    """One contact-sheet image: the picture, its class name and id ("" and -1 when none), its boxes."""

    image: Any
    class_name: str
    label: int
    boxes: Tuple[DrawnBox, ...] = ()


# One colour per detection class id (cycling), opaque and far from grey backgrounds.
BOX_COLORS = (
    (230, 25, 75),
    (60, 180, 75),
    (0, 130, 200),
    (245, 130, 48),
    (145, 30, 180),
    (70, 240, 240),
    (240, 50, 230),
    (210, 245, 60),
    (255, 225, 25),
    (0, 128, 128),
)
BOX_LINE_WIDTH = 2  # pixels, drawn inward from the box's edges


def box_color(class_id: int) -> Tuple[int, int, int]:
    """The fixed colour of a detection class id on the contact sheet."""
    return BOX_COLORS[(class_id - 1) % len(BOX_COLORS)]


def _font(size: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow without FreeType: the fixed bitmap font
        return ImageFont.load_default()


def _to_pil(values: Mapping[str, Any]):
    from PIL import Image

    fmt = records.decode_text(values[keys.IMAGE_FORMAT])
    data = values[keys.IMAGE_ENCODED]
    if fmt == keys.FORMAT_RAW:
        w, h, c = int(values[keys.IMAGE_WIDTH]), int(values[keys.IMAGE_HEIGHT]), int(values[keys.IMAGE_CHANNELS])
        return Image.frombytes({1: "L", 3: "RGB"}[c], (w, h), data)
    img = Image.open(io.BytesIO(data))
    img.load()
    return img.convert("RGB")


def _boxes(values: Mapping[str, Any]) -> Tuple[DrawnBox, ...]:
    coords = [values[k] for k in (keys.BBOX_XMIN, keys.BBOX_YMIN, keys.BBOX_XMAX, keys.BBOX_YMAX)]
    texts = [records.decode_text(t) for t in values[keys.OBJECT_CLASS_TEXT]]
    return tuple(
        DrawnBox(x0, y0, x1, y1, text, int(label))
        for x0, y0, x1, y1, text, label in zip(*coords, texts, values[keys.OBJECT_CLASS_LABEL])
    )


def sample_images(directory: str, doc: DatasetManifest, split: str, n: int) -> List[Sample]:
    """Up to ``n`` records of a split as :class:`Sample`s, boxes for detection (unreadable images skipped)."""
    detection = doc.is_detection
    wanted = STAT_KEYS + ((keys.OBJECT_CLASS_LABEL, keys.OBJECT_CLASS_TEXT) + keys.BBOX_KEYS if detection else ())
    spec = spec_subset(doc, wanted + (keys.CLASS_LABEL, keys.CLASS_TEXT))
    out = []
    for _, _, data in sample_records(directory, doc, split, n):
        try:
            values = records.parse_example(data, spec)
            image = _to_pil(values)
        except Exception:  # a broken record or image: verify reports it, the grid just skips it
            continue
        if detection:
            boxes = _boxes(values)
            out.append(Sample(image, f"{len(boxes)} box{'' if len(boxes) == 1 else 'es'}", -1, boxes))
        elif keys.CLASS_TEXT not in values:  # an unlabeled dataset
            out.append(Sample(image, "", -1))
        else:
            out.append(Sample(image, records.decode_text(values[keys.CLASS_TEXT]), int(values[keys.CLASS_LABEL])))
    return out


def draw_boxes(thumb, boxes: Sequence[DrawnBox], font) -> None:
    """Draw each box on ``thumb`` (scaled to its size) in its class colour, its class name at its top-left corner."""
    from PIL import ImageDraw

    draw = ImageDraw.Draw(thumb)
    w, h = thumb.size
    for box in boxes:
        x0, y0 = round(box.xmin * w), round(box.ymin * h)
        x1, y1 = max(x0, round(box.xmax * w) - 1), max(y0, round(box.ymax * h) - 1)
        color = box_color(box.class_id)
        draw.rectangle([x0, y0, x1, y1], outline=color, width=BOX_LINE_WIDTH)
    for box in boxes:  # names over every outline, each on its class colour
        tx = max(0, min(round(box.xmin * w) + 1, w - 1 - int(draw.textlength(box.class_name, font=font))))
        ty = round(box.ymin * h) + 1
        left, top, right, bottom = draw.textbbox((tx, ty), box.class_name, font=font)
        draw.rectangle([left - 1, top - 1, right, bottom], fill=box_color(box.class_id))
        draw.text((tx, ty), box.class_name, fill=(0, 0, 0), font=font)


def draw_grid(samples: Sequence[Sample], path: str, cell: int = 128) -> Tuple[int, int]:
    """A contact sheet of the samples with their boxes, each captioned ``class (id)``; returns its (width, height)."""
    from PIL import Image, ImageDraw

    cols = max(1, math.ceil(math.sqrt(len(samples))))
    rows = max(1, math.ceil(len(samples) / cols))
    font = _font(12)
    caption_h = 18
    pad = 4
    width, height = cols * (cell + pad) + pad, rows * (cell + caption_h + pad) + pad
    sheet = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    box_font = _font(10)
    for i, (image, class_name, label, boxes) in enumerate(samples):
        x = pad + (i % cols) * (cell + pad)
        y = pad + (i // cols) * (cell + caption_h + pad)
        thumb = image.copy()
        thumb.thumbnail((cell, cell))
        if boxes:
            thumb = thumb.convert("RGB")
            draw_boxes(thumb, boxes, box_font)
        sheet.paste(thumb, (x + (cell - thumb.width) // 2, y + (cell - thumb.height) // 2))
        caption = _fit_text(draw, class_name if label < 0 and class_name else f"{class_name} ({label})", font, cell)
        draw.text((x + 2, y + cell + 2), caption, fill=(0, 0, 0), font=font)
    _save_png(sheet, path)
    return width, height


def _fit_text(draw, text: str, font, max_width: int) -> str:
    if draw.textlength(text, font=font) <= max_width:
        return text
    while text and draw.textlength(text + "...", font=font) > max_width:
        text = text[:-1]
    return text + "..."


_PALETTE = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
]
MAX_CHART_CLASSES = 200


def draw_class_chart(doc: DatasetManifest, path: str) -> Tuple[int, int]:
    """Horizontal bars of examples per class, one segment per split; returns the PNG's (width, height).

    Classes beyond :data:`MAX_CHART_CLASSES` (in label order) are left out
    and the chart says how many.
    """
    from PIL import Image, ImageDraw

    split_names = list(doc.splits)
    classes = list(doc.labels)
    counts = {c: [doc.splits[s].examples_per_class.get(c, 0) for s in split_names] for c in classes}
    shown = classes[:MAX_CHART_CLASSES]
    font, title_font = _font(12), _font(15)
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    labels = [f"{c} ({i})" for i, c in enumerate(shown)]
    name_w = int(max([probe.textlength(t, font=font) for t in labels] + [40])) + 12
    bar_max, row_h, margin, top = 560, 20, 16, 64
    footer = 24 if len(classes) > len(shown) else 0
    width = margin + name_w + bar_max + 70 + margin
    height = top + max(1, len(shown)) * row_h + margin + footer
    chart = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(chart)
    draw.text((margin, 10), "examples per class and split", fill=(0, 0, 0), font=title_font)
    x = margin
    for i, split in enumerate(split_names):  # legend
        color = _PALETTE[i % len(_PALETTE)]
        draw.rectangle([x, 38, x + 12, 50], fill=color)
        text = f"{split} ({doc.splits[split].num_examples})"
        draw.text((x + 16, 37), text, fill=(0, 0, 0), font=font)
        x += 16 + int(draw.textlength(text, font=font)) + 16
    biggest = max([sum(v) for v in counts.values()] + [1])
    x0 = margin + name_w
    for row, (cls, label) in enumerate(zip(shown, labels)):
        y = top + row * row_h
        draw.text((x0 - 6 - draw.textlength(label, font=font), y + 3), label, fill=(0, 0, 0), font=font)
        x = x0
        for i, n in enumerate(counts[cls]):
            length = round(bar_max * n / biggest)
            if length:
                draw.rectangle([x, y + 3, x + length - 1, y + row_h - 4], fill=_PALETTE[i % len(_PALETTE)])
            x += length
        draw.text((x + 6, y + 3), str(sum(counts[cls])), fill=(0, 0, 0), font=font)
    draw.line([x0, top - 4, x0, top + len(shown) * row_h], fill=(0, 0, 0))
    if footer:
        draw.text(
            (margin, height - footer),
            f"... {len(classes) - len(shown)} more classes not shown",
            fill=(0, 0, 0),
            font=font,
        )
    _save_png(chart, path)
    return width, height


def _save_png(image, path: str) -> None:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    with storage.create_binary(path) as f:
        f.write(buf.getvalue())
