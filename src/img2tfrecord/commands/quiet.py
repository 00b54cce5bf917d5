"""Quiet by default: a run's stderr carries img2tfrecord's own lines, not its libraries' start-up chatter.

Two filters, both off with ``convert --verbose``:

* :class:`OwnLinesOnly`, on the logging handler: records logged by
  img2tfrecord's code pass; those of other libraries (Beam, TensorFlow,
  absl, google-auth's credential warnings) go to the run's log file only
  (``failures.RunLog``), which the line of a failed run names, as does a
  failure the command itself reports in one line (the error budget).
* :class:`StderrFilter`, on file descriptor 2: TensorFlow's and gRPC's C++
  code logs through absl before anything can configure it ("All log
  messages before absl::InitializeLog() is called are written to STDERR",
  ``I0000 ... cudart_stub.cc:31] Could not find cuda drivers``), straight to
  fd 2 and whatever ``TF_CPP_MIN_LOG_LEVEL`` says. fd 2 becomes a pipe to a
  small child process that drops those lines (:func:`is_noise`) and copies
  every other byte, unchanged, to the real stderr. Python's ``sys.stderr``
  is re-pointed at the real stderr, so this process's own lines (and a
  terminal's live progress line) do not go through the pipe. Processes
  started meanwhile (the conversion pool) inherit the pipe as their fd 2. The
  child is a process, not a thread, so that what a crashing or killed run
  wrote last still reaches the terminal: it copies until every writer has
  closed the pipe.

No Beam and no TensorFlow here; the child imports only this module.
"""

from __future__ import annotations

import array
import io
import logging
import os
import re
import select
import signal
import subprocess
import sys
import time
import warnings
from typing import Dict, List, Optional

from img2tfrecord.errors import STOP_SIGNALS

# Lines of C++ libraries that say nothing about the run (TensorFlow, absl, gRPC), as whole lines.
NOISE = (
    re.compile(rb"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"),
    # absl/glog INFO, WARNING and ERROR lines: "I0000 00:00:1795704440.281315   28565 port.cc:153] ...";
    # FATAL ones (F...) pass: they explain a crash.
    re.compile(rb"[IWE]\d{4} [\d:.]+ +\d+ [^ \]]+:\d+\] .*"),
    # the second line of TensorFlow's cpu_feature_guard message
    re.compile(rb"To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler flags\."),
    # multiprocessing's resource tracker, when the launcher was killed (SIGKILL) before it closed its
    # pools' queues: the tracker removes those semaphores itself, as it says, and the line tells nothing
    re.compile(rb".*resource_tracker\.py:\d+: UserWarning: resource_tracker: There appear to be \d+ leaked .*"),
    re.compile(rb" +warnings\.warn\('resource_tracker: There appear to be %d '"),
)
# A relaunched resource tracker (its predecessor was killed) prints a KeyError traceback for each semaphore
# the predecessor registered: the pools release those themselves. Such a traceback is left out whole.
TRACEBACK_HEAD = b"Traceback (most recent call last):"
TRACKER_FRAME = re.compile(rb'  File ".*[/\\]multiprocessing[/\\]resource_tracker\.py", line \d+, in main')
TRACKER_RELAUNCHED = "resource_tracker: process died unexpectedly"  # the launcher's own warning then
_PARTIAL_WAIT_S = 0.1  # an unfinished line is passed on after this long without more bytes
# Exceptions a job raises on purpose and the command reports as one line of its own (``convert``'s
# error budget): a runner's log of them, with the job's traceback, is left out.
REPORTED_BY_COMMAND = ("ErrorBudgetExceeded",)


def is_noise(line: bytes) -> bool:
    """True for a known start-up line of a C++ library (without its line end)."""
    line = line.rstrip(b"\r")
    return any(p.fullmatch(line) for p in NOISE)


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class OwnLinesOnly(logging.Filter):
    """Passes the records logged by img2tfrecord's code.

    Judged by the file that logged, not the logger's name: Beam's portable
    runner, for one, logs its job's messages through the root logger, as
    img2tfrecord does.
    """

    def __init__(self):
        super().__init__()
        self._ours: Dict[str, bool] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if reported_by_command(record):
            return False
        ours = self._ours.get(record.pathname)
        if ours is None:
            ours = self._ours[record.pathname] = os.path.abspath(record.pathname).startswith(_PACKAGE_DIR)
        return ours


def reported_by_command(record: logging.LogRecord) -> bool:
    """True for a log record about an exception named in :data:`REPORTED_BY_COMMAND`.

    Told by the exception's class, or by its name in the message for runners
    that pass on their worker's log as text.
    """
    if record.exc_info and record.exc_info[1] is not None:
        if any(cls.__name__ in REPORTED_BY_COMMAND for cls in type(record.exc_info[1]).__mro__):
            return True
    try:
        message = record.getMessage()
    except Exception:  # a library's malformed log call: let the handler show it as it would
        return False
    return any(name in message for name in REPORTED_BY_COMMAND)


