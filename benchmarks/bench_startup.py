"""The one-core start-up of ``convert``: seconds from the command's start until its first shard converts.

Each run is a fresh ``convert`` process over the cached benchmark corpus; a polling loop in this
script notes when the first shard's temp file appears in the run's staging folder
(``.tmp-run-*/shards/``), then lets the run finish. ``--compare CODE_DIR`` alternates every run with
the same command run from another checkout (e.g. a ``git worktree`` of an earlier commit), so the
two are measured in the same conditions. Medians are reported.

    .venv/bin/python benchmarks/bench_startup.py --num-images 24000 --runs 2
    .venv/bin/python benchmarks/bench_startup.py --num-images 24000 --runs 2 --convert-args=--no-analyze
    .venv/bin/python benchmarks/bench_startup.py --num-images 24000 --compare /tmp/older-checkout

Prints a table and writes ``benchmarks/results/bench_startup-<time>.json``.
"""

from __future__ import annotations

import argparse
import glob
import os
import shlex
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
from common import RESULTS_DIR, save_result  # noqa: E402


def time_run(code: str, src: str, out: str, convert_args) -> dict:
    """One ``convert`` started in ``code`` (its package wins over the installed one): seconds to its
    first shard's temp file and to its exit."""
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "img2tfrecord", "convert", "--input", src, "--output", out, "--quiet"]
    start = time.perf_counter()
    proc = subprocess.Popen([*command, *convert_args], cwd=code, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first = None
    while proc.poll() is None:
        if first is None and glob.glob(os.path.join(out, ".tmp-run-*", "shards", "*", "*")):
            first = time.perf_counter() - start
        time.sleep(0.02)
    total = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"convert failed in {code} ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
    return {"first_shard_s": round(first, 2) if first is not None else None, "run_s": round(total, 1)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-images", type=int, default=24000)
    parser.add_argument("--kind", choices=corpus.KINDS, default="photo")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--convert-args", default="", help="extra convert arguments, e.g. '--no-analyze'")
    parser.add_argument("--compare", metavar="CODE_DIR", help="another checkout, run alternately with this one")
    args = parser.parse_args(argv)

    src = os.path.join(RESULTS_DIR, f"corpus-{args.kind}-{args.num_images}")
    corpus.generate(src, args.num_images, kind=args.kind)
    convert_args = ["--image-size", "224", "--resize", "stretch", *shlex.split(args.convert_args)]
    codes = {"this": ROOT, **({"compare": os.path.abspath(args.compare)} if args.compare else {})}
    runs = {name: [] for name in codes}
    with tempfile.TemporaryDirectory(prefix="bench_startup-") as tmp:
        for i in range(args.runs):
            for name, code in codes.items():
                result = time_run(code, src, os.path.join(tmp, "out"), convert_args)
                runs[name].append(result)
                print(f"run {i + 1} {name}: first shard after {result['first_shard_s']} s, run {result['run_s']} s")
    summary = {
        name: {
            "first_shard_s_median": statistics.median(r["first_shard_s"] for r in found),
            "run_s_median": statistics.median(r["run_s"] for r in found),
        }
        for name, found in runs.items()
    }
    print(f"\n{args.num_images} {args.kind} images, convert {' '.join(convert_args)}")
    for name, s in summary.items():
        print(f"  {name:8s} first shard {s['first_shard_s_median']:6.2f} s   run {s['run_s_median']:6.1f} s")
    save_result(
        "bench_startup",
        {
            "num_images": args.num_images,
            "kind": args.kind,
            "convert_args": convert_args,
            "codes": codes,
            "runs": runs,
            "summary": summary,
        },
    )


if __name__ == "__main__":
    main()
