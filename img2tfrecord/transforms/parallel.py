"""Spread the conversion over local worker processes.

Converting is CPU work (JPEG decode, resize, encode). On one machine the
local runner gets its parallelism here: ``ConvertInParallel`` hands batches
of work items to a pool of ``processes`` worker processes and keeps up to
two batches per process in flight, so the workers never wait for the
runner's thread. The workers are spawned, clean interpreters that import
only ``converter.py`` with Pillow and protobuf (no Beam, no TensorFlow), so
they start in about 0.1 s; records come back as serialized bytes.

Why not threads or Beam's own parallel modes: Pillow releases the GIL only
inside its C calls, and the Python work around them (reading, checks,
protobuf) held two threads to about 1.1x of one on this pipeline; Beam
2.77's FnApiRunner ``multi_processing`` mode gained nothing, and its
``multi_threading`` mode, whose bundle threads append to one grouping
buffer without a lock, was seen to drop an element now and then. The
runner therefore runs ``in_memory`` and the processes live here. On
distributed runners there is one process per worker (``processes=1``): the
DoFn converts in the worker itself and the runner's workers are the
parallelism.

Converting ahead (``ConvertAhead``): on the local runner the launching
process spends seconds importing Beam (and TensorFlow for the analysis),
tracing and building the graph before the runner asks for the first
conversion, on one core while the other waits. ``run.py`` therefore starts
the pool as soon as the plan has listed a local folder and converts the
first items of the seeded order while that goes on; ``_ConvertInProcesses``
adopts the pool and takes each item's result from there instead of
converting it again. A result is taken only for an equal work item and
label list, so the outputs are those of a normal run; a bounded number of
items is converted ahead, so the results waiting to be asked for stay small.

A worker process that dies (a crash in a decoder, the kernel's
out-of-memory killer) does not stop the run: the pool is restarted, the
batches that were in flight are converted again one item at a time, and an
item whose conversion kills a fresh worker again becomes an error row with
reason ``worker_crashed``.
"""
from __future__ import annotations

import collections
import concurrent.futures
import logging
import multiprocessing
import os
import threading
import uuid
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Deque, Dict, List, NamedTuple, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.utils.windowed_value import WindowedValue

from img2tfrecord.transforms.convert import ConvertFn, OutputCounter, beam_output
from img2tfrecord.transforms.converter import ERRORS, ImageConverter, Output, convert_batch, install_converter

_IN_FLIGHT_PER_PROCESS = 2  # batches queued per worker process, so none waits between batches
_CRASH_MESSAGE = (
    "the conversion worker process died while converting this item, twice "
    "(a crash in the image decoder, or out of memory)"
)

# Where one item's output comes from: (future of its batch, index in the batch, pool generation).
_Source = Tuple[concurrent.futures.Future, int, int]


def _new_pool(converter: ImageConverter, processes: int) -> concurrent.futures.ProcessPoolExecutor:
    return concurrent.futures.ProcessPoolExecutor(
        processes,
        mp_context=multiprocessing.get_context("spawn"),  # never fork the runner's threads
        initializer=install_converter,
        initargs=(converter, os.getpid()),  # workers exit if this process dies
    )


def _same_converter(a: ImageConverter, b: ImageConverter) -> bool:
    return type(a) is type(b) and a.__getstate__() == b.__getstate__()


# ConvertAhead objects of this process, by token, until a DoFn adopts them.
_AHEAD: Dict[str, "ConvertAhead"] = {}