def copy_without_noise(src: int, dst: int) -> None:
    """Copy ``src`` to ``dst`` until end of file, leaving out :func:`is_noise` lines and a relaunched resource
    tracker's tracebacks (:data:`TRACKER_FRAME`).

    A line still unfinished when no bytes have come for a moment is passed
    on as it is (with the rest of it when it comes), so a prompt or a
    progress display of a child process is not held back.
    """
    pending = b""
    passing = False  # the head of the current line was already passed on
    held = b""  # a traceback's first line, until the next line tells whose traceback it is
    dropping = False  # inside a resource tracker's traceback
    writable = True
    while True:
        if pending and not select.select([src], [], [], _PARTIAL_WAIT_S)[0]:
            out, pending, held, passing = held + pending, b"", b"", True
        else:
            data = os.read(src, 65536)
            if not data:
                out, pending = held + (b"" if not passing and is_noise(pending) else pending), b""
                writable = _write(dst, out) if writable else False
                return
            lines = (pending + data).split(b"\n")
            pending = lines.pop()
            kept: List[bytes] = []
            for line in lines:
                whole = line.rstrip(b"\r")
                if passing:
                    kept.append(line + b"\n")
                elif dropping:
                    dropping = whole.startswith(b" ")  # the exception's own line ends the traceback
                elif held and TRACKER_FRAME.fullmatch(whole):
                    held, dropping = b"", True
                else:
                    kept.append(held)
                    held = b""
                    if whole == TRACEBACK_HEAD:
                        held = line + b"\n"
                    elif not is_noise(line):
                        kept.append(line + b"\n")
                passing = False
            out = b"".join(kept)
        if writable:
            writable = _write(dst, out)


def _write(fd: int, data: bytes) -> bool:
    """Write all of ``data``; False once the reader is gone (the rest is read and dropped)."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BrokenPipeError:
            return False
    return True


def main() -> None:
    """The child: stdin is the pipe, stdout the real stderr."""
    # Ctrl-C and a group's SIGTERM are for the run: this process leaves when the pipe closes.
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    copy_without_noise(0, 1)


class StderrFilter:
    """fd 2 through :func:`copy_without_noise` in a child process, from :meth:`start` to :meth:`stop`."""

    def __init__(self):
        self._saved: Optional[int] = None  # the real stderr
        self._pipe: Optional[int] = None  # this process's own handle on the pipe's write end
        self._old_stderr = None

    def start(self) -> StderrFilter:
        """Filter fd 2 from now on; without a usable fd 2 or a child process (or off POSIX), leaves things be."""
        if os.name != "posix":
            return self
        if sys.stderr is not None:
            sys.stderr.flush()
        try:
            saved = os.dup(2)
        except OSError:
            return self
        read_end, write_end = os.pipe()
        package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        code = f"import sys; sys.path.append({package_parent!r}); from img2tfrecord.commands.quiet import main; main()"
        try:
            # Not waited for: it leaves when the last writer closes the pipe, which may be after this process.
            subprocess.Popen([sys.executable, "-I", "-S", "-c", code], stdin=read_end, stdout=saved, stderr=saved)
        except OSError:
            os.close(saved)
            os.close(write_end)
            return self
        finally:
            os.close(read_end)
        os.dup2(write_end, 2)  # inherited by the processes started from now on
        warnings.filterwarnings("ignore", message=TRACKER_RELAUNCHED, category=UserWarning)
        self._saved, self._pipe = saved, write_end
        self._old_stderr = sys.stderr
        sys.stderr = io.TextIOWrapper(
            io.FileIO(saved, "w", closefd=False),
            encoding=getattr(sys.stderr, "encoding", None) or "utf-8",
            errors="backslashreplace",
            line_buffering=True,
        )
        return self

    def stop(self, wait_s: float = 1.0) -> None:
        """fd 2 and ``sys.stderr`` back to the real stderr, once the child has read what is in the pipe.

        Waits at most ``wait_s`` for that. Processes that still hold the pipe
        (the multiprocessing resource tracker lives as long as this process)
        keep it open; the child copies their lines until they close it.
        """
        if self._saved is None or self._pipe is None:
            return
        sys.stderr.flush()
        os.dup2(self._saved, 2)
        deadline = time.monotonic() + wait_s
        while _unread(self._pipe) and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.01)  # for the child to write out what it read last, before this process writes on
        os.close(self._pipe)
        # sys.stderr was handed to logging handlers and rich meanwhile: it stays usable (fd ``saved`` is
        # left open); sys.stderr itself goes back to the object it was.
        sys.stderr = self._old_stderr
        self._saved = self._pipe = None

    def __enter__(self) -> StderrFilter:
        return self.start()

    def __exit__(self, *unused) -> None:
        self.stop()


def _unread(pipe: int) -> int:
    """Bytes in ``pipe`` that its reader has not read yet."""
    import fcntl
    import termios

    count = array.array("i", [0])
    fcntl.ioctl(pipe, termios.FIONREAD, count, True)
    return count[0]


if __name__ == "__main__":
    main()
