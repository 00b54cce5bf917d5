"""The conversion DoFn: one work item in, one record or one error row out, in this process.

The work itself is done by a converter of ``converter.py`` (no Beam there,
so the same object also runs in conversion worker processes, see
``parallel.py``). This DoFn is what runs when conversion is not spread over
local processes: on distributed runners, whose workers are the parallelism.
"""
from __future__ import annotations

from typing import List, Optional

import apache_beam as beam

from img2tfrecord.transforms.converter import ERRORS, ImageConverter

NAMESPACE = "img2tfrecord"


class OutputCounter:
    """Beam counters of conversion outputs: records as ``images_written``, error rows as
    ``images_rejected`` and ``rejected_<reason>``. Counts on the thread that runs the bundle."""

    def __init__(self):
        self._written = beam.metrics.Metrics.counter(NAMESPACE, "images_written")
        self._rejected = beam.metrics.Metrics.counter(NAMESPACE, "images_rejected")

    def __call__(self, tag: Optional[str], value) -> None:
        """Count one converter output ``(tag, value)``."""
        if tag == ERRORS:
            self._rejected.inc()
            beam.metrics.Metrics.counter(NAMESPACE, f"rejected_{value['reason']}").inc()
        else:
            self._written.inc()


def beam_output(tag: Optional[str], value):
    """A converter output as a DoFn yields it: the record, or the error row on the ``errors`` output."""
    return beam.pvalue.TaggedOutput(tag, value) if tag else value


class ConvertFn(beam.DoFn):
    """Work item -> Record on the main output, or an error row on the ``errors`` output."""

    def __init__(self, converter: ImageConverter):
        self.converter = converter
        self._count = OutputCounter()

    def process(self, element, label_names: List[str]):
        tag, value = self.converter(element, label_names)
        self._count(tag, value)
        yield beam_output(tag, value)