class ConvertAhead:
    """A pool started before the pipeline runs, converting ``items`` ahead (see the module docstring).

    A feeder thread keeps two batches in flight for every process until
    every item is submitted or :meth:`adopt` stops it; the launcher shares
    the cores meanwhile, so none waits. Batches are large (64 items) because
    the pool hands work to its processes from a thread of this process,
    which needs the GIL while the launcher's imports and graph building
    hold it for long stretches: with batches of 8 the two cores were only
    75-85% busy while the launcher started.
    :meth:`close` shuts the pool down when no DoFn adopted it (a failed or
    dry run).
    """

    def __init__(
        self, converter: ImageConverter, processes: int, items: Sequence[Any], label_names: Sequence[str],
        batch_size: int = 64,
    ):
        self.token = uuid.uuid4().hex
        self.converter = converter
        self.label_names = list(label_names)
        self._in_flight_limit = _IN_FLIGHT_PER_PROCESS * processes
        self._pool: Optional[concurrent.futures.ProcessPoolExecutor] = _new_pool(converter, processes)
        # Written by the feeder thread only; read once that thread has ended (adopt() joins it).
        self._results: Dict[Any, Tuple[concurrent.futures.Future, int]] = {}
        self._stop = threading.Event()
        batches = [list(items[i: i + batch_size]) for i in range(0, len(items), batch_size)]
        self._thread = threading.Thread(target=self._feed, args=(batches,), name="img2tfrecord-ahead", daemon=True)
        _AHEAD[self.token] = self
        self._thread.start()

    def _feed(self, batches: List[List[Any]]) -> None:
        in_flight: Deque[concurrent.futures.Future] = collections.deque()
        for batch in batches:
            while len(in_flight) >= self._in_flight_limit:
                done, _ = concurrent.futures.wait([in_flight[0]], timeout=0.05)
                if self._stop.is_set():
                    return
                if done:
                    in_flight.popleft()
            if self._stop.is_set():
                return
            try:
                future = self._pool.submit(convert_batch, batch, self.label_names)
            except (BrokenProcessPool, RuntimeError):  # broken, or shut down: the DoFn converts the rest
                return
            for index, item in enumerate(batch):
                self._results[item] = (future, index)
            in_flight.append(future)

    def adopt(self) -> Tuple[concurrent.futures.ProcessPoolExecutor, Dict[Any, Tuple[concurrent.futures.Future, int]]]:
        """Stop converting ahead; -> the pool and ``{item: (future, index)}`` of what was submitted."""
        self._stop.set()
        self._thread.join()
        _AHEAD.pop(self.token, None)
        pool, self._pool = self._pool, None
        logging.info("%d items were converted ahead while the pipeline started", len(self._results))
        return pool, self._results

    def close(self) -> None:
        """Shut the pool down unless a DoFn adopted it."""
        if _AHEAD.pop(self.token, None) is None:
            return
        self._stop.set()
        self._thread.join()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


class _InFlight(NamedTuple):
    batch: List[Any]
    labels: List[str]
    sources: List[_Source]  # one per item of the batch
    timestamp: Any
    window: Any

    def done(self) -> bool:
        return all(future.done() for future, _, _ in self.sources)


