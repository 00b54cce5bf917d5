"""The stderr filters of ``convert``: libraries' start-up lines dropped, every other byte kept, even on a crash."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from conftest import SRC

import img2tfrecord
from img2tfrecord.commands.quiet import OwnLinesOnly, copy_without_noise, is_noise

# As TensorFlow 2.21 prints them on import, whatever TF_CPP_MIN_LOG_LEVEL says.
STARTUP = [
    b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
    b"I0000 00:00:1795704440.281315   28565 port.cc:153] oneDNN custom operations are on. You may see slightly "
    b"different numerical results due to floating-point round-off errors from different computation orders. "
    b"To turn them off, set the environment variable `TF_ENABLE_ONEDNN_OPTS=0`.",
    b"I0000 00:00:1795704440.282565   28565 cudart_stub.cc:31] Could not find cuda drivers on your machine, "
    b"GPU will not be used.",
    b"E0000 00:00:1795705003.449204    1904 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: "
    b"Failed call to cuInit: UNKNOWN ERROR",
    b"W0000 00:00:1795705003.449204    1904 fork_posix.cc:71] Other threads are currently calling into gRPC, "
    b"skipping fork() handlers",
    b"To enable the following instructions: AVX2 AVX512F FMA, in other operations, rebuild TensorFlow with the "
    b"appropriate compiler flags.",
]
KEPT = [
    b"INFO input: 300 files, 2.7 MB, layout class; shards per split: {'train': 1}",
    b"F0000 00:00:1795705003.449204    1904 check.cc:12] Check failed: a crash explained",
    b"Traceback (most recent call last):",
    b'  File "x.py", line 1, in <module>',
    b"WARNING 2 empty class folder(s)",
    b"I0000 is not a log line",
    b"",
    b"caf\xe9 \x1b[2K not UTF-8, with an escape code",
]


def test_the_start_up_lines_are_noise_and_others_are_not():
    assert all(is_noise(line) for line in STARTUP)
    assert all(is_noise(line + b"\r") for line in STARTUP)
    assert not any(is_noise(line) for line in KEPT)


def test_the_resource_trackers_warning_after_a_killed_launcher_is_noise():
    warning = [
        b"/usr/lib/python3.11/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: There appear "
        b"to be 5 leaked semaphore objects to clean up at shutdown",
        b"  warnings.warn('resource_tracker: There appear to be %d '",
    ]
    assert all(is_noise(line) for line in warning)
    assert not is_noise(b"  warnings.warn('something else')")


def _copy(chunks, pause_s: float = 0.0) -> bytes:
    """``chunks`` written into a pipe (``pause_s`` apart) through copy_without_noise; -> what came out."""
    src_r, src_w = os.pipe()
    dst_r, dst_w = os.pipe()
    copier = threading.Thread(target=copy_without_noise, args=(src_r, dst_w))
    copier.start()
    for chunk in chunks:
        os.write(src_w, chunk)
        time.sleep(pause_s)
    os.close(src_w)
    copier.join(10)
    os.close(dst_w)
    out = b""
    while True:
        data = os.read(dst_r, 65536)
        if not data:
            break
        out += data
    for fd in (src_r, dst_r):
        os.close(fd)
    return out


def test_every_other_byte_passes_unchanged_in_order():
    lines = [STARTUP[0], KEPT[0], STARTUP[1], STARTUP[2], KEPT[1], KEPT[2], KEPT[3], STARTUP[3], KEPT[6], KEPT[7]]
    data = b"".join(line + b"\n" for line in lines) + b"no line end at the very end"
    kept = b"".join(line + b"\n" for line in lines if not is_noise(line)) + b"no line end at the very end"
    cut = [data[i : i + 7] for i in range(0, len(data), 7)]  # lines arrive in pieces
    assert _copy(cut) == kept
    assert _copy([data]) == kept


def test_a_relaunched_resource_trackers_tracebacks_are_left_out_and_every_other_traceback_kept():
    tracker = (
        b"Traceback (most recent call last):\n"
        b'  File "/usr/lib/python3.11/multiprocessing/resource_tracker.py", line 239, in main\n'
        b"    cache[rtype].remove(name)\n"
        b"KeyError: '/mp-eh_wa3my'\n"
    )
    other = b'Traceback (most recent call last):\n  File "/x/run.py", line 3, in f\n    boom()\nValueError: real\n'
    data = b"before\n" + tracker + other + tracker + b"after\n" + b"Traceback (most recent call last):\n"
    kept = b"before\n" + other + b"after\n" + b"Traceback (most recent call last):\n"
    assert _copy([data]) == kept
    assert _copy([data[i : i + 5] for i in range(0, len(data), 5)]) == kept  # lines arrive in pieces


def test_an_unfinished_line_is_passed_on_after_a_moment_and_the_rest_of_it_follows():
    head = STARTUP[1][:40]  # looks like noise, but the rest comes too late to judge the line
    out = _copy([b"Proceed? ", head, STARTUP[1][40:] + b"\n" + STARTUP[2] + b"\n"], pause_s=0.3)
    assert out == b"Proceed? " + STARTUP[1] + b"\n"


def test_own_lines_only_passes_img2tfrecords_records_only():
    ours = os.path.join(os.path.dirname(img2tfrecord.__file__), "pipeline", "run.py")
    beams = os.path.join(os.path.dirname(logging.__file__), "apache_beam", "runners", "portable_runner.py")

    def record(pathname: str, level: int) -> logging.LogRecord:
        return logging.LogRecord("root", level, pathname, 1, "message", None, None)

    keep = OwnLinesOnly()
    assert keep.filter(record(ours, logging.INFO))
    assert not keep.filter(record(beams, logging.INFO))  # Beam's portable runner logs through the root logger
    assert not keep.filter(record(beams, logging.WARNING))  # e.g. google-auth's credential warnings
    assert not keep.filter(record(beams, logging.ERROR))  # in the run's log file, which a failure's line names
    assert keep.filter(record(ours, logging.ERROR))


CRASHING = textwrap.dedent(
    """
    import os, signal, subprocess, sys
    from img2tfrecord.commands.quiet import StderrFilter

    StderrFilter().start()
    os.write(2, NOISE + b"\\nfirst kept line\\n")
    print("python's own stderr line", file=sys.stderr)
    subprocess.run([sys.executable, "-c", "import os; os.write(2, NOISE + b'\\\\nfrom a child process\\\\n')"
                    .replace("NOISE", repr(NOISE))], check=True)
    os.write(2, NOISE + b"\\nlast words before the crash, without a line end")
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.parametrize("noise", [STARTUP[0], STARTUP[2]])
def test_the_last_lines_of_a_killed_process_and_of_its_children_still_come_out(noise):
    code = f"NOISE = {noise!r}\n" + CRASHING
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, timeout=60, env=dict(os.environ, PYTHONPATH=SRC)
    )
    assert proc.returncode == -9
    lines = proc.stderr.split(b"\n")
    # sys.stderr writes straight to the real stderr, so its line may overtake those still in the pipe.
    lines.remove(b"python's own stderr line")
    assert lines == [
        b"first kept line",
        b"from a child process",
        b"last words before the crash, without a line end",
    ], proc.stderr


def test_stop_gives_fd_2_and_sys_stderr_back():
    code = textwrap.dedent(
        """
        import os, sys
        from img2tfrecord.commands.quiet import StderrFilter

        before = sys.stderr
        quiet = StderrFilter().start()
        os.write(2, b"I0000 00:00:1.5 7 port.cc:153] hidden\\nshown while filtered\\n")
        quiet.stop()
        assert sys.stderr is before
        os.write(2, b"I0000 00:00:1.5 7 port.cc:153] shown after stop\\n")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, timeout=60, env=dict(os.environ, PYTHONPATH=SRC)
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == b"shown while filtered\nI0000 00:00:1.5 7 port.cc:153] shown after stop\n"
