"""Photo-like benchmark corpora in class folders.

* ``photo``: ImageNet-sized JPEGs (~500x375, ~45 KB);
* ``mixed``: sizes from 300 to 2000 px on the long side, JPEG qualities 75-95
  and one image in four a PNG (those up to 800 px), so file sizes run from
  tens of KB to about a MB;
* :func:`imagenet_shaped`: ImageNet's shape at little disk cost: 1,000 class
  folders of small JPEGs (48-160 px), for measuring how commands grow with
  the number of inputs and classes.

Deterministic: the same arguments always write the same files. Each image is
a smooth random colour field with shapes and grain, so file sizes and decode
costs resemble real photos rather than flat synthetic shapes.
"""

from __future__ import annotations

import argparse
import io
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


KINDS = ("photo", "mixed")


def _mixed(rng: random.Random):
    """(image, format, quality) of the mixed corpus."""
    long_side = rng.randrange(300, 2001)
    short_side = int(long_side * rng.uniform(0.55, 0.9))
    size = (long_side, short_side) if rng.random() < 0.7 else (short_side, long_side)
    small = photo_like(rng, (max(1, size[0] // 4), max(1, size[1] // 4)))  # the grain at a quarter scale
    img = small.resize(size, Image.Resampling.BICUBIC)
    if long_side <= 800 and rng.random() < 0.25:
        return img, "PNG", None
    return img, "JPEG", rng.randrange(75, 96)


def generate(directory: str, num_images: int, num_classes: int = 10, seed: int = 0, kind: str = "photo") -> int:
    """Write ``num_images`` images of ``kind`` spread over ``num_classes`` folders; returns total bytes."""
    if kind not in KINDS:
        raise ValueError(f"unknown corpus kind {kind!r}; expected one of {KINDS}")
    total = 0
    for i in range(num_images):
        rng = random.Random(f"{seed}/{i}" if kind == "photo" else f"{kind}/{seed}/{i}")
        folder = os.path.join(directory, f"class_{i % num_classes:02d}")
        os.makedirs(folder, exist_ok=True)
        stem = os.path.join(folder, f"img_{i:07d}")
        existing = [p for p in (stem + ".jpg", stem + ".png") if os.path.exists(p)]
        if existing:
            total += os.path.getsize(existing[0])
            continue
        if kind == "photo":
            w = rng.randrange(440, 520)
            img, fmt, quality = photo_like(rng, (w, 375)), "JPEG", 90
        else:
            img, fmt, quality = _mixed(rng)
        path = stem + (".jpg" if fmt == "JPEG" else ".png")
        img.save(path, format=fmt, **({"quality": quality} if quality else {}))
        total += os.path.getsize(path)
    return total


IMAGENET_POOL = 4096  # distinct images an ImageNet-shaped corpus writes under its many names


def imagenet_class(index: int) -> str:
    """The folder of class ``index`` of an ImageNet-shaped corpus: a WordNet-id-like name."""
    return f"n{index + 1:08d}"


def _small_jpeg(index: int, seed: int) -> bytes:
    """Pool image ``index``: a photo-like JPEG of 48-160 px a side."""
    rng = random.Random(f"imagenet/{seed}/{index}")
    img = photo_like(rng, (rng.randrange(48, 161), rng.randrange(48, 161)))
    buffer = io.BytesIO()
    img.save(buffer, format="JPEG", quality=rng.randrange(80, 96))
    return buffer.getvalue()


def imagenet_shaped(root: str, num_images: int, num_classes: int = 1000, seed: int = 0) -> int:
    """Write an ImageNet-shaped corpus: ``num_images`` small JPEGs in ``num_classes`` class folders
    (``root/n00000001/n00000001_0000042.JPEG``); returns its total bytes.

    Image ``i`` goes to class ``i % num_classes``, so a smaller corpus is the first images of a larger one.
    Its pixels are pool image ``i % IMAGENET_POOL`` (every pool image distinct, 48-160 px a side) and its
    bytes carry a JPEG comment naming it, so no two files are byte-identical. Deterministic; resumable: a
    folder's files are written under temporary names and renamed, and an interrupted call's leftovers
    are removed and the missing files written on the next call.
    """
    pool = [_small_jpeg(i, seed) for i in range(min(IMAGENET_POOL, num_images))]
    per_class = [range(c, num_images, num_classes) for c in range(num_classes)]
    total = 0
    for c, indices in enumerate(per_class):
        if not indices:
            continue
        name = imagenet_class(c)
        folder = os.path.join(root, name)
        os.makedirs(folder, exist_ok=True)
        existing = set()
        for entry in os.scandir(folder):
            if entry.name.startswith("."):  # an interrupted write
                os.remove(entry.path)
            else:
                existing.add(entry.name)
        for i in indices:
            file_name = f"{name}_{i:07d}.JPEG"
            image = pool[i % len(pool)]
            # A comment segment (FF FE, its length, the text) right after the start-of-image marker.
            comment = f"{seed}/{i}".encode()
            data = image[:2] + b"\xff\xfe" + (len(comment) + 2).to_bytes(2, "big") + comment + image[2:]
            total += len(data)
            if file_name in existing:
                continue
            temp = os.path.join(folder, "." + file_name)
            with open(temp, "wb") as f:
                f.write(data)
            os.rename(temp, os.path.join(folder, file_name))
    return total


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("directory")
    parser.add_argument("--num-images", type=int, default=12000)
    parser.add_argument("--num-classes", type=int, default=10)
    parser.add_argument("--kind", choices=KINDS + ("imagenet",), default="photo")
    args = parser.parse_args()
    if args.kind == "imagenet":
        total = imagenet_shaped(args.directory, args.num_images, args.num_classes)
    else:
        total = generate(args.directory, args.num_images, args.num_classes, kind=args.kind)
    print(f"{args.num_images} images, {total / args.num_images / 1024:.1f} KB average, in {args.directory}")
