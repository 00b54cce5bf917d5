"""Each ``--file-format`` against TFRecord: the same conversion, timed in one alternating run.

The runs of one case alternate tfrecord, array_record, webdataset, parquet, tfrecord, ... so drift
on a shared machine hits every format alike; each run is a fresh ``convert`` process timed from start
to exit (imports included), with peak RSS and CPU from ``/usr/bin/time -v``. The table gives each
format's median wall time against TFRecord's median in the same run. Two cases, each on its own
corpus of 300-2000 px JPEGs and PNGs (``benchmarks/corpus.py``'s ``mixed``, seeds 0 and 1):

* ``reencode``: resized to 224x224 and re-encoded as JPEG: conversion-bound, small records, where a
  format's cost per record shows;
* ``keep``: stored as they are (``--format keep``): records of tens of KB to about a MB, where a
  format's cost per byte shows.

A third table times the record writers alone, in this process (best of 3): records of 20 KB to 1 MB,
then of 8 to 30 KB (a re-encoded photo's), written into one shard by each format's writer with the
sha256 the shard step takes of every byte, so the cost a format adds per record shows apart from
the conversion.

    .venv/bin/python benchmarks/bench_formats.py                       # both cases, 3 runs each
    .venv/bin/python benchmarks/bench_formats.py --reencode-images 600 --keep-images 300 --runs 5

Prints a table and writes ``benchmarks/results/bench_formats-<time>.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import corpus  # noqa: E402
from bench_convert import timed  # noqa: E402
from common import CONVERT, RESULTS_DIR, package_dir, save_result  # noqa: E402

FORMATS = ("tfrecord", "array_record", "webdataset", "parquet")
# case -> (corpus seed, convert arguments); both corpora are corpus.py's "mixed" kind
CASES = {
    "reencode": (0, ("--image-size", "224", "--resize", "stretch", "--format", "jpeg")),
    "keep": (1, ("--format", "keep")),
}


def bench_corpus(case: str, num_images: int, runs: int, extra: List[str]) -> Dict[str, dict]:
    """format -> its runs and medians on ``num_images`` images of ``case``'s corpus."""
    seed, case_args = CASES[case]
    src = os.path.join(RESULTS_DIR, f"corpus-mixed-{seed}-{num_images}")
    corpus.generate(src, num_images, seed=seed, kind="mixed")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=package_dir())
    work = tempfile.mkdtemp(prefix="bench_formats-")
    rows: Dict[str, List[dict]] = {f: [] for f in FORMATS}
    try:
        for run in range(runs):
            for file_format in FORMATS:
                out = os.path.join(work, f"{file_format}-{run}")
                cmd = [
                    *CONVERT,
                    "--input",
                    src,
                    "--output",
                    out,
                    "-q",
                    "--no-analyze",
                    "--file-format",
                    file_format,
                    *case_args,
                    *extra,
                ]
                seconds, rss, cpu = timed(cmd, env)
                rows[file_format].append({"seconds": seconds, "peak_rss_mb": rss, "cpu_seconds": cpu})
                print(
                    f"{case} run {run + 1}/{runs} {file_format:12s} {seconds:7.1f} s  "
                    f"{num_images / seconds:7.1f} img/s  {rss:6.0f} MB  {cpu:7.1f} s CPU",
                    flush=True,
                )
                shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = statistics.median(r["seconds"] for r in rows["tfrecord"])
    summary = {}
    for file_format, done in rows.items():
        median = statistics.median(r["seconds"] for r in done)
        summary[file_format] = {
            "runs": done,
            "median_seconds": median,
            "images_per_second": num_images / median,
            "peak_rss_mb": max(r["peak_rss_mb"] for r in done),
            "median_cpu_seconds": statistics.median(r["cpu_seconds"] for r in done),
            "time_vs_tfrecord": median / base - 1,
        }
    return summary


