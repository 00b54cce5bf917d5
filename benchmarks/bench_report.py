"""How fast ``img2tfrecord report`` reads a dataset, against ``verify`` reading the same records.

Converts a photo-like corpus (``corpus.py``) once to 224x224 JPEG records,
in ``--num-shards`` shards per split, then runs, alternating, ``report --processes 1``, ``report`` with one
process per core, and ``verify`` (one process; it also reads and decodes
every record). Prints the median wall time of each whole command and the
records per second it gives, plus the read pass that ``report.json``
states.

    python benchmarks/bench_report.py --num-images 3000 --num-shards 8 --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import corpus  # noqa: E402


def cli(*args: str) -> float:
    """Run the CLI; its wall time in seconds."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "img2tfrecord", *args], capture_output=True, text=True, cwd=ROOT)
    elapsed = time.perf_counter() - started
    if proc.returncode not in (0,):
        raise SystemExit(f"img2tfrecord {args[0]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-images", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--num-shards", type=int, default=8, help="shards per split: report reads one shard per task")
    parser.add_argument("--workdir", default=None, help="keep the corpus and records here (default: a temp folder)")
    ns = parser.parse_args()
    work = ns.workdir or tempfile.mkdtemp(prefix="bench-report-")
    source, records = os.path.join(work, "corpus"), os.path.join(work, f"records-{ns.num_shards}")
    if not os.path.isdir(source):
        corpus.generate(source, ns.num_images)
    if not os.path.exists(os.path.join(records, "_SUCCESS")):
        cli(
            "convert",
            "--input",
            source,
            "--output",
            records,
            "--image-size",
            "224",
            "--no-analyze",
            "--overwrite",
            "--splits",
            "train=0.8,validation=0.1,test=0.1",
            "--num-shards",
            str(ns.num_shards),
            "--runner=FnApiRunner",
            "--direct_running_mode=in_memory",
        )
    with open(os.path.join(records, "dataset.json"), encoding="utf-8") as f:
        count = json.load(f)["accounting"]["written"]
    cores = len(os.sched_getaffinity(0))
    page = os.path.join(work, "report.html")
    commands = {
        "report --processes 1": ("report", records, "--output", page, "--processes", "1"),
        f"report --processes {cores}": ("report", records, "--output", page, "--processes", str(cores)),
        "verify": ("verify", records),
    }
    times = {name: [] for name in commands}
    read_rate = {name: [] for name in commands}
    for _ in range(ns.runs):
        for name, args in commands.items():
            times[name].append(cli(*args))
            if args[0] == "report":
                with open(os.path.join(work, "report.json"), encoding="utf-8") as f:
                    read_rate[name].append(json.load(f)["read"]["images_per_second"])
    print(
        f"{count} records of 224x224 JPEG in {ns.num_shards} shards per split, {ns.runs} runs, medians, {cores} cores"
    )
    print(f"{'command':<24} {'wall s':>8} {'records/s':>10} {'read pass records/s':>20}")
    for name in commands:
        wall = statistics.median(times[name])
        rate = f"{statistics.median(read_rate[name]):.0f}" if read_rate[name] else "-"
        print(f"{name:<24} {wall:>8.2f} {count / wall:>10.0f} {rate:>20}")


if __name__ == "__main__":
    main()
