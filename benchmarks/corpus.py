"""Photo-like benchmark corpora in class folders.

* ``photo``: ImageNet-sized JPEGs (~500x375, ~45 KB);
* ``mixed``: sizes from 300 to 2000 px on the long side, JPEG qualities 75-95
  and one image in four a PNG (those up to 800 px), so file sizes run from
  tens of KB to about a MB.
* ``imagenet``: ImageNet-shaped (:func:`imagenet_shaped`): 1,000 class folders of
  uneven sizes holding small images (48..160 px, a few JPEG qualities, some
  grayscale, a few PNGs), with planted near duplicates and exact copies, so
  that a corpus of 1.28 million images costs a few GB.

Deterministic: the same arguments always write the same files. Each image is
a smooth random colour field with shapes and grain, so file sizes and decode
costs resemble real photos rather than flat synthetic shapes.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import random
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import cv2
import numpy as np
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


KINDS = ("photo", "mixed", "imagenet")


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


def generate(
    directory: str, num_images: int, num_classes: Optional[int] = None, seed: int = 0, kind: str = "photo"
) -> int:
    """Write ``num_images`` images of ``kind`` spread over ``num_classes`` folders (default 10, 1,000 for
    ``imagenet``); returns total bytes."""
    if kind == "imagenet":
        return imagenet_shaped(directory, num_images, num_classes or IMAGENET_CLASSES, seed).bytes
    num_classes = num_classes or 10
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


# -- ImageNet-shaped -----------------------------------------------------------------------------

IMAGENET_CLASSES = 1000
_IMAGENET_PX = (48, 160)  # the side lengths of the small images
_COPY_SHARE = 0.003  # images that are a byte copy of an earlier plain image, under another name
_NEAR_SHARE = 0.01  # images that are a variant (re-encoded, brightened, shrunk) of an earlier plain image
_PLAIN_BELOW = 64  # the first images are always plain, so that every planted image has a source
_CHUNK = 2000  # images per task of the writing processes


class Planted(NamedTuple):
    """An image made from another one: ``kind`` "copy" (the same bytes) or "near" (a variant)."""

    relpath: str
    source: str
    kind: str


@dataclasses.dataclass
class ImagenetCorpus:
    """What :func:`imagenet_shaped` wrote: ``root`` holds ``classes`` folders of ``images`` files."""

    root: str
    images: int
    classes: int
    bytes: int
    copies: int
    near: int
    planted: List[Planted]


def wnid(class_index: int) -> str:
    """The folder name of a class, shaped like ImageNet's WordNet ids (``n00000042``)."""
    return f"n{class_index:08d}"


def class_sizes(num_images: int, num_classes: int, seed: int) -> List[int]:
    """Images per class: uneven like ImageNet's (the smallest about 0.55 of the largest), summing to ``num_images``."""
    rng = random.Random(f"imagenet-sizes/{seed}")
    weights = [rng.uniform(0.55, 1.0) for _ in range(num_classes)]
    total = sum(weights)
    exact = [num_images * w / total for w in weights]
    sizes = [int(x) for x in exact]
    by_remainder = sorted(range(num_classes), key=lambda c: (sizes[c] - exact[c], c))
    for c in by_remainder[: num_images - sum(sizes)]:
        sizes[c] += 1
    return sizes


class _Layout:
    """Image number -> class and file name, over the class sizes."""

    def __init__(self, num_images: int, num_classes: int, seed: int) -> None:
        self.seed = seed
        self.starts = np.cumsum([0] + class_sizes(num_images, num_classes, seed))

    def class_of(self, image: int) -> int:
        return int(np.searchsorted(self.starts, image, side="right")) - 1

    def relpath(self, image: int, fmt: str) -> str:
        c = self.class_of(image)
        name = wnid(c)
        return f"{name}/{name}_{image - int(self.starts[c])}.{'JPEG' if fmt == 'JPEG' else 'png'}"


