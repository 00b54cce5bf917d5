"""Every command at ImageNet's shape and size: time and peak process-tree memory as the inputs grow.

For each size an ImageNet-shaped corpus (``corpus.imagenet_shaped``: 1,000 class folders of small JPEGs) is
built once under ``benchmarks/results/corpus-imagenet-<N>`` (resumed where an earlier call stopped), linked
into a work folder, and every command runs on it in a fresh process, timed, with the peak of the summed
resident sets of the process and its children sampled from ``/proc``:

    plan              convert --plan --format keep --no-analyze
    keep              convert --format keep --no-analyze            (the output the read commands use)
    keep+analysis     convert --format keep
    reencode          convert --image-size 128 --format jpeg --no-analyze
    reencode+analysis convert --image-size 128 --format jpeg
    verify            verify OUT
    inspect           inspect OUT
    report            report OUT --output DIR/
    load              img2tfrecord.load(OUT, "train", batch_size=256): one epoch
    append            convert --append --format keep --no-analyze, after 1% new inputs (it adds to OUT)
    nothing-new       the same append again: nothing new

    .venv/bin/python benchmarks/bench_scale.py                                  # 50,000 and 200,000
    .venv/bin/python benchmarks/bench_scale.py --sizes 1280000                  # the full size, one command
    .venv/bin/python benchmarks/bench_scale.py --sizes 50000 --commands keep,verify,append

A command past ``--max-tree-gb`` of memory is stopped (its row says so), and one past ``--timeout`` too.
Prints a table, with each command's time ratio and memory per added input between the two first sizes
(linear time is a ratio of their sizes, 4.0 for 200,000/50,000), the machine's load before and after, and
writes ``benchmarks/results/bench_scale-<time>.json``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import corpus  # noqa: E402
from common import RESULTS_DIR, package_dir, save_result, tree_rss_mb  # noqa: E402

KEEP = ("--format", "keep")
REENCODE = ("--image-size", "128", "--resize", "stretch", "--format", "jpeg", "--quality", "90")
NO_ANALYZE = ("--no-analyze",)
# name -> (what it runs, whether it writes a conversion of its own)
COMMANDS = {
    "plan": ("convert", (*KEEP, *NO_ANALYZE, "--plan")),
    "keep": ("convert", (*KEEP, *NO_ANALYZE)),
    "keep+analysis": ("convert", KEEP),
    "reencode": ("convert", (*REENCODE, *NO_ANALYZE)),
    "reencode+analysis": ("convert", REENCODE),
    "verify": ("verify", ()),
    "inspect": ("inspect", ()),
    "report": ("report", ()),
    "load": ("load", ()),
    "append": ("append", (*KEEP, *NO_ANALYZE)),
    "nothing-new": ("append", (*KEEP, *NO_ANALYZE)),
}
LOAD = """
import sys, img2tfrecord
n = 0
for images, labels in img2tfrecord.load(sys.argv[1], "train", batch_size=256, image_size=64):
    n += int(labels.shape[0])
