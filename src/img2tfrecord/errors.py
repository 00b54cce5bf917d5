"""The exceptions a conversion raises to its caller (``img2tfrecord.convert`` and the command line).

Standard library only. The command line maps them to exit codes: :class:`UsageError` 2,
:class:`ConversionFailed` 1, :class:`ErrorBudgetExceeded` 3 (``commands/errors.py``).
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from img2tfrecord.schemas.dataset_json import DatasetManifest


# What stops a run as Ctrl-C does: one line, the lock released, staging kept for --resume. A closed terminal
# sends SIGHUP; SIGQUIT is Ctrl-\. SIGPIPE stays ignored (Python's default): writers handle EPIPE.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class UsageError(ValueError):
    """What was asked for cannot run (a bad option, input or output); found before any work.

    The message is one line naming the option or path and how to fix it, the same text the command line
    prints.
    """


class ConversionFailed(RuntimeError):
    """The pipeline failed. The message is one line: what failed, why, and what to do next; ``stage``,
    ``cause`` and ``fix`` are its parts, ``log_path`` the run's log file (tracebacks, the libraries' log
    lines) and ``__cause__`` the runner's exception. Finished shards stay in the output's staging folder
    for ``resume=True``."""

    def __init__(self, message: str, stage: str = "", cause: str = "", fix: str = "", log_path: str = ""):
        super().__init__(message)
        self.stage, self.cause, self.fix, self.log_path = stage, cause, fix, log_path


class ErrorBudgetExceeded(RuntimeError):
    """More inputs were rejected than ``max_error_rate`` allows, or no record was written at all.

    The output was written and is consistent (``result`` is its manifest); with no record written it has
    no ``_SUCCESS``. Raised inside the pipeline without ``result``, and to callers with it.
    """

    def __init__(self, message: str, result: Optional[DatasetManifest] = None):
        super().__init__(message)
        self.result = result


class Interrupted(KeyboardInterrupt):
    """A signal of :data:`STOP_SIGNALS` stopped a run. ``kept`` says in a few words what its output
    keeps for ``--resume`` (None: the run stopped before it wrote anything); ``exit_code`` is the shell's 128 + the
    signal's number."""

    def __init__(self, signum: int, kept: Optional[str] = None):
        super().__init__(kept or "")
        self.signum = signum
        self.kept = kept

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum
