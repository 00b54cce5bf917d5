"""A newcomer's first commands: help and a closed pipe as real processes; the error budget's one line and
report DIR/ through the CLI in this process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, cli_command, cli_env, convert
from helpers.cli import run_in_process
from PIL import Image

from img2tfrecord.commands.errors import EXIT_CLOSED_PIPE, EXIT_ERROR_BUDGET
from img2tfrecord.schemas import output_files

COMMANDS = ("convert", "sample", "inspect", "verify", "report")


def _console_script() -> str:
    path = shutil.which("img2tfrecord", path=os.path.dirname(sys.executable))
    assert path, "the img2tfrecord console script is installed beside this Python"
    return path


# -h and --help are one argparse action: each program is started with one of them, and each flag is given to one
# program, for every command.
@pytest.mark.parametrize("flag", ["-h", "--help"])
@pytest.mark.parametrize("command", ("",) + COMMANDS)
def test_help_exits_0_with_the_usage_on_stdout(command, flag):
    args = [command, flag] if command else [flag]
    argv = cli_command(*args) if flag == "-h" else [_console_script(), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=cli_env(), cwd=ROOT)
    assert proc.returncode == 0, (argv, proc.stderr[-3000:])
    assert proc.stdout.startswith(f"usage: img2tfrecord {command}".rstrip() + " "), argv
    assert proc.stderr == ""


def _into_closed_pipe(*args: str, unbuffered: bool) -> subprocess.CompletedProcess:
    """Run the CLI with stdout a pipe whose reader has already left (``| head`` that has exited)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = cli_env({"PYTHONUNBUFFERED": "1"} if unbuffered else None)
    if not unbuffered:
        env.pop("PYTHONUNBUFFERED", None)
    try:
        return subprocess.run(
            cli_command(*args), stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=300, env=env, cwd=ROOT
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
def test_a_closed_stdout_ends_every_command_quietly(converted_sample, sample_dir, tmp_path, unbuffered):
    for args in (
        ("inspect", converted_sample),
        ("inspect", converted_sample, "--json"),
        ("verify", converted_sample),
        ("convert", "--input", sample_dir, "--output", str(tmp_path / "never"), "--plan", "--no-analyze"),
        ("--help",),
        ("report", "--help"),
    ):
        proc = _into_closed_pipe(*args, unbuffered=unbuffered)
        assert (proc.returncode, proc.stderr) == (EXIT_CLOSED_PIPE, ""), args
    assert not (tmp_path / "never").exists()


def test_inspect_piped_into_head_prints_its_first_line(converted_sample):
    proc = subprocess.run(
        ["bash", "-c", 'set -o pipefail; "$@" | head -1', "bash", *cli_command("inspect", converted_sample)],
        capture_output=True,
        text=True,
        timeout=120,
        env=cli_env(),
        cwd=ROOT,
    )
    # head may leave before or after inspect's last write: either way no traceback, one line out.
    assert proc.returncode in (0, EXIT_CLOSED_PIPE) and proc.stderr == ""
    assert proc.stdout.startswith(converted_sample) and proc.stdout.count("\n") == 1


@pytest.fixture(scope="module")
def half_bad(tmp_path_factory) -> str:
    """Two inputs, one of them not an image: 50% rejected."""
    root = tmp_path_factory.mktemp("half_bad") / "in"
    (root / "a").mkdir(parents=True)
    Image.new("RGB", (8, 8), (90, 10, 10)).save(root / "a" / "good.png")
    (root / "a" / "bad.jpg").write_bytes(b"not an image")
    return str(root)


def _budget_line(out: str) -> str:
    return (
        "img2tfrecord: error budget exceeded: 1 of 2 inputs rejected (50.0% > 20.0%, --max-error-rate); "
        f"details in {out}/{output_files.ERRORS_FILE}"
    )


def test_error_budget_is_one_line(half_bad, tmp_path):
    out = str(tmp_path / "quiet")
    proc = convert(half_bad, out, "--max-error-rate", "0.2", "--no-analyze", "--quiet")
    assert proc.returncode == EXIT_ERROR_BUDGET, proc.stderr[-3000:]
    assert proc.stderr.splitlines() == [_budget_line(out)]
    assert os.path.exists(os.path.join(out, output_files.SUCCESS_FILE))

    out = str(tmp_path / "default")
    proc = convert(half_bad, out, "--max-error-rate", "0.2", "--no-analyze")
    assert proc.returncode == EXIT_ERROR_BUDGET
    lines = proc.stderr.splitlines()
    assert lines[-1] == _budget_line(out) and "Traceback" not in proc.stderr
    assert all(line.startswith("INFO ") for line in lines[:-1]), lines  # the run's own progress lines


def test_error_budget_traceback_with_verbose(half_bad, tmp_path):
    out = str(tmp_path / "verbose")
    proc = convert(half_bad, out, "--max-error-rate", "0.2", "--no-analyze", "--verbose")
    assert proc.returncode == EXIT_ERROR_BUDGET
    assert "Traceback" in proc.stderr and "ErrorBudgetExceeded" in proc.stderr
    assert proc.stderr.splitlines()[-1] == _budget_line(out)


def test_report_output_folder_gets_report_html_and_json(converted_sample, tmp_path):
    for output, folder in (
        (f"{tmp_path}/reports/", tmp_path / "reports"),  # created
        (f"{tmp_path}/new/deeper/", tmp_path / "new" / "deeper"),
        (str(tmp_path / "reports"), tmp_path / "reports"),  # an existing folder, without the slash
    ):
        proc = run_in_process("report", converted_sample, "--output", output, "--processes", "1")
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout.strip() == str(folder / "report.html")
        assert sorted(os.listdir(folder)) == [
            "report-classes.jsonl",
            "report-duplicates.jsonl",
            "report-rejected.jsonl",
            "report.html",
            "report.json",
        ]
        assert json.loads((folder / "report.json").read_text())["dataset"]["complete"] is True
    assert not (tmp_path / "reports.json").exists()


# An object whose finalizer, run while the interpreter tears its modules down (after its exit handlers, once
# Python's signal handlers are gone), sends this process SIGTERM: a stop signal at the last moment of a command.
_SIGNAL_IN_TEARDOWN = """
import os, signal, sys
class Late:
    def __del__(self, kill=os.kill, pid=os.getpid(), signum=signal.SIGTERM):
        kill(pid, signum)
late = Late()
sys.argv = ["img2tfrecord", *sys.argv[1:]]
from img2tfrecord.cli import run
run()
"""


def test_a_stop_signal_while_the_interpreter_tears_down_leaves_the_commands_code():
    args = ("--version",)
    proc = subprocess.run(
        [sys.executable, "-c", _SIGNAL_IN_TEARDOWN, *args], capture_output=True, text=True, env=cli_env(), cwd=ROOT
    )
    expected = subprocess.run(cli_command(*args), capture_output=True, text=True, env=cli_env(), cwd=ROOT)
    assert proc.returncode == expected.returncode >= 0, proc.stderr
    assert proc.stderr == expected.stderr


# A command whose process also holds a thread that never ends (as a library's thread stuck at exit would be):
# Python joins such a thread at exit, for ever, unless the finished command ends its process itself.
_STUCK_THREAD_AT_EXIT = """
import sys, threading
from img2tfrecord import cli
cli.EXIT_GRACE_S = 0.5
threading.Thread(target=threading.Event().wait, name="stuck").start()  # not a daemon: joined at exit
sys.argv = ["img2tfrecord", *sys.argv[1:]]
cli.run()
"""


def test_a_finished_command_exits_with_its_code_while_a_thread_it_would_join_never_ends(converted_sample):
    args = ("inspect", converted_sample)
    proc = subprocess.run(
        [sys.executable, "-c", _STUCK_THREAD_AT_EXIT, *args],
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert converted_sample in proc.stdout or "train" in proc.stdout, proc.stdout[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr
