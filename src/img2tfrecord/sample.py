"""A built-in sample dataset: synthetic shapes, generated deterministically.

``img2tfrecord sample DIR`` (and ``./run_local.sh`` with no arguments) writes
``DIR/<class>/<file>`` with four classes -- circle, square, triangle, stripes --
drawn in random colours, sizes and positions over noisy backgrounds. Files
mix JPEG and PNG, sizes and aspect ratios, and include grayscale, RGBA and
EXIF-rotated images, so a conversion exercises the real decode paths.
"""

from __future__ import annotations

import io
import os
import random
from typing import Dict

from PIL import Image, ImageDraw, ImageFilter

CLASSES = ("circle", "square", "stripes", "triangle")
DEFAULT_IMAGES_PER_CLASS = 75


def noise(rng: random.Random, size, sigma: float) -> Image.Image:
    """Grey noise around 128 with standard deviation ``sigma``, from ``rng`` (Pillow's own
    ``effect_noise`` draws from C's unseeded generator, so its output differs between runs)."""
    spread = min(127.5, sigma * 3**0.5)  # a uniform distribution of that standard deviation
    uniform = Image.frombytes("L", size, rng.randbytes(size[0] * size[1]))
    return uniform.point(lambda v: round(127.5 + (v - 127.5) * spread / 127.5))


def _background(rng: random.Random, size) -> Image.Image:
    base = tuple(rng.randrange(256) for _ in range(3))
    grain = noise(rng, size, rng.uniform(10, 40)).convert("RGB")
    solid = Image.new("RGB", size, base)
    return Image.blend(solid, grain, 0.25)


def draw_shape(class_name: str, rng: random.Random, size) -> Image.Image:
    img = _background(rng, size)
    draw = ImageDraw.Draw(img)
    w, h = size
    color = tuple(rng.randrange(256) for _ in range(3))
    s = rng.uniform(0.3, 0.6) * min(w, h)
    cx, cy = rng.uniform(s / 2, w - s / 2), rng.uniform(s / 2, h - s / 2)
    if class_name == "circle":
        draw.ellipse([cx - s / 2, cy - s / 2, cx + s / 2, cy + s / 2], fill=color)
    elif class_name == "square":
        draw.rectangle([cx - s / 2, cy - s / 2, cx + s / 2, cy + s / 2], fill=color)
    elif class_name == "triangle":
        draw.polygon([(cx, cy - s / 2), (cx - s / 2, cy + s / 2), (cx + s / 2, cy + s / 2)], fill=color)
    elif class_name == "stripes":
        step = max(4, int(s / 5))
        for x in range(0, w, step * 2):
            draw.rectangle([x, 0, x + step - 1, h], fill=color)
    else:
        raise ValueError(f"unknown sample class {class_name!r}")
    return img.filter(ImageFilter.SMOOTH)


def _variant(img: Image.Image, index: int, rng: random.Random):
    """(image, format, save kwargs) cycling through the decode paths worth exercising."""
    kind = index % 10
    if kind == 7:
        return img.convert("L"), "JPEG", {"quality": 90}
    if kind == 8:
        rgba = img.convert("RGBA")
        rgba.putalpha(Image.new("L", img.size, 200))
        return rgba, "PNG", {}
    if kind == 9:
        exif = Image.Exif()
        exif[0x0112] = rng.choice([3, 6, 8])  # rotated: the pipeline must undo it
        return img, "JPEG", {"quality": 90, "exif": exif.tobytes()}
    if kind in (3, 5):
        return img, "PNG", {}
    return img, "JPEG", {"quality": rng.randrange(75, 96)}


def generate(directory: str, images_per_class: int = DEFAULT_IMAGES_PER_CLASS, seed: int = 0) -> Dict[str, int]:
    """Write the sample dataset under ``directory``; returns files written per class."""
    if images_per_class < 1:
        raise ValueError("images_per_class must be at least 1")
    counts = {}
    for class_name in CLASSES:
        folder = os.path.join(directory, class_name)
        os.makedirs(folder, exist_ok=True)
        for i in range(images_per_class):
            rng = random.Random(f"{seed}/{class_name}/{i}")
            size = (rng.randrange(96, 200), rng.randrange(96, 200))
            img, fmt, kwargs = _variant(draw_shape(class_name, rng, size), i, rng)
            ext = ".jpg" if fmt == "JPEG" else ".png"
            buf = io.BytesIO()
            img.save(buf, format=fmt, **kwargs)
            with open(os.path.join(folder, f"{class_name}_{i:04d}{ext}"), "wb") as f:
                f.write(buf.getvalue())
        counts[class_name] = images_per_class
    return counts
