"""Throughput of ``img2tfrecord.load`` against a hand-tuned ``tf.data`` pipeline over the same shards.

    .venv/bin/python benchmarks/bench_load.py [--images 3000] [--runs 5] [--batch-size 64]

The corpus is built once by the real converter: photo-like JPEGs from
``benchmarks/corpus.py`` converted with ``--image-size 224`` (224x224 JPEG
records, 8 shards) into ``benchmarks/results/corpus-<images>/`` and reused
by later runs.

Both pipelines shuffle shards and records, repeat, decode to float32
``[batch, 224, 224, 3]`` in [0, 1] and prefetch. The hand-tuned one is the
textbook form: parallel interleave, record shuffle, one parallel map of
``parse_single_example`` + ``decode_jpeg`` per record, batch, prefetch.

Runs alternate (load, hand-tuned, load, ...); each run builds a fresh
pipeline, skips ``--warmup`` batches (start-up and autotuning) and times
the next ``--batches``. Reported: median images/s (wall clock) and median
images per CPU-second of the process (less sensitive to other load on the
machine), the ratio load / hand-tuned, and the load average around the
runs. Results go to ``benchmarks/results/bench_load-<time>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(ROOT, "src"), HERE]

from common import CONVERT, package_dir, save_result  # noqa: E402
from common import RESULTS_DIR as RESULTS  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

IMAGE_SIZE = 224
NUM_SHARDS = 8


def build_corpus(images: int) -> str:
    """The converted 224x224 corpus directory, converting it first when missing."""
    import corpus

    base = os.path.join(RESULTS, f"corpus-{images}")
    src, out = os.path.join(base, "images"), os.path.join(base, "records")
    if os.path.exists(os.path.join(out, "_SUCCESS")):
        return out
    print(f"writing {images} source images to {src}", flush=True)
    corpus.generate(src, images)
    print(f"converting to {out} ({IMAGE_SIZE}x{IMAGE_SIZE} JPEG, {NUM_SHARDS} shards)", flush=True)
    subprocess.run(
        [
            *CONVERT,
            "--input",
            src,
            "--output",
            out,
            "--image-size",
            str(IMAGE_SIZE),
            "--num-shards",
            str(NUM_SHARDS),
            "--overwrite",
            "-q",
        ],
        check=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=package_dir()),
    )
    return out


def hand_tuned(path: str, batch_size: int, seed: int):
    """The reference pipeline, written directly against the shards."""
    import tensorflow as tf

    from img2tfrecord.schemas import features as keys

    with open(os.path.join(path, "dataset.json"), encoding="utf-8") as f:
        doc = json.load(f)
    files = [os.path.join(path, s["file"]) for s in doc["splits"]["train"]["shards"]]
    spec = {
        keys.IMAGE_ENCODED: tf.io.FixedLenFeature([], tf.string),
        keys.CLASS_LABEL: tf.io.FixedLenFeature([], tf.int64),
    }
    autotune = tf.data.AUTOTUNE

    def decode(record):
        ex = tf.io.parse_single_example(record, spec)
        image = tf.io.decode_jpeg(ex[keys.IMAGE_ENCODED], channels=3)
        image = tf.ensure_shape(image, [IMAGE_SIZE, IMAGE_SIZE, 3])
        return tf.image.convert_image_dtype(image, tf.float32), ex[keys.CLASS_LABEL]

    ds = tf.data.Dataset.from_tensor_slices(files).shuffle(len(files), seed=seed)
    ds = ds.interleave(
        tf.data.TFRecordDataset, cycle_length=len(files), num_parallel_calls=autotune, deterministic=False
    )
    ds = ds.shuffle(2048, seed=seed).repeat()
    ds = ds.map(decode, num_parallel_calls=autotune, deterministic=False)
    return ds.batch(batch_size).prefetch(autotune)


def with_load(path: str, batch_size: int, seed: int):
    import img2tfrecord

    return img2tfrecord.load(path, split="train", batch_size=batch_size, seed=seed, repeat=True)


def measure(make: Callable, warmup: int, batches: int) -> Dict[str, float]:
    it = iter(make())
    for _ in range(warmup):
        next(it)
    images = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(batches):
        x, _ = next(it)
        images += int(x.shape[0])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"images": images, "seconds": wall, "images_per_s": images / wall, "images_per_cpu_s": images / cpu}


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=3000, help="corpus size (default 3000)")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per pipeline (default 5)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=10, help="batches skipped per run")
    parser.add_argument("--batches", type=int, default=100, help="batches timed per run")
    args = parser.parse_args(argv)

    path = build_corpus(args.images)
    import tensorflow as tf

    pipelines = {
        "img2tfrecord.load": lambda: with_load(path, args.batch_size, 0),
        "hand-tuned tf.data": lambda: hand_tuned(path, args.batch_size, 0),
    }
    load_before = os.getloadavg()
    runs: Dict[str, List[Dict[str, float]]] = {name: [] for name in pipelines}
    for r in range(args.runs):
        order = list(pipelines) if r % 2 == 0 else list(reversed(pipelines))
        for name in order:
            result = measure(pipelines[name], args.warmup, args.batches)
            runs[name].append(result)
            print(
                f"run {r + 1}/{args.runs} {name:<20} {result['images_per_s']:8.0f} images/s "
                f"{result['images_per_cpu_s']:8.0f} images/cpu-s",
                flush=True,
            )
    load_after = os.getloadavg()

    summary = {
        name: {
            "median_images_per_s": statistics.median(r["images_per_s"] for r in results),
            "median_images_per_cpu_s": statistics.median(r["images_per_cpu_s"] for r in results),
            "runs": results,
        }
        for name, results in runs.items()
    }
    a, b = summary["img2tfrecord.load"], summary["hand-tuned tf.data"]
    ratio = a["median_images_per_s"] / b["median_images_per_s"]
    cpu_ratio = a["median_images_per_cpu_s"] / b["median_images_per_cpu_s"]

    print()
    print(f"{'pipeline':<22}{'images/s (median)':>20}{'images/cpu-s (median)':>24}")
    for name, s in summary.items():
        print(f"{name:<22}{s['median_images_per_s']:>20.0f}{s['median_images_per_cpu_s']:>24.0f}")
    print(f"ratio load / hand-tuned: {ratio:.2f}x wall clock, {cpu_ratio:.2f}x per CPU-second (target >= 0.9x)")
    print(f"load average before/after: {load_before[0]:.2f} / {load_after[0]:.2f} on {os.cpu_count()} CPUs")

    save_result(
        "bench_load",
        {
            "corpus": path,
            "image_size": IMAGE_SIZE,
            "settings": vars(args),
            "machine": {
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
                "tensorflow": tf.__version__,
                "loadavg_before": load_before,
                "loadavg_after": load_after,
            },
            "ratio_wall": ratio,
            "ratio_cpu": cpu_ratio,
            "pipelines": summary,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
