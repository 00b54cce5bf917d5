"""The one-core start-up of ``convert``: seconds from the command's start until its first image converts,
and until its first shard's writer starts.

Each run is a fresh ``convert`` process over the cached benchmark corpus; a polling loop in this
script (every 20 ms) notes, per run:

* ``first read``: when a conversion process first opens an input image (inotify on the corpus's
  folders, counting opens once a pool process exists; the launch's own sample reads come before);
* ``first shard``: when the first shard's temp file appears in the run's staging folder
  (``.tmp-run-*/shards/``): the job's shard writer has started;
* ``pool CPU``: the CPU seconds the conversion processes have used by then (their own start-up,
  about 0.3-0.5 s each, included): what they converted before the writer asked for anything;
* ``run``: the whole command, to its exit.

``--compare CODE_DIR`` alternates every run with
the same command run from another checkout (e.g. a ``git worktree`` of an earlier commit), so the
two are measured in the same conditions. Medians are reported.

    .venv/bin/python benchmarks/bench_startup.py --num-images 24000 --runs 2
    .venv/bin/python benchmarks/bench_startup.py --num-images 24000 --runs 2 --convert-args=--no-analyze
    .venv/bin/python benchmarks/bench_startup.py --num-images 24000 --compare /tmp/older-checkout

Prints a table and writes ``benchmarks/results/bench_startup-<time>.json``. Linux only (``/proc``, inotify).
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import shlex
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from typing import List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import corpus  # noqa: E402
from common import RESULTS_DIR, package_dir, save_result  # noqa: E402

_IN_OPEN, _IN_ISDIR = 0x20, 0x40000000
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then len bytes of name)


class _Opens:
    """Files opened in a folder tree (by any process), as inotify reports them."""

    def __init__(self, root: str):
        libc = ctypes.CDLL(None, use_errno=True)
        self._fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        for folder, _, _ in os.walk(root):
            if libc.inotify_add_watch(self._fd, folder.encode(), _IN_OPEN) < 0:
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {folder}")

    def opened(self) -> bool:
        """Whether a file (not a folder) was opened since the last call."""
        found = False
        while True:
            try:
                data = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                return found
            offset = 0
            while offset < len(data):
                _, mask, _, length = _EVENT.unpack_from(data, offset)
                found = found or not mask & _IN_ISDIR
                offset += _EVENT.size + length

    def close(self) -> None:
        os.close(self._fd)


def _children(pid: int) -> List[int]:
    children: List[int] = []
    for path in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            with open(path) as f:
                children.extend(int(child) for child in f.read().split())
        except OSError:
            pass
    return children


def _pool_processes(pid: int) -> List[int]:
    """The conversion processes of ``pid``: the processes below it that multiprocessing started (spawned
    ones, or a fork server and the workers it forked, whose start-up cost the server's CPU holds)."""
    found, todo = [], _children(pid)
    while todo:
        child = todo.pop()
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if b"spawn_main" in cmdline or b"multiprocessing.forkserver" in cmdline:
            found.append(child)
            todo.extend(_children(child))
    return found


def _cpu_seconds(pids: List[int]) -> float:
    """User + system CPU seconds of ``pids`` (those still running)."""
    ticks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return ticks / os.sysconf("SC_CLK_TCK")


def _rounded(value: Optional[float], digits: int = 2) -> Optional[float]:
    return round(value, digits) if value is not None else None


def time_run(code: str, src: str, out: str, convert_args) -> dict:
    """One ``convert`` started in ``code`` (its package wins over the installed one): seconds to the first
    image a conversion process opens, to its first shard's temp file and to its exit, and the conversion
    processes' CPU seconds when that temp file appeared."""
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "img2tfrecord", "convert", "--input", src, "--output", out, "--quiet"]
    opens = _Opens(src)
    try:
        start = time.perf_counter()
        env = dict(os.environ, PYTHONPATH=package_dir(code))
        proc = subprocess.Popen(
            [*command, *convert_args], cwd=code, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        first = first_read = pool_cpu = None
        pool_seen = False
        while proc.poll() is None:
            now = time.perf_counter() - start
            opened = opens.opened()  # before a pool process is seen: the launch's own sample reads
            if first_read is None:
                if pool_seen and opened:
                    first_read = now
                pool_seen = pool_seen or bool(_pool_processes(proc.pid))
            if first is None and glob.glob(os.path.join(out, ".tmp-run-*", "shards", "*", "*")):
                first = now
                pool_cpu = _cpu_seconds(_pool_processes(proc.pid))
            time.sleep(0.02)
        total = time.perf_counter() - start
    finally:
        opens.close()
    if proc.returncode != 0:
        raise SystemExit(f"convert failed in {code} ({proc.returncode}): {proc.stderr.read().decode()[-2000:]}")
    return {
        "first_read_s": _rounded(first_read),
        "first_shard_s": _rounded(first),
        "pool_cpu_s": _rounded(pool_cpu),
        "run_s": round(total, 1),
    }


def _median(values) -> Optional[float]:
    found = [v for v in values if v is not None]
    return statistics.median(found) if found else None


def _shown(value: Optional[float], width: int, digits: int = 2) -> str:
    return f"{value:{width}.{digits}f}" if value is not None else f"{'-':>{width}}"


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
                print(
                    f"run {i + 1} {name}: first read after {result['first_read_s']} s, first shard after "
                    f"{result['first_shard_s']} s (pool CPU {result['pool_cpu_s']} s), run {result['run_s']} s"
                )
    summary = {
        name: {f"{key}_median": _median(r[key] for r in found) for key in found[0]} for name, found in runs.items()
    }
    print(f"\n{args.num_images} {args.kind} images, convert {' '.join(convert_args)}")
    print(f"  {'':8s} {'first read':>10s} {'first shard':>11s} {'pool CPU':>9s} {'run':>7s}  (seconds, medians)")
    for name, s in summary.items():
        print(
            f"  {name:8s} {_shown(s['first_read_s_median'], 10)} {_shown(s['first_shard_s_median'], 11)} "
            f"{_shown(s['pool_cpu_s_median'], 9)} {_shown(s['run_s_median'], 7, 1)}"
        )
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
