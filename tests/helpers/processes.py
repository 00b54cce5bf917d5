"""Runs as real processes, for what only a process shows: killed at a known moment, paused at a phase."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from typing import Iterator

from conftest import ROOT, cli_command, cli_env


def kill_when(args, ready, what: str, env=None) -> int:
    """Start ``img2tfrecord ARGS``, SIGKILL it as soon as ``ready()`` holds; -> its return code."""
    proc = subprocess.Popen(
        cli_command(*args), cwd=ROOT, env=env or cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 180
        while not ready():
            assert proc.poll() is None, (
                "the run ended before it could be killed: " + proc.stdout.read().decode()[-2000:]
            )
            assert time.monotonic() < deadline, f"never {what}"
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    return proc.returncode


@contextlib.contextmanager
def paused_run(args, marker: str, phase: str) -> Iterator[subprocess.Popen]:
    """``img2tfrecord ARGS`` started and paused at ``phase`` (``faults.pause_at``), as the context's value: it
    goes on when ``marker`` is removed, and is killed on leaving the context if it has not finished."""
    env = cli_env({"IMG2TFRECORD_FAULT": f"pause:{phase}", "IMG2TFRECORD_FAULT_MARKER": marker})
    pipe = subprocess.PIPE
    proc = subprocess.Popen(cli_command(*args), cwd=ROOT, env=env, stdout=pipe, stderr=pipe, text=True)
    try:
        deadline = time.monotonic() + 180
        while not os.path.exists(marker):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                _, err = proc.communicate()
                raise AssertionError(f"never paused at {phase}: {err[-2000:]}")
            time.sleep(0.02)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


# The first lines of a ``python -c`` script in which TensorFlow cannot be imported: every attempt is refused with
# ImportError and its module name kept in ``asked_for_tensorflow``.
BLOCK_TENSORFLOW = """
import importlib.abc, sys
asked_for_tensorflow = []

class BlockTensorFlow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "tensorflow":
            asked_for_tensorflow.append(name)
            raise ImportError("tensorflow is blocked in this test")
        return None

sys.meta_path.insert(0, BlockTensorFlow())
"""
