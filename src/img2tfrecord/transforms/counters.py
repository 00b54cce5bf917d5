"""The run's Beam counters: records written, inputs rejected (per reason), shard bytes, resumed shards.

Each count also feeds ``progress.TALLY``; ``pipeline/run.py`` reads the
counters back by these names once the run ends.
"""

from __future__ import annotations

from typing import Any, Optional

import apache_beam as beam

from img2tfrecord import progress
from img2tfrecord.model import ERRORS

NAMESPACE = "img2tfrecord"  # Beam metrics namespace of the run's counters
IMAGES_WRITTEN = "images_written"  # its counters: records written (clips with --sequence),
IMAGES_REJECTED = "images_rejected"  # inputs rejected (error rows),
BYTES_WRITTEN = "bytes_written"  # and bytes written to shard files
SHARDS_RESUMED = "shards_resumed"  # finished shards a resumed run replayed instead of converting
INPUTS = "inputs"  # work items found (discovery), and
INPUTS_SKIPPED = "inputs_skipped"  # names skipped as junk


class OutputCounter:
    """The one place that counts outputs: records as ``images_written``, error rows as ``images_rejected``
    and ``rejected_<reason>``, shard file bytes as ``bytes_written``.

    Each count goes to the Beam counter and to ``progress.TALLY``, which a
    launcher running the steps in its own process reads while ``p.run()``
    blocks (Beam's local runners give their metrics only at the end).
    """

    def __init__(self) -> None:
        self._written = beam.metrics.Metrics.counter(NAMESPACE, IMAGES_WRITTEN)
        self._rejected = beam.metrics.Metrics.counter(NAMESPACE, IMAGES_REJECTED)
        self._bytes = beam.metrics.Metrics.counter(NAMESPACE, BYTES_WRITTEN)

    def __call__(self, tag: Optional[str], value: Any) -> None:
        if tag == ERRORS:
            self._rejected.inc()
            beam.metrics.Metrics.counter(NAMESPACE, f"rejected_{value['reason']}").inc()
            progress.TALLY.add(rejected=1)
        else:
            self._written.inc()
            progress.TALLY.add(written=1)

    def records(self, n: int) -> None:
        """``n`` records at once (a resumed run's finished shard)."""
        if n:
            self._written.inc(n)
            progress.TALLY.add(written=n)

    def wrote_bytes(self, n: int) -> None:
        if n:
            self._bytes.inc(n)
            progress.TALLY.add(bytes_written=n)


class CountRejectedFn(beam.DoFn):
    """Counts the error rows of inputs rejected before the shard step (discovery, ``--dedupe``); outputs nothing."""

    def __init__(self) -> None:
        self._count = OutputCounter()

    def process(self, row):
        self._count(ERRORS, row)
        return ()


class PassRejectedFn(CountRejectedFn):
    """Counts the error rows of inputs rejected before the shard step and passes them on."""

    def process(self, row):
        self._count(ERRORS, row)
        yield row
