"""Test-only fault injection, off unless ``IMG2TFRECORD_FAULT`` is set: the suite's way to stop a run at a known phase.

* ``pause:<phase>``: at that phase the run writes the file named by
  ``IMG2TFRECORD_FAULT_MARKER`` and sleeps, so a test can kill it right there,
  or change the input and remove the marker to let the run go on.
  Phases: ``listing``, ``converting`` (once a shard is finished and the next is half
  written), ``committing`` (once the first split is committed), ``analysis`` (the transform
  exported, not yet published), ``finalizing`` (``dataset.json`` written, ``_SUCCESS`` not yet).
  ``report``'s worker processes pause at ``scanning``, as each starts on a shard.
* ``drop_record``: the shard writer leaves out the first record it is given,
  as a lost write would; the accounting check must then fail the run.
* ``slow:<seconds>``: the shard writer waits that long after each record, so
  a small dataset converts for as long as a test needs (progress reports).
* ``fail:<stage>:<error>``: the run fails at that stage (:data:`STAGES`) with ``error``: ``error`` (an
  exception), ``enospc`` (a full disk), ``eacces`` (permission denied); at stages ``worker`` and
  ``scanning`` (a ``report`` worker starting on a shard) also ``kill``: the worker process that gets
  there dies, as if killed (with a marker file, only the first one: the file marks it). At
  ``heartbeat`` the lock's heartbeat beats every few milliseconds, and fails.

The shard step takes its faults as a value (:func:`from_environment` gives
the :class:`FaultPlan` the conversion passes to ``WriteShards``, None when
the variable is unset); the other phases call :func:`pause_at`.
No Beam and no TensorFlow here.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from typing import Any, List, Optional

ENV = "IMG2TFRECORD_FAULT"
MARKER_ENV = "IMG2TFRECORD_FAULT_MARKER"
PHASES = ("listing", "converting", "committing", "finalizing")  # and "analysis", with the analysis on
# Where fail:<stage>:<error> strikes: the launch's listing, a conversion worker, a record written into a
# shard, a split's commit, the tf.Transform analysis, dataset.json, the lock's heartbeat; a report's worker.
STAGES = ("listing", "worker", "writing", "committing", "analysis", "finalizing", "heartbeat", "scanning")
HEARTBEAT_FAULT_S = 0.02  # of convert
_PAUSE_S = 600.0
_DROPPED: List[Any] = []  # drop_record: the one record this process left out
_FINISHED: List[None] = []  # pause:converting: one entry per shard this process finished
_PAUSED: List[str] = []  # pause:converting: paused once already in this process


def pause_at(phase: str) -> None:
    """Stop here, for a test to kill the run, when ``IMG2TFRECORD_FAULT=pause:<phase>``."""
    if os.environ.get(ENV) == f"pause:{phase}":
        _pause(phase, os.environ.get(MARKER_ENV))


def fail_at(stage: str, path: str = "") -> None:
    """Raise the error ``IMG2TFRECORD_FAULT=fail:<stage>:<error>`` names (``path``: the file it is about)."""
    fault = os.environ.get(ENV, "")
    if fault.startswith(f"fail:{stage}:"):
        _raise(fault.rsplit(":", 1)[1], stage, path)


def _raise(error: str, stage: str, path: str) -> None:
    if error == "enospc":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path or None)
    if error == "eacces":
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path or None)
    if error == "kill":
        marker = os.environ.get(MARKER_ENV)
        if marker:
            if os.path.exists(marker):  # the one marked has died already
                return
            with open(marker, "w", encoding="utf-8") as f:
                f.write(f"{stage} {os.getpid()}\n")
        os.kill(os.getpid(), signal.SIGKILL)
    raise RuntimeError(f"a fault injected at {stage}")


def heartbeat_seconds(default: float) -> float:
    """The lock's heartbeat: ``default``, or a few milliseconds under a heartbeat fault."""
    return HEARTBEAT_FAULT_S if os.environ.get(ENV, "").startswith("fail:heartbeat:") else default


def _pause(phase: str, marker: Optional[str]) -> None:
    if not marker:
        time.sleep(_PAUSE_S)
        return
    with open(marker + ".tmp", "w", encoding="utf-8") as f:
        f.write(f"{phase} {os.getpid()}\n")
    os.replace(marker + ".tmp", marker)  # whole when it appears: the test may read it at once
    deadline = time.monotonic() + _PAUSE_S
    while os.path.exists(marker) and time.monotonic() < deadline:  # the test removes it to let the run go on
        time.sleep(0.05)


class FaultPlan:
    """One fault for the shard step, as the hooks ``WriteShards(faults=...)`` calls.

    ``fault`` is a value of ``IMG2TFRECORD_FAULT``, ``marker`` the file a
    pause writes (``IMG2TFRECORD_FAULT_MARKER``). Picklable: it travels to the
    workers with the step.
    """

    def __init__(self, fault: str, marker: Optional[str] = None):
        self.fault = fault
        self.marker = marker

    def drops(self, record: Any) -> bool:
        """``drop_record``: True for the first record this process writes."""
        if self.fault != "drop_record" or _DROPPED:
            return False
        _DROPPED.append(record)
        return True

    def record_written(self) -> None:
        """``slow:<seconds>``: wait; ``pause:converting``: pause once a shard is finished and another half written;
        ``fail:writing:<error>``: fail."""
        if self.fault.startswith("slow:"):
            time.sleep(float(self.fault[len("slow:") :]))
        if self.fault.startswith("fail:writing:"):
            _raise(self.fault.rsplit(":", 1)[1], "writing", "")
        if _FINISHED and not _PAUSED and self.fault == "pause:converting":
            _PAUSED.append(self.fault)  # once: removing the marker lets the run go on to the end
            _pause("converting", self.marker)

    def shard_finished(self) -> None:
        _FINISHED.append(None)

    def split_committed(self) -> None:
        """``pause:committing``: pause once a split's shards have their final names; ``fail:committing:<error>``:
        fail then."""
        if self.fault == "pause:committing":
            _pause("committing", self.marker)
        if self.fault.startswith("fail:committing:"):
            _raise(self.fault.rsplit(":", 1)[1], "committing", "")


def from_environment() -> Optional[FaultPlan]:
    """The shard step's fault plan from ``IMG2TFRECORD_FAULT``; None (no faults) when it is unset."""
    fault = os.environ.get(ENV)
    return FaultPlan(fault, os.environ.get(MARKER_ENV)) if fault else None