def _rng(seed: int, image: int, salt: int = 0) -> random.Random:
    return random.Random((seed << 40) ^ (salt << 36) ^ image)


def _plan(seed: int, image: int) -> str:
    """ "plain", "copy" or "near": what image ``image`` is, decided alone (so a source can be checked)."""
    if image < _PLAIN_BELOW:
        return "plain"
    draw = _rng(seed, image, 1).random()
    return "copy" if draw < _COPY_SHARE else "near" if draw < _COPY_SHARE + _NEAR_SHARE else "plain"


def _picture(seed: int, image: int) -> Tuple[Image.Image, str, Optional[int]]:
    """The picture of a plain image: a smooth random field with shapes, its format and JPEG quality."""
    rng = _rng(seed, image)
    low, high = _IMAGENET_PX
    w = rng.randrange(low, high + 1)
    h = max(low, min(high, int(w * rng.choice((0.75, 0.8, 1.0, 1.25, 1.33)))))
    gw, gh = rng.randrange(6, 11), rng.randrange(5, 10)
    grid = np.frombuffer(rng.randbytes(gw * gh * 3), np.uint8).reshape(gh, gw, 3)
    img = Image.fromarray(cv2.resize(grid, (w, h), interpolation=cv2.INTER_LINEAR), "RGB")  # 4x Pillow's speed here
    draw = ImageDraw.Draw(img)
    for _ in range(rng.randrange(1, 4)):
        x, y, r = rng.randrange(w), rng.randrange(h), rng.randrange(6, max(7, w // 3))
        color = tuple(rng.randrange(256) for _ in range(3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)([x - r, y - r, x + r, y + r], fill=color)
    if rng.random() < 0.03:
        img = img.convert("L")
    if rng.random() < 0.02:
        return img, "PNG", None
    return img, "JPEG", rng.choice((75, 85, 90, 95))


def _encode(img: Image.Image, fmt: str, quality: Optional[int]) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **({"quality": quality} if quality else {}))
    return buf.getvalue()


def _source(seed: int, image: int, layout: _Layout) -> int:
    """An earlier plain image: in the same class half the time, anywhere before otherwise."""
    rng = _rng(seed, image, 2)
    c = layout.class_of(image)
    start = int(layout.starts[c]) if rng.random() < 0.5 and image > int(layout.starts[c]) else 0
    source = rng.randrange(start, image)
    while _plan(seed, source) != "plain":
        source -= 1
    return source


def _variant(img: Image.Image, fmt: str, quality: Optional[int], rng: random.Random):
    """The same picture changed a little: re-encoded at another quality, brighter, or shrunk."""
    how = rng.randrange(3)
    if how == 0:
        return img, "JPEG", 70 if quality != 70 else 92
    if how == 1:
        pixels = np.asarray(img, dtype=np.int16) + rng.choice((-4, 4))
        return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)), fmt, quality
    w, h = img.size
    return img.resize((max(24, w * 5 // 6), max(24, h * 5 // 6)), Image.Resampling.BILINEAR), fmt, quality


def _file(seed: int, image: int, layout: _Layout) -> Tuple[str, bytes, Optional[Planted]]:
    """(relpath, bytes, what it was planted from) of one image."""
    plan = _plan(seed, image)
    if plan == "plain":
        img, fmt, quality = _picture(seed, image)
        return layout.relpath(image, fmt), _encode(img, fmt, quality), None
    source = _source(seed, image, layout)
    img, fmt, quality = _picture(seed, source)
    source_path = layout.relpath(source, fmt)
    if plan == "near":
        img, fmt, quality = _variant(img, fmt, quality, _rng(seed, image, 3))
    relpath = layout.relpath(image, fmt)
    return relpath, _encode(img, fmt, quality), Planted(relpath, source_path, plan)


def _write_chunk(args: Tuple[str, int, int, int, int, int]) -> Tuple[int, List[Planted]]:
    root, num_images, num_classes, seed, first, last = args
    cv2.setNumThreads(1)  # one process per core already
    layout = _Layout(num_images, num_classes, seed)
    total, planted = 0, []
    made = set()
    for image in range(first, last):
        relpath, data, origin = _file(seed, image, layout)
        folder = os.path.dirname(relpath)
        if folder not in made:
            os.makedirs(os.path.join(root, folder), exist_ok=True)
            made.add(folder)
        with open(os.path.join(root, relpath), "wb") as f:
            f.write(data)
        total += len(data)
        if origin is not None:
            planted.append(origin)
    return total, planted


def imagenet_shaped(
    root: str, num_images: int, num_classes: int = IMAGENET_CLASSES, seed: int = 0, processes: Optional[int] = None
) -> ImagenetCorpus:
    """Write an ImageNet-shaped corpus of ``num_images`` small images in ``num_classes`` class folders under ``root``.

    Deterministic in its arguments (whatever ``processes``). About 1.3% of the images
    are planted: byte copies and near variants of earlier images (half of them in the
    same class), which a conversion's hashed splits spread over the splits. A finished
    corpus is recorded in ``<root>.corpus.json`` and not written again.
    """
    import json
    import multiprocessing

    stamp = root.rstrip("/") + ".corpus.json"
    wanted = {"images": num_images, "classes": num_classes, "seed": seed}
    if os.path.exists(stamp):
        with open(stamp, encoding="utf-8") as f:
            done = json.load(f)
        if {k: done.get(k) for k in wanted} == wanted:
            return _corpus(root, done)
    chunks = [
        (root, num_images, num_classes, seed, first, min(num_images, first + _CHUNK))
        for first in range(0, num_images, _CHUNK)
    ]
    processes = processes or len(os.sched_getaffinity(0))
    total, planted = 0, []
    if processes <= 1 or len(chunks) <= 1:
        results = map(_write_chunk, chunks)
    else:
        pool = multiprocessing.get_context("fork").Pool(processes)
        results = pool.imap(_write_chunk, chunks)
    try:
        for chunk_total, chunk_planted in results:
            total += chunk_total
            planted += chunk_planted
    finally:
        if processes > 1 and len(chunks) > 1:
            pool.close()
            pool.join()
    done = {**wanted, "bytes": total, "planted": [list(p) for p in planted]}
    with open(stamp + ".tmp", "w", encoding="utf-8") as f:
        json.dump(done, f)
    os.replace(stamp + ".tmp", stamp)
    return _corpus(root, done)


def _corpus(root: str, done: Dict) -> ImagenetCorpus:
    planted = [Planted(*p) for p in done["planted"]]
    return ImagenetCorpus(
        root,
        done["images"],
        done["classes"],
        done["bytes"],
        sum(p.kind == "copy" for p in planted),
        sum(p.kind == "near" for p in planted),
        planted,
    )


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory")
    parser.add_argument("--num-images", type=int, default=12000)
    parser.add_argument("--num-classes", type=int, default=None, help="default 10, 1000 for --kind imagenet")
    parser.add_argument("--kind", choices=KINDS, default="photo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--processes", type=int, default=None, help="writing processes of --kind imagenet")
    args = parser.parse_args(argv)
    if args.kind == "imagenet":
        made = imagenet_shaped(
            args.directory, args.num_images, args.num_classes or IMAGENET_CLASSES, args.seed, args.processes
        )
        print(
            f"{made.images} images in {made.classes} classes, {made.bytes / made.images / 1024:.1f} KB average, "
            f"{made.copies} exact copies and {made.near} near variants planted, in {made.root}"
        )
        return
    total = generate(args.directory, args.num_images, args.num_classes, args.seed, kind=args.kind)
    print(f"{args.num_images} images, {total / args.num_images / 1024:.1f} KB average, in {args.directory}")


if __name__ == "__main__":
    main()
