"""``img2tfrecord report`` at ImageNet shape, against a ``convert --format keep --no-analyze`` of the same corpus.

For each size, an ImageNet-shaped corpus (``corpus.imagenet_shaped``: 1,000
classes of small images with planted copies and near variants) is converted
with ``--format keep --no-analyze`` and reported on, both timed in the same
run with the peak memory of their whole process tree (launcher and workers,
sampled from ``/proc``). The table gives, per size, both commands, the ratio
report / convert (the goal: at most 1), the page's size and what the report
found; then the growth between the smallest and largest size (linear = the
ratio of the sizes) and the report's memory per added record.

``--corpus frames`` writes instead a corpus where most records fall into
near-duplicate groups, as video frames, tiles and scans do: groups of 5 to 65
frames (a base picture with a little noise and a brightness shift each, so
most frames hash apart by a few bits, some alike) make
``--duplicate-share`` (default 0.96) of the images, the rest are distinct.
The report's peak memory should not depend on that share.

``--search-only`` measures the duplicate search alone, in process: for each
size, a table of that many records with random hashes (distinct) and one
with ``--duplicate-share`` of them in groups of 5 to 65 hashes within 3 bits
of their group's base, each searched in a fresh process; the figure is the
process's peak RSS above the table's (no corpus is written; a minute or two).

Peak memory is sampled twice per tick: the summed RSS of the tree (shared
pages counted once per process) and the summed PSS (``/proc/<pid>/smaps_rollup``,
shared pages split between the processes sharing them: counted once overall).

    .venv/bin/python benchmarks/bench_report.py                         # 50,000 and 200,000 images
    .venv/bin/python benchmarks/bench_report.py --sizes 1280000 --workdir /data/bench
    .venv/bin/python benchmarks/bench_report.py --corpus frames --sizes 20000,80000
    .venv/bin/python benchmarks/bench_report.py --search-only --sizes 50000,200000

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

FRAMES_GROUP_SIZES = (5, 65)  # frames per near-duplicate group of the frames corpus (uniform)
_FRAMES_CHUNK = 40  # groups per task of the writing processes


def _tree(root: int) -> list:
    """``root`` and its descendants."""
    children: dict = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(name))
            except (OSError, IndexError, ValueError):
                pass
    tree, frontier = [root], [root]
    while frontier:
        for child in children.get(frontier.pop(), ()):
            tree.append(child)
            frontier.append(child)
    return tree


def _tree_memory_mb(root: int) -> tuple:
    """(summed RSS, summed PSS) of ``root`` and its descendants, in MB."""
    rss = pss = 0
    for pid in _tree(root):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith(("Rss:", "Pss:")):
                        kb = int(line.split()[1])
                        if line.startswith("Rss:"):
                            rss += kb
                        else:
                            pss += kb
        except (OSError, IndexError, ValueError):
            pass
    return rss / 1024, pss / 1024


def peak_tree_memory(cmd: list, env: dict, interval: float = 0.2) -> tuple:
    """(seconds, peak summed RSS MB, peak summed PSS MB) of a command and its descendants."""
    import subprocess

    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak_rss = peak_pss = 0.0
    while proc.poll() is None:
        rss, pss = _tree_memory_mb(proc.pid)
        peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
        time.sleep(interval)
    assert proc.stderr is not None
    stderr = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode:
        raise RuntimeError(f"{cmd[:5]} failed ({proc.returncode}):\n{stderr[-3000:]}")
    return time.perf_counter() - start, peak_rss, peak_pss


class FramesCorpus:
    def __init__(self, root: str, images: int, grouped: int, groups: int) -> None:
        self.root, self.images, self.grouped, self.groups = root, images, grouped, groups
        self.copies, self.near = 0, grouped


def _frames_plan(num_images: int, share: float, seed: int) -> list:
    """(first image, frames) of every group, frames 1 for a distinct image; ``share`` of the images in groups."""
    import random

    rng = random.Random(f"frames/{seed}")
    plan, image = [], 0
    while image < num_images:
        if rng.random() < share:
            size = min(num_images - image, rng.randint(*FRAMES_GROUP_SIZES))
        else:
            size = 1
        plan.append((image, size))
        image += size
    return plan


def _write_frames(task: tuple) -> None:
    import io
    import random

    import numpy as np
    from PIL import Image

    root, num_images, classes, seed, groups = task
    for first, size in groups:
        img, fmt, quality = corpus._picture(seed, first)
        base = np.asarray(img.convert("RGB"), dtype=np.int16)
        rng = random.Random(f"frame/{seed}/{first}")
        noise = np.random.default_rng(rng.randrange(1 << 30))
        for image in range(first, first + size):
            pixels = base if size == 1 else base + rng.randint(-3, 3) + noise.integers(-6, 7, base.shape)
            frame = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
            name = corpus.wnid(image * classes // num_images)
            os.makedirs(os.path.join(root, name), exist_ok=True)
            buf = io.BytesIO()
            frame.save(buf, format="JPEG", quality=quality or 90)
            with open(os.path.join(root, name, f"{name}_{image}.JPEG"), "wb") as f:
                f.write(buf.getvalue())


def frames(root: str, num_images: int, classes: int, seed: int, share: float) -> FramesCorpus:
    """A corpus of ``num_images`` small JPEGs, ``share`` of them frames of near-duplicate groups (written once)."""
    import multiprocessing

    plan = _frames_plan(num_images, share, seed)
    made = FramesCorpus(root, num_images, sum(n for _, n in plan if n > 1), sum(n > 1 for _, n in plan))
    stamp = root.rstrip("/") + ".frames.json"
    wanted = {"images": num_images, "classes": classes, "seed": seed, "share": share}
    if os.path.exists(stamp):
        with open(stamp, encoding="utf-8") as f:
            if json.load(f) == wanted:
                return made
    tasks = [(root, num_images, classes, seed, plan[i : i + _FRAMES_CHUNK]) for i in range(0, len(plan), _FRAMES_CHUNK)]
    with multiprocessing.get_context("fork").Pool(len(os.sched_getaffinity(0))) as pool:
        for _ in pool.imap_unordered(_write_frames, tasks):
            pass
    with open(stamp, "w", encoding="utf-8") as f:
        json.dump(wanted, f)
    return made


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _cli(*args: str) -> list:
    return [sys.executable, "-m", "img2tfrecord", *args]


SPLITS = "train=0.8,validation=0.1,test=0.1"  # planted copies land in different splits: leakage to find


def _convert(root: str, records: str, splits: str, env: dict) -> tuple:
    """(seconds, peak summed RSS MB) of ``convert --format keep --no-analyze`` of ``root`` into ``records``."""
    return peak_tree_rss(
        _cli(
            "convert",
            "--input",
            root,
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


def _synthetic_table(n: int, share: float, seed: int = 0):
    """A record table of ``n`` records in 3 splits, ``share`` of them in near-duplicate hash groups."""
    import random

    import numpy as np

    from img2tfrecord.report import record_table
    from img2tfrecord.report.shard_scan import ShardColumns

    rng, draw = np.random.default_rng(seed), random.Random(seed)
    hashes, i = np.empty(n, np.uint64), 0
    while i < n:
        size = min(n - i, draw.randint(*FRAMES_GROUP_SIZES)) if draw.random() < share else 1
        flips = np.zeros(size, np.uint64)
        for _ in range(3):
            use = rng.random(size) < 0.5
            flips[use] |= np.uint64(1) << rng.integers(0, 64, size).astype(np.uint64)[use]
        hashes[i : i + size] = rng.integers(0, 2**63, dtype=np.uint64) ^ flips
        i += size
    splits, classes = ["train", "validation", "test"], tuple(f"c{c}" for c in range(1000))
    builder = record_table.TableBuilder(splits, classes)
    for start in range(0, n, 2000):
        m = min(2000, n - start)
        names = [f"n{(start + j) % 1000:08d}/img_{start + j}.JPEG".encode() for j in range(m)]
        columns = ShardColumns(
            np.arange(m, dtype=np.int32),
            np.arange(m, dtype=np.int64) * 1000,
            rng.integers(0, 1000, m).astype(np.int32),
            rng.integers(0, 256, (m, 32), dtype=np.uint8),
            hashes[start : start + m],
            np.ones(m, bool),
            b"".join(names),
            np.cumsum([len(x) for x in names]).astype(np.int64),
            classes,
        )
        builder.add(f"shard-{start // 2000:05d}", splits[(start // 2000) % 3], columns)
    return builder.build()


def _search_child(n: int, share: float) -> None:
    """Print the figures of one in-process search (run in a fresh process)."""
    import resource

    from img2tfrecord.report import duplicates, group_lines

    table = _synthetic_table(n, share)
    with open("/proc/self/statm") as f:
        before = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    resource.getrusage(resource.RUSAGE_SELF)
    top = group_lines.TopGroups(100, 12, 4)
    lines = [0]

    def emit(group) -> None:
        lines[0] += len(json.dumps(group_lines.group_json(group)))
        top.offer(group)

    started = time.perf_counter()
    found = duplicates.search(table, 6, emit)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    row = {
        "records": n,
        "duplicate_share": share,
        "grouped_records": found.near.records + found.exact.records,
        "near_groups": found.near.groups,
        "table_mb": round(before),
        "peak_mb": round(peak),
        "search_mb": round(peak - before),
        "search_seconds": round(seconds, 1),
    }
    print(json.dumps(row), flush=True)


def search_only(sizes: list, share: float) -> list:
    """The duplicate search's own peak memory, distinct and with ``share`` in groups, one process each."""
    import subprocess

    env = dict(os.environ, PYTHONPATH=package_dir())
    rows = []
    for n in sizes:
        for s in (0.0, share):
            out = subprocess.run(
                [sys.executable, __file__, "--search-child", f"{n},{s}"], env=env, check=True, capture_output=True
            )
            rows.append(json.loads(out.stdout.decode().strip().splitlines()[-1]))
            print(json.dumps(rows[-1]), flush=True)
    for s in (0.0, share):
        same = [r for r in rows if r["duplicate_share"] == s]
        if len(same) > 1:
            small, large = same[0], same[-1]
            kb = (large["search_mb"] - small["search_mb"]) * 1024 / (large["records"] - small["records"])
            print(
                f"share {s}: search memory {small['search_mb']} -> {large['search_mb']} MB, "
                f"{kb:.3f} KB per added record"
            )
    return rows