print(n)
"""


def run_measured(cmd: List[str], env: Dict[str, str], timeout: float, max_mb: float, interval: float = 0.2) -> dict:
    """Run ``cmd`` in its own session: its wall seconds, the peak summed RSS of its process tree (MB; at least
    the process's own peak, which a command shorter than ``interval`` shows alone), and why it was
    stopped, if it was."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    peak, stopped, status, usage = 0.0, None, None, None
    while status is None:
        pid, code, found = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            status, usage = code, found
            break
        peak = max(peak, tree_rss_mb(proc.pid))
        if peak > max_mb:
            stopped = f"stopped at {peak:.0f} MB"
        elif time.perf_counter() - started > timeout:
            stopped = f"stopped after {timeout:.0f} s"
        if stopped:
            os.killpg(proc.pid, signal.SIGKILL)
            _, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(interval)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    peak = max(peak, usage.ru_maxrss / 1024)  # KB
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    failed = None if stopped or proc.returncode == 0 else f"exit {proc.returncode}: {stderr.strip()[-300:]}"
    return {"seconds": seconds, "peak_tree_mb": peak, "stopped": stopped, "failed": failed}


def link_input(source: str, target: str) -> None:
    """``target`` as a tree of hard links to the corpus ``source`` (the append adds files to it, not to the corpus)."""
    shutil.rmtree(target, ignore_errors=True)
    for folder, _, names in os.walk(source):
        into = os.path.join(target, os.path.relpath(folder, source))
        os.makedirs(into, exist_ok=True)
        for name in names:
            os.link(os.path.join(folder, name), os.path.join(into, name))


def add_new_inputs(folder: str, fraction: float = 0.01) -> int:
    """Link ``fraction`` of the corpus' files again under new names (``<name>_new.<suffix>``): the inputs an append
    adds."""
    files = sorted(
        os.path.join(root, name) for root, _, names in os.walk(folder) for name in names if not name.startswith(".")
    )
    step = max(1, round(1 / fraction))
    for path in files[::step]:
        stem, suffix = os.path.splitext(path)
        os.link(path, f"{stem}_new{suffix}")
    return len(files[::step])


def command_line(name: str, src: str, out: str, work: str) -> List[str]:
    kind, args = COMMANDS[name]
    python = [sys.executable]
    if kind == "load":
        return [*python, "-c", LOAD, os.path.join(work, "out-keep")]
    if kind in ("verify", "inspect"):
        return [*python, "-m", "img2tfrecord", kind, os.path.join(work, "out-keep")]
    if kind == "report":
        return [*python, "-m", "img2tfrecord", "report", os.path.join(work, "out-keep"), "--output", work + "/report/"]
    if kind == "append":
        return [*python, "-m", "img2tfrecord", "convert", "--input", src, "--output", os.path.join(work, "out-keep")]
    return [*python, "-m", "img2tfrecord", "convert", "--input", src, "--output", out, "-q", *args]


def run_size(size: int, names: List[str], args) -> List[dict]:
    source = os.path.join(RESULTS_DIR, f"corpus-imagenet-{size}")
    started = time.perf_counter()
    total = corpus.imagenet_shaped(source, size).bytes
    print(f"{size} inputs: corpus of {total / 1e6:.0f} MB ready in {time.perf_counter() - started:.0f} s", flush=True)
    work = os.path.join(args.work, f"scale-{size}")
    shutil.rmtree(work, ignore_errors=True)
    src = os.path.join(work, "in")
    link_input(source, src)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=args.package_dir)
    env.setdefault("IMG2TFRECORD_CACHE_DIR", os.path.join(args.work, "cache"))
    rows = []
    needs_keep = any(COMMANDS[n][0] in ("verify", "inspect", "report", "load", "append") for n in names)
    order = (["keep"] if needs_keep and "keep" not in names else []) + [n for n in COMMANDS if n in names]
    for name in order:
        kind, extra = COMMANDS[name]
        out = os.path.join(work, "out-keep" if name == "keep" else f"out-{name}")
        cmd = command_line(name, src, out, work)
        if kind == "append":
            cmd += ["-q", "--append", *extra]
            if name == "append":
                print(f"  append: {add_new_inputs(src)} new inputs", flush=True)
        found = run_measured(cmd, env, args.timeout, args.max_tree_gb * 1024)
        row = {"command": name, "inputs": size, **found, "load_average": os.getloadavg()}
        if name in names:
            rows.append(row)
        note = found["stopped"] or found["failed"] or ""
        print(f"  {name:18s} {found['seconds']:8.1f} s  peak {found['peak_tree_mb']:7.0f} MB  {note}", flush=True)
        if out != os.path.join(work, "out-keep"):
            shutil.rmtree(out, ignore_errors=True)
    if not args.keep_work:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def table(rows: List[dict], sizes: List[int], names: List[str]) -> str:
    lines = ["| command | " + " | ".join(f"{n:,} inputs" for n in sizes) + " |"]
    first, second = (sizes[0], sizes[1]) if len(sizes) > 1 else (None, None)
    if first is not None:
        lines[0] += f" time {second:,}/{first:,} | memory per added input |"
    lines.append("|" + "---|" * (lines[0].count("|") - 1))
    for name in names:
        found: Dict[int, Optional[dict]] = {
            n: next((r for r in rows if r["command"] == name and r["inputs"] == n), None) for n in sizes
        }
        cells = []
        for n in sizes:
            r = found[n]
            if r is None:
                cells.append("")
            else:
                note = f" ({r['stopped'] or 'failed'})" if r["stopped"] or r["failed"] else ""
                cells.append(f"{r['seconds']:.1f} s, {r['peak_tree_mb']:.0f} MB{note}")
        line = f"| {name} | " + " | ".join(cells) + " |"
        a, b = (found[first], found[second]) if first is not None else (None, None)
        if first is not None:
            if a and b and not (a["stopped"] or a["failed"] or b["stopped"] or b["failed"]):
                kb = (b["peak_tree_mb"] - a["peak_tree_mb"]) * 1024 / (second - first)
                line += f" {b['seconds'] / a['seconds']:.2f} | {kb:.2f} KB |"
            else:
                line += " | |"
        lines.append(line)
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="50000,200000", help="corpus sizes, comma separated (e.g. 1280000)")
    parser.add_argument("--commands", default=",".join(COMMANDS), help="commands to run: " + ", ".join(COMMANDS))
    parser.add_argument("--work", default=os.path.join(RESULTS_DIR, "scale-work"), help="where outputs are written")
    parser.add_argument("--package-dir", default=package_dir(), help="the folder img2tfrecord is imported from")
    parser.add_argument("--timeout", type=float, default=3 * 3600, help="seconds before a command is stopped")
    parser.add_argument("--max-tree-gb", type=float, default=16.0, help="process-tree memory at which it is stopped")
    parser.add_argument("--keep-work", action="store_true", help="keep the outputs (and the linked inputs)")
    args = parser.parse_args(argv)
    sizes = [int(n) for n in args.sizes.split(",")]
    names = [n.strip() for n in args.commands.split(",") if n.strip()]
    unknown = [n for n in names if n not in COMMANDS]
    if unknown:
        parser.error(f"unknown command(s) {', '.join(unknown)}; choose from {', '.join(COMMANDS)}")
    load_before = os.getloadavg()
    rows: List[dict] = []
    for size in sizes:
        rows.extend(run_size(size, names, args))
    load_after = os.getloadavg()
    print()
    print(f"ImageNet-shaped corpus (1,000 classes), {os.cpu_count()} cores; peak of the summed RSS of the process tree")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    print(table(rows, sizes, [n for n in COMMANDS if n in names]))
    save_result(
        "bench_scale",
        {
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpu_count": os.cpu_count(),
            "package_dir": args.package_dir,
            "load_average_before": load_before,
            "load_average_after": load_after,
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
