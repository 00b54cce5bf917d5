"""Shuffle the work items by their seeded keys, before they are converted.

Each work item (a source file, or a clip of frames) gets the seeded 64-bit
key of its relpath (``split.shuffle_key``).
Items are grouped into buckets by ``key % buckets`` and each bucket is
emitted in key order, so records are converted, and reach the shard
writers, in a seeded order that mixes the classes even when the input was
listed class by class; ``WriteToTFRecord`` deals them round-robin over the
shards of their split.

Shuffling the items rather than the records moves small tuples (paths and
sizes) instead of encoded images: the only step that moves the image bytes
between workers is the grouping inside ``WriteToTFRecord``. The grouping is
also the fusion break after discovery: on a distributed runner the buckets
spread the conversion over the workers (about ``ITEMS_PER_BUCKET`` items
each). How much of the order survives depends on the runner: the local
runner keeps it up to the writers; distributed runners keep the mix but not
the exact order.
"""
from __future__ import annotations

import math
from typing import Callable, Iterable, Tuple

import apache_beam as beam

from img2tfrecord.transforms.split import shuffle_key

ITEMS_PER_BUCKET = 500


def source_relpath(source) -> str:
    """The relpath a source file's record is keyed by."""
    return source[1]


def num_buckets(num_items: int) -> int:
    return max(1, math.ceil(num_items / ITEMS_PER_BUCKET))


def _bucket(item, seed: int, buckets: int, relpath_of: Callable):
    key = shuffle_key(relpath_of(item), seed)
    return key % buckets, (key, item)


def _in_key_order(group: Tuple[int, Iterable[Tuple[int, object]]]):
    _, keyed = group
    for _, item in sorted(keyed, key=lambda kv: kv[0]):
        yield item


class ShuffleItems(beam.PTransform):
    """Work items -> the same items, grouped into ``buckets`` and ordered by their seeded keys."""

    def __init__(self, seed: int, buckets: int, relpath_of: Callable = source_relpath):
        super().__init__()
        if buckets < 1:
            raise ValueError(f"buckets must be at least 1, got {buckets}")
        self._seed = seed
        self._buckets = buckets
        self._relpath_of = relpath_of

    def expand(self, items):
        return (
            items
            | "KeyByBucket" >> beam.Map(_bucket, self._seed, self._buckets, self._relpath_of)
            | "GroupBuckets" >> beam.GroupByKey()
            | "OrderByKey" >> beam.FlatMap(_in_key_order)
        )
