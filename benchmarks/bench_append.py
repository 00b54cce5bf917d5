"""A nightly append against a full conversion: ``convert --append`` of 1% new files, and of nothing new.

The input is the cached benchmark corpus less every 100th file (hard links, so nothing is copied);
``convert`` converts it whole, the held-back files are linked in, ``convert --append`` converts
them, and a second ``--append`` finds nothing new. ``--input-kind manifest`` gives the same files
as a CSV manifest (path,label) that gains the new rows; ``--input-kind archives`` packs them into
zip archives, one per class (stored, not compressed), and the new files into one more. Each command
is a fresh process timed from start to exit with ``/usr/bin/time -v`` (CPU includes the conversion
processes), in the same run, so the ratios compare like with like. Also reported: the ledger's bytes
per million inputs, and what listing the input folder costs per 1,000 files (with sizes and change
markers).

    .venv/bin/python benchmarks/bench_append.py --num-images 24000 --runs 2
    .venv/bin/python benchmarks/bench_append.py --kind mixed --num-images 12000 --runs 1
    .venv/bin/python benchmarks/bench_append.py --input-kind manifest --convert-args=--no-analyze

Prints a table and writes ``benchmarks/results/bench_append-<time>.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "src"))

import corpus  # noqa: E402
from bench_convert import timed  # noqa: E402
from common import package_dir, save_result  # noqa: E402


def _link_tree(src: str, dst: str, keep) -> int:
    """Hard-link the files of ``src`` for which ``keep(relpath)`` holds into ``dst``; -> how many."""
    count = 0
    for folder, _, names in os.walk(src):
        for name in sorted(names):
            path = os.path.join(folder, name)
            relpath = os.path.relpath(path, src)
            if keep(relpath):
                target = os.path.join(dst, relpath)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                os.link(path, target)
                count += 1
    return count


def _write_manifest(path: str, src: str, relpaths) -> None:
    """A CSV manifest naming ``relpaths`` (relative to the manifest's folder), labelled by their folder."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("path,label\n")
        for relpath in relpaths:
            f.write(f"{relpath},{relpath.split('/')[0]}\n")


def _write_archives(folder: str, src: str, relpaths, name=None) -> None:
    """``relpaths`` of ``src`` packed into stored zips in ``folder``: one per class, or all in ``name``."""
    groups = {}
    for relpath in relpaths:
        groups.setdefault(name or f"{relpath.split('/')[0]}.zip", []).append(relpath)
    os.makedirs(folder, exist_ok=True)
    for archive, members in groups.items():
        with zipfile.ZipFile(os.path.join(folder, archive), "w", zipfile.ZIP_STORED) as z:
            for relpath in members:
                z.write(os.path.join(src, relpath), relpath)


def _listing_seconds(folder: str) -> float:
    """Seconds to list ``folder`` with sizes and change markers, as a run's launch does (median of 3)."""
    from img2tfrecord.pipeline.listing import list_stamped

    times = []
    for _ in range(3):
        start = time.perf_counter()
        list_stamped(folder.rstrip("/") + "/**")
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-images", type=int, default=24000)
    parser.add_argument("--kind", choices=corpus.KINDS, default="photo")
    parser.add_argument("--every", type=int, default=100, help="every N-th file is new (default 100: 1%%)")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--convert-args", default="", help="extra arguments for every convert, e.g. '--no-analyze'")
    parser.add_argument("--input-kind", choices=("folder", "manifest", "archives"), default="folder")
    args = parser.parse_args(argv)

    src = os.path.join(HERE, "results", f"corpus-{args.kind}-{args.num_images}")
    corpus.generate(src, args.num_images, kind=args.kind)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=package_dir())
    relpaths = sorted(
        os.path.relpath(os.path.join(folder, name), src) for folder, _, names in os.walk(src) for name in names
    )
    new = set(relpaths[:: args.every])
    rows = {"full": [], "append": [], "nothing new": []}
    ledger_bytes = listing = None
    work = tempfile.mkdtemp(prefix="bench_append-")
    try:
        for run in range(args.runs):
            data, out = os.path.join(work, f"in-{run}"), os.path.join(work, f"out-{run}")
            kept = [r for r in relpaths if r not in new]
            if args.input_kind == "archives":
                _write_archives(data, src, kept)
                given = os.path.join(data, "*")
            else:
                _link_tree(src, data, lambda r: r not in new)
                given = data
            if args.input_kind == "manifest":
                given = os.path.join(data, "labels.csv")
                _write_manifest(given, src, kept)
            cmd = [sys.executable, "-m", "img2tfrecord", "convert", "--input", given, "--output", out, "-q"]
            cmd += ["--image-size", "224", "--format", "jpeg", "--quality", "90", *args.convert_args.split()]
            for name in rows:
                if name == "append":
                    if args.input_kind == "archives":
                        _write_archives(data, src, sorted(new), name="new.zip")
                    else:
                        _link_tree(src, data, lambda r: r in new)
                    if args.input_kind == "manifest":
                        _write_manifest(given, src, relpaths)
                seconds, rss, cpu = timed(cmd + (["--append"] if name != "full" else []), env)
                rows[name].append({"seconds": seconds, "cpu_seconds": cpu, "peak_rss_mb": rss})
                print(f"run {run + 1}/{args.runs} {name:12s} {seconds:7.1f} s  {cpu:7.1f} s CPU  {rss:5.0f} MB")
            ledger_bytes = sum(
                os.path.getsize(os.path.join(out, "ledger", name)) for name in os.listdir(os.path.join(out, "ledger"))
            )
            listing = _listing_seconds(data)
            shutil.rmtree(data, ignore_errors=True)
            shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    median = {name: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for name, runs in rows.items()}
    full = median["full"]
    summary = {
        "append_wall_ratio": median["append"]["seconds"] / full["seconds"],
        "append_cpu_ratio": median["append"]["cpu_seconds"] / full["cpu_seconds"],
        "nothing_new_wall_ratio": median["nothing new"]["seconds"] / full["seconds"],
        "nothing_new_cpu_ratio": median["nothing new"]["cpu_seconds"] / full["cpu_seconds"],
        "ledger_bytes_per_million_inputs": (ledger_bytes or 0) / len(relpaths) * 1e6,
        "local_listing_seconds_per_1000_files": (listing or 0.0) / len(relpaths) * 1000,
    }
    print(f"{args.num_images} {args.kind} images ({args.input_kind}), {len(new)} new; medians of {args.runs} run(s):")
    for name, m in median.items():
        print(f"  {name:12s} {m['seconds']:7.1f} s  {m['cpu_seconds']:7.1f} s CPU  {m['peak_rss_mb']:5.0f} MB")
    for key, value in summary.items():
        print(f"  {key}: {value:.4g}")
    save_result(
        "bench_append",
        {
            "num_images": args.num_images,
            "kind": args.kind,
            "input_kind": args.input_kind,
            "new_files": len(new),
            "convert_args": args.convert_args,
            "runs": rows,
            "medians": median,
            "summary": summary,
        },
    )


if __name__ == "__main__":
    main()
