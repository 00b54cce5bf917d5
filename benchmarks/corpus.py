"""Photo-like benchmark corpus: ImageNet-sized JPEGs (~500x375, ~45 KB) in class folders.

Deterministic: the same arguments always write the same files. Each image is
a smooth random colour field with shapes and grain, so JPEG sizes and decode
costs resemble real photos rather than flat synthetic shapes.
"""
from __future__ import annotations

import argparse
import os
import random

from PIL import Image, ImageDraw, ImageFilter

from img2tfrecord.sample import noise  # seeded grain: the same files on every run


def photo_like(rng: random.Random, size=(500, 375)) -> Image.Image:
    w, h = size
    small = Image.new("RGB", (8, 6))
    small.putdata([tuple(rng.randrange(256) for _ in range(3)) for _ in range(48)])
    img = small.resize(size, Image.Resampling.BICUBIC)
    draw = ImageDraw.Draw(img)
    for _ in range(rng.randrange(3, 8)):
        x, y = rng.randrange(w), rng.randrange(h)
        r = rng.randrange(10, 120)
        color = tuple(rng.randrange(256) for _ in range(3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)([x - r, y - r, x + r, y + r], fill=color)
    img = img.filter(ImageFilter.GaussianBlur(1.2))
    grain = noise(rng, size, 24).convert("RGB")
    return Image.blend(img, grain, 0.12)


def generate(directory: str, num_images: int, num_classes: int = 10, seed: int = 0) -> int:
    """Write ``num_images`` JPEGs spread over ``num_classes`` folders; returns total bytes."""
    total = 0
    for i in range(num_images):
        rng = random.Random(f"{seed}/{i}")
        folder = os.path.join(directory, f"class_{i % num_classes:02d}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"img_{i:07d}.jpg")
        if os.path.exists(path):
            total += os.path.getsize(path)
            continue
        w = rng.randrange(440, 520)
        photo_like(rng, (w, 375)).save(path, format="JPEG", quality=90)
        total += os.path.getsize(path)
    return total


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("directory")
    parser.add_argument("--num-images", type=int, default=12000)
    parser.add_argument("--num-classes", type=int, default=10)
    args = parser.parse_args()
    total = generate(args.directory, args.num_images, args.num_classes)
    print(f"{args.num_images} images, {total / args.num_images / 1024:.1f} KB average, in {args.directory}")
