"""Each ``--file-format`` against TFRecord: the same conversion, timed in one alternating run.

The runs of one corpus alternate tfrecord, array_record, webdataset, tfrecord, ... so drift on a
shared machine hits every format alike; each run is a fresh ``convert`` process timed from start to
exit (imports included), with peak RSS and CPU from ``/usr/bin/time -v``. The table gives each
format's median wall time against TFRecord's. Two corpora (``benchmarks/corpus.py``):

* ``photo``: ~500x375 JPEGs resized to 224x224 and re-encoded: conversion-bound;
* ``mixed``: 300-2000 px JPEGs and PNGs stored as they are (``--format keep``): records of tens of KB
  to about a MB, the case where writing the shards costs the most.

A third table times the record writers alone, in this process (best of 3): 600 records of 20 KB to
1 MB written into one shard by each format's writer, with the sha256 the shard step takes of every
byte, so the cost a format adds per record shows apart from the conversion.

    .venv/bin/python benchmarks/bench_formats.py                       # both corpora, 3 runs each
    .venv/bin/python benchmarks/bench_formats.py --photo-images 3000 --mixed-images 1000 --runs 5

Prints a table and writes ``benchmarks/results/bench_formats-<time>.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import corpus  # noqa: E402
from bench_convert import timed  # noqa: E402
from common import CONVERT, RESULTS_DIR, package_dir, save_result  # noqa: E402

FORMATS = ("tfrecord", "array_record", "webdataset")
CORPUS_ARGS = {
    "photo": ("--image-size", "224", "--resize", "stretch", "--format", "jpeg"),
    "mixed": ("--format", "keep"),
}


def bench_corpus(kind: str, num_images: int, runs: int, extra: List[str]) -> Dict[str, dict]:
    """format -> its runs and medians on ``num_images`` images of corpus ``kind``."""
    src = os.path.join(RESULTS_DIR, f"corpus-{kind}-{num_images}")
    corpus.generate(src, num_images, kind=kind)
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
                    *CORPUS_ARGS[kind],
                    *extra,
                ]
                seconds, rss, cpu = timed(cmd, env)
                rows[file_format].append({"seconds": seconds, "peak_rss_mb": rss, "cpu_seconds": cpu})
                print(
                    f"{kind} run {run + 1}/{runs} {file_format:12s} {seconds:7.1f} s  "
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


class _Digesting:
    """A file written through a sha256, as the shard step writes its shards."""

    def __init__(self, f):
        self._f, self._hash, self._n = f, hashlib.sha256(), 0

    def write(self, data: bytes) -> None:
        self._hash.update(data)
        self._n += len(data)
        self._f.write(data)

    def tell(self) -> int:
        return self._n


def bench_writers(num_records: int = 600) -> Dict[str, dict]:
    """format -> seconds (best of 3) to write ``num_records`` records of 20 KB to 1 MB into one shard."""
    sys.path.insert(0, package_dir())
    from img2tfrecord.conversion.examples import encode_example
    from img2tfrecord.images.options import ConvertedImage
    from img2tfrecord.shard_formats import array_records, stream_writer

    rng = random.Random(0)
    records = [
        encode_example(
            ConvertedImage(rng.randbytes(rng.randrange(20_000, 1_000_000)), "jpeg", 100, 100, 3),
            i % 10,
            f"class_{i % 10:02d}",
            f"class_{i % 10:02d}/img_{i:07d}.jpg",
        )
        for i in range(num_records)
    ]
    folder = tempfile.mkdtemp(prefix="bench_formats-writers-")
    found = {}
    try:
        for file_format in FORMATS:
            best = float("inf")
            for _ in range(3):
                path = os.path.join(folder, file_format)
                start = time.perf_counter()
                if file_format == "array_record":
                    writer = array_records.ArrayRecordShardWriter(path)
                    for record in records:
                        writer.write(record)
                    writer.close()
                    with open(path, "rb") as f:
                        hashlib.sha256(f.read()).hexdigest()
                else:
                    with open(path, "wb") as f:
                        stream = stream_writer(file_format, _Digesting(f), "train-000000", False)
                        for record in records:
                            stream.write(record)
                        stream.close()
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
    parser.add_argument("--photo-images", type=int, default=3000)
    parser.add_argument("--mixed-images", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--convert-args", default="", help="extra arguments for every convert")
    parser.add_argument("--writers-only", action="store_true", help="only the table of the writers alone")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    results = {}
    for kind, num in (("photo", args.photo_images), ("mixed", args.mixed_images)):
        if num > 0 and not args.writers_only:
            results[kind] = {
                "num_images": num,
                "formats": bench_corpus(kind, num, args.runs, args.convert_args.split()),
            }
    print()
    print(f"{os.cpu_count()} cores, median of {args.runs} runs, load average at the start {load[0]:.2f}")
    print(
        f"{'corpus':8s} {'format':12s} {'img/s':>8s} {'seconds':>8s} {'peak RSS':>9s} {'CPU s':>8s} "
        f"{'vs tfrecord':>12s}"
    )
    for kind, doc in results.items():
        for file_format, s in doc["formats"].items():
            print(
                f"{kind:8s} {file_format:12s} {s['images_per_second']:8.1f} {s['median_seconds']:8.1f} "
                f"{s['peak_rss_mb']:6.0f} MB {s['median_cpu_seconds']:8.1f} {s['time_vs_tfrecord']:+11.1%}"
            )
    writers = bench_writers()
    print()
    print(f"the writers alone, {writers['tfrecord']['megabytes']:.0f} MB in 600 records, best of 3:")
    for file_format, row in writers.items():
        extra = row["seconds"] / writers["tfrecord"]["seconds"] - 1
        print(f"{file_format:12s} {row['seconds']:6.3f} s  {row['ms_per_record']:5.2f} ms/record  {extra:+6.1%}")
    save_result(
        "bench_formats",
        {
            "load_average_at_start": load,
            "load_average_at_end": os.getloadavg(),
            "runs": args.runs,
            "convert_args": args.convert_args,
            "corpora": results,
            "writers": writers,
        },
    )


if __name__ == "__main__":
    main()
