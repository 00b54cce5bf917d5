"""Runs as real processes, for what only a process shows: killed at a known moment, paused at a phase."""

from __future__ import annotations

import os
import signal
import subprocess
import time

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


def start_paused(args, marker: str, phase: str) -> subprocess.Popen:
    """Start ``img2tfrecord ARGS`` and return once it is paused at ``phase`` (``faults.pause_at``): it goes
    on when ``marker`` is removed."""
    env = cli_env({"IMG2TFRECORD_FAULT": f"pause:{phase}", "IMG2TFRECORD_FAULT_MARKER": marker})
    proc = subprocess.Popen(
        cli_command(*args), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 180
    while not os.path.exists(marker):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            _, err = proc.communicate()
            raise AssertionError(f"never paused at {phase}: {err[-2000:]}")
        time.sleep(0.02)
    return proc
