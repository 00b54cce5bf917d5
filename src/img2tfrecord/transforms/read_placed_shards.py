"""The shards of a run whose work items were placed at launch (``conversion/placement.py``): each
shard's items read from the run's placed-items file (``conversion/placed_items.py``) as
``GroupByShard`` gives them to the writer, without a shuffle of every work item first.

    blocks (one per shard, in the graph) -> ReadBlock: ((split, shard), [ShardItem])
    rejected (error rows, in the graph)   -> counted, on the errors output
"""

from __future__ import annotations

from typing import NamedTuple, Tuple

import apache_beam as beam

from img2tfrecord import storage
from img2tfrecord.conversion import placed_items
from img2tfrecord.conversion.placed_items import Block
from img2tfrecord.model import ERRORS, ErrorRow
from img2tfrecord.transforms.counters import INPUTS, NAMESPACE, PassRejectedFn
from img2tfrecord.transforms.launch_values import launch_values


class PlacedShards(NamedTuple):
    """What a launcher placed: its file, the file's blocks, and the work items rejected while placing."""

    path: str
    blocks: Tuple[Block, ...]
    rejected: Tuple[ErrorRow, ...]
    spread: bool  # spread the blocks over the workers first (a distributed runner)

    @property
    def num_inputs(self) -> int:
        """The inputs the run accounts for: the work items placed and the rejected ones."""
        return sum(block.num_items for block in self.blocks) + len(self.rejected)


class _ReadBlockFn(beam.DoFn):
    """Block -> ``((split, shard), its ShardItems in writing order)``."""

    def __init__(self, path: str):
        self._path = path
        self._inputs = beam.metrics.Metrics.counter(NAMESPACE, INPUTS)

    def process(self, block: Block):
        with storage.open_binary(self._path) as f:
            f.seek(block.offset)
            data = f.read(block.length)
        items = placed_items.decode(data, block)
        self._inputs.inc(len(items))
        yield (block.split, block.shard), items


class ReadPlacedShards(beam.PTransform):
    """PBegin -> ``{"shards": ((split, shard), [ShardItem]) per shard, "errors": the rejected rows}``."""

    def __init__(self, placed: PlacedShards):
        super().__init__()
        self._placed = placed

    def expand(self, pbegin):
        if self._placed.spread:  # over the workers of a distributed runner
            blocks = pbegin | "Blocks" >> beam.Create(list(self._placed.blocks), reshuffle=True)
        else:
            blocks = launch_values(pbegin.pipeline, "Blocks", self._placed.blocks)
        shards = blocks | "ReadBlock" >> beam.ParDo(_ReadBlockFn(self._placed.path))
        errors = launch_values(pbegin.pipeline, "Rejected", self._placed.rejected) | "CountRejected" >> beam.ParDo(
            PassRejectedFn()
        )
        return {"shards": shards, ERRORS: errors}
