"""The report's worker processes: one pool of clean processes, started in one place (:func:`start_pool`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator, List, Optional, Sequence

if TYPE_CHECKING:
    import concurrent.futures


def start_pool(processes: int) -> concurrent.futures.ProcessPoolExecutor:
    """A pool of ``processes`` clean processes (never forked from this one: the caller may hold threads), each
    bound to this process's life: a killed report leaves no worker behind (``worker_exit.py``)."""
    import concurrent.futures

    from img2tfrecord.worker_exit import begin_worker, pool_start

    context, start = pool_start()
    return concurrent.futures.ProcessPoolExecutor(
        processes, mp_context=context, initializer=begin_worker, initargs=(start,)
    )


class Workers:
    """A pool of ``processes`` processes, started on the first call that can use it; a context manager."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._pool: Optional[concurrent.futures.ProcessPoolExecutor] = None

    def imap(self, function: Callable[[Any], Any], tasks: Sequence[Any]) -> Iterator[Any]:
        """``function(task)`` for each task, in task order, yielded as they come; in the pool when there are
        several tasks and processes."""
        if self.processes <= 1 or len(tasks) <= 1:
            return (function(task) for task in tasks)
        if self._pool is None:
            self._pool = start_pool(self.processes)
        return self._pool.map(function, tasks)

    def map(self, function: Callable[[Any], Any], tasks: Sequence[Any]) -> List[Any]:
        """``[function(task) for task in tasks]``, in the pool when there are several tasks and processes."""
        return list(self.imap(function, tasks))

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
