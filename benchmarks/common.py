"""What the benchmarks share: where their results go and how they are written."""

from __future__ import annotations

import datetime
import json
import os
from typing import Any

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
