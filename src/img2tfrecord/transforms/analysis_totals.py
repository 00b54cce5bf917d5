"""The train split's batch totals summed exactly in Beam (``conversion/run_totals.py`` holds the totals)."""

from __future__ import annotations

import apache_beam as beam

from img2tfrecord.conversion.run_totals import BATCH_CLASSES, RunTotals


class TotalsCombineFn(beam.CombineFn):
    """Batch totals -> ``RunTotals``. Python ints: exact at any size."""

    def __init__(self, channels: int):
        self._channels = channels

    def create_accumulator(self) -> RunTotals:
        return RunTotals(self._channels)

    def add_input(self, acc: RunTotals, batch) -> RunTotals:
        images = int(batch[0])
        if images == 0:
            return acc
        classes = {}
        if len(batch) > BATCH_CLASSES:
            classes = dict(zip(batch[BATCH_CLASSES].tolist(), (int(n) for n in batch[BATCH_CLASSES + 1].tolist())))
        return acc.add(
            RunTotals(
                self._channels,
                images,
                int(batch[1]),
                [int(v) for v in batch[2]],
                [int(v) for v in batch[3]],
                (int(batch[4]), int(batch[5])),
                (int(batch[6]), int(batch[7])),
                classes,
            )
        )

    def merge_accumulators(self, accumulators) -> RunTotals:
        out = self.create_accumulator()
        for acc in accumulators:
            out.add(acc)
        return out

    def extract_output(self, acc: RunTotals) -> RunTotals:
        return acc
