"""The CLI called in this process: exit code and output of a command, without starting Python again.

For commands whose behaviour is the point, not the process: ``inspect``, ``verify`` and
``report``. What only a process shows (signals, a closed pipe, stderr filtering, a
conversion's process pool) stays with ``conftest.run_cli``.
"""

from __future__ import annotations

import contextlib
import io
import subprocess

from img2tfrecord import cli


def run_in_process(*args: str) -> subprocess.CompletedProcess:
    """``img2tfrecord ARGS`` through ``cli.main``: a finished process's code, stdout and stderr (text).

    argparse's exits (usage errors, ``--help``) become the return code, as they would for a process.
    """
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(args))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    return subprocess.CompletedProcess(["img2tfrecord", *args], code, out.getvalue(), err.getvalue())
