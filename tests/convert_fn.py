"""The converter as a plain DoFn, item by item: how the tests run it inside a Beam pipeline."""

from __future__ import annotations

from typing import List

import apache_beam as beam

from img2tfrecord.conversion.converter import ImageConverter
from img2tfrecord.model import ERRORS

__all__ = ["ERRORS", "ConvertFn"]


class ConvertFn(beam.DoFn):
    """Work item -> its Record on the main output, or its error row on ``errors``."""

    def __init__(self, converter: ImageConverter):
        self.converter = converter

    def process(self, element, label_names: List[str]):
        tag, value = self.converter(element, label_names)
        yield beam.pvalue.TaggedOutput(tag, value) if tag else value