def bench_writers(num_records: int = 600, smallest: int = 20_000, largest: int = 1_000_000) -> Dict[str, dict]:
    """format -> seconds (best of 3) to write ``num_records`` records of ``smallest`` to ``largest`` bytes
    of image into one shard."""
    sys.path.insert(0, package_dir())
    from img2tfrecord import shard_formats
    from img2tfrecord.conversion.examples import encode_example
    from img2tfrecord.images.options import ConvertedImage
    from img2tfrecord.transforms.beam_tfrecord_sink import _DigestingFile  # the shard step's file: a sha256 of it

    rng = random.Random(0)
    records = [
        encode_example(
            ConvertedImage(rng.randbytes(rng.randrange(smallest, largest)), "jpeg", 100, 100, 3),
            i % 10,
            f"class_{i % 10:02d}",
            f"class_{i % 10:02d}/img_{i:07d}.jpg",
        )
        for i in range(num_records)
    ]
    context = shard_formats.ShardContext("train-000000", False, tuple(f"class_{c:02d}" for c in range(10)))
    folder = tempfile.mkdtemp(prefix="bench_formats-writers-")
    found = {}
    try:
        for file_format in FORMATS:
            adapter = shard_formats.adapter(file_format)
            best = float("inf")
            for _ in range(3):
                path = os.path.join(folder, file_format)
                start = time.perf_counter()
                if adapter.streams:
                    with _DigestingFile(open(path, "wb")) as f:
                        writer = adapter.open_writer(f, context)
                        for record in records:
                            writer.write(record)
                        writer.close()
                else:  # a local file, digested once written, as the shard step does
                    writer = adapter.open_writer(path, context)
                    for record in records:
                        writer.write(record)
                    writer.close()
                    with open(path, "rb") as f:
                        hashlib.sha256(f.read()).hexdigest()
                best = min(best, time.perf_counter() - start)
            found[file_format] = {"seconds": best, "ms_per_record": best / num_records * 1000}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    megabytes = sum(map(len, records)) / 1e6
    for row in found.values():
        row["megabytes"] = megabytes
    return found


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reencode-images", type=int, default=1000)
    parser.add_argument("--keep-images", type=int, default=500)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--convert-args", default="", help="extra arguments for every convert")
    parser.add_argument("--writers-only", action="store_true", help="only the table of the writers alone")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    uptime = _uptime()
    results = {}
    for case, num in (("reencode", args.reencode_images), ("keep", args.keep_images)):
        if num > 0 and not args.writers_only:
            results[case] = {
                "num_images": num,
                "convert_args": list(CASES[case][1]),
                "formats": bench_corpus(case, num, args.runs, args.convert_args.split()),
            }
    print()
    print(f"{os.cpu_count()} cores, median of {args.runs} runs; at the start: {uptime}")
    header = ("img/s", 8), ("seconds", 8), ("peak RSS", 9), ("CPU s", 8), ("vs tfrecord", 12)
    print(f"{'case':8s} {'format':12s} " + " ".join(f"{name:>{width}s}" for name, width in header))
    for case, doc in results.items():
        for file_format, s in doc["formats"].items():
            print(
                f"{case:8s} {file_format:12s} {s['images_per_second']:8.1f} {s['median_seconds']:8.1f} "
                f"{s['peak_rss_mb']:6.0f} MB {s['median_cpu_seconds']:8.1f} {s['time_vs_tfrecord']:+11.1%}"
            )
    writers = {}
    for label, num, smallest, largest in (("large", 600, 20_000, 1_000_000), ("small", 3000, 8_000, 30_000)):
        writers[label] = found = bench_writers(num, smallest, largest)
        print()
        print(f"the writers alone, {found['tfrecord']['megabytes']:.0f} MB in {num} records, best of 3:")
        for file_format, row in found.items():
            extra = row["seconds"] / found["tfrecord"]["seconds"] - 1
            print(f"{file_format:12s} {row['seconds']:6.3f} s  {row['ms_per_record']:6.3f} ms/record  {extra:+7.1%}")
    print(f"at the end: {_uptime()}")
    save_result(
        "bench_formats",
        {
            "uptime_at_start": uptime,
            "load_average_at_start": load,
            "load_average_at_end": os.getloadavg(),
            "runs": args.runs,
            "convert_args": args.convert_args,
            "cases": results,
            "writers": writers,
        },
    )


def _uptime() -> str:
    """``uptime``'s line: how busy the (shared) machine was."""
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


if __name__ == "__main__":
    main()
