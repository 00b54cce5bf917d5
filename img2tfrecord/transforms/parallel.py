"""Run a per-element DoFn over small batches with a thread pool.

Pillow releases the GIL while it decodes, resizes and encodes, so a few
threads inside one worker keep every core of a machine busy. This is how
the local runner uses all cores: Beam's FnApiRunner in ``multi_threading``
or ``multi_processing`` mode appends the outputs of its parallel bundles to
the same grouping buffer from several threads without a lock, and on this
pipeline it was seen to drop an element now and then (1 of 3,000 records,
in about one run in four). The runner therefore runs ``in_memory`` and the
parallelism lives here. On distributed runners the pool has one thread and
the runner's own workers provide the parallelism.

Beam counters only count on the thread that runs the bundle, so the
wrapped DoFn's outputs are counted here, on that thread: records as
``images_written``, error rows as ``images_rejected`` and
``rejected_<reason>``.
"""
from __future__ import annotations

import concurrent.futures
from typing import Any, List, Optional

import apache_beam as beam

NAMESPACE = "img2tfrecord"


class _InPool(beam.DoFn):
    def __init__(self, inner: beam.DoFn, threads: int, errors_tag: str):
        self._inner = inner
        self._threads = threads
        self._errors_tag = errors_tag
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._written = beam.metrics.Metrics.counter(NAMESPACE, "images_written")
        self._rejected = beam.metrics.Metrics.counter(NAMESPACE, "images_rejected")

    def setup(self):
        self._inner.setup()
        if self._threads > 1:
            self._pool = concurrent.futures.ThreadPoolExecutor(self._threads, thread_name_prefix="img2tfrecord")

    def teardown(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._inner.teardown()

    def process(self, batch: List[Any], **side_inputs):
        def run(element):
            return list(self._inner.process(element, **side_inputs))

        results = self._pool.map(run, batch) if self._pool is not None else map(run, batch)
        for outputs in results:
            for output in outputs:
                if isinstance(output, beam.pvalue.TaggedOutput) and output.tag == self._errors_tag:
                    self._rejected.inc()
                    beam.metrics.Metrics.counter(NAMESPACE, f"rejected_{output.value['reason']}").inc()
                else:
                    self._written.inc()
                yield output


class ParDoInThreads(beam.PTransform):
    """``ParDo(inner)`` over batches of elements, ``threads`` elements at a time.

    Outputs and tags are those of ``inner``; the main output is ``main``.
    """

    def __init__(self, inner: beam.DoFn, threads: int, errors_tag: str, main: str, **side_inputs):
        super().__init__()
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        self._inner = inner
        self._threads = threads
        self._errors_tag = errors_tag
        self._main = main
        self._side_inputs = side_inputs

    def expand(self, pcoll):
        return (
            pcoll
            | "Batch" >> beam.BatchElements(min_batch_size=2 * self._threads, max_batch_size=16 * self._threads)
            | "Process"
            >> beam.ParDo(_InPool(self._inner, self._threads, self._errors_tag), **self._side_inputs).with_outputs(
                self._errors_tag, main=self._main
            )
        )
