"""Command line: ``img2tfrecord convert | inspect | verify | report | sample``.

Parses, dispatches to ``img2tfrecord/commands/``, and turns failures into
one line and an exit code: 0 success, 1 failure, 2 usage error, 3 error
budget exceeded, 141 stdout closed by its reader (``commands/errors.py``).
"""

from __future__ import annotations

import argparse
import atexit
import gc
import os
import select
import shlex
import shutil
import signal
import sys
import threading
from typing import Callable, List, Optional, Sequence, Tuple

from img2tfrecord.commands.errors import EXIT_CLOSED_PIPE, EXIT_FAILURE, EXIT_USAGE, UsageError
from img2tfrecord.errors import STOP_SIGNALS, ConversionFailed, Interrupted
from img2tfrecord.failures import Failure, failure_of


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line and exits 2."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> Tuple[argparse.ArgumentParser, List[str]]:
    """The program's parser, and the option strings of ``convert``."""
    from img2tfrecord import __version__
    from img2tfrecord.commands import convert, inspect, report, sample, verify

    parser = _Parser(
        prog="img2tfrecord",
        description="Convert image datasets into sharded TFRecord files with an Apache Beam pipeline.",
    )
    parser.add_argument("--version", action="version", version=f"img2tfrecord {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    convert_options = convert.add_parser(sub)
    sample.add_parser(sub)
    inspect.add_parser(sub)
    verify.add_parser(sub)
    report.add_parser(sub)
    return parser, convert_options


def main(argv: Optional[Sequence[str]] = None) -> int:
    from img2tfrecord.beam_filesystem_fixes import defer_object_stores

    defer_object_stores()  # before Beam loads: S3's and Azure's SDKs load with their first path
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, convert_options = build_parser()
    if argv and argv[0] == "convert":
        ns, rest = parser.parse_known_args(argv)
    else:
        ns, rest = parser.parse_args(argv), []
    try:
        if ns.command != "convert":
            return ns.func(ns)
        from img2tfrecord.commands import convert

        return convert.run(ns, rest, convert_options)
    except UsageError as e:
        print(f"img2tfrecord: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as e:  # Ctrl-C; during a conversion also SIGTERM (pipeline/run.py Interrupted)
        print(f"img2tfrecord: {_interrupted(e, ns, argv)}", file=sys.stderr)
        return int(getattr(e, "exit_code", 128 + signal.SIGINT))
    except ConversionFailed as e:  # one line: what failed, why, what next; the details are in its log file
        failure = Failure(e.stage, e.cause, e.fix) if e.stage else None
        again = f"run: {_resume_command(ns, argv)}"
        line = failure.line(again, e.log_path) if failure is not None else str(e)
        print(f"img2tfrecord: {line}", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as e:  # a command's own failure: one line
        if isinstance(e, BrokenPipeError) and _stdout_closed():
            return _leave_closed_stdout()
        details = _traceback_file(e)
        print(f"img2tfrecord: {ns.command} failed: {failure_of(e).cause} (details: {details})", file=sys.stderr)
        return EXIT_FAILURE


def _traceback_file(e: BaseException) -> str:
    """A temporary file holding ``e``'s traceback, for the one line that names it."""
    import tempfile
    import traceback

    with tempfile.NamedTemporaryFile("w", prefix="img2tfrecord-", suffix=".log", delete=False) as f:
        f.write("".join(traceback.format_exception(type(e), e, e.__traceback__)))
    return f.name


def _interrupted(e: KeyboardInterrupt, ns: argparse.Namespace, argv: Sequence[str]) -> str:
    """The line for a stopped command; for a conversion, what it kept and the command that finishes it."""
    kept = getattr(e, "kept", None)
    name = getattr(e, "signal_name", "SIGINT")
    if kept is None:
        if isinstance(e, Interrupted) and ns.command == "convert":
            return f"interrupted by {name} before anything was written"
        return f"interrupted by {name}" if isinstance(e, Interrupted) else "interrupted"
    return f"interrupted by {name}: {kept}; to finish, run: {_resume_command(ns, argv)}"


def _resume_command(ns: argparse.Namespace, argv: Sequence[str]) -> str:
    """The same command line with ``--resume`` (and without ``--overwrite``, in any abbreviation argparse took)."""
    again = [a for a in argv if not (ns.overwrite and len(a) > 3 and "--overwrite".startswith(a))]
    if not ns.resume:
        again.append("--resume")
    return shlex.join([*invoked_as(), *again])


def invoked_as() -> List[str]:
    """The program as this process was started, to run it again from the same folder: ``img2tfrecord`` when
    that is a command outside a virtualenv, else its path as typed or found (``.venv/bin/img2tfrecord``:
    ``./run_local.sh`` does not put it on the caller's PATH), or ``.venv/bin/python -m img2tfrecord``."""
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "__main__.py":
        return [_shortest(sys.executable), "-m", "img2tfrecord"]
    if os.path.basename(argv0) != "img2tfrecord" or "/" not in argv0:
        return ["img2tfrecord"]  # called from Python (cli.main), or as typed
    on_path = shutil.which("img2tfrecord")
    if sys.prefix == sys.base_prefix and on_path and os.path.abspath(on_path) == os.path.abspath(argv0):
        return ["img2tfrecord"]
    return [_shortest(argv0)]


def _shortest(path: str) -> str:
    """``path`` relative to the working folder when that is shorter and stays below it, else absolute."""
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute)
    if "/" not in relative:
        relative = "./" + relative  # a bare name would be looked up on PATH
    return relative if not relative.startswith("..") and len(relative) < len(absolute) else absolute


def _stdout_closed() -> bool:
    """True when stdout is a pipe whose reader has left, so a BrokenPipeError was about stdout."""
    if not hasattr(select, "poll"):
        return True
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def _flushed_stdout() -> bool:
    """Flush stdout; False when its reader has left."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        return False
    return True


def _leave_closed_stdout() -> int:
    """Exit code for a closed stdout, with nothing on stderr.

    stdout is pointed at the null device (Python's documented recipe, in the
    ``signal`` module's notes on SIGPIPE) so the interpreter's final flush of
    what is still buffered does not raise again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_CLOSED_PIPE


def run(argv: Optional[Sequence[str]] = None) -> None:
    """The program: ``main(argv)``, then exit with its code.

    The objects TensorFlow and Beam leave behind are frozen first, so the
    interpreter's final garbage collection skips them (a long pause after a
    run with tf.Transform; docs/performance.md). Everything is written and
    closed by then, and exit handlers still run.
    """
    _stop_from_the_start()
    try:
        code = main(argv)
    except SystemExit as e:  # argparse after --help, --version or a usage error
        # argparse itself swallows the error of writing help into a closed pipe (unbuffered stdout).
        if _flushed_stdout() and not (e.code in (None, 0) and _stdout_closed()):
            raise
        code = _leave_closed_stdout()
    except BrokenPipeError:  # argparse writing a long help into a closed pipe
        code = _leave_closed_stdout()
    except Interrupted as e:  # a stop signal before a command started
        print(f"img2tfrecord: interrupted by {e.signal_name} before anything was written", file=sys.stderr)
        code = e.exit_code
    else:
        if not _flushed_stdout():
            code = _leave_closed_stdout()
    exit_on_stop_signals(code)
    exit_within(code)
    gc.freeze()
    sys.exit(code)


def _stop_from_the_start() -> None:
    """From the program's first line, a stop signal ends it as Ctrl-C does (one line, 128 + the signal), also
    while it still imports; a conversion installs its own handlers once it holds its output."""

    def stop(signum, unused_frame):
        raise Interrupted(signum)

    for signum in STOP_SIGNALS:
        if signum != signal.SIGINT:  # Python's own: KeyboardInterrupt
            signal.signal(signum, stop)
    atexit.register(_ignore_stop_signals)  # registered first: it runs after the other exit handlers


def _ignore_stop_signals() -> None:
    """The program's last exit handler: stop signals are ignored from here on. The interpreter next gives
    every signal with a Python handler back to its default, death by the signal, then tears its modules down
    (a tenth of a second or more with TensorFlow loaded): a signal then would turn the command's code into
    -15 and no line."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


# How long the interpreter may take to end a finished command (its exit handlers, joining library threads).
EXIT_GRACE_S = 10.0


def exit_within(code: int, end: Optional[Callable[[int], None]] = None) -> None:
    """Once the command is over, its process ends with ``code`` within ``EXIT_GRACE_S`` s, whatever a library's
    thread or exit handler still waits on: Python joins every non-daemon thread and child process at exit, and
    CPython 3.11's process pools can deadlock there when their workers were killed mid-run. Its workers
    then exit with it (``worker_exit.py``). ``end``: what ends it (:func:`end_process`)."""
    timer = threading.Timer(EXIT_GRACE_S, end or end_process, args=(code,))
    timer.daemon = True
    timer.start()


def exit_on_stop_signals(code: int) -> None:
    """Once the command is over, a stop signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT) arriving while the interpreter
    tears down ends the process at once with the command's own code: nothing is left to interrupt, and a
    finished run must not read as killed (exit -15 and no line)."""

    def leave(unused_signum, unused_frame):
        end_process(code)

    for signum in STOP_SIGNALS:
        signal.signal(signum, leave)


def end_process(code: int) -> None:
    """Flush stdout and stderr, then end this process with ``code`` at once (no more exit handlers)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    run()
