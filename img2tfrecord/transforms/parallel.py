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
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Deque, List, NamedTuple, Optional

import apache_beam as beam
from apache_beam.utils.windowed_value import WindowedValue

from img2tfrecord.transforms.convert import ConvertFn, OutputCounter, beam_output
from img2tfrecord.transforms.converter import ERRORS, ImageConverter, Output, convert_batch, install_converter

_IN_FLIGHT_PER_PROCESS = 2  # batches queued per worker process, so none waits between batches
_CRASH_MESSAGE = (
    "the conversion worker process died while converting this item, twice "
    "(a crash in the image decoder, or out of memory)"
)

class _InFlight(NamedTuple):
    batch: List[Any]
    labels: List[str]
    future: concurrent.futures.Future
    generation: int  # of the pool the batch was submitted to
    timestamp: Any
    window: Any


class _ConvertInProcesses(beam.DoFn):
    """Batches of work items -> the converter's outputs, converted in a process pool."""

    def __init__(self, converter: ImageConverter, processes: int):
        self._converter = converter
        self._processes = processes
        self._count = OutputCounter()
        self._pool: Optional[concurrent.futures.ProcessPoolExecutor] = None
        self._generation = 0
        self._in_flight: Deque[_InFlight] = collections.deque()

    def _start_pool(self) -> None:
        self._pool = concurrent.futures.ProcessPoolExecutor(
            self._processes,
            mp_context=multiprocessing.get_context("spawn"),  # never fork the runner's threads
            initializer=install_converter,
            initargs=(self._converter, os.getpid()),  # workers exit if this process dies
        )
        self._generation += 1

    def _restart_pool(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._start_pool()

    def setup(self):
        self._start_pool()

    def teardown(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def start_bundle(self):
        self._in_flight = collections.deque()

    def process(self, batch: List[Any], timestamp=beam.DoFn.TimestampParam, window=beam.DoFn.WindowParam, **side_inputs):
        label_names = side_inputs["label_names"]
        future = self._pool.submit(convert_batch, batch, label_names)
        self._in_flight.append(_InFlight(batch, label_names, future, self._generation, timestamp, window))
        limit = _IN_FLIGHT_PER_PROCESS * self._processes
        while self._in_flight and (len(self._in_flight) > limit or self._in_flight[0].future.done()):
            yield from self._outputs(self._in_flight.popleft())

    def finish_bundle(self):
        while self._in_flight:
            yield from self._outputs(self._in_flight.popleft())

    def _outputs(self, entry: _InFlight):
        for tag, value in self._results(entry):
            self._count(tag, value)
            yield beam_output(tag, WindowedValue(value, entry.timestamp, (entry.window,)))

    def _results(self, entry: _InFlight) -> List[Output]:
        try:
            return entry.future.result()
        except BrokenProcessPool:
            if entry.generation == self._generation:  # the current pool broke: start a fresh one
                logging.warning("a conversion worker process died; converting its batch again, one item at a time")
                self._restart_pool()
        return [self._alone(element, entry.labels) for element in entry.batch]

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
    worker itself. ``side_inputs`` (``label_names``) go to the converter.
    """

    def __init__(self, converter: ImageConverter, processes: int, main: str = "records", batch_size: int = 8, **side_inputs):
        super().__init__()
        if processes < 1:
            raise ValueError(f"processes must be at least 1, got {processes}")
        self._converter = converter
        self._processes = processes
        self._main = main
        self._batch_size = batch_size
        self._side_inputs = side_inputs

    def expand(self, pcoll):
        if self._processes == 1:
            fn = ConvertFn(self._converter)
            return pcoll | "Convert" >> beam.ParDo(fn, **self._side_inputs).with_outputs(ERRORS, main=self._main)
        return (
            pcoll
            | "Batch" >> beam.BatchElements(min_batch_size=self._batch_size, max_batch_size=self._batch_size)
            | "ConvertInProcesses"
            >> beam.ParDo(_ConvertInProcesses(self._converter, self._processes), **self._side_inputs).with_outputs(
                ERRORS, main=self._main
            )
        )