class _ConvertInProcesses(beam.DoFn):
    """Batches of work items -> the converter's outputs, converted in a process pool.

    With ``ahead``, the token of a ``ConvertAhead`` of this process, its pool
    and results are taken over in ``setup``.
    """

    def __init__(self, converter: ImageConverter, processes: int, ahead: Optional[str] = None):
        self._converter = converter
        self._processes = processes
        self._ahead_token = ahead
        self._count = OutputCounter()
        self._pool: Optional[concurrent.futures.ProcessPoolExecutor] = None
        self._generation = 0
        self._in_flight: Deque[_InFlight] = collections.deque()
        self._ahead: Dict[Any, Tuple[concurrent.futures.Future, int]] = {}
        self._ahead_labels: Optional[List[str]] = None
        self._ahead_generation = 0

    def _start_pool(self) -> None:
        self._pool = _new_pool(self._converter, self._processes)
        self._generation += 1

    def _restart_pool(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._start_pool()

    def setup(self):
        ahead = _AHEAD.get(self._ahead_token) if self._ahead_token else None
        if ahead is None or not _same_converter(ahead.converter, self._converter):  # its workers convert otherwise
            self._start_pool()
            return
        self._pool, self._ahead = ahead.adopt()
        self._ahead_labels = ahead.label_names
        self._generation += 1
        self._ahead_generation = self._generation

    def teardown(self):
        self._ahead = {}
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def start_bundle(self):
        self._in_flight = collections.deque()

    def process(self, batch: List[Any], timestamp=beam.DoFn.TimestampParam, window=beam.DoFn.WindowParam, **side_inputs):
        label_names = side_inputs["label_names"]
        sources: List[Optional[_Source]] = [self._converted_ahead(element, label_names) for element in batch]
        todo = [element for element, source in zip(batch, sources) if source is None]
        if todo:
            future = self._pool.submit(convert_batch, todo, label_names)
            index = iter(range(len(todo)))
            sources = [source or (future, next(index), self._generation) for source in sources]
        self._in_flight.append(_InFlight(batch, label_names, sources, timestamp, window))
        limit = _IN_FLIGHT_PER_PROCESS * self._processes
        while self._in_flight and (len(self._in_flight) > limit or self._in_flight[0].done()):
            yield from self._outputs(self._in_flight.popleft())

    def _converted_ahead(self, element: Any, label_names: List[str]) -> Optional[_Source]:
        if not self._ahead or (label_names is not self._ahead_labels and label_names != self._ahead_labels):
            return None
        try:
            found = self._ahead.pop(element, None)
        except TypeError:  # an item that cannot be a dict key was never converted ahead
            return None
        return None if found is None else (found[0], found[1], self._ahead_generation)

    def finish_bundle(self):
        while self._in_flight:
            yield from self._outputs(self._in_flight.popleft())

    def _outputs(self, entry: _InFlight):
        for element, source in zip(entry.batch, entry.sources):
            tag, value = self._result(element, source, entry.labels)
            self._count(tag, value)
            yield beam_output(tag, WindowedValue(value, entry.timestamp, (entry.window,)))

    def _result(self, element: Any, source: _Source, labels: List[str]) -> Output:
        future, index, generation = source
        try:
            return future.result()[index]
        except BrokenProcessPool:
            if generation == self._generation:  # the current pool broke: start a fresh one
                logging.warning("a conversion worker process died; converting its batch again, one item at a time")
                self._restart_pool()
        return self._alone(element, labels)

    def _alone(self, element: Any, labels: List[str]) -> Output:
        """One item converted alone in the pool: if the pool breaks now, this item broke it."""
        future = self._pool.submit(convert_batch, [element], labels)
        try:
            return future.result()[0]
        except BrokenProcessPool:
            self._restart_pool()
            return self._converter.crashed(element, _CRASH_MESSAGE)


class ConvertInParallel(beam.PTransform):
    """Work items -> ``{main: records, "errors": error rows}`` through ``converter``.

    With ``processes`` > 1 the items are converted in that many local
    worker processes, ``batch_size`` items per task; with 1, in the runner's
    worker itself. The pool queues one task per process plus one for its
    processes, so a task of 32 images (~0.1 s) keeps them busy while the
    runner's thread works elsewhere (tf.Transform's batches); with 8 they
    waited now and then. ``side_inputs`` (``label_names``) go to the converter.
    ``ahead``: the token of a ``ConvertAhead`` started for these items.
    """

    def __init__(
        self, converter: ImageConverter, processes: int, main: str = "records", batch_size: int = 32,
        ahead: Optional[str] = None, **side_inputs,
    ):
        super().__init__()
        if processes < 1:
            raise ValueError(f"processes must be at least 1, got {processes}")
        self._converter = converter
        self._processes = processes
        self._main = main
        self._batch_size = batch_size
        self._ahead = ahead
        self._side_inputs = side_inputs

    def expand(self, pcoll):
        if self._processes == 1:
            fn = ConvertFn(self._converter)
            return pcoll | "Convert" >> beam.ParDo(fn, **self._side_inputs).with_outputs(ERRORS, main=self._main)
        return (
            pcoll
            | "Batch" >> beam.BatchElements(min_batch_size=self._batch_size, max_batch_size=self._batch_size)
            | "ConvertInProcesses"
            >> beam.ParDo(_ConvertInProcesses(self._converter, self._processes, self._ahead), **self._side_inputs).with_outputs(
                ERRORS, main=self._main
            )
        )
