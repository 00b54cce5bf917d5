"""Test-only fault injection, off unless ``IMG2TFRECORD_FAULT`` is set: the suite's way to stop a run at a known phase.

* ``pause:<phase>``: at that phase the run writes the file named by
  ``IMG2TFRECORD_FAULT_MARKER`` and sleeps, so a test can kill it right there,
  or change the input and remove the marker to let the run go on.
  Phases: ``listing``, ``converting`` (once a shard is finished and the next is half
  written), ``committing`` (once the first split is committed), ``finalizing`` (``dataset.json``
  written, ``_SUCCESS`` not yet).
* ``drop_record``: the shard writer leaves out the first record it is given,
  as a lost write would; the accounting check must then fail the run.
* ``slow:<seconds>``: the shard writer waits that long after each record, so
  a small dataset converts for as long as a test needs (progress reports).

No Beam and no TensorFlow here.
"""

from __future__ import annotations

import os
import time

ENV = "IMG2TFRECORD_FAULT"
MARKER_ENV = "IMG2TFRECORD_FAULT_MARKER"
PHASES = ("listing", "converting", "committing", "finalizing")
_PAUSE_S = 600.0


def pause_at(phase: str) -> None:
    """Stop here, for a test to kill the run, when ``IMG2TFRECORD_FAULT=pause:<phase>``."""
    if os.environ.get(ENV) != f"pause:{phase}":
        return
    marker = os.environ.get(MARKER_ENV)
    if not marker:
        time.sleep(_PAUSE_S)
        return
    with open(marker + ".tmp", "w", encoding="utf-8") as f:
        f.write(f"{phase} {os.getpid()}\n")
    os.replace(marker + ".tmp", marker)  # whole when it appears: the test may read it at once
    deadline = time.monotonic() + _PAUSE_S
    while os.path.exists(marker) and time.monotonic() < deadline:  # the test removes it to let the run go on
        time.sleep(0.05)


def drops_records() -> bool:
    return os.environ.get(ENV) == "drop_record"


def slow_down() -> None:
    """Wait after a record is written, when ``IMG2TFRECORD_FAULT=slow:<seconds>``."""
    fault = os.environ.get(ENV)
    if fault and fault.startswith("slow:"):
        time.sleep(float(fault[len("slow:") :]))
