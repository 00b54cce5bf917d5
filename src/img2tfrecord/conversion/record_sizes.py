"""Record size estimates and shard counts: a split's bytes from a converted sample, its shards from a size target.

Shard counts are needed before any shard is written, when only a few images have been converted:
a record is estimated as the sample's mean input size times its output/input ratio, plus the
record's other features and framing. A sample is converted at most at ``SAMPLE_PIXELS`` output pixels
(``sample_options``): a huge ``--image-size`` is sampled at a smaller size of the same shape and its
bytes scaled by the pixel count, so a launch or a ``--plan`` takes seconds, not minutes and gigabytes.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from img2tfrecord.conversion.seeded_hashes import shuffle_key
from img2tfrecord.images.convert import convert_image
from img2tfrecord.images.options import ImageError, ImageOptions
from img2tfrecord.model import WorkItem
from img2tfrecord.sources.files import read_source

SAMPLE_SIZE = 16
SAMPLE_PIXELS = 4_000_000  # output pixels a sample image is converted at, at most
RECORD_OVERHEAD_BYTES = 200  # framing + the non-image features of one record
MIB = 1024 * 1024


def estimated_record_bytes(input_bytes: float, ratio: float) -> float:
    """Output bytes of one record made from ``input_bytes`` of image data at the output/input ``ratio``."""
    return input_bytes * ratio + RECORD_OVERHEAD_BYTES


def seeded_sample(paths: Iterable[Tuple[str, str]], seed: int) -> List[Tuple[str, str]]:
    """The SAMPLE_SIZE ``(path, relpath)`` with the smallest seeded shuffle keys: the same sample whatever
    the order the references come in (a manifest's rows, a PCollection)."""
    return heapq.nsmallest(SAMPLE_SIZE, paths, key=lambda p: shuffle_key(p[1], seed))


def sample_options(image: ImageOptions) -> Tuple[ImageOptions, float]:
    """The options a launch-time sample is converted with, and how much larger the run's output is per image:
    ``image`` itself (1.0), or, for an ``--image-size`` of more than ``SAMPLE_PIXELS``, the same shape
    scaled down to it and the ratio of the pixel counts (encoded bytes and conversion time grow about
    linearly with the pixels written; a raw image's bytes exactly)."""
    if image.size is None or image.size[0] * image.size[1] <= SAMPLE_PIXELS:
        return image, 1.0
    width, height = image.size
    scale = math.sqrt(SAMPLE_PIXELS / (width * height))
    small = (max(1, round(width * scale)), max(1, round(height * scale)))
    return dataclasses.replace(image, size=small), (width * height) / (small[0] * small[1])


def sample_sizes(items: Iterable[WorkItem], image: ImageOptions) -> Tuple[float, float]:
    """``(mean input bytes, output/input ratio)`` of converting ``items``, read here.

    The mean is over the items that could be read, the ratio over those that also converted;
    ``(0.0, 1.0)`` when none could be read. Bytes are kept when ``image`` changes nothing. Converted
    with ``sample_options``: a huge ``--image-size`` at a smaller size, its bytes scaled up.
    """
    options, scale = sample_options(image)
    read_bytes, read = 0, 0
    in_bytes, out_bytes = 0, 0.0
    for item in items:
        try:
            data = read_source(item, image.max_file_bytes)
        except (ImageError, OSError):
            continue
        read_bytes += len(data)
        read += 1
        if image.format == "keep" and image.size is None:
            continue
        try:
            converted = convert_image(data, options)
        except (ImageError, OSError):
            continue
        in_bytes += len(data)
        out_bytes += len(converted.encoded) * scale
    ratio = out_bytes / in_bytes if in_bytes else 1.0
    return (read_bytes / read if read else 0.0), ratio


def shard_counts(
    split_bytes: Mapping[str, float], shard_size_mb: float, num_shards: Optional[int] = None
) -> Dict[str, int]:
    """Each split's shard count: ``num_shards`` when given, else its bytes over ``shard_size_mb``, at least 1."""
    if num_shards:
        return {name: num_shards for name in split_bytes}
    target = shard_size_mb * MIB
    return {name: max(1, math.ceil(size / target)) for name, size in split_bytes.items()}
