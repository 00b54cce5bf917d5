"""The conversion DoFn: one work item in, one record or one error row out, in this process.

The work itself is done by a converter of ``converter.py`` (no Beam there,
so the same object also runs in conversion worker processes, see
``parallel.py``). This DoFn is what runs when conversion is not spread over
local processes: on distributed runners, whose workers are the parallelism.
"""
from __future__ import annotations

from typing import List

import apache_beam as beam

from img2tfrecord.transforms.converter import ERRORS, ImageConverter, Output
from img2tfrecord.transforms.image import ImageOptions
from img2tfrecord.transforms.split import Splits

NAMESPACE = "img2tfrecord"


class OutputCounter:
    """Beam counters of conversion outputs: records as ``images_written``, error rows as
    ``images_rejected`` and ``rejected_<reason>``. Counts on the thread that runs the bundle."""

    def __init__(self):
        self._written = beam.metrics.Metrics.counter(NAMESPACE, "images_written")
        self._rejected = beam.metrics.Metrics.counter(NAMESPACE, "images_rejected")

    def __call__(self, output: Output):
        """The Beam output of a converter output, counted."""
        tag, value = output
        if tag == ERRORS:
            self._rejected.inc()
            beam.metrics.Metrics.counter(NAMESPACE, f"rejected_{value['reason']}").inc()
            return beam.pvalue.TaggedOutput(ERRORS, value)
        self._written.inc()
        return value


class ConvertFn(beam.DoFn):
    """Work item -> Record on the main output, or an error row on the ``errors`` output."""

    def __init__(self, converter: ImageConverter):
        self.converter = converter
        self._count = OutputCounter()

    def process(self, element, label_names: List[str]):
        yield self._count(self.converter(element, label_names))


class ConvertImageFn(ConvertFn):
    """SourceFile -> Record, or an error row on the ``errors`` output."""

    def __init__(self, options: ImageOptions, layout: str, splits: Splits, seed: int):
        super().__init__(ImageConverter(options, layout, splits, seed))
