"""What ``convert`` prints while it runs: progress lines, a live terminal line, and nothing of its libraries'."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import termios
import time

import images as I
import pytest
from conftest import IN_MEMORY, ROOT, cli_command, cli_env, convert, run_cli

from img2tfrecord import faults, progress
from img2tfrecord.readers.records import read_manifest

# "INFO progress: 40/64 images (62%), 31 images/s, ETA 1 s, 3 rejected, 120.4 kB written"
PROGRESS = re.compile(
    r"INFO progress: (?P<done>\d+)/(?P<total>\d+|\?) images(?: \(\d+%\))?(?:, (?P<rate>[\d.]+) images/s)?"
    r"(?:, ETA (?P<eta>[^,]+))?, (?P<rejected>\d+) rejected, (?P<bytes>[\d.]+ (?:B|kB|MB|GB)) written(?:, finishing)?"
)
# What TensorFlow's and absl's C++ code prints as it loads ("I0000 00:00:17957.. 28565 port.cc:153] ...").
ABSL_LINE = re.compile(r"^[IWE]\d{4} [\d:.]+ +\d+ \S+:\d+\] ")
ABSL_PREAMBLE = "All log messages before absl::InitializeLog() is called are written to STDERR"
BAD = {"cat/empty.jpg": b"", "dog/truncated.jpg": I.truncated_jpeg(), "dog/notes.jpg": I.text_as_jpg()}
BAD_NAME = b"cat/caf\xe9.jpg"  # not UTF-8: rejected as the input is listed (bad_name), before conversion


def write_dataset(root: str, per_class: int, bad: bool) -> int:
    """Two classes of small JPEGs (and the bad files above); -> the number of inputs."""
    count = 0
    for c, name in enumerate(("cat", "dog")):
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(per_class):
            with open(os.path.join(root, name, f"{name}_{i:03d}.jpg"), "wb") as f:
                f.write(I.jpeg(40 + i % 7, 30 + c, I.noise(8, 6, seed=100 * c + i)))
            count += 1
    if bad:
        for relpath, data in BAD.items():
            with open(os.path.join(root, relpath), "wb") as f:
                f.write(data)
        with open(os.path.join(os.fsencode(root), BAD_NAME), "wb") as f:
            f.write(I.jpeg(40, 30))
        count += len(BAD) + 1
    return count


def slow_env(seconds_per_record: float, interval_s: float = 0.3) -> dict:
    return {faults.ENV: f"slow:{seconds_per_record}", progress.INTERVAL_ENV: str(interval_s)}


@pytest.fixture(scope="module")
def logged_run(tmp_path_factory):
    """A default run (analysis on) with stderr not a terminal, slowed to last several progress intervals."""
    root = str(tmp_path_factory.mktemp("progress_in"))
    inputs = write_dataset(root, per_class=30, bad=True)
    out = str(tmp_path_factory.mktemp("progress_out") / "out")
    proc = run_cli("convert", "--input", root, "--output", out, *IN_MEMORY, env=slow_env(0.05), analyze=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return inputs, out, proc


def test_a_run_without_a_terminal_logs_progress_lines_that_count_up_to_its_inputs(logged_run):
    inputs, out, proc = logged_run
    found = [PROGRESS.fullmatch(line) for line in proc.stderr.splitlines() if line.startswith("INFO progress:")]
    assert found and all(found), proc.stderr[-3000:]
    assert len(found) >= 4, proc.stderr[-3000:]
    done = [int(m["done"]) for m in found]
    rejected = [int(m["rejected"]) for m in found]
    assert done == sorted(done) and rejected == sorted(rejected)
    assert {m["total"] for m in found} == {str(inputs)}
    assert any(m["rate"] and m["eta"] for m in found), "no line while converting showed a rate and an ETA"
    acc = read_manifest(out).accounting
    assert acc.inputs == inputs and acc.rejected == len(BAD) + 1
    last = found[-1]
    assert int(last["done"]) == acc.inputs == acc.written + acc.rejected
    assert int(last["rejected"]) == acc.rejected
    shard_bytes = sum(info.num_bytes for info in read_manifest(out).splits.values())
    assert last["bytes"] == progress.format_bytes(shard_bytes)


def test_a_default_run_prints_none_of_its_libraries_start_up_lines(logged_run):
    _, _, proc = logged_run
    assert "analysing the 'train' split" in proc.stderr  # TensorFlow was loaded
    assert ABSL_PREAMBLE not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert not [line for line in lines if ABSL_LINE.match(line)], proc.stderr[-3000:]
    # Only img2tfrecord's own log lines; the summary is on stdout.
    assert all(re.match(r"(INFO|WARNING) ", line) for line in lines), proc.stderr[-3000:]


def test_verbose_shows_the_libraries_lines_too(sample_dir, tmp_path):
    proc = convert(sample_dir, str(tmp_path / "out"), "--verbose", analyze=True, process=True)  # TensorFlow loads too
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ABSL_PREAMBLE in proc.stderr
    assert any(ABSL_LINE.match(line) for line in proc.stderr.splitlines()), proc.stderr[-3000:]
    assert "INFO Creating state cache" in proc.stderr  # one of Beam's INFO lines


def test_quiet_and_verbose_together_are_a_usage_error(sample_dir, tmp_path):
    proc = convert(sample_dir, str(tmp_path / "out"), "-q", "--verbose")
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "not allowed with" in lines[0], proc.stderr


def run_in_terminal(*args: str, env: dict, timeout: float = 300) -> tuple:
    """``python -m img2tfrecord ARGS`` with stdin, stdout and stderr on a pseudo-terminal; -> (exit code, output)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    full_env = cli_env({"TERM": "xterm-256color", **env})
    full_env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        cli_command(*args),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=full_env,
        cwd=ROOT,
        start_new_session=True,  # the terminal becomes its controlling terminal
    )
    os.close(slave)
    output = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not select.select([master], [], [], 1.0)[0]:
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every process has closed the terminal
                break
            if not data:
                break
            output += data
        else:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"no end after {timeout} s: {output[-2000:]!r}")
        return proc.wait(timeout=60), output.decode("utf-8", "replace")
    finally:
        os.close(master)


def test_a_terminal_shows_one_live_line_and_then_the_summary(tmp_path):
    root = str(tmp_path / "in")
    inputs = write_dataset(root, per_class=20, bad=False)
    code, output = run_in_terminal(
        "convert",
        "--input",
        root,
        "--output",
        str(tmp_path / "out"),
        "--no-analyze",
        *IN_MEMORY,
        env=slow_env(0.05),
    )
    assert code == 0, output[-3000:]
    assert re.search(rf"\d+/{inputs} images \(\d+%\), [\d.]+ images/s, ETA \d+ s, 0 rejected", output), output[-3000:]
    assert f"{inputs}/{inputs} images (100%)" in output
    live = output.split(f"{inputs} inputs:")[0]
    assert "\x1b[2K" in live and live.count(" images (") >= 3  # one line, erased and redrawn
    assert "INFO progress:" not in output  # the log form is for stderr that is not a terminal
    summary = output.split(f"{inputs} inputs: {inputs} records written, 0 rejected")
    assert len(summary) == 2 and "images/s" not in summary[1]


def test_quiet_in_a_terminal_prints_only_the_summary(tmp_path):
    root = str(tmp_path / "in")
    inputs = write_dataset(root, per_class=10, bad=False)
    out = str(tmp_path / "out")
    code, output = run_in_terminal(
        "convert", "--input", root, "--output", out, "--no-analyze", "-q", *IN_MEMORY, env=slow_env(0.05)
    )
    assert code == 0, output
    lines = [line for line in output.replace("\r\n", "\n").split("\n") if line]
    assert lines == [
        f"{inputs} inputs: {inputs} records written, 0 rejected",
        f"  train: {inputs} records in 1 shard(s), {read_manifest(out).splits['train'].num_bytes / 1e6:.1f} MB",
        f"    cat: {inputs // 2}",
        f"    dog: {inputs // 2}",
        f"output: {out}",
    ], output
