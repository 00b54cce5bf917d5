"""Shard counts computed inside the graph, for inputs a launcher cannot list (a user pipeline's image references).

    work items -> count per split                      exact
               -> the SAMPLE_SIZE smallest shuffle keys -> converted once: mean size, output/input ratio
               -> {split: shard count}                 one element, a side input of the shard step

The sample is chosen by seeded hashes, so the counts are the same on every run of the same input.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import apache_beam as beam

from img2tfrecord.conversion.converter import Converter
from img2tfrecord.conversion.record_sizes import SAMPLE_SIZE, estimated_record_bytes, sample_sizes, shard_counts
from img2tfrecord.conversion.seeded_hashes import shuffle_key
from img2tfrecord.sources.layout import PlacementError
from img2tfrecord.transforms.launch_values import launch_value


class _SplitOf:
    def __init__(self, converter: Converter[Any]):
        self._converter = converter

    def __call__(self, item) -> List[str]:
        try:
            return [self._converter.split_of(item)]
        except PlacementError:  # rejected by the shard step; no record
            return []


class _SampleKey:
    def __init__(self, converter: Converter[Any]):
        self._converter = converter

    def __call__(self, item) -> int:
        return shuffle_key(self._converter.relpath_of(item), self._converter.seed)


class _Counts:
    def __init__(self, converter: Converter[Any], split_names: Sequence[str], shard_size_mb: float):
        self._converter = converter
        self._split_names = list(split_names)
        self._shard_size_mb = shard_size_mb

    def __call__(self, unused_start, per_split: Dict[str, int], sample: List[Any]) -> Dict[str, int]:
        mean_size, ratio = sample_sizes(sample, self._converter.options)
        record_bytes = estimated_record_bytes(mean_size, ratio)
        split_bytes = {name: per_split.get(name, 0) * record_bytes for name in self._split_names}
        return shard_counts(split_bytes, self._shard_size_mb)


def fixed_shard_counts(pipeline: beam.Pipeline, split_names: Sequence[str], num_shards: int) -> beam.PCollection:
    """The one-element PCollection ``{split: num_shards}`` of a run given ``--num-shards``."""
    return launch_value(pipeline, "FixedCounts", {name: num_shards for name in split_names})


class CountShards(beam.PTransform):
    """Work items -> one ``{split: shard count}``: ``num_shards`` each when given, else from ``shard_size_mb``.

    A split's bytes are its items times a record's size estimated from converting the
    SAMPLE_SIZE items with the smallest seeded shuffle keys (as ``convert`` estimates a
    manifest's from a sample of its rows); every split in ``split_names`` gets at least one shard.
    """

    def __init__(
        self,
        converter: Converter[Any],
        split_names: Sequence[str],
        shard_size_mb: float,
        num_shards: Optional[int] = None,
    ):
        super().__init__()
        self._converter = converter
        self._split_names = list(split_names)
        self._shard_size_mb = shard_size_mb
        self._num_shards = num_shards

    def expand(self, items):
        if self._num_shards:
            return fixed_shard_counts(items.pipeline, self._split_names, self._num_shards)
        split_of, sample_key = _SplitOf(self._converter), _SampleKey(self._converter)
        per_split = items | "SplitOf" >> beam.FlatMap(split_of) | "PerSplit" >> beam.combiners.Count.PerElement()
        sample = items | "Sample" >> beam.combiners.Top.Smallest(SAMPLE_SIZE, key=sample_key)
        return launch_value(items.pipeline, "Start", None) | "Counts" >> beam.Map(
            _Counts(self._converter, self._split_names, self._shard_size_mb),
            per_split=beam.pvalue.AsDict(per_split),
            sample=beam.pvalue.AsSingleton(sample),
        )
