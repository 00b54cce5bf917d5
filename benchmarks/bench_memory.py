"""Peak memory of a local conversion as the dataset grows: the whole process tree, sampled.

``convert`` runs its launcher and its conversion processes; the figure that
matters is the peak of the *sum* of their resident sets, sampled every
0.2 s from ``/proc`` (``/usr/bin/time`` reports one process only). Each mode
runs at every size on the same corpus; the table gives the peak per size and
the ratio of the largest to the smallest. A conversion whose memory does not
grow with the dataset has a ratio near 1.

    .venv/bin/python benchmarks/bench_memory.py                       # 6,000 and 48,000 images
    .venv/bin/python benchmarks/bench_memory.py --sizes 2000,8000 --kind mixed
    .venv/bin/python benchmarks/bench_memory.py --sizes 50000,200000 --kind imagenet --modes "keep --no-analyze"

``--kind imagenet`` is ``corpus.imagenet_shaped`` (1,000 classes of small JPEGs). The table also gives the
growth per added input (KB of peak per input between the smallest and the largest size): what the
launcher holds per input, and what a shard's writer holds per item of its shard where the smaller size
fills its shards less (``--args "--shard-size-mb 16"`` fills them at both sizes). ``--package-dir`` runs
another checkout's package (a before/after comparison).

Prints a table and writes ``benchmarks/results/bench_memory-<time>.json``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import corpus  # noqa: E402
from common import CONVERT, package_dir, peak_tree_rss, save_result  # noqa: E402

MODES = {
    "keep --no-analyze": ["--format", "keep", "--no-analyze"],
    "jpeg 224 + analysis": ["--image-size", "224", "--resize", "stretch", "--format", "jpeg", "--quality", "90"],
}


def corpus_files(kind: str, src: str, size: int):
    """``(class folder, path)`` of the first ``size`` images of a corpus of ``kind`` written at ``src``."""
    if kind == "imagenet":  # every class, round robin: the i-th image of each class, then the (i+1)-th
        folders = sorted(os.listdir(src))
        files = {
            c: sorted(os.listdir(os.path.join(src, c)), key=lambda n: int(n.rsplit("_", 1)[1].split(".")[0]))
            for c in folders
        }
        taken, depth = 0, 0
        while taken < size:
            for cls in folders:
                if depth < len(files[cls]) and taken < size:
                    yield cls, os.path.join(src, cls, files[cls][depth])
                    taken += 1
            depth += 1
        return
    for i in range(size):
        cls = f"class_{i % 10:02d}"
        for ext in (".jpg", ".png"):
            path = os.path.join(src, cls, f"img_{i:07d}{ext}")
            if os.path.exists(path):
                yield cls, path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="6000,48000", help="dataset sizes, comma separated")
    parser.add_argument("--kind", choices=corpus.KINDS + ("imagenet",), default="photo")
    parser.add_argument("--package-dir", default=package_dir(), help="the folder img2tfrecord is imported from")
    parser.add_argument("--args", default="", help="more convert arguments for every mode, e.g. '--shard-size-mb 16'")
    parser.add_argument("--modes", default=",".join(MODES), help="modes to run, comma separated: " + ", ".join(MODES))
    args = parser.parse_args(argv)
    sizes = sorted(int(n) for n in args.sizes.split(","))
    modes = [m.strip() for m in args.modes.split(",")]

    results_dir = os.path.join(HERE, "results")
    os.makedirs(results_dir, exist_ok=True)
    src = os.path.join(results_dir, f"corpus-{args.kind}-{sizes[-1]}")
    if args.kind == "imagenet":
        corpus.imagenet_shaped(src, sizes[-1])
    else:
        corpus.generate(src, sizes[-1], kind=args.kind)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=args.package_dir)
    work = tempfile.mkdtemp(prefix="bench_memory-")
    rows = []
    try:
        for size in sizes:
            # The first ``size`` images of the corpus, as hard links: the same files at every size.
            subset = os.path.join(work, f"in-{size}")
            for cls, path in corpus_files(args.kind, src, size):
                os.makedirs(os.path.join(subset, cls), exist_ok=True)
                os.link(path, os.path.join(subset, cls, os.path.basename(path)))
            for mode in modes:
                out = os.path.join(work, "out")
                cmd = [
                    *CONVERT,
                    "--input",
                    subset,
                    "--output",
                    out,
                    "-q",
                    *MODES[mode],
                    *args.args.split(),
                ]
                seconds, peak = peak_tree_rss(cmd, env)
                out_mb = (
                    sum(os.path.getsize(os.path.join(out, n)) for n in os.listdir(out) if n.endswith(".tfrecord")) / 1e6
                )
                rows.append(
                    {"images": size, "mode": mode, "seconds": seconds, "peak_tree_rss_mb": peak, "output_mb": out_mb}
                )
                print(
                    f"{size:7d} images  {mode:22s} {seconds:7.1f} s  peak {peak:7.0f} MB  output {out_mb:8.0f} MB",
                    flush=True,
                )
                shutil.rmtree(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print()
    print(f"{args.kind} corpus, {os.cpu_count()} cores; peak of the summed RSS of the process tree")
    for mode in modes:
        peaks = {r["images"]: r["peak_tree_rss_mb"] for r in rows if r["mode"] == mode}
        ratio = peaks[sizes[-1]] / peaks[sizes[0]]
        per_input_kb = (peaks[sizes[-1]] - peaks[sizes[0]]) * 1024 / max(1, sizes[-1] - sizes[0])
        cells = "  ".join(f"{n}: {peaks[n]:.0f} MB" for n in sizes)
        print(f"{mode:22s} {cells}  ratio {sizes[-1]}/{sizes[0]}: {ratio:.2f}  {per_input_kb:.2f} KB per added input")
    save_result(
        "bench_memory",
        {
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "kind": args.kind,
            "package_dir": args.package_dir,
            "args": args.args,
            "load_average": os.getloadavg(),
            "cpu_count": os.cpu_count(),
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
