"""Convert work items in local worker processes, handing the outputs back in submission order.

The shard step (``transforms/shards.py``) streams each shard's records into
its file in a seeded order, so it needs the outputs in the order it queued
the items, whichever process finished first. ``ConversionPool`` keeps a
queue of items and up to ``in_flight_per_process`` batches per process
submitted, so the processes never wait for the writer; items of the next
shard are submitted while the last batches of the previous one finish, so
the cores stay busy across shard boundaries. Memory is bounded by the
batches in flight, not by the shard or the dataset.

The workers are spawned, clean interpreters that import only
``converter.py`` with Pillow and protobuf (no Beam, no TensorFlow).
Threads are not used: Pillow releases the GIL only inside its C calls, so
the Python work around them (reading, checks, protobuf) would serialise.

A worker process that dies (a crash in a decoder, the kernel's
out-of-memory killer) does not stop the run: the pool is restarted, the
batches that were in flight are converted again one item at a time, and an
item whose conversion kills a fresh worker again becomes an error row with
reason ``worker_crashed``.

The workers ignore SIGINT and SIGTERM: a terminal's Ctrl-C (sent to the
whole process group) or a service manager's SIGTERM is for the run, which
then shuts its pools down (:func:`close_open_pools`); a worker whose parent
is gone exits by itself.

No Beam here: the pool is plain ``concurrent.futures``.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import logging
import multiprocessing
import os
import pickle
import signal
import sys
import weakref
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Deque, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from img2tfrecord.conversion.converter import Converter, Output, convert_batch, install_converter

CRASH_MESSAGE = (
    "the conversion worker process died while converting this item, twice "
    "(a crash in the image decoder, or out of memory)"
)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


_RUN_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_OPEN: weakref.WeakSet[ConversionPool] = weakref.WeakSet()


def close_open_pools() -> None:
    """Close every pool of this process that is still open (a run stopped before its steps were torn down)."""
    for pool in list(_OPEN):
        pool.close()


# Pools started ahead of the step that uses them: (the converter pickled, processes, batch size, pool).
_STARTED: List[Tuple[bytes, int, int, ConversionPool]] = []


def start_early(converter: Converter[Any], processes: int, batch_size: int = 32) -> None:
    """Start a pool now for a step that runs later in this process (``take_started``): its processes
    start on the other cores while this one imports Beam and builds the job."""
    _STARTED.append((pickle.dumps(converter), processes, batch_size, ConversionPool(converter, processes, batch_size)))


def take_started(converter: Converter[Any], processes: int, batch_size: int = 32) -> Optional[ConversionPool]:
    """The pool ``start_early`` started for the same converter, processes and batch size (once), or None."""
    key = pickle.dumps(converter)
    for i, (started, n, size, pool) in enumerate(_STARTED):
        if (started, n, size) == (key, processes, batch_size):
            del _STARTED[i]
            return pool
    return None


def close_started() -> None:
    """Close the pools started early that no step took (the run ended before its writers)."""
    while _STARTED:
        _STARTED.pop()[3].close()


@contextlib.contextmanager
def _main_module_hidden() -> Iterator[None]:
    """While workers are spawned, the caller's ``__main__`` looks like an interactive session's.

    A spawned process re-imports the parent's main script unless it has no file, and the workers
    need nothing from it. Hidden, a script without an ``if __name__ == "__main__":`` guard, code
    piped to ``python -`` or ``python -c`` can call ``img2tfrecord.convert`` (the workers would
    otherwise run the script again, or fail to find ``<stdin>``), and a guarded script's imports
    are not paid for again in every worker.
    """
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved: Dict[str, Any] = {name: main.__dict__[name] for name in ("__file__", "__spec__") if name in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


def _start_worker(converter: Converter[Any], parent_pid: int) -> None:
    """The initializer of a worker process: the run's signals ignored, then the converter installed."""
    for signum in _RUN_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _RUN_SIGNALS)  # blocked by the parent while it started this
    install_converter(converter, parent_pid)


class _Batch(NamedTuple):
    items: List[Any]
    labels: List[str]
    future: concurrent.futures.Future
    generation: int  # the pool that runs it


