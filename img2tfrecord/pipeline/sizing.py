"""Launch-time size estimates: the output/input size ratio from a sample, record bytes, shard counts.

``WriteToTFRecord`` needs each split's shard count when the graph is built, but output sizes are
known only after conversion: a small sample is converted to measure the ratio when images are
re-encoded.
"""

from __future__ import annotations

import math
from typing import Dict, List

from img2tfrecord.images import ImageError, convert_image
from img2tfrecord.model import WorkItem
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.sources.files import read_source

SAMPLE_SIZE = 16
RECORD_OVERHEAD_BYTES = 200  # framing + the non-image features of one record
MIB = 1024 * 1024


def estimate_size_ratio(config: ConvertConfig, files: List[WorkItem]) -> float:
    """Output bytes per input byte, from converting a few evenly spaced files."""
    image = config.image
    if image.format == "keep" and image.size is None:
        return 1.0
    step = max(1, len(files) // SAMPLE_SIZE)
    in_bytes = out_bytes = 0
    for source in files[::step][:SAMPLE_SIZE]:
        size = source.size
        try:
            converted = convert_image(read_source(source, image.max_file_bytes), image)
        except (ImageError, OSError):
            continue
        in_bytes += size
        out_bytes += len(converted.encoded)
    return out_bytes / in_bytes if in_bytes else 1.0


def estimated_record_bytes(input_bytes: float, ratio: float) -> float:
    """Output bytes of one record made from ``input_bytes`` of image data at the output/input ``ratio``."""
    return input_bytes * ratio + RECORD_OVERHEAD_BYTES


def num_shards(config: ConvertConfig, split_names, split_bytes: Dict[str, float]) -> Dict[str, int]:
    if config.num_shards:
        return {name: config.num_shards for name in split_names}
    target = config.shard_size_mb * MIB
    return {name: max(1, math.ceil(split_bytes.get(name, 0) / target)) for name in split_names}
