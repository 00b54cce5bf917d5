"""The train split's run totals and the ``statistics`` block of ``dataset.json`` made from them.

batch totals (one list per tf.Transform batch, laid out as below; made by analyze._batch_totals)
  -> transforms/analysis_totals.TotalsCombineFn -> RunTotals (Python ints: exact however many images)
  -> pixel_moments / statistics_json            -> mean and std, the ``statistics`` block of dataset.json

Beam-free: an append reads the totals an output records (``totals_of``) before any pipeline starts.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from img2tfrecord.schemas import output_files
from img2tfrecord.schemas import transformed as names

MAX_PIXEL = 255
PIXEL_TOTALS = "pixel_totals"  # dataset.json statistics: the exact totals the mean and std come from

# The batch totals, by position: images, pixels, sums, squares, height min/max,
# width min/max, then (labeled records) the batch's classes and their counts.
BATCH_CLASSES = 8

Span = Union[Tuple[None, None], Tuple[int, int]]  # (min, max); (None, None) before the first image


@dataclasses.dataclass
class RunTotals:
    """The train split's totals: exact integers however many images (the ``TotalsCombineFn`` accumulator)."""

    channels: int
    images: int = 0
    pixels: int = 0
    sums: List[int] = dataclasses.field(default_factory=list)
    squares: List[int] = dataclasses.field(default_factory=list)
    height: Span = (None, None)  # (min, max)
    width: Span = (None, None)
    classes: Dict[Any, int] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        self.sums = self.sums or [0] * self.channels
        self.squares = self.squares or [0] * self.channels

    def copy(self) -> RunTotals:
        return dataclasses.replace(self, sums=list(self.sums), squares=list(self.squares), classes=dict(self.classes))

    def subtract(self, other: RunTotals) -> RunTotals:
        """These totals without ``other``'s images (their sizes stay in the spans: a min or max cannot be undone)."""
        self.images -= other.images
        self.pixels -= other.pixels
        self.sums = [a - b for a, b in zip(self.sums, other.sums)]
        self.squares = [a - b for a, b in zip(self.squares, other.squares)]
        for name, n in other.classes.items():
            left = self.classes.get(name, 0) - n
            if left > 0:
                self.classes[name] = left
            else:
                self.classes.pop(name, None)
        return self

    def add(self, other: RunTotals) -> RunTotals:
        if not other.images:
            return self
        self.images += other.images
        self.pixels += other.pixels
        self.sums = [a + b for a, b in zip(self.sums, other.sums)]
        self.squares = [a + b for a, b in zip(self.squares, other.squares)]
        self.height = _span(self.height, other.height)
        self.width = _span(self.width, other.width)
        for name, n in other.classes.items():
            self.classes[name] = self.classes.get(name, 0) + n
        return self


def _span(a: Span, b: Span) -> Span:
    if a[0] is None:
        return b
    if b[0] is None:
        return a
    return min(a[0], b[0]), max(a[1], b[1])


def pixel_moments(pixels: int, sums: Sequence[int], squares: Sequence[int]) -> Tuple[List[float], List[float]]:
    """Per-channel mean and (population) standard deviation in [0, 1] units, from exact uint8 totals."""
    if not pixels:
        return [0.0] * len(sums), [0.0] * len(sums)
    mean = [s / (pixels * MAX_PIXEL) for s in sums]
    # n^2 var = n * sum(x^2) - sum(x)^2, exact in integers.
    std = [math.sqrt(max(0, pixels * q - s * s)) / (pixels * MAX_PIXEL) for s, q in zip(sums, squares)]
    return mean, std


def statistics_json(totals: RunTotals, label_names: Optional[List[str]] = None, exact: bool = True) -> Dict[str, Any]:
    """The ``statistics`` block of ``dataset.json`` from the run totals.

    ``examples_per_class`` follows ``label_names`` (the vocabulary order,
    zeros included) when given, else the sorted train classes; absent for
    records without labels. ``exact``: every image's sums are of its
    stored pixels; False when images re-encoded as JPEG may have
    contributed the pixels given to the encoder (``image.pixel_sums``).
    """
    mean, std = pixel_moments(totals.pixels, totals.sums, totals.squares)
    stats: Dict[str, Any] = {
        "split": names.ANALYZED_SPLIT,
        "num_examples": totals.images,
        "pixel_mean": mean,
        "pixel_std": std,
        "exact": exact,
        "image_height": {"min": totals.height[0], "max": totals.height[1]},
        "image_width": {"min": totals.width[0], "max": totals.width[1]},
        # The exact integer totals, so that an append adds its images to them without reading old shards.
        PIXEL_TOTALS: {"pixels": totals.pixels, "sums": list(totals.sums), "squares": list(totals.squares)},
    }
    counts = {name.decode("utf-8") if isinstance(name, bytes) else name: n for name, n in totals.classes.items()}
    if label_names is not None:
        stats["examples_per_class"] = {name: counts.get(name, 0) for name in label_names}
        stats["label_vocabulary"] = names.LABEL_VOCABULARY
    elif counts:
        stats["examples_per_class"] = dict(sorted(counts.items()))
    stats["files"] = {
        "transform_fn": output_files.TRANSFORM_FN_DIR,
        "transformed_metadata": output_files.TRANSFORMED_METADATA_DIR,
        "raw_metadata": output_files.RAW_METADATA_DIR,
        "schema": output_files.SCHEMA_FILE,
    }
    return stats


def totals_of(stats: Optional[Mapping[str, Any]], channels: int) -> Optional[RunTotals]:
    """The run totals a ``statistics`` block of dataset.json records, or None when it has no exact totals
    (written before they were recorded, or of another shape)."""
    if not stats or not isinstance(stats.get(PIXEL_TOTALS), dict):
        return None
    found = stats[PIXEL_TOTALS]
    try:
        sums, squares = [int(v) for v in found["sums"]], [int(v) for v in found["squares"]]
        height, width = stats.get("image_height") or {}, stats.get("image_width") or {}
        totals = RunTotals(
            channels,
            images=int(stats["num_examples"]),
            pixels=int(found["pixels"]),
            sums=sums,
            squares=squares,
            height=(height.get("min"), height.get("max")),
            width=(width.get("min"), width.get("max")),
            # keyed as the analysis batches key them (the records' class text, bytes)
            classes={name.encode("utf-8"): int(n) for name, n in (stats.get("examples_per_class") or {}).items() if n},
        )
    except (KeyError, TypeError, ValueError):
        return None
    if len(sums) != channels or len(squares) != channels:
        return None
    return totals
