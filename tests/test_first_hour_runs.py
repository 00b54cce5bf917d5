"""Runs that meet each other or are stopped, as real processes: one writer per output, and Ctrl-C.

A run is held mid-conversion by the test-only pause (``img2tfrecord/faults.py``)
so the second process or the signal arrives at a known point. The lock
itself is tested in-process in ``tests/test_lock.py``.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, cli_command, cli_env, convert, shard_digests
from helpers.datasets import photos
from helpers.outputs import one_line, snapshot

from img2tfrecord import faults
from img2tfrecord.schemas import output_files

ARGS = ("--image-size", "24", "--num-shards", "4", "--no-analyze", "--seed", "5")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A small class-folder input and its conversion by an undisturbed run."""
    root = str(tmp_path_factory.mktemp("runs") / "photos")
    photos(root, per_class=8)
    reference = str(tmp_path_factory.mktemp("runs_reference") / "out")
    done = convert(root, reference, *ARGS, runner=())
    assert done.returncode == 0, done.stderr[-3000:]
    return root, reference


def _paused(args, marker: str) -> subprocess.Popen:
    """Start ``convert ARGS`` held while converting (after its first shard); return once it is held."""
    env = cli_env({faults.ENV: "pause:converting", faults.MARKER_ENV: marker})
    proc = subprocess.Popen(
        cli_command("convert", *args), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 180
    while not os.path.exists(marker):
        if proc.poll() is not None:
            raise AssertionError("the run ended before it paused: " + proc.stderr.read()[-3000:])
        assert time.monotonic() < deadline, "the run never paused"
        time.sleep(0.05)
    return proc


def _without_lock(tree: dict) -> dict:
    """A snapshot with the lock file's size and time left out (its heartbeat rewrites it)."""
    return {path: (None if path == output_files.LOCK_FILE else value) for path, value in tree.items()}


def test_a_second_run_into_a_held_output_is_refused_and_spoils_nothing(dataset, tmp_path):
    root, reference = dataset
    out = str(tmp_path / "out")
    marker = str(tmp_path / "paused")
    first = _paused(("--input", root, "--output", out, *ARGS), marker)
    try:
        held = _without_lock(snapshot(out))
        assert output_files.LOCK_FILE in held
        for flags in ((), ("--overwrite",), ("--resume",), ("--image-size", "32", "--overwrite")):
            second = convert(root, out, *ARGS, *flags, runner=())
            assert second.returncode == 2, second.stderr[-2000:]
            line = one_line(second)
            assert f"being written by another run (pid {first.pid} on host " in line, line
            assert "started " in line and "wait for it to finish or stop it" in line
            assert _without_lock(snapshot(out)) == held, f"the run with {flags} changed the held output"
        os.remove(marker)  # the first run goes on
        _, stderr = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, stderr[-3000:]
    assert shard_digests(out) == shard_digests(reference)
    assert not os.path.exists(os.path.join(out, output_files.LOCK_FILE))
    verified = subprocess.run(
        cli_command("verify", out), cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=300
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr


@pytest.mark.parametrize("signum", [signal.SIGINT], ids=["SIGINT"])  # SIGTERM at every stage: test_fault_matrix
def test_a_stopped_run_says_one_line_and_its_resume_command_finishes_it(dataset, tmp_path, signum):
    root, reference = dataset
    out = str(tmp_path / "out")
    marker = str(tmp_path / "paused")
    args = ("--input", root, "--output", out, *ARGS)
    run = _paused(args, marker)
    try:
        run.send_signal(signum)
        _, stderr = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 128 + signum, stderr[-3000:]
    line = one_line(subprocess.CompletedProcess(run.args, run.returncode, "", stderr))  # INFO lines aside
    assert "Traceback" not in stderr and "semaphore" not in stderr, stderr[-3000:]
    name = signal.Signals(signum).name
    assert line.startswith(f"img2tfrecord: interrupted by {name}: 1 finished shard(s) kept in "), line
    command = line.split("; to finish, run: ", 1)[1]  # the program as started (python -m here), from ROOT
    python = os.path.relpath(sys.executable, ROOT) if sys.executable.startswith(ROOT + "/") else sys.executable
    assert shlex.split(command) == [python, "-m", "img2tfrecord", "convert", *args, "--resume"]
    left = sorted(os.listdir(out))
    assert len(left) == 1 and left[0].startswith(output_files.RUN_FOLDER_PREFIX), left  # no lock, no beam-temp-*

    resumed = subprocess.run(shlex.split(command), cwd=ROOT, env=cli_env(), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "1 finished shard(s) kept from the interrupted run" in resumed.stderr
    assert shard_digests(out) == shard_digests(reference)


def test_a_killed_runs_lock_is_taken_over_by_resume_with_a_warning(dataset, tmp_path):
    root, reference = dataset
    out = str(tmp_path / "out")
    marker = str(tmp_path / "paused")
    run = _paused(("--input", root, "--output", out, *ARGS), marker)
    run.kill()  # SIGKILL: nothing cleans up, the lock stays
    run.communicate(timeout=60)
    assert os.path.exists(os.path.join(out, output_files.LOCK_FILE))

    before = snapshot(out)
    again = convert(root, out, *ARGS, runner=())
    assert again.returncode == 2
    line = one_line(again)
    assert "pass --resume to finish it" in line and "stale" in line and "its process is gone" in line, line
    assert snapshot(out) == before

    resumed = convert(root, out, *ARGS, "--resume", runner=())
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"took over the stale lock on {out} of an earlier run (pid {run.pid} " in resumed.stderr
    assert shard_digests(out) == shard_digests(reference)
    assert not os.path.exists(os.path.join(out, output_files.LOCK_FILE))


def test_the_resume_hint_names_the_program_as_it_was_started(tmp_path, monkeypatch):
    """``./run_local.sh`` runs the venv's img2tfrecord without putting it on the caller's PATH: the hint names
    it by its path from the caller's folder, and ``python -m img2tfrecord`` by that interpreter."""
    from img2tfrecord.cli import invoked_as

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", [os.path.join(ROOT, ".venv", "bin", "img2tfrecord"), "convert"])
    assert invoked_as() == [".venv/bin/img2tfrecord"]  # a virtualenv's command, as found on run_local.sh's PATH
    monkeypatch.chdir(tmp_path)
    assert invoked_as() == [os.path.join(ROOT, ".venv", "bin", "img2tfrecord")]  # from elsewhere: absolute
    monkeypatch.setattr(sys, "argv", [os.path.join(ROOT, "src", "img2tfrecord", "__main__.py"), "convert"])
    assert invoked_as() == [os.path.abspath(sys.executable), "-m", "img2tfrecord"]
    monkeypatch.setattr(sys, "argv", ["pytest"])  # cli.main called from Python
    assert invoked_as() == ["img2tfrecord"]