def measure(
    workdir: str,
    size: int,
    classes: int,
    seed: int,
    splits: str = SPLITS,
    kind: str = "imagenet",
    share: float = 0.96,
    report_only: bool = False,
) -> dict:
    """Write (or reuse) the corpus of ``size`` images, convert it, report on it; the figures of both commands."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=package_dir())
    started = time.perf_counter()
    if kind == "frames":
        made = frames(os.path.join(workdir, f"frames-{share}-{size}"), size, classes, seed, share)
    else:
        made = corpus.imagenet_shaped(os.path.join(workdir, f"corpus-{size}"), size, classes, seed)
    corpus_seconds = time.perf_counter() - started
    records = os.path.join(workdir, f"records-{kind}-{size}")
    load_before = _load()
    if report_only and os.path.exists(os.path.join(records, "_SUCCESS")):
        convert_s, convert_mb = float("nan"), float("nan")
    else:
        convert_s, convert_mb = _convert(made.root, records, splits, env)
    pages = os.path.join(workdir, f"report-{kind}-{size}") + os.sep
    report_s, report_mb, report_pss_mb = peak_tree_memory(_cli("report", records, "--output", pages), env)
    load_after = _load()
    with open(os.path.join(pages, "report.json"), encoding="utf-8") as f:
        document = json.load(f)
    dups = document["duplicates"]
    return {
        "corpus": kind,
        "images": size,
        "classes": classes,
        "corpus_seconds": round(corpus_seconds, 1),
        "planted_copies": made.copies,
        "planted_near": made.near,
        "records": document["read"]["records"],
        "convert_seconds": round(convert_s, 1),
        "convert_peak_tree_mb": round(convert_mb, 0),  # NaN with --report-only
        "report_seconds": round(report_s, 1),
        "report_peak_tree_mb": round(report_mb),
        "report_peak_tree_pss_mb": round(report_pss_mb),
        "report_over_convert": round(report_s / convert_s, 3),  # NaN with --report-only
        "read_seconds": document["read"]["seconds"],
        "duplicate_search_seconds": document["read"]["duplicate_search_seconds"],
        "page_mb": round(os.path.getsize(os.path.join(pages, "report.html")) / 1e6, 2),
        "json_kb": round(os.path.getsize(os.path.join(pages, "report.json")) / 1e3, 1),
        "lines_mb": round(
            sum(os.path.getsize(os.path.join(pages, n)) for n in os.listdir(pages) if n.endswith(".jsonl")) / 1e6, 2
        ),
        "grouped_records": dups["exact"]["records"] + dups["near"]["records"],
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
    parser.add_argument("--corpus", choices=("imagenet", "frames"), default="imagenet", help="which corpus")
    parser.add_argument("--duplicate-share", type=float, default=0.96, help="frames: share of images in groups")
    parser.add_argument("--splits", default=SPLITS, help=f"convert's --splits (default {SPLITS})")
    parser.add_argument("--workdir", default=None, help="keep corpora and outputs here (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    parser.add_argument(
        "--report-only", action="store_true", help="reuse a converted output already in --workdir (no convert figures)"
    )
    parser.add_argument("--search-only", action="store_true", help="the duplicate search alone, in process")
    parser.add_argument("--search-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = sorted(int(n) for n in args.sizes.split(","))
    if args.search_child:
        n, share = args.search_child.split(",")
        _search_child(int(n), float(share))
        return
    if args.search_only:
        rows = search_only(sizes, args.duplicate_share)
        save_result(
            "bench_report_search", {"time": datetime.datetime.now().isoformat(timespec="seconds"), "rows": rows}
        )
        return
    work = args.workdir or tempfile.mkdtemp(prefix="bench_report-")
    os.makedirs(work, exist_ok=True)
    rows = []
    try:
        for size in sizes:
            row = measure(
                work, size, args.classes, args.seed, args.splits, args.corpus, args.duplicate_share, args.report_only
            )
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        if not args.workdir and not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    print()
    print(
        f"{args.corpus} corpus, {args.classes} classes, {len(os.sched_getaffinity(0))} cores; "
        "peak = summed RSS (rep MB) and summed PSS (rep PSS) of the process tree"
    )
    print(
        f"{'images':>9} {'grouped':>8} {'convert s':>10} {'conv MB':>8} {'report s':>9} {'rep MB':>7} {'rep PSS':>7} "
        f"{'rep/conv':>8} "
        f"{'read s':>7} {'search s':>8} {'page MB':>8} {'groups':>13} {'load (1/5/15 min)':>20}"
    )
    for r in rows:
        print(
            f"{r['images']:>9,} {r['grouped_records']:>8,} {r['convert_seconds']:>10.1f} "
            f"{r['convert_peak_tree_mb']:>8} {r['report_seconds']:>9.1f} {r['report_peak_tree_mb']:>7} "
            f"{r['report_peak_tree_pss_mb']:>7} {r['report_over_convert']:>8.2f} {r['read_seconds']:>7.1f} "
            f"{r['duplicate_search_seconds']:>8.1f} {r['page_mb']:>8.2f} "
            f"{r['exact_groups']:>6}+{r['near_groups']:<6} {r['load_average_after']:>20}"
        )
    if len(rows) > 1:
        small, large = rows[0], rows[-1]
        linear = large["images"] / small["images"]
        added = large["images"] - small["images"]
        per_record_kb = (large["report_peak_tree_mb"] - small["report_peak_tree_mb"]) * 1024 / added
        per_record_pss_kb = (large["report_peak_tree_pss_mb"] - small["report_peak_tree_pss_mb"]) * 1024 / added
        print(
            f"growth {large['images']:,}/{small['images']:,} (linear = {linear:.1f}): report time "
            f"{large['report_seconds'] / small['report_seconds']:.2f}, convert time "
            f"{large['convert_seconds'] / small['convert_seconds']:.2f}; report memory "
            f"{large['report_peak_tree_mb'] / small['report_peak_tree_mb']:.2f}x, "
            f"{per_record_kb:.3f} KB (PSS {per_record_pss_kb:.3f} KB) per added record"
        )
    save_result(
        "bench_report",
        {
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "corpus": args.corpus,
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
