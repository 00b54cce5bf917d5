"""Convert work items in local worker processes, handing the outputs back in submission order.

The shard step (``transforms/write_shards.py``) streams each shard's records into
its file in a seeded order, so it needs the outputs in the order it queued
the items, whichever process finished first. ``ConversionPool`` keeps a
queue of items and up to ``in_flight_per_process`` batches per process
submitted, so the processes never wait for the writer; items of the next
shard are submitted while the last batches of the previous one finish, so
the cores stay busy across shard boundaries. Memory is bounded by the
batches in flight, not by the shard or the dataset.

The workers are clean processes forked by a fork server that imported only
``converter.py`` with Pillow and protobuf (no Beam, no TensorFlow), once
(``worker_exit.pool_start``).
Threads are not used: Pillow releases the GIL only inside its C calls, so
the Python work around them (reading, checks, protobuf) would serialise.

A worker process that dies (a crash in a decoder, the kernel's
out-of-memory killer) does not stop the run: the pool is restarted, the
batches that were in flight are converted again one item at a time, and an
item whose conversion kills a fresh worker again becomes an error row with
reason ``worker_crashed``. The broken pool's surviving workers are killed
at once: they ignore SIGTERM (below) and may be blocked writing a result no
one reads, and an executor joins its workers before this process can exit.

A pool started before its caller knows what it will queue can convert ahead
(:meth:`ConversionPool.prefetch`): the first shards' items, converted while
the run imports Beam and starts its job; the ``put`` of those same items
takes the outputs instead of converting them again.

The workers ignore SIGINT, SIGTERM, SIGHUP and SIGQUIT: a terminal's Ctrl-C or hang-up (sent to
the whole process group) or a service manager's SIGTERM is for the run, which
then shuts its pools down (:func:`close_open_pools`); a worker whose parent
is gone, however it went, exits by itself (``worker_exit.py``).

No Beam here: the pool is plain ``concurrent.futures``.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import logging
import os
import pickle
import signal
import sys
import weakref
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Deque, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

from img2tfrecord.conversion.converter import Converter, Output, convert_batch, install_converter
from img2tfrecord.errors import STOP_SIGNALS
from img2tfrecord.worker_exit import WorkerStart, begin_worker, pool_result, pool_start, stop_pool

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


# numpy's OpenBLAS starts a thread per core when numpy is imported, and they spin for a while: CPU
# that image conversion, which does no linear algebra, never uses. Workers start with none of them.
BLAS_THREADS_ENV = "OPENBLAS_NUM_THREADS"

_RUN_SIGNALS = STOP_SIGNALS  # for the run, which stops its pools; the workers ignore them
_OPEN: weakref.WeakSet[ConversionPool] = weakref.WeakSet()


def close_open_pools() -> None:
    """Close every pool of this process that is still open (a run stopped before its steps were torn down)."""
    for pool in list(_OPEN):
        pool.close()


# Pools started ahead of the step that uses them: (the converter pickled, processes, batch size, pool).
_STARTED: List[Tuple[bytes, int, int, ConversionPool]] = []


def start_early(converter: Converter[Any], processes: int, batch_size: int = 32) -> ConversionPool:
    """Start a pool now for a step that runs later in this process (``take_started``): its processes
    start on the other cores while this one imports Beam and builds the job. Returns it (to ``prefetch``)."""
    pool = ConversionPool(converter, processes, batch_size)
    _STARTED.append((pickle.dumps(converter), processes, batch_size, pool))
    return pool


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


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    """While workers are spawned, numpy's OpenBLAS in them keeps to the calling thread (unless the
    caller's environment says otherwise); the caller's environment is restored afterwards."""
    if BLAS_THREADS_ENV in os.environ:
        yield
        return
    os.environ[BLAS_THREADS_ENV] = "1"
    try:
        yield
    finally:
        os.environ.pop(BLAS_THREADS_ENV, None)


def _start_worker(converter: Converter[Any], start: WorkerStart) -> None:
    """The initializer of a worker process: bound to its parent's life, the run's signals ignored, then the
    converter installed."""
    begin_worker(start)
    for signum in _RUN_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _RUN_SIGNALS)  # blocked by the parent while it started this
    install_converter(converter)


class _Batch(NamedTuple):
    items: List[Any]
    labels: List[str]
    future: concurrent.futures.Future
    generation: int  # the pool that runs it
    prefetched: bool = False  # submitted by ``prefetch``: held within its budget, not the in-flight limit


class _Prefetched(NamedTuple):
    """Items converted ahead, in the order a ``put`` will give them, and their batches in that order."""

    items: List[Any]
    labels: List[str]
    batches: List[_Batch]


class ConversionPool:
    """``processes`` worker processes converting queued items; outputs come back in queue order.

    Use as a context manager, or call :meth:`close`. Not thread-safe: one
    caller queues items and reads outputs.

    The queue holds items, and batches converted ahead (``prefetch``) that a
    ``put`` took, in the order they were put: outputs come back in that order.
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
        self._queue: Deque[Union[Tuple[Any, List[str]], _Batch]] = collections.deque()
        self._queued_batches = 0  # the prefetched batches in ``_queue``
        self._in_flight: Deque[_Batch] = collections.deque()
        self._prefetched: Deque[_Prefetched] = collections.deque()
        self._pool: Optional[concurrent.futures.ProcessPoolExecutor] = None
        self._generation = 0
        self._start_pool()
        _OPEN.add(self)

    def __enter__(self) -> ConversionPool:
        return self

    def __exit__(self, *unused) -> None:
        self.close()

    def _start_pool(self) -> None:
        # The run's signals stay blocked in the workers until their initializer ignores them
        # (a blocked signal mask is inherited; a Ctrl-C meanwhile would break their start-up).
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _RUN_SIGNALS)
        try:
            with _main_module_hidden(), _one_blas_thread():
                context, start = pool_start()  # never forked from this process: it holds the runner's threads
                self._pool = concurrent.futures.ProcessPoolExecutor(
                    self._processes,
                    mp_context=context,
                    initializer=_start_worker,
                    initargs=(self._converter, start),  # workers exit if this process dies
                )
                self._generation += 1
                # Start every process now (an empty batch each): their start-up overlaps the
                # caller's own until the first items come, instead of delaying those items.
                for _ in range(self._processes):
                    self._pool.submit(convert_batch, [], [])
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _executor(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._pool is None:
            raise RuntimeError("the conversion pool is closed")
        return self._pool

    def _restart_pool(self) -> None:
        """A fresh pool for one a worker's death broke; the broken one's survivors are killed first."""
        if self._pool is not None:
            stop_pool(self._pool, grace_s=0.0)  # broken: its results are no longer read
        self._start_pool()

    def close(self) -> None:
        """Stop the workers; outputs not read yet are dropped."""
        _OPEN.discard(self)
        self._queue.clear()
        self._queued_batches = 0
        self._in_flight.clear()
        self._prefetched.clear()
        if self._pool is not None:
            stop_pool(self._pool)
            self._pool = None

    @property
    def pending(self) -> int:
        """Items queued or in flight whose outputs have not been read (not those converted ahead and not put)."""
        queued = sum(len(e.items) if isinstance(e, _Batch) else 1 for e in self._queue)
        return queued + sum(len(b.items) for b in self._in_flight)

    @property
    def prefetched(self) -> int:
        """Items converted ahead (``prefetch``) that no ``put`` has taken yet."""
        return sum(len(p.items) for p in self._prefetched)

    def prefetch(self, shards: Sequence[Sequence[Any]], label_names: List[str]) -> None:
        """Start converting each of ``shards`` (items in the order a later ``put`` gives them) now.

        A ``put`` whose items begin with one of them, with equal ``label_names``, takes its outputs
        instead of converting them again; a ``put`` of other items is converted as without prefetch.
        The outputs are held until taken or :meth:`close`: the caller bounds how many items it gives.
        """
        labels = list(label_names)
        for shard in shards:
            items = list(shard)
            batches = [
                _Batch(chunk, labels, self._send(chunk, labels), self._generation, prefetched=True)
                for chunk in (items[i : i + self._batch_size] for i in range(0, len(items), self._batch_size))
            ]
            if batches:
                self._prefetched.append(_Prefetched(items, labels, batches))

    def put(self, items: Sequence[Any], label_names: List[str]) -> None:
        """Queue ``items``; their outputs follow those of every item queued before. Items that begin with
        ones converted ahead (``prefetch``) take those outputs."""
        taken = self._take_prefetched(items, label_names) if items and self._prefetched else None
        if taken is not None:
            self._queue.extend(taken.batches)
            self._queued_batches += len(taken.batches)
            items = items[len(taken.items) :]
        self._queue.extend((item, label_names) for item in items)

    def _take_prefetched(self, items: Sequence[Any], label_names: List[str]) -> Optional[_Prefetched]:
        """The items converted ahead that ``items`` begin with, under the same labels (removed), or None."""
        for i, ahead in enumerate(self._prefetched):
            n = len(ahead.items)
            if n <= len(items) and items[0] == ahead.items[0] and ahead.labels == list(label_names):
                if list(items[:n]) == ahead.items:
                    del self._prefetched[i]
                    return ahead
        self._stop_prefetch()
        return None

    def _stop_prefetch(self) -> None:
        """Cancel the batches converted ahead that have not started, so that items put that matched none
        are converted now; each shard keeps the batches before its first cancelled one."""
        kept: Deque[_Prefetched] = collections.deque()
        for ahead in self._prefetched:
            cancelled = [batch.future.cancel() for batch in ahead.batches]
            n = cancelled.index(True) if True in cancelled else len(cancelled)
            if n:
                batches = ahead.batches[:n]
                kept.append(_Prefetched(ahead.items[: sum(len(b.items) for b in batches)], ahead.labels, batches))
        self._prefetched = kept

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
        while self._queue:
            head = self._queue[0]
            if isinstance(head, _Batch):  # converted ahead: submitted already, within the prefetch's bound
                self._queue.popleft()
                self._queued_batches -= 1
                self._in_flight.append(head)
                continue
            if sum(not b.prefetched for b in self._in_flight) >= self._limit:
                return
            if not drain and not self._queued_batches and len(self._queue) < self._batch_size:
                return  # wait for more items: a full batch keeps a process busy longer
            labels = head[1]
            items: List[Any] = []
            while self._queue and len(items) < self._batch_size:
                entry = self._queue[0]
                if isinstance(entry, _Batch) or entry[1] is not labels:
                    break
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
            outputs = self._result(batch.future)
        except BrokenProcessPool:
            if batch.generation == self._generation:  # the current pool broke: start a fresh one
                logging.warning("a conversion worker process died; converting its batch again, one item at a time")
                self._restart_pool()
            outputs = [self._alone(item, batch.labels) for item in batch.items]
        yield from zip(batch.items, outputs)

    def _result(self, future: concurrent.futures.Future) -> Any:
        """``future.result()``; BrokenProcessPool also when a worker died while it wrote a result back."""
        return pool_result(future, self._pool)

    def _alone(self, item: Any, labels: List[str]) -> Output:
        """One item converted alone: if the pool breaks now, this item broke it."""
        future = self._send([item], labels)
        try:
            return self._result(future)[0]
        except BrokenProcessPool:
            self._restart_pool()
            return self._converter.crashed(item, CRASH_MESSAGE)
