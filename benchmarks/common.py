"""What the benchmarks share: where their results go and how they are written."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ``img2tfrecord convert`` in a fresh process of this interpreter (its PYTHONPATH picks the checkout).
CONVERT = (sys.executable, "-m", "img2tfrecord", "convert")


def package_dir(checkout: str = ROOT) -> str:
    """The folder a checkout's ``img2tfrecord`` package is imported from (``src/``; an older checkout's
    root), for ``PYTHONPATH`` of a process that must run that checkout's code."""
    src = os.path.join(checkout, "src")
    return src if os.path.isdir(os.path.join(src, "img2tfrecord")) else checkout


def save_result(benchmark: str, doc: Any, indent: int = 2) -> str:
    """Write ``doc`` to ``results/<benchmark>-<local time>.json``, print its path and return it."""
    os.makedirs(RESULTS_DIR, exist_ok=True)
    path = os.path.join(RESULTS_DIR, f"{benchmark}-{datetime.datetime.now():%Y%m%d-%H%M%S}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=indent)
    print(f"wrote {path}")
    return path


_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def _parents() -> Dict[int, int]:
    """{pid: parent pid} of every process."""
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                parents[int(name)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                pass
    return parents


def tree_rss_mb(root: int) -> float:
    """Sum of the resident sets of ``root`` and all its descendants, in MB."""
    parents = _parents()
    tree, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        for child, parent in parents.items():
            if parent == pid and child not in tree:
                tree.add(child)
                frontier.append(child)
    total_kb = 0
    for pid in tree:
        try:
            with open(f"/proc/{pid}/statm") as f:
                total_kb += int(f.read().split()[1]) * _PAGE_KB
        except (OSError, IndexError, ValueError):
            pass
    return total_kb / 1024


def peak_tree_rss(
    cmd: Sequence[str], env: Optional[Mapping[str, str]] = None, interval: float = 0.2, ok: Sequence[int] = (0,)
) -> Tuple[float, float]:
    """(seconds, peak summed RSS in MB) of a command and its descendants, sampled every ``interval`` s from
    ``/proc`` (``/usr/bin/time`` reports one process only). Raises RuntimeError for an exit code not in ``ok``."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0.0
    while proc.poll() is None:
        peak = max(peak, tree_rss_mb(proc.pid))
        time.sleep(interval)
    assert proc.stderr is not None
    stderr = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if proc.returncode not in ok:
        raise RuntimeError(f"{list(cmd)[:5]} failed ({proc.returncode}):\n{stderr[-3000:]}")
    return time.perf_counter() - start, peak
