"""The report's worker processes: one pool of clean processes, started in one place (:func:`start_pool`).

A worker that dies (the out-of-memory killer, a crash in a decoder) does not stop the report at once: the
tasks from the one it was running on are run again in a fresh pool; a task whose worker dies again stops the
report with :class:`WorkerDied`. A worker killed halfway through handing a result back breaks the pool
instead of leaving the report waiting (``worker_exit.pool_result``).
"""

from __future__ import annotations

import concurrent.futures
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Iterator, List, Optional, Sequence

from img2tfrecord.worker_exit import CLOSE_GRACE_S, begin_worker, pool_result, pool_start, stop_pool


def start_pool(processes: int) -> concurrent.futures.ProcessPoolExecutor:
    """A pool of ``processes`` clean processes (never forked from this one: the caller may hold threads), each
    bound to this process's life: a killed report leaves no worker behind (``worker_exit.py``)."""
    context, start = pool_start()
    return concurrent.futures.ProcessPoolExecutor(
        processes, mp_context=context, initializer=begin_worker, initargs=(start,)
    )


class WorkerDied(Exception):
    """A task during which a worker process died twice, in two pools."""

    def __init__(self, task: Any) -> None:
        super().__init__(f"a worker process died twice while running {task!r}")
        self.task = task


class Workers:
    """A pool of ``processes`` processes, started on the first call that can use it; a context manager.
    ``warn`` is given the one line to show when a worker died and its tasks run again."""

    def __init__(self, processes: int, warn: Callable[[str], None]) -> None:
        self.processes = processes
        self._warn = warn
        self._pool: Optional[concurrent.futures.ProcessPoolExecutor] = None

    def imap(self, function: Callable[[Any], Any], tasks: Sequence[Any]) -> Iterator[Any]:
        """``function(task)`` for each task, in task order, yielded as they come; in the pool when there are
        several tasks and processes."""
        if self.processes <= 1 or len(tasks) <= 1:
            return (function(task) for task in tasks)
        return self._pooled(function, list(tasks))

    def _pooled(self, function: Callable[[Any], Any], tasks: List[Any]) -> Iterator[Any]:
        done, broken_at = 0, -1
        while done < len(tasks):
            pool = self._started()
            try:
                futures = [pool.submit(function, task) for task in tasks[done:]]  # raises if it broke while idle
                for future in futures:
                    result = pool_result(future, pool)
                    done += 1
                    yield result
            except BrokenProcessPool:
                self._stop(grace_s=0.0)  # broken: its survivors are killed
                if broken_at == done:
                    raise WorkerDied(tasks[done]) from None
                broken_at = done
                self._warn("a worker process died; running its tasks again in a fresh pool")

    def _started(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._pool is None:
            self._pool = start_pool(self.processes)
        return self._pool

    def _stop(self, grace_s: float = CLOSE_GRACE_S) -> None:
        if self._pool is not None:
            stop_pool(self._pool, grace_s)
            self._pool = None

    def map(self, function: Callable[[Any], Any], tasks: Sequence[Any]) -> List[Any]:
        """``[function(task) for task in tasks]``, in the pool when there are several tasks and processes."""
        return list(self.imap(function, tasks))

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc) -> None:
        self._stop()
