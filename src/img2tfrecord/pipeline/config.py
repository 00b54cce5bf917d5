"""Everything a conversion run needs to know, validated before any pipeline starts."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional

from img2tfrecord.conversion.sharding import Splits
from img2tfrecord.images import ImageOptions
from img2tfrecord.option_values import DEFAULT_SHARD_SIZE_MB


@dataclasses.dataclass(frozen=True)
class ConvertConfig:
    input: str
    output: str
    image: ImageOptions = ImageOptions()
    splits: Optional[Splits] = None  # None: split folders if present, else everything in "train"
    seed: int = 0
    shard_size_mb: float = DEFAULT_SHARD_SIZE_MB
    num_shards: Optional[int] = None  # fixed shards per split instead of --shard-size-mb
    compression: str = "none"
    file_format: str = "tfrecord"  # the shard container (schemas/manifest.FILE_FORMATS); the records are the same
    overwrite: bool = False
    resume: bool = False  # keep the shards a killed run of the same fingerprint finished (plan.Plan.fingerprint)
    analyze: bool = True  # tf.Transform analysis of the train split (--no-analyze: skip)
    exact_statistics: bool = False  # re-encoded JPEGs' statistics from their stored bytes (image.pixel_sums)
    max_error_rate: Optional[float] = None  # the job fails (after writing everything) past this rejected fraction
    processes: int = 1  # local conversion processes; 1: in the runner's worker; 0: as many as the input is worth
    sequence: bool = False  # SRC/<class>/<clip>/<frames> -> one tf.train.SequenceExample per clip
    task: Optional[str] = None  # classification or detection; None: detected from the input's layout
    require_boxes: bool = False  # detection: reject an image left without boxes instead of writing it
    dedupe: bool = False  # files with identical bytes converted once (transforms/dedupe.py)
    append: bool = False  # convert only what is new since the output was written (pipeline/append.py)
    allow_new_classes: bool = False  # an append may add class folders, with the next ids
    retry_rejected: bool = False  # an append converts every earlier rejected input again, not only transient ones
    accept_changes: bool = False  # an append withdraws the records of changed and removed inputs

    def options_json(self) -> Dict[str, Any]:
        """The options as recorded in ``dataset.json``."""
        image = self.image
        return {
            "image_size": list(image.size) if image.size else None,
            "resize": image.resize,
            "resample": image.resample,
            "channels": image.channels,
            "format": image.format,
            "quality": image.quality,
            "max_pixels": image.max_pixels,
            "max_file_bytes": image.max_file_bytes,
            "decode_timeout_s": image.decode_timeout_s,
            "splits": {name: fraction for name, fraction in self.splits} if self.splits else None,
            "seed": self.seed,
            "shard_size_mb": None if self.num_shards else self.shard_size_mb,
            "num_shards": self.num_shards,
            "compression": self.compression,
            "file_format": self.file_format,
            "max_error_rate": self.max_error_rate,
            "analyze": self.analyze,
            "exact_statistics": self.exact_statistics,
            "sequence": self.sequence,
            "task": self.task,
            "require_boxes": self.require_boxes,
            "dedupe": self.dedupe,
        }
