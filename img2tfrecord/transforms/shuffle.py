"""Shuffle records inside each split by their seeded keys.

Records are grouped into buckets by ``key % buckets`` (one bucket per output
shard of the split, so a bucket is about a shard's worth of data) and each
bucket is emitted in key order. The set of records per split is fixed by
the seed; their order in the files follows the keys, so classes are mixed
inside every shard even when the input was listed class by class.
"""
from __future__ import annotations

from typing import Dict, Iterable, Tuple

import apache_beam as beam


def _bucket(record, buckets: Dict[str, int]):
    split, key, _, example = record
    return (split, key % buckets[split]), (key, example)


def _in_key_order(group: Tuple[Tuple[str, int], Iterable[Tuple[int, bytes]]]):
    (split, _), keyed = group
    for _, example in sorted(keyed, key=lambda kv: kv[0]):
        yield split, example


class ShuffleSplits(beam.PTransform):
    """(split, key, class, example) -> (split, example), grouped and ordered by key."""

    def __init__(self, buckets: Dict[str, int]):
        super().__init__()
        self._buckets = dict(buckets)

    def expand(self, records):
        return (
            records
            | "KeyByBucket" >> beam.Map(_bucket, self._buckets)
            | "GroupBuckets" >> beam.GroupByKey()
            | "OrderByKey" >> beam.FlatMap(_in_key_order)
        )
