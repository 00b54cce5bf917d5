"""The fault matrix: each stage of a run, and each fault that can hit it (``faults.py``: an exception, a full
disk, permission denied, a worker killed; SIGTERM and SIGKILL of the run at a stage).

Every cell checks what a user meets: the exit code, at most 3 lines on stderr and no traceback, nothing in
the output but the run's staging folder (the stages before the launch wrote anything: nothing at all), the
lock released, no worker process left, and ``--resume`` after the fault is gone finishing with the bytes of an
undisturbed run (resumed once per stage: a full disk and a denied write stop the run where the exception
does). A failure runs the command in this process (the boundary is the point); a signal runs it as a
process. The stages the conversion pool is open in run with two worker processes, the others in one.
docs/troubleshooting.md has the same matrix as a table.
"""

from __future__ import annotations

import dataclasses
import hashlib
import multiprocessing
import os
import shutil
import signal
import subprocess
import time
from typing import Dict, List

import images as I
import pytest
from conftest import ROOT, built_once, cli_command, cli_env
from helpers.cli import run_in_process
from helpers.datasets import write_tree

from img2tfrecord import faults, progress
from img2tfrecord.conversion import pool as pool_module
from img2tfrecord.readers.records import read_manifest
from img2tfrecord.schemas import output_files

pytestmark = pytest.mark.e2e

ARGS = ("--image-size", "16", "--splits", "train=0.5,test=0.5", "--num-shards", "2", "--seed", "1")
ARGS += ("--runner=FnApiRunner", "--direct_running_mode=in_memory")
# The stages a conversion pool is open in (started at the launch, closed once the shards are written) run with
# two worker processes, so that their closing is checked; the later stages run in one process, as the same bytes.
POOL_STAGES = ("listing", "worker", "writing", "converting")
STAGE_WORDS = {
    "listing": "listing the input",
    "worker": "converting and writing shards",
    "writing": "converting and writing shards",
    "committing": "committing a split's shards",
    "analysis": "analysing the train split",
    "finalizing": "finishing the output (dataset.json)",
}
CAUSE_WORDS = {
    "error": "RuntimeError: a fault injected at",
    "enospc": "No space left on device",
    "eacces": "Permission denied",
}


def _write_input(root: str) -> None:
    write_tree(root, {f"c{i % 2}/{i:02d}.jpg": I.jpeg(20 + i % 5, 14) for i in range(16)})


def _options(analyze: bool, stage: str = "worker"):
    processes = ("--processes", "2" if stage in POOL_STAGES else "1")
    return (*ARGS, *processes) if analyze else (*ARGS, *processes, "--no-analyze")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """The input, and its undisturbed conversions (without and with the analysis), built once per session."""

    def build(folder: str) -> None:
        _write_input(os.path.join(folder, "in"))
        for analyze in (False, True):
            out = os.path.join(folder, f"reference-{analyze}")
            done = run_in_process("convert", "--input", os.path.join(folder, "in"), "--output", out, *_options(analyze))
            assert done.returncode == 0, done.stderr[-3000:]

    folder = built_once(tmp_path_factory, "fault-matrix", build)
    references = {analyze: os.path.join(folder, f"reference-{analyze}") for analyze in (False, True)}
    return os.path.join(folder, "in"), references


def _digests(out: str) -> Dict[str, str]:
    found = {}
    for folder, _, names in os.walk(out):
        for name in names:
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, out)
            if output_files.parse_shard_file_name(relative) or relative.startswith(output_files.INDEX_DIR + os.sep):
                with open(path, "rb") as f:
                    found[relative] = hashlib.sha256(f.read()).hexdigest()
    return found


def _comparable(out: str):
    doc = read_manifest(out)
    return doc.replace(created="", generations=tuple(dataclasses.replace(g, created="") for g in doc.generations))


