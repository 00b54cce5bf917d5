"""Conversion throughput: ``img2tfrecord convert`` against a plain single-process loop.

Both sides do the identical work on the same corpus: read each JPEG, decode
it with Pillow (``draft`` first), resize to 224x224 (stretch), encode JPEG
quality 90, build a ``tf.train.Example`` with the same features, and write
TFRecord files. The baseline is the loop people write by hand (Pillow +
``tf.train.Example`` + ``tf.io.TFRecordWriter``, no Beam, one process);
``convert`` runs with its default local runner. Runs alternate so drift on a
shared machine hits both sides alike; each run is a fresh process timed
from start to exit (imports included), with peak RSS from ``/usr/bin/time -v``.

    .venv/bin/python benchmarks/bench_convert.py --num-images 12000 --runs 3
    .venv/bin/python benchmarks/bench_convert.py --format keep --convert-args=--no-analyze
    .venv/bin/python benchmarks/bench_convert.py --kind mixed --convert-args=--no-analyze   # 300-2000 px, JPEG+PNG
    .venv/bin/python benchmarks/bench_convert.py --num-images 2000 --convert-args=--no-analyze --variant=--dedupe

``--ceiling`` adds the loop run as two processes started together, each on half of the images
(every second file): the speed-up that splitting the one-core work across the cores gives on this
machine, to read the ratio of ``convert`` against.

``--variant ARGS`` adds a configuration: the same ``convert`` command plus ARGS, timed in the
same alternation, with its time relative to plain ``convert``.

Prints a table and writes ``benchmarks/results/bench_convert-<time>.json``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import corpus  # noqa: E402
from common import CONVERT, package_dir, save_result  # noqa: E402

BASELINE = r"""
import hashlib, io, os, sys
from PIL import Image
import tensorflow as tf

src, out, size, fmt = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
part, parts = (int(n) for n in (sys.argv[5] if len(sys.argv) > 5 else "0/1").split("/"))
classes = sorted(os.listdir(src))
os.makedirs(out, exist_ok=True)

def feature_bytes(v): return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))
def feature_int(v): return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))

with tf.io.TFRecordWriter(os.path.join(out, f"train-{part:05d}-of-{parts:05d}.tfrecord")) as writer:
    for label, name in enumerate(classes):
        for fname in sorted(os.listdir(os.path.join(src, name)))[part::parts]:
            path = os.path.join(src, name, fname)
            data = open(path, "rb").read()
            img = Image.open(io.BytesIO(data))
            if fmt == "keep":
                w, h = img.size
                img.draft(img.mode, (max(1, w // 8), max(1, h // 8)))
                img.load()
                encoded, stored, fmt_name = data, (w, h), img.format.lower()
            else:
                img.draft("RGB", (size, size))
                img = img.convert("RGB").resize((size, size), Image.Resampling.BICUBIC, reducing_gap=2.0)
                buf = io.BytesIO()
                img.save(buf, format="JPEG", quality=90)
                encoded, stored, fmt_name = buf.getvalue(), img.size, "jpeg"
            example = tf.train.Example(features=tf.train.Features(feature={
                "image/encoded": feature_bytes(encoded),
                "image/format": feature_bytes(fmt_name.encode()),
                "image/height": feature_int(stored[1]),
                "image/width": feature_int(stored[0]),
                "image/channels": feature_int(3),
                "image/class/label": feature_int(label),
                "image/class/text": feature_bytes(name.encode()),
                "image/filename": feature_bytes(f"{name}/{fname}".encode()),
                "image/key/sha256": feature_bytes(hashlib.sha256(encoded).hexdigest().encode()),
            }))
            writer.write(example.SerializeToString())
"""


def _usage(proc, stderr, cmd):
    """(peak RSS in MB, CPU seconds: user + system) from /usr/bin/time -v's report on ``stderr``."""
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:4]} failed:\n{stderr[-3000:]}")
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr).group(1))
    cpu = sum(float(re.search(rf"{kind} time \(seconds\): ([\d.]+)", stderr).group(1)) for kind in ("User", "System"))
    return rss_kb / 1024, cpu


def timed(cmd, env=None):
    """(seconds, peak RSS in MB, CPU seconds: user + system) of a whole command, from /usr/bin/time -v.

    The CPU time covers the process and the children it waited for (the conversion processes).
    """
    return timed_together([cmd], env)


