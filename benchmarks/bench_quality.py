"""Resampling quality of ``--resample fast`` and ``--resample bicubic``: mean PSNR against a reference.

For every image of a corpus and every resize mode, each path converts the image (to PNG, so the
stored pixels are the resampled ones) and reports where the source went (``ConvertedImage.transform``:
reduced-scale decode, crop, scale, padding). The reference is the full-resolution decode (oriented,
normalised) resized with Pillow's LANCZOS over exactly that region, so the figure measures the
filter and the reduced-scale decode, not a half-pixel difference in where a crop falls::

    .venv/bin/python benchmarks/corpus.py /tmp/photo-600 --num-images 600 --kind photo
    .venv/bin/python benchmarks/bench_quality.py --corpus /tmp/photo-600 --limit 300
"""

from __future__ import annotations

import argparse
import datetime
import io
import math
import os
import statistics
import sys
import time

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

from common import save_result  # noqa: E402

from img2tfrecord.images.convert import (  # noqa: E402
    _apply_orientation,
    _orientation,
    convert_image,  # noqa: E402
    normalise_mode,
)
from img2tfrecord.images.options import (  # noqa: E402
    RESAMPLE_MODES,
    RESIZE_MODES,
    ImageOptions,  # noqa: E402
)


def reference(data: bytes, image, channels: int) -> np.ndarray:
    """The stored image as a full-resolution decode resized with LANCZOS over the same source region."""
    src = Image.open(io.BytesIO(data))
    src.load()
    src = normalise_mode(_apply_orientation(src, _orientation(src)), "RGB" if channels == 3 else "L")
    t = image.transform
    dec_w, dec_h = t.decoded_size if t.orientation not in (5, 6, 7, 8) else t.decoded_size[::-1]
    kx, ky = src.width / dec_w, src.height / dec_h  # oriented decoded pixel -> full-resolution pixel
    out_w, out_h = t.size
    (sx, sy), (ox, oy) = t.scale, t.offset
    if ox > 0 or oy > 0:  # fit: the content is the whole source, padded
        fw, fh = round(dec_w * sx), round(dec_h * sy)
        canvas = Image.new(src.mode, (out_w, out_h), 0)
        canvas.paste(src.resize((fw, fh), Image.Resampling.LANCZOS), (round(ox), round(oy)))
        return np.asarray(canvas, dtype=np.float64)
    box = (-ox / sx * kx, -oy / sy * ky, (out_w - ox) / sx * kx, (out_h - oy) / sy * ky)
    return np.asarray(src.resize((out_w, out_h), Image.Resampling.LANCZOS, box=box), dtype=np.float64)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a - b) ** 2))
    return 99.0 if mse == 0 else 10 * math.log10(255.0**2 / mse)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", required=True, help="a folder of class folders (benchmarks/corpus.py)")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--limit", type=int, default=300, help="images taken, evenly spread over the corpus")
    args = parser.parse_args(argv)

    found = os.walk(args.corpus)
    files = sorted(os.path.join(root, name) for root, _, names in found for name in names if name[0] != ".")
    files = files[:: max(1, len(files) // args.limit)][: args.limit]
    table = {}
    for resize in RESIZE_MODES:
        for resample in RESAMPLE_MODES:
            options = ImageOptions(
                size=(args.image_size, args.image_size), resize=resize, format="png", resample=resample
            )
            scores, seconds = [], 0.0
            for path in files:
                with open(path, "rb") as f:
                    data = f.read()
                start = time.perf_counter()
                image = convert_image(data, options)
                seconds += time.perf_counter() - start
                stored = np.asarray(Image.open(io.BytesIO(image.encoded)), dtype=np.float64)
                scores.append(psnr(stored, reference(data, image, options.channels)))
            table[f"{resize}/{resample}"] = {
                "mean_psnr_db": statistics.fmean(scores),
                "min_psnr_db": min(scores),
                "ms_per_image": 1000 * seconds / len(files),
            }
            row = table[f"{resize}/{resample}"]
            print(
                f"{resize:8} {resample:8} mean PSNR {row['mean_psnr_db']:5.1f} dB  min {row['min_psnr_db']:5.1f} dB  "
                f"{row['ms_per_image']:5.2f} ms/image (to PNG)",
                flush=True,
            )
    save_result(
        "bench_quality",
        {
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "corpus": args.corpus,
            "num_images": len(files),
            "image_size": args.image_size,
            "table": table,
        },
    )


if __name__ == "__main__":
    main()
