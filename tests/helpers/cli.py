"""The CLI called in this process: exit code and output of a command, without starting Python again.

For commands whose behaviour is the point, not the process: ``inspect``, ``verify``, ``report``
and most conversions. What only a process shows (signals, a closed pipe, stderr filtering of the
libraries' C++ lines, environment variables such as the fault hooks, concurrency) stays with
``conftest.run_cli``.
"""

from __future__ import annotations

import contextlib
import gc
import io
import logging
import subprocess
from unittest import mock

from img2tfrecord import cli
from img2tfrecord.commands import quiet


@contextlib.contextmanager
def _command_logging(args, err: io.StringIO):
    """The log lines a ``convert`` process prints on stderr, written to ``err``: img2tfrecord's own at
    INFO (WARNING with ``--quiet``), every library's with ``--verbose``."""
    handler = logging.StreamHandler(err)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    if "--verbose" not in args:
        handler.addFilter(quiet.OwnLinesOnly())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.WARNING if ("--quiet" in args or "-q" in args) else logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def run_in_process(*args: str) -> subprocess.CompletedProcess:
    """``img2tfrecord ARGS`` through ``cli.main``: a finished process's code, stdout and stderr (text).

    argparse's exits (usage errors, ``--help``) become the return code, as they would for a process.
    A conversion's stderr holds the log lines the command prints; the libraries' C++ lines, which a
    process filters out of fd 2 (``commands/quiet.py``), are not filtered here.
    """
    # This process is every test's: Beam is imported whole first, as a library caller's would be, so the
    # CLI's lean import (pipeline/fast_start.py) leaves it as it is.
    import apache_beam  # noqa: F401  # pylint: disable=import-outside-toplevel,unused-import

    out, err = io.StringIO(), io.StringIO()
    with contextlib.ExitStack() as stack:
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        stack.enter_context(mock.patch.object(quiet.StderrFilter, "start", lambda self: self))  # fd 2 is a process's
        if args[:1] == ("convert",):
            stack.enter_context(_command_logging(args, err))
        try:
            code = cli.main(list(args))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        finally:
            gc.unfreeze()  # a process runs one command and freezes its start-up heap; this one runs many
    return subprocess.CompletedProcess(["img2tfrecord", *args], code, out.getvalue(), err.getvalue())


FAST = ("--no-analyze",)  # analysis is not what these tests are about