class ConversionPool:
    """``processes`` worker processes converting queued items; outputs come back in queue order.

    Use as a context manager, or call :meth:`close`. Not thread-safe: one
    caller queues items and reads outputs.
    """

    def __init__(
        self,
        converter: Converter[Any],
        processes: int,
        batch_size: int = 32,
        in_flight_per_process: int = 2,
    ):
        if processes < 1:
            raise ValueError(f"processes must be at least 1, got {processes}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self._converter = converter
        self._processes = processes
        self._batch_size = batch_size
        self._limit = in_flight_per_process * processes
        self._queue: Deque[Tuple[Any, List[str]]] = collections.deque()
        self._in_flight: Deque[_Batch] = collections.deque()
        self._pool: Optional[concurrent.futures.ProcessPoolExecutor] = None
        self._generation = 0
        self._start_pool()
        _OPEN.add(self)

    def __enter__(self) -> ConversionPool:
        return self

    def __exit__(self, *unused) -> None:
        self.close()

    def _start_pool(self) -> None:
        self._pool = concurrent.futures.ProcessPoolExecutor(
            self._processes,
            mp_context=multiprocessing.get_context("spawn"),  # never fork the runner's threads
            initializer=_start_worker,
            initargs=(self._converter, os.getpid()),  # workers exit if this process dies
        )
        self._generation += 1
        # Start every process now (an empty batch each): their start-up overlaps the
        # caller's own until the first items come, instead of delaying those items.
        # The run's signals stay blocked in them until their initializer ignores them
        # (a blocked signal mask is inherited; a Ctrl-C meanwhile would break their start-up).
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _RUN_SIGNALS)
        try:
            with _main_module_hidden():
                for _ in range(self._processes):
                    self._pool.submit(convert_batch, [], [])
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _executor(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._pool is None:
            raise RuntimeError("the conversion pool is closed")
        return self._pool

    def _restart_pool(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._start_pool()

    def close(self) -> None:
        """Stop the workers; outputs not read yet are dropped."""
        _OPEN.discard(self)
        self._queue.clear()
        self._in_flight.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    @property
    def pending(self) -> int:
        """Items queued or in flight whose outputs have not been read."""
        return len(self._queue) + sum(len(b.items) for b in self._in_flight)

    def put(self, items: Sequence[Any], label_names: List[str]) -> None:
        """Queue ``items``; their outputs follow those of every item queued before."""
        self._queue.extend((item, label_names) for item in items)

    def outputs(self, drain: bool) -> Iterator[Tuple[Any, Output]]:
        """``(item, output)`` in queue order.

        With ``drain`` False, yields what can be had while keeping the
        processes busy and returns once fewer than a batch of items is left
        to submit (queue more, then call again); with ``drain`` True, yields
        every output, waiting for them.
        """
        while True:
            self._submit(drain)
            if not self._in_flight:
                return
            head = self._in_flight[0]
            if not drain and not head.future.done() and len(self._queue) < self._batch_size:
                return
            self._in_flight.popleft()
            yield from self._results(head)

    def _submit(self, drain: bool) -> None:
        while self._queue and len(self._in_flight) < self._limit:
            if not drain and len(self._queue) < self._batch_size:
                return  # wait for more items: a full batch keeps a process busy longer
            labels = self._queue[0][1]
            items: List[Any] = []
            while self._queue and len(items) < self._batch_size and self._queue[0][1] is labels:
                items.append(self._queue.popleft()[0])
            self._in_flight.append(_Batch(items, labels, self._send(items, labels), self._generation))

    def _send(self, items: List[Any], labels: List[str]) -> concurrent.futures.Future:
        """``items`` submitted to the current pool; a pool a worker's death broke since is restarted first
        (its batches are converted again when read, as ``_results`` does)."""
        try:
            return self._executor().submit(convert_batch, items, labels)
        except BrokenProcessPool:
            logging.warning("a conversion worker process died; its batches will be converted again, one item at a time")
            self._restart_pool()
            return self._executor().submit(convert_batch, items, labels)

    def _results(self, batch: _Batch) -> Iterator[Tuple[Any, Output]]:
        try:
            outputs = batch.future.result()
        except BrokenProcessPool:
            if batch.generation == self._generation:  # the current pool broke: start a fresh one
                logging.warning("a conversion worker process died; converting its batch again, one item at a time")
                self._restart_pool()
            outputs = [self._alone(item, batch.labels) for item in batch.items]
        yield from zip(batch.items, outputs)

    def _alone(self, item: Any, labels: List[str]) -> Output:
        """One item converted alone: if the pool breaks now, this item broke it."""
        future = self._send([item], labels)
        try:
            return future.result()[0]
        except BrokenProcessPool:
            self._restart_pool()
            return self._converter.crashed(item, CRASH_MESSAGE)
