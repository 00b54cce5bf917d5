"""How every pool's worker processes start (:func:`pool_start`), and how they exit when the process they
belong to dies, however it dies (SIGKILL, the kernel's out-of-memory killer): no pool of a killed
``convert``, ``report`` or ``verify`` is left running, re-parented.

Workers are forked by a fork server (``multiprocessing``'s "forkserver" start method, where the platform has
it; else spawned): one clean process per pool owner, started once with the conversion code imported
(:data:`PRELOAD`), so a pool's workers start in milliseconds instead of each importing it again; never
forked from the owner itself, whose threads (Beam's, TensorFlow's) a fork would copy mid-step. The fork
server runs with the stop signals blocked (a terminal's Ctrl-C or a service manager's SIGTERM is for the
run) and exits when its owner does; a worker takes the owner's environment of the moment its pool starts
(:class:`WorkerStart`), as a spawned one would.

Every pool's workers call :func:`exit_with_parent` first (their initializer). On Linux the kernel kills
the worker when its parent goes (``prctl(PR_SET_PDEATHSIG, SIGKILL)``, through ctypes), at once and even
inside a long C call; the kernel counts as "the parent" the *thread* that started the worker, so this is
armed only for workers started by a main thread (the fork server's, or a spawning parent's), which ends
only with its process. Everywhere, a daemon thread also watches the parent's pid (another platform, a
worker started by another thread). A forked worker's parent is the fork server, which ends with the owner.

No Beam, no TensorFlow: workers import this first.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import multiprocessing.context
import os
import signal
import sys
import threading
import time
from typing import Dict, List, NamedTuple, Tuple

from img2tfrecord.errors import STOP_SIGNALS

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_WATCH_S = 0.5  # how often the watching thread looks at the parent
# What the fork server imports once for every worker it forks: the conversion workers' code.
PRELOAD = ("img2tfrecord.conversion.pool",)


class Parent(NamedTuple):
    """The process a worker belongs to (pickled to the worker with its initializer's arguments)."""

    pid: int
    main_thread: bool  # the workers are started by its main thread

    @classmethod
    def this_process(cls) -> Parent:
        """The calling process, as the parent of the workers it is about to start from the calling thread."""
        return cls(os.getpid(), threading.current_thread() is threading.main_thread())


class WorkerStart(NamedTuple):
    """What a pool's workers start with (pickled to each with its initializer's arguments): the process that
    starts them, and the environment of the pool's owner when the pool started."""

    parent: Parent
    environment: Dict[str, str]


def pool_start() -> Tuple[multiprocessing.context.BaseContext, WorkerStart]:
    """The start method of a pool about to start from the calling thread, and what its workers start with
    (their initializer calls :func:`begin_worker` with it)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn"), WorkerStart(Parent.this_process(), dict(os.environ))
    context = multiprocessing.get_context("forkserver")
    return context, WorkerStart(Parent(_running_fork_server(), main_thread=True), dict(os.environ))


def _running_fork_server() -> int:
    """The pid of this process's fork server, started (with :data:`PRELOAD` and the stop signals blocked) if
    it is not running."""
    from multiprocessing import forkserver  # pylint: disable=import-outside-toplevel

    server = forkserver._forkserver  # pylint: disable=protected-access
    # Never "__main__" (multiprocessing's default): the owner's script is not the workers' to run.
    preload: List[str] = [name for name in getattr(server, "_preload_modules", []) if name != "__main__"]
    server.set_forkserver_preload(preload + [name for name in PRELOAD if name not in preload])
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # inherited by the server and its forks
    try:
        server.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    pid = getattr(server, "_forkserver_pid", None)
    if not isinstance(pid, int):
        raise RuntimeError("multiprocessing's fork server did not start")
    return pid


def begin_worker(start: WorkerStart) -> None:
    """The first thing a pool's worker does: bound to its parent's life, with its owner's environment."""
    exit_with_parent(start.parent)
    _release_fork_server()
    os.environ.clear()
    os.environ.update(start.environment)


def _release_fork_server() -> None:
    """A forked worker holds the write end of its fork server's "alive" pipe, as the owner does; the server
    runs until every holder has closed it. Closed here, the server ends with the owner (and the worker with
    the server), not with the last of its workers."""
    server = sys.modules.get("multiprocessing.forkserver")
    fd = getattr(getattr(server, "_forkserver", None), "_forkserver_alive_fd", None)
    if isinstance(fd, int):  # forked by a fork server (a spawned worker has none)
        os.close(fd)
        server._forkserver._forkserver_alive_fd = None  # type: ignore[union-attr]  # pylint: disable=protected-access


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
        libc = ctypes.CDLL(None, use_errno=True)  # this process's own symbols, libc's among them
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no libc prctl: the watching thread is enough
        pass


def _watch(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(_WATCH_S)
    os._exit(1)  # pylint: disable=protected-access
