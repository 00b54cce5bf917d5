"""Worker processes that exit when the process that started them dies, however it dies (SIGKILL, the kernel's
out-of-memory killer): no pool of a killed ``convert``, ``report`` or ``verify`` is left running, re-parented.

Every pool's workers call :func:`exit_with_parent` first (their initializer). On Linux the kernel kills
the worker when its parent goes (``prctl(PR_SET_PDEATHSIG, SIGKILL)``, through ctypes), at once and even
inside a long C call; the kernel counts as "the parent" the *thread* that started the worker, so this is
armed only for workers started by the parent's main thread, which ends only with the process. Everywhere,
a daemon thread also watches the parent's pid (another platform, a worker started by another thread).

No Beam, no TensorFlow: spawned workers import this first.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time
from typing import NamedTuple

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_WATCH_S = 0.5  # how often the watching thread looks at the parent


class Parent(NamedTuple):
    """The process a worker belongs to (pickled to the worker with its initializer's arguments)."""

    pid: int
    main_thread: bool  # the workers are started by its main thread

    @classmethod
    def this_process(cls) -> Parent:
        """The calling process, as the parent of the workers it is about to start from the calling thread."""
        return cls(os.getpid(), threading.current_thread() is threading.main_thread())


def exit_with_parent(parent: Parent) -> None:
    """Make this (worker) process exit as soon as ``parent`` is gone; it exits now if it is gone already."""
    if parent.main_thread and sys.platform.startswith("linux"):
        _kill_with_parent()
    if os.getppid() != parent.pid:  # gone before the kernel was asked, or before this process started
        os._exit(1)  # pylint: disable=protected-access
    threading.Thread(target=_watch, args=(parent.pid,), name="img2tfrecord-parent-watch", daemon=True).start()


def _kill_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent thread ends; quietly nothing where it cannot."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no libc prctl: the watching thread is enough
        pass


def _watch(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(_WATCH_S)
    os._exit(1)  # pylint: disable=protected-access
