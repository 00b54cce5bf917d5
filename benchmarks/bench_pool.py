"""The conversion pool alone: one process against two, on the same work items.

Times ``ConversionPool`` (``conversion/pool.py``) converting every image of a
corpus with the run's ``ImageConverter`` and handing the records back in
order, as the shard step reads them, without Beam, listing or writing. The
speed-up of two processes over one is what the cores give for the
conversion work itself on this machine, the limit of any two-process
``convert`` for that work. Runs alternate, medians; the workers' start-up
is excluded (the pool is warmed first).

    .venv/bin/python benchmarks/bench_pool.py --corpus benchmarks/results/corpus-photo-12000 --format keep
    .venv/bin/python benchmarks/bench_pool.py --corpus benchmarks/results/corpus-photo-12000 --format jpeg

``--compare-resample`` instead times one process with ``--resample fast`` against one with
``--resample bicubic`` (Pillow's path for every image), alternating: the per-core speed of the
image core.

Prints a table and writes ``benchmarks/results/bench_pool-<time>.json``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import resource
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

from common import save_result  # noqa: E402

from img2tfrecord.conversion.converter import ImageConverter  # noqa: E402
from img2tfrecord.conversion.pool import ConversionPool  # noqa: E402
from img2tfrecord.images.options import ImageOptions  # noqa: E402
from img2tfrecord.model import WorkItem  # noqa: E402
from img2tfrecord.sources.layout import LAYOUT_CLASS  # noqa: E402


def work_items(folder: str):
    """Every file of a folder of class folders, as the pipeline's work items, in relpath order."""
    items = []
    for name in sorted(os.listdir(folder)):
        for file_name in sorted(os.listdir(os.path.join(folder, name))):
            path = os.path.join(folder, name, file_name)
            items.append(WorkItem(path, f"{name}/{file_name}", os.path.getsize(path)))
    return items


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def convert_all(converter, items, labels, processes: int) -> dict:
    """Seconds of converting ``items`` in a warmed pool; the processes' CPU seconds, their start-up included."""
    with ConversionPool(converter, processes) as pool:
        pool.put(items[: processes * 4], labels)  # start the processes before the clock
        for _ in pool.outputs(drain=True):
            pass
        cpu_before = children_cpu()  # processes reaped before this pool
        start = time.perf_counter()
        pool.put(items, labels)
        written = sum(1 for _, (tag, _) in pool.outputs(drain=True) if tag is None)
        seconds = time.perf_counter() - start
    return {"seconds": seconds, "records": written, "worker_cpu_seconds": children_cpu() - cpu_before}


def compare_resample(args) -> None:
    """One process, ``--resample fast`` against ``bicubic``, alternating runs; the median ratio."""
    size = (args.image_size, args.image_size)
    items = work_items(args.corpus)
    labels = sorted(os.listdir(args.corpus))
    rows = {}
    for resample in ("bicubic", "fast"):
        options = ImageOptions(size=size, resize=args.resize, format="jpeg", quality=90, resample=resample)
        rows[resample] = (ImageConverter(options, LAYOUT_CLASS, (("train", 1.0),), 42), [])
    for run in range(args.runs):
        for resample, (converter, results) in rows.items():
            result = convert_all(converter, items, labels, 1)
            results.append(result)
            print(
                f"run {run + 1}/{args.runs} {resample:8} {result['seconds']:7.2f} s "
                f"{len(items) / result['seconds']:7.1f} img/s",
                flush=True,
            )
    medians = {name: statistics.median(r["seconds"] for r in results) for name, (_, results) in rows.items()}
    ratio = medians["bicubic"] / medians["fast"]
    print(f"\n{len(items)} images, --resize {args.resize}, one process, median of {args.runs} runs")
    for name, seconds in medians.items():
        print(f"--resample {name:8} {seconds:7.2f} s  {len(items) / seconds:7.1f} img/s")
    print(f"fast / bicubic speed: {ratio:.2f}x")
    save_result(
        "bench_pool_resample",
        {
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "corpus": args.corpus,
            "num_images": len(items),
            "resize": args.resize,
            "runs": {name: results for name, (_, results) in rows.items()},
            "median_seconds": medians,
            "speedup": ratio,
        },
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", required=True, help="a folder of class folders (benchmarks/corpus.py)")
    parser.add_argument("--format", choices=("jpeg", "keep"), default="jpeg")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--resize", choices=("stretch", "fit", "fill"), default="stretch")
    parser.add_argument("--compare-resample", action="store_true", help="one process: fast against bicubic")
    args = parser.parse_args(argv)
    if args.compare_resample:
        return compare_resample(args)

    if args.format == "keep":
        options = ImageOptions(format="keep")
    else:
        size = (args.image_size, args.image_size)
        options = ImageOptions(size=size, resize="stretch", format="jpeg", quality=90)
    converter = ImageConverter(options, LAYOUT_CLASS, (("train", 1.0),), 42)
    items = work_items(args.corpus)
    labels = sorted(os.listdir(args.corpus))
    rows = {1: [], 2: []}
    for run in range(args.runs):
        for processes in rows:
            result = convert_all(converter, items, labels, processes)
            rows[processes].append(result)
            print(
                f"run {run + 1}/{args.runs} {processes} process(es) {result['seconds']:7.2f} s "
                f"{len(items) / result['seconds']:7.1f} img/s",
                flush=True,
            )
    medians = {n: statistics.median(r["seconds"] for r in runs) for n, runs in rows.items()}
    speedup = medians[1] / medians[2]
    print(f"\n{len(items)} images, format {args.format}, median of {args.runs} runs")
    for n, seconds in medians.items():
        print(f"{n} process(es): {seconds:7.2f} s  {len(items) / seconds:7.1f} img/s")
    print(f"two processes / one: {speedup:.2f}x")
    result = {
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "corpus": args.corpus,
        "num_images": len(items),
        "format": args.format,
        "cpu_count": os.cpu_count(),
        "runs": {str(n): runs for n, runs in rows.items()},
        "median_seconds": {str(n): s for n, s in medians.items()},
        "speedup": speedup,
    }
    save_result("bench_pool", result)


if __name__ == "__main__":
    main()