def _outside_staging(out: str):
    """What the output holds besides the run's staging folder."""
    if not os.path.isdir(out):
        return []
    return sorted(n for n in os.listdir(out) if not n.startswith(output_files.RUN_FOLDER_PREFIX))


def _resume_matches(input_dir: str, out: str, reference: str, analyze: bool, stage: str) -> None:
    resumed = run_in_process("convert", "--input", input_dir, "--output", out, *_options(analyze, stage), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _digests(out) == _digests(reference)
    assert _comparable(out) == _comparable(reference)


@pytest.fixture(autouse=True)
def _no_progress_lines(monkeypatch):
    """The one-line checks count stderr's lines: a run slowed by a busy machine must not add progress lines."""
    monkeypatch.setenv(progress.INTERVAL_ENV, "3600")


FAILURES = [(stage, error) for stage in STAGE_WORDS if stage != "worker" for error in ("error", "enospc", "eacces")]
FAILURES += [("worker", error) for error in ("error", "enospc", "eacces")]


@pytest.mark.parametrize("stage, error", FAILURES)
def test_a_failure_at_a_stage_is_one_line_exit_1_and_resume_finishes_it(inputs, tmp_path, monkeypatch, stage, error):
    input_dir, references = inputs
    analyze = stage == "analysis"
    out = str(tmp_path / "out")
    monkeypatch.setenv(faults.ENV, f"fail:{stage}:{error}")
    before = set(multiprocessing.active_children())
    failed = run_in_process("convert", "--input", input_dir, "--output", out, *_options(analyze, stage))
    lines = failed.stderr.strip().splitlines()
    assert failed.returncode == 1, failed.stderr[-3000:]
    assert len(lines) <= 3 and "Traceback" not in failed.stderr, failed.stderr
    assert lines[-1].startswith(f"img2tfrecord: the run failed while {STAGE_WORDS[stage]}: {CAUSE_WORDS[error]}")
    assert "--resume (details: " in lines[-1], lines[-1]
    assert os.path.exists(lines[-1].rsplit("(details: ", 1)[1].rstrip(")"))  # the log the line names
    assert _outside_staging(out) == []  # no shard, no beam-temp-*, no lock: only the staging folder
    assert set(multiprocessing.active_children()) <= before and not pool_module._OPEN
    monkeypatch.delenv(faults.ENV)
    if error == "error":  # the three faults stop the run at the same point and so leave the same output
        _resume_matches(input_dir, out, references[analyze], analyze, stage)


def test_a_killed_conversion_worker_is_replaced_and_the_run_writes_the_same_bytes(inputs, tmp_path, monkeypatch):
    input_dir, references = inputs
    out = str(tmp_path / "out")
    monkeypatch.setenv(faults.ENV, "fail:worker:kill")
    monkeypatch.setenv(faults.MARKER_ENV, str(tmp_path / "killed"))
    done = run_in_process("convert", "--input", input_dir, "--output", out, *_options(False))
    assert done.returncode == 0, done.stderr[-3000:]
    assert os.path.exists(tmp_path / "killed")  # a worker was killed
    assert _digests(out) == _digests(references[False])


@pytest.mark.parametrize("error", ["error", "enospc", "eacces"])
def test_a_failing_heartbeat_is_one_warning_and_the_run_finishes(inputs, tmp_path, monkeypatch, error):
    input_dir, references = inputs
    out = str(tmp_path / "out")
    monkeypatch.setenv(faults.ENV, f"fail:heartbeat:{error}")
    done = run_in_process("convert", "--input", input_dir, "--output", out, *_options(False, "heartbeat"))
    assert done.returncode == 0, done.stderr[-3000:]
    warnings = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and "could not refresh the lock" in warnings[0], done.stderr
    assert not os.path.exists(os.path.join(out, output_files.LOCK_FILE))
    assert _digests(out) == _digests(references[False])


def _signalled(args, marker: str, phase: str, signum: int) -> subprocess.CompletedProcess:
    """``img2tfrecord ARGS`` paused at ``phase``, then sent ``signum``; -> the finished process."""
    env = cli_env({faults.ENV: f"pause:{phase}", faults.MARKER_ENV: marker})
    proc = subprocess.Popen(cli_command(*args), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 180
        while not os.path.exists(marker):
            assert proc.poll() is None, proc.communicate()[1].decode()[-3000:]
            assert time.monotonic() < deadline, f"never paused at {phase}"
            time.sleep(0.02)
        os.kill(proc.pid, signum)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out.decode(), err.decode())


def _processes_of(marker: str) -> List[int]:
    """The processes of a run started with ``marker`` as its fault marker (they inherit its environment)."""
    wanted = f"{faults.MARKER_ENV}={marker}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if wanted in f.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                pass
    return found


def _assert_killed_at(phase: str, out: str, reference: str) -> None:
    """What a run killed at ``phase`` leaves: never a partial file under a final name, and no ``_SUCCESS``."""
    assert not os.path.exists(os.path.join(out, output_files.SUCCESS_FILE))
    expected = _digests(reference)
    staged = [n for n in os.listdir(out) if n.startswith(output_files.RUN_FOLDER_PREFIX)] if os.path.isdir(out) else []
    committed = os.path.join(out, staged[0], output_files.RUN_COMMITTED_DIR) if staged else ""
    for folder in (out, committed):
        for name, digest in (_digests(folder) if folder and os.path.isdir(folder) else {}).items():
            assert digest == expected[name], f"{name} is not whole"
    if phase == "converting":  # one shard done, the next half written: nothing committed
        assert not _digests(committed) and os.listdir(os.path.join(out, staged[0], output_files.RUN_DONE_DIR))
    if phase == "committing":  # one split committed, in the staging folder only (and the killed run's lock)
        assert _outside_staging(out) == [output_files.LOCK_FILE] and 0 < len(_digests(committed)) < len(expected)
    if phase == "finalizing":  # published, dataset.json written, no _SUCCESS yet
        assert _digests(out) == expected and os.path.exists(os.path.join(out, output_files.MANIFEST_FILE))


SIGNALS = [(phase, signum) for phase in faults.PHASES for signum in (signal.SIGTERM, signal.SIGKILL)]
SIGNALS += [("analysis", signal.SIGTERM)]
# A closed terminal (SIGHUP) and Ctrl-\ (SIGQUIT) end a run as SIGTERM does.
SIGNALS += [("converting", signal.SIGHUP), ("committing", signal.SIGQUIT)]


@pytest.mark.parametrize("phase, signum", SIGNALS, ids=lambda v: v.name if isinstance(v, signal.Signals) else v)
def test_a_signal_at_a_stage_leaves_an_output_resume_finishes(inputs, tmp_path, phase, signum):
    input_dir, references = inputs
    analyze = phase == "analysis"
    out = str(tmp_path / "out")
    args = ("convert", "--input", input_dir, "--output", out, *_options(analyze, phase))
    marker = str(tmp_path / "paused")
    done = _signalled(args, marker, phase, signum)
    if signum != signal.SIGKILL:
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 128 + signum, done.stderr[-3000:]
        assert len(lines) <= 3 and "Traceback" not in done.stderr and "leaked" not in done.stderr, done.stderr
        if phase == "listing":  # at the launch: nothing to resume
            assert lines[-1] == f"img2tfrecord: interrupted by {signum.name} before anything was written"
        else:
            assert lines[-1].startswith(f"img2tfrecord: interrupted by {signum.name}: ") and "--resume" in lines[-1]
        assert _outside_staging(out) == []  # no lock either: released
    else:
        assert done.returncode == -signal.SIGKILL
        _assert_killed_at(phase, out, references[analyze])
    deadline = time.monotonic() + 10
    while _processes_of(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_of(marker) == [], "a process of the run outlived it"
    _resume_matches(input_dir, out, references[analyze], analyze, phase)
    shutil.rmtree(out)
