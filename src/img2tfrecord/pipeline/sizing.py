"""Launch-time size estimates: the output/input size ratio from a sample of the listing, shard counts, and
how many local conversion processes an input is worth.

``WriteToTFRecord``-style sharding needs each split's shard count before the first shard is written,
but output sizes are known only after conversion: a few evenly spaced inputs of the listing are
converted to measure the ratio when images are re-encoded (``conversion/record_sizes.py``).
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Sequence, Tuple, TypeVar

from img2tfrecord.conversion.pool import usable_cores
from img2tfrecord.conversion.record_sizes import (
    MIB,
    SAMPLE_SIZE,
    sample_sizes,
    seeded_sample,
    shard_counts,
)
from img2tfrecord.model import WorkItem
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.listing import file_size
from img2tfrecord.pipeline.plan_model import Sizing

T = TypeVar("T")


# A conversion process costs about a second of CPU to start; below these an extra one costs more than it saves.
INPUTS_PER_PROCESS = 500
INPUT_BYTES_PER_PROCESS = 64 * MIB


def processes_for(num_inputs: int, input_bytes: float) -> int:
    """Local conversion processes for an input: one per usable core, fewer for a small input (one per
    ``INPUTS_PER_PROCESS`` inputs or ``INPUT_BYTES_PER_PROCESS`` bytes, whichever gives more)."""
    enough = max(num_inputs // INPUTS_PER_PROCESS, int(input_bytes // INPUT_BYTES_PER_PROCESS))
    return max(1, min(usable_cores(), enough))


def sized(
    config: ConvertConfig, split_names, split_bytes: Dict[str, float], num_inputs: int, input_bytes: float, ratio: float
) -> Sizing:
    """A plan's sizing: ``num_inputs`` inputs of ``input_bytes``, shards per split from ``split_bytes``."""
    return Sizing(num_shards(config, split_names, split_bytes), num_inputs, int(input_bytes), ratio)


def estimate_size_ratio(config: ConvertConfig, files: Sequence[WorkItem]) -> float:
    """Output bytes per input byte, from converting up to SAMPLE_SIZE evenly spaced files."""
    image = config.image
    if image.format == "keep" and image.size is None:
        return 1.0
    return sample_sizes(evenly_spaced(files, SAMPLE_SIZE), image)[1]


def evenly_spaced(items: Sequence[T], count: int) -> List[T]:
    """Up to ``count`` of ``items`` spread over them: ``items[::step][:count]`` with ``step`` a ``count``-th of
    them, read by index (a long sequence made as it is read is not copied)."""
    step = max(1, len(items) // count)
    return [items[i] for i in range(0, min(len(items), step * count), step)]


def sampled_sizes(config: ConvertConfig, paths: Iterable[Tuple[str, str]]) -> Tuple[float, float]:
    """``(mean input bytes, output/input ratio)`` of the seeded sample of ``(path, relpath)`` images that a
    manifest names: the images the graph's ``CountShards`` samples from the same references."""
    sample = []
    for path, relpath in seeded_sample(paths, config.seed):
        size = file_size(path)
        if size is not None:
            sample.append(WorkItem(path, relpath, size))
    mean_size = sum(f.size for f in sample) / len(sample) if sample else 0.0
    return mean_size, estimate_size_ratio(config, sample)


def num_shards(config: ConvertConfig, split_names, split_bytes: Dict[str, float]) -> Dict[str, int]:
    """Each split's shard count: ``--num-shards``, or its estimated bytes over ``--shard-size-mb``."""
    return shard_counts(
        {name: split_bytes.get(name, 0) for name in split_names}, config.shard_size_mb, config.num_shards
    )