def timed_together(cmds, env=None):
    """(seconds until the last exits, summed peak RSS in MB, summed CPU seconds) of commands started together."""
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            ["/usr/bin/time", "-v", *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for cmd in cmds
    ]
    outputs = [proc.communicate()[1] for proc in procs]
    seconds = time.perf_counter() - start
    usage = [_usage(proc, stderr, cmd) for cmd, proc, stderr in zip(cmds, procs, outputs)]
    return seconds, sum(rss for rss, _ in usage), sum(cpu for _, cpu in usage)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-images", type=int, default=12000)
    parser.add_argument("--corpus", default=None, help="corpus folder (default: a cached one under benchmarks/results)")
    parser.add_argument("--kind", choices=corpus.KINDS, default="photo", help="corpus kind (benchmarks/corpus.py)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--format", choices=("jpeg", "keep"), default="jpeg")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--convert-args", default="", help="extra arguments for convert, e.g. '--direct_num_workers=4'")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="ARGS",
        help="another configuration: convert with these extra arguments too, e.g. '--dedupe' (repeatable)",
    )
    parser.add_argument(
        "--ceiling",
        action="store_true",
        help="also time the loop as two processes started together, each on half of the images: "
        "what splitting the one-core loop across the cores gives on this machine",
    )
    args = parser.parse_args(argv)

    results_dir = os.path.join(HERE, "results")
    os.makedirs(results_dir, exist_ok=True)
    src = args.corpus or os.path.join(results_dir, f"corpus-{args.kind}-{args.num_images}")
    corpus.generate(src, args.num_images, kind=args.kind)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=package_dir())
    work = tempfile.mkdtemp(prefix="bench_convert-")
    convert_cmd = [
        *CONVERT,
        "--input",
        src,
        "-q",
        "--num-shards",
        "1",
        *(
            ["--image-size", str(args.image_size), "--resize", "stretch", "--format", "jpeg", "--quality", "90"]
            if args.format == "jpeg"
            else ["--format", "keep"]
        ),
        *args.convert_args.split(),
    ]
    variants = {f"convert {v}": v.split() for v in args.variant}
    rows = {"baseline": [], **({"2 loops": []} if args.ceiling else {}), "convert": []}
    rows.update({name: [] for name in variants})
    try:
        for run in range(args.runs):
            for i, name in enumerate(rows):
                out = os.path.join(work, f"{i}-{run}")
                loop = [sys.executable, "-c", BASELINE, src, out, str(args.image_size), args.format]
                if name == "baseline":
                    seconds, rss, cpu = timed(loop, env)
                elif name == "2 loops":
                    seconds, rss, cpu = timed_together([loop + ["0/2"], loop + ["1/2"]], env)
                else:
                    seconds, rss, cpu = timed(convert_cmd + variants.get(name, []) + ["--output", out], env)
                rows[name].append({"seconds": seconds, "peak_rss_mb": rss, "cpu_seconds": cpu})
                print(
                    f"run {run + 1}/{args.runs} {name:8s} {seconds:7.1f} s  "
                    f"{args.num_images / seconds:7.1f} img/s  {rss:7.0f} MB  {cpu:7.1f} s CPU",
                    flush=True,
                )
                shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    summary = {}
    for name, runs in rows.items():
        median = statistics.median(r["seconds"] for r in runs)
        summary[name] = {
            "median_seconds": median,
            "images_per_second": args.num_images / median,
            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
            "median_cpu_seconds": statistics.median(r["cpu_seconds"] for r in runs),
        }
    ratio = summary["convert"]["images_per_second"] / summary["baseline"]["images_per_second"]
    print()
    print(
        f"{args.num_images} {args.kind} images, format {args.format}, {args.convert_args or 'default options'}, "
        f"{os.cpu_count()} cores, median of {args.runs} runs"
    )
    width = max(10, *(len(name) for name in rows))
    print(f"{'':{width}s} {'img/s':>8s} {'seconds':>8s} {'peak RSS':>9s} {'CPU s':>8s}")
    for name in rows:
        s = summary[name]
        print(
            f"{name:{width}s} {s['images_per_second']:8.1f} {s['median_seconds']:8.1f} {s['peak_rss_mb']:7.0f} MB "
            f"{s['median_cpu_seconds']:8.1f}"
        )
    print(f"ratio convert/baseline: {ratio:.2f}x")
    ceiling = None
    if args.ceiling:
        ceiling = summary["baseline"]["median_seconds"] / summary["2 loops"]["median_seconds"]
        print(f"ratio 2 loops/baseline: {ceiling:.2f}x (the loop split across two processes on this machine)")
    for name in variants:
        extra = summary[name]["median_seconds"] / summary["convert"]["median_seconds"] - 1
        extra_cpu = summary[name]["median_cpu_seconds"] / summary["convert"]["median_cpu_seconds"] - 1
        summary[name].update(time_vs_convert=extra, cpu_vs_convert=extra_cpu)
        print(f"{name}: {extra:+.1%} time, {extra_cpu:+.1%} CPU against convert")
    result = {
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "num_images": args.num_images,
        "kind": args.kind,
        "format": args.format,
        "image_size": args.image_size,
        "cpu_count": os.cpu_count(),
        "convert_args": args.convert_args,
        "variants": args.variant,
        "runs": rows,
        "summary": summary,
        "ratio": ratio,
        "two_loops_ratio": ceiling,
    }
    save_result("bench_convert", result)


if __name__ == "__main__":
    main()
