"""``img2tfrecord report`` at ImageNet shape, against a ``convert --format keep --no-analyze`` of the same corpus.

For each size, an ImageNet-shaped corpus (``corpus.imagenet_shaped``: 1,000
classes of small images with planted copies and near variants) is converted
with ``--format keep --no-analyze`` and reported on, both timed in the same
run with the peak memory of their whole process tree (launcher and workers,
sampled from ``/proc``). The table gives, per size, both commands, the ratio
report / convert (the goal: at most 1), the page's size and what the report
found; then the growth between the smallest and largest size (linear = the
ratio of the sizes) and the report's memory per added record.

    .venv/bin/python benchmarks/bench_report.py                         # 50,000 and 200,000 images
    .venv/bin/python benchmarks/bench_report.py --sizes 1280000 --workdir /data/bench

Corpora and outputs stay in ``--workdir`` (default a temporary folder, removed
unless ``--keep``); a corpus already there is not written again. Prints a table
and writes ``benchmarks/results/bench_report-<time>.json``. The machine's load
average is printed beside the figures: times on a shared machine drift.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import corpus  # noqa: E402
from common import package_dir, peak_tree_rss, save_result  # noqa: E402


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _cli(*args: str) -> list:
    return [sys.executable, "-m", "img2tfrecord", *args]


SPLITS = "train=0.8,validation=0.1,test=0.1"  # planted copies land in different splits: leakage to find


def measure(workdir: str, size: int, classes: int, seed: int, splits: str = SPLITS) -> dict:
    """Write (or reuse) the corpus of ``size`` images, convert it, report on it; the figures of both commands."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=package_dir())
    started = time.perf_counter()
    made = corpus.imagenet_shaped(os.path.join(workdir, f"corpus-{size}"), size, classes, seed)
    corpus_seconds = time.perf_counter() - started
    records = os.path.join(workdir, f"records-{size}")
    load_before = _load()
    convert_s, convert_mb = peak_tree_rss(
        _cli(
            "convert",
            "--input",
            made.root,
            "--output",
            records,
            "--splits",
            splits,
            "--format",
            "keep",
            "--no-analyze",
            "--overwrite",
            "-q",
        ),
        env,
    )
    pages = os.path.join(workdir, f"report-{size}") + os.sep
    report_s, report_mb = peak_tree_rss(_cli("report", records, "--output", pages), env)
    load_after = _load()
    with open(os.path.join(pages, "report.json"), encoding="utf-8") as f:
        document = json.load(f)
    dups = document["duplicates"]
    return {
        "images": size,
        "classes": classes,
        "corpus_seconds": round(corpus_seconds, 1),
        "planted_copies": made.copies,
        "planted_near": made.near,
        "records": document["read"]["records"],
        "convert_seconds": round(convert_s, 1),
        "convert_peak_tree_mb": round(convert_mb),
        "report_seconds": round(report_s, 1),
        "report_peak_tree_mb": round(report_mb),
        "report_over_convert": round(report_s / convert_s, 3),
        "read_seconds": document["read"]["seconds"],
        "duplicate_search_seconds": document["read"]["duplicate_search_seconds"],
        "page_mb": round(os.path.getsize(os.path.join(pages, "report.html")) / 1e6, 2),
        "json_kb": round(os.path.getsize(os.path.join(pages, "report.json")) / 1e3, 1),
        "lines_mb": round(
            sum(os.path.getsize(os.path.join(pages, n)) for n in os.listdir(pages) if n.endswith(".jsonl")) / 1e6, 2
        ),
        "exact_groups": dups["exact"]["groups"],
        "near_groups": dups["near"]["groups"],
        "cross_split_pairs": dups["exact"]["cross_split_pairs"] + dups["near"]["cross_split_pairs"],
        "load_average_before": load_before,
        "load_average_after": load_after,
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="50000,200000", help="corpus sizes, comma separated")
    parser.add_argument("--classes", type=int, default=corpus.IMAGENET_CLASSES)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--splits", default=SPLITS, help=f"convert's --splits (default {SPLITS})")
    parser.add_argument("--workdir", default=None, help="keep corpora and outputs here (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    sizes = sorted(int(n) for n in args.sizes.split(","))
    work = args.workdir or tempfile.mkdtemp(prefix="bench_report-")
    os.makedirs(work, exist_ok=True)
    rows = []
    try:
        for size in sizes:
            row = measure(work, size, args.classes, args.seed, args.splits)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        if not args.workdir and not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    print()
    print(
        f"ImageNet-shaped corpus, {args.classes} classes, {len(os.sched_getaffinity(0))} cores; "
        "peak = summed RSS of the process tree"
    )
    print(
        f"{'images':>9} {'convert s':>10} {'conv MB':>8} {'report s':>9} {'rep MB':>7} {'rep/conv':>8} "
        f"{'read s':>7} {'search s':>8} {'page MB':>8} {'groups':>13} {'load (1/5/15 min)':>20}"
    )
    for r in rows:
        print(
            f"{r['images']:>9,} {r['convert_seconds']:>10.1f} {r['convert_peak_tree_mb']:>8} "
            f"{r['report_seconds']:>9.1f} "
            f"{r['report_peak_tree_mb']:>7} {r['report_over_convert']:>8.2f} {r['read_seconds']:>7.1f} "
            f"{r['duplicate_search_seconds']:>8.1f} {r['page_mb']:>8.2f} "
            f"{r['exact_groups']:>6}+{r['near_groups']:<6} {r['load_average_after']:>20}"
        )
    if len(rows) > 1:
        small, large = rows[0], rows[-1]
        linear = large["images"] / small["images"]
        per_record_kb = (
            (large["report_peak_tree_mb"] - small["report_peak_tree_mb"]) * 1024 / (large["images"] - small["images"])
        )
        print(
            f"growth {large['images']:,}/{small['images']:,} (linear = {linear:.1f}): report time "
            f"{large['report_seconds'] / small['report_seconds']:.2f}, convert time "
            f"{large['convert_seconds'] / small['convert_seconds']:.2f}; report memory "
            f"{large['report_peak_tree_mb'] / small['report_peak_tree_mb']:.2f}x, "
            f"{per_record_kb:.3f} KB per added record"
        )
    save_result(
        "bench_report",
        {"time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "rows": rows},
    )


if __name__ == "__main__":
    main()
