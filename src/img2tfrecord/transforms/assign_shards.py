"""Shard assignment: each work item's (split, shard) and in-shard position, from seeded hashes of its relpath
(``conversion/placement.py``)."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import apache_beam as beam

from img2tfrecord.conversion.converter import Converter
from img2tfrecord.conversion.placement import place, shard_keys
from img2tfrecord.model import ERRORS
from img2tfrecord.transforms.counters import OutputCounter


class AssignShardsFn(beam.DoFn):
    """Work item -> ``((split, shard), ShardItem)``; an item without a place -> its error row."""

    def __init__(self, converter: Converter[Any]):
        self._converter = converter
        self._count = OutputCounter()

    def process(self, item, num_shards: Dict[str, int]):
        """``num_shards``: each split's shard count (a side input: it may be computed in the graph)."""
        key, value = place(self._converter, item, num_shards)
        if key is None:
            self._count(ERRORS, value)
            yield beam.pvalue.TaggedOutput(ERRORS, value)
        else:
            yield key, value


def every_shard(num_shards: Dict[str, int]) -> List[Tuple[Tuple[str, int], None]]:
    """One placeholder per shard, so that a shard no item hashes to is written too (empty)."""
    return [(key, None) for key in shard_keys(num_shards)]
