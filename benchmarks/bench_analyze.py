"""Cost of the tf.Transform analysis: ``convert`` with and without ``--no-analyze``.

    .venv/bin/python benchmarks/bench_analyze.py [--images 12000 | --corpus DIR] [--runs 5]

The corpus is photo-like JPEGs from ``benchmarks/corpus.py`` (ImageNet-sized,
~45 KB), written once into ``benchmarks/results/analyze-corpus-<images>/images``
and reused. Each run is the real CLI in a fresh process, as a user runs it:

    python -m img2tfrecord convert --input <corpus> --output <out> \\
        --image-size 224 --resize stretch --format jpeg --overwrite -q [--no-analyze | --exact-statistics]

with the default local runner, in three modes: ``--no-analyze``, the
default analysis, and ``--exact-statistics`` (the stored JPEGs decoded
again for the statistics). Runs alternate between the modes (the order
flips every round). Reported: median wall time and median CPU seconds
(user + sys of the child, less sensitive to other load on the machine)
per mode, the time each analysis adds as a fraction of the
``--no-analyze`` time (target <= 25% wall for the default; as the ratio of
the medians and as the median of each round's own ratio), how far the
default statistics are from the exact ones, and the load average around
the runs. Results go to ``benchmarks/results/bench_analyze-<time>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(ROOT, "src"), HERE]

from common import CONVERT, package_dir, save_result  # noqa: E402
from common import RESULTS_DIR as RESULTS  # noqa: E402

IMAGE_SIZE = 224
BASE, DEFAULT, EXACT = "--no-analyze", "analyze (default)", "--exact-statistics"
MODES = {BASE: ["--no-analyze"], DEFAULT: [], EXACT: ["--exact-statistics"]}
TARGET = 0.25


def build_corpus(images: int) -> str:
    import corpus

    src = os.path.join(RESULTS, f"analyze-corpus-{images}", "images")
    print(f"corpus: {images} photo-like JPEGs in {src}", flush=True)
    corpus.generate(src, images)  # skips files already there
    return src


def convert_once(src: str, out: str, extra: List[str]) -> Dict[str, float]:
    cmd = [
        *CONVERT,
        "--input",
        src,
        "--output",
        out,
        "--image-size",
        str(IMAGE_SIZE),
        "--resize",
        "stretch",
        "--format",
        "jpeg",
        "--overwrite",
        "-q",
        *extra,
    ]
    env = dict(os.environ, PYTHONPATH=package_dir(), TF_CPP_MIN_LOG_LEVEL="2")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"convert failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu}


def main(argv: List[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=12000, help="corpus size (default 12000, as bench_convert)")
    parser.add_argument(
        "--runs", type=int, default=5, help="timed runs per mode (default 5; single runs drift by up to 10%%)"
    )
    parser.add_argument(
        "--corpus", default=None, help="an existing corpus folder (SRC/<class>/<file>) instead of --images"
    )
    args = parser.parse_args(argv)

    src = os.path.abspath(args.corpus) if args.corpus else build_corpus(args.images)
    work = os.path.join(RESULTS, f"analyze-corpus-{args.images}" if not args.corpus else "analyze-outputs")
    outs = {mode: os.path.join(work, f"out-{i}") for i, mode in enumerate(MODES)}
    load_before = os.getloadavg()
    runs: Dict[str, List[Dict[str, float]]] = {mode: [] for mode in MODES}
    for r in range(args.runs):
        order = list(MODES) if r % 2 == 0 else list(reversed(MODES))
        for mode in order:
            result = convert_once(src, outs[mode], MODES[mode])
            runs[mode].append(result)
            print(
                f"run {r + 1}/{args.runs} {mode:<18} {result['wall_s']:7.2f} s wall {result['cpu_s']:7.2f} s cpu",
                flush=True,
            )
    load_after = os.getloadavg()

    summary = {
        mode: {
            "median_wall_s": statistics.median(r["wall_s"] for r in results),
            "median_cpu_s": statistics.median(r["cpu_s"] for r in results),
            "runs": results,
        }
        for mode, results in runs.items()
    }
    base = summary[BASE]
    # Ratio of the medians, and the median of each round's own ratio: the modes of one round run
    # back to back, so the second is less sensitive to the machine's load drifting between rounds.
    added = {
        mode: {
            "wall": summary[mode]["median_wall_s"] / base["median_wall_s"] - 1,
            "cpu": summary[mode]["median_cpu_s"] / base["median_cpu_s"] - 1,
            "wall_per_round": statistics.median(r["wall_s"] / b["wall_s"] - 1 for r, b in zip(runs[mode], runs[BASE])),
        }
        for mode in (DEFAULT, EXACT)
    }
    from img2tfrecord.schemas import output_files

    stats = {}
    for mode in (DEFAULT, EXACT):
        with open(os.path.join(outs[mode], output_files.MANIFEST_FILE), encoding="utf-8") as f:
            stats[mode] = json.load(f).get(output_files.STATISTICS)
    mean_diff = max(abs(a - b) for a, b in zip(stats[DEFAULT]["pixel_mean"], stats[EXACT]["pixel_mean"]))
    std_diff = max(abs(a / b - 1) for a, b in zip(stats[DEFAULT]["pixel_std"], stats[EXACT]["pixel_std"]))

    print()
    print(f"{'mode':<20}{'wall s (median)':>18}{'cpu s (median)':>18}{'added wall':>12}{'added cpu':>12}")
    for mode, s in summary.items():
        extra = f"{added[mode]['wall']:>+12.1%}{added[mode]['cpu']:>+12.1%}" if mode in added else ""
        print(f"{mode:<20}{s['median_wall_s']:>18.2f}{s['median_cpu_s']:>18.2f}{extra}")
    print(
        f"added by the default analysis: {added[DEFAULT]['wall']:+.1%} wall "
        f"({summary[DEFAULT]['median_wall_s'] - base['median_wall_s']:+.2f} s; target <= {TARGET:.0%} wall); "
        f"median of the rounds' own ratios {added[DEFAULT]['wall_per_round']:+.1%}"
    )
    print(
        f"default vs exact statistics: mean differs by at most {mean_diff:.1e}, std by at most {std_diff:.2%} "
        f"(per channel, [0, 1] units)"
    )
    print(f"load average before/after: {load_before[0]:.2f} / {load_after[0]:.2f} on {os.cpu_count()} CPUs")

    save_result(
        "bench_analyze",
        {
            "corpus": src,
            "images": args.images,
            "image_size": IMAGE_SIZE,
            "settings": vars(args),
            "machine": {
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
                "loadavg_before": load_before,
                "loadavg_after": load_after,
            },
            "added": added,
            "target_added_wall": TARGET,
            "modes": summary,
            "statistics": stats,
            "default_vs_exact": {"max_mean_difference": mean_diff, "max_std_relative_difference": std_diff},
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
