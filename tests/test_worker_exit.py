"""Worker processes die with the process that started them (``worker_exit.py``): a ``report`` or ``convert``
killed with SIGKILL leaves none of its pool's workers running; a worker started by a thread that ends before
its process lives on. Real processes: a process's death is the point."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import List, Set, Tuple

import pytest
from conftest import ROOT, cli_command, cli_env

from img2tfrecord import faults

_GONE_WITHIN_S = 2.0


def _children(pid: int) -> Set[int]:
    """The processes whose parent is ``pid``, from Linux's /proc."""
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == pid:
                found.add(int(name))
    return found


def _descendants(pid: int) -> Set[int]:
    """Every process below ``pid``: its children (a pool's fork server among them), theirs, and so on."""
    found, todo = set(), [pid]
    while todo:
        children = _children(todo.pop()) - found
        found |= children
        todo.extend(children)
    return found


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (a container's init may never reap what it inherits)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _kill_and_watch(args: List[str], marker: str, phase: str) -> Tuple[Set[int], str]:
    """Start ``img2tfrecord ARGS`` paused at ``phase``, SIGKILL it there; -> its children still running
    ``_GONE_WITHIN_S`` later (every descendant it had then), and what reached stderr once they all closed it."""
    env = cli_env({faults.ENV: f"pause:{phase}", faults.MARKER_ENV: marker})
    proc = subprocess.Popen(cli_command(*args), cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err: List[bytes] = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    try:
        deadline = time.monotonic() + 180
        while not os.path.exists(marker):
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, f"never paused at {phase}"
            time.sleep(0.02)
        workers = _descendants(proc.pid)
        assert len(workers) >= 2, f"the run has no worker processes to watch: {sorted(workers)}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + _GONE_WITHIN_S
        while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = {pid for pid in workers if _running(pid)}
        reader.start()
        reader.join(timeout=30)
        return left, b"".join(err).decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_report_leaves_no_worker_running(converted_sample, tmp_path):
    marker = str(tmp_path / "paused")
    args = ["report", converted_sample, "--output", str(tmp_path / "report.html"), "--processes", "2"]
    left, stderr = _kill_and_watch(args, marker, "scanning")
    assert not left, f"worker(s) {sorted(left)} outlived the killed report"
    assert "leaked" not in stderr and "Traceback" not in stderr, stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_convert_leaves_no_conversion_worker_running(sample_dir, tmp_path):
    marker = str(tmp_path / "paused")
    args = ["convert", "--input", sample_dir, "--output", str(tmp_path / "out"), "--no-analyze"]
    args += ["--processes", "2", "--num-shards", "4"]  # paused once a shard is finished and the next half written
    left, stderr = _kill_and_watch(args, marker, "converting")
    assert not left, f"worker(s) {sorted(left)} outlived the killed convert"
    assert "leaked" not in stderr and "Traceback" not in stderr, stderr


_THREAD_STARTS_A_WORKER = textwrap.dedent(
    """
    import multiprocessing, sys, threading, time
    from img2tfrecord.worker_exit import Parent, exit_with_parent

    def work(parent):
        exit_with_parent(parent)
        time.sleep(1.0)  # longer than the thread that started it lives

    if __name__ == "__main__":
        started = []

        def start():  # a thread that ends as soon as its worker is started
            parent = Parent.this_process()
            assert not parent.main_thread
            process = multiprocessing.get_context("spawn").Process(target=work, args=(parent,))
            process.start()
            started.append(process)

        thread = threading.Thread(target=start)
        thread.start()
        thread.join()
        started[0].join(timeout=60)
        print(started[0].exitcode)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the kernel's parent-death signal is Linux's")
def test_a_worker_outlives_the_thread_that_started_it_while_its_process_lives(tmp_path):
    """Linux signals a worker when the *thread* that started it ends: only workers started by the main thread
    are bound to it; the others are watched by their own thread, so they live as long as the process."""
    script = tmp_path / "starts.py"
    script.write_text(_THREAD_STARTS_A_WORKER)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=cli_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "0", "the worker was killed when the thread that started it ended"


def test_pool_workers_are_forked_by_a_fork_server_with_the_environment_of_their_pools_start(monkeypatch):
    """Workers come from a fork server, not from this process (which holds Beam's and TensorFlow's threads),
    and each pool's workers see this process's environment as it was when that pool started, not as it was
    when the fork server started."""
    from img2tfrecord.report.workers import start_pool

    seen = []
    for value in ("first", "second"):
        monkeypatch.setenv("IMG2TFRECORD_TEST_WORKER_VALUE", value)
        pool = start_pool(2)
        try:
            seen.append(pool.submit(os.getenv, "IMG2TFRECORD_TEST_WORKER_VALUE").result(timeout=60))
            parent = pool.submit(os.getppid).result(timeout=60)
        finally:
            pool.shutdown()
        if sys.platform.startswith("linux"):
            assert parent != os.getpid(), "a worker was started by this process itself"
            assert _running(parent), "the fork server ended with its pool"
    assert seen == ["first", "second"]
