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

The owner's side of a worker's death (:func:`pool_result`, :func:`stop_pool`): a result a dead worker left
half-written breaks the pool instead of leaving its owner waiting, and a pool is stopped without waiting on
its workers for ever.

No Beam, no TensorFlow: workers import this first.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import logging
import multiprocessing
import multiprocessing.context
import os
import signal
import sys
import threading
import time
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from img2tfrecord.errors import STOP_SIGNALS

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_WATCH_S = 0.5  # how often the watching thread looks at the parent
# What the fork server imports once for every worker it forks: the conversion workers' code.
PRELOAD = ("img2tfrecord.conversion.pool",)
STALL_CHECK_S = 5.0  # a result not back after this long: are all of the pool's workers still alive?
REAP_S = 5.0  # how long a killed worker may take to be reaped
CLOSE_GRACE_S = 5.0  # how long a closing pool's workers may take to finish their task before they are killed


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


def pool_result(future: concurrent.futures.Future, executor: Optional[concurrent.futures.ProcessPoolExecutor]) -> Any:
    """``future.result()``, raising BrokenProcessPool also when a worker of ``executor`` died while it wrote
    a result back.

    An executor reads results from one pipe and notices a dead worker only between two results: a worker
    killed halfway through writing one (by the out-of-memory killer, or with its fork server) leaves it
    waiting for the rest for ever. A result not back within ``STALL_CHECK_S`` has the workers looked at;
    with one of them dead, the pool is broken here.
    """
    while True:
        try:
            return future.result(timeout=STALL_CHECK_S)
        except concurrent.futures.TimeoutError:
            if executor is not None and any(process.exitcode is not None for process in _workers(executor)):
                _break(executor)  # its futures fail with BrokenProcessPool


def stop_pool(executor: concurrent.futures.ProcessPoolExecutor, grace_s: float = CLOSE_GRACE_S) -> None:
    """Shut ``executor`` down without waiting on it for ever: its workers get ``grace_s`` to finish their task
    and exit, then those still alive are killed (SIGKILL: workers may ignore SIGTERM) and reaped, so that the
    executor's manager thread, which the interpreter joins at exit, ends too."""
    processes = _workers(executor)
    manager = getattr(executor, "_executor_manager_thread", None)
    executor.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + grace_s
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    alive = [process for process in processes if process.is_alive()]
    if alive:
        logging.debug("stopping %d worker process(es) that did not exit by themselves", len(alive))
    _kill(alive)
    if manager is not None:  # it reaps the workers too: once it ends, none is left as a child of this process
        manager.join(REAP_S)


def _workers(executor: concurrent.futures.ProcessPoolExecutor) -> List[Any]:
    """The worker processes ``executor`` counts."""
    return list((getattr(executor, "_processes", None) or {}).values())


def _kill(processes: Sequence[Any]) -> None:
    """SIGKILL ``processes`` and reap them."""
    for process in processes:
        with contextlib.suppress(OSError, ValueError):
            process.kill()
    for process in processes:
        process.join(REAP_S)


def _break(executor: concurrent.futures.ProcessPoolExecutor) -> None:
    """End ``executor`` after a worker died mid-result: its other workers are killed, then this process's
    own end of the result pipe is closed, so the executor's reader sees the pipe end instead of waiting
    for the rest of a result, and fails every pending future with BrokenProcessPool."""
    logging.debug("a worker process died while writing a result back: breaking its pool")
    _kill(_workers(executor))
    writer = getattr(getattr(executor, "_result_queue", None), "_writer", None)
    if writer is not None:
        with contextlib.suppress(OSError):
            writer.close()
