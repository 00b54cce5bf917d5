"""Shard assignment: each work item's (split, shard) and in-shard position, from seeded hashes of its relpath."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import apache_beam as beam

from img2tfrecord.conversion.converter import Converter
from img2tfrecord.conversion.sharding import assign_shard, shuffle_key
from img2tfrecord.model import ERRORS, ShardItem, error_row
from img2tfrecord.sources.layout import PlacementError
from img2tfrecord.transforms.counters import OutputCounter


class AssignShardsFn(beam.DoFn):
    """Work item -> ``((split, shard), ShardItem)``; an item without a place -> its error row."""

    def __init__(self, converter: Converter[Any], seed: int):
        self._converter = converter
        self._seed = seed
        self._count = OutputCounter()

    def process(self, item, num_shards: Dict[str, int]):
        """``num_shards``: each split's shard count (a side input: it may be computed in the graph)."""
        relpath = self._converter.relpath_of(item)
        try:
            split = self._converter.split_of(item)
        except PlacementError:
            tag, row = self._converter(item, [])  # the converter's own rejection of it, read nothing
            self._count(tag, row)
            yield beam.pvalue.TaggedOutput(ERRORS, row)
            return
        if split not in num_shards:
            row = error_row(
                self._converter.path_of(item),
                relpath,
                "unknown_split",
                f"split {split!r} was not seen when the run was planned (splits: {', '.join(num_shards)})",
            )
            self._count(ERRORS, row)
            yield beam.pvalue.TaggedOutput(ERRORS, row)
            return
        shard = assign_shard(relpath, self._seed, num_shards[split])
        yield (split, shard), ShardItem(shuffle_key(relpath, self._seed), relpath, item)


def every_shard(num_shards: Dict[str, int]) -> List[Tuple[Tuple[str, int], None]]:
    """One placeholder per shard, so that a shard no item hashes to is written too (empty)."""
    return [((split, shard), None) for split, n in sorted(num_shards.items()) for shard in range(n)]
