"""The values of the ``convert`` options: defaults, upper bounds and the argparse types that check them.

Standard library, ``schemas/`` and the (import-light) format table only: the CLI parser is built from these
before any dependency is imported.
"""

from __future__ import annotations

import argparse
import re
from typing import Any, Callable, Literal, Mapping, Optional, Tuple, Union

from img2tfrecord.schemas.output_files import TASK_CLASSIFICATION, TASK_DETECTION
from img2tfrecord.shard_formats import FileFormatName as FileFormats

DEFAULT_SHARD_SIZE_MB = 128.0
TASKS = (TASK_CLASSIFICATION, TASK_DETECTION)
DEFAULT_QUALITY = 90

# Upper bounds of the size options: past them a value is a mistake that would exhaust memory or
# files, not a bigger dataset. docs/options.md ("Bounds") says why each is where it is.
MAX_IMAGE_SIDE = 16384  # pixels: a 16384x16384 RGB image is 768 MiB in each conversion process
MAX_PIXELS_BOUND = 1 << 30  # --max-pixels: a decoded RGB image of 2^30 pixels is 3 GiB
MAX_FILE_MB_BOUND = 2000  # --max-file-mb: a record is a protocol buffer, which holds less than 2 GiB
MAX_SHARD_SIZE_MB = 16384  # --shard-size-mb: 16 GiB, over a hundred times the recommended 100-200 MB
MAX_NUM_SHARDS = 10000  # --num-shards: per split; each shard is a file, a task and an index
LIMITS_DOC = "docs/options.md#bounds"

# The Python types of the options' values (``convert()``'s keywords, ``ConvertConfig``): a choice is a Literal of
# its ``choices`` (tests/test_typed_api.py holds each against the declaration in options.py).
ImageSize = Union[int, Tuple[int, int]]  # N (N x N) or (width, height)
SplitsGiven = Union[str, Mapping[str, float]]  # "train=0.8,validation=0.2" or {"train": 0.8, "validation": 0.2}
ResizeMode = Literal["stretch", "fit", "fill"]
ResampleMode = Literal["fast", "bicubic"]
ChannelCount = Literal[1, 3]
StoredFormat = Literal["keep", "jpeg", "png", "raw"]
TaskName = Literal["classification", "detection"]
CompressionName = Literal["none", "gzip"]
FileFormatName = FileFormats  # the flag values of the format table (shard_formats)


def parse_image_size(value: Any) -> Tuple[int, int]:
    """``"224"`` or 224 -> (224, 224); ``"320x240"`` or (320, 240) -> (320, 240) as (width, height); each side at
    most :data:`MAX_IMAGE_SIDE`."""
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(-?\d+)\s*(?:[xX]\s*(-?\d+)\s*)?", value)
        if not m:
            raise argparse.ArgumentTypeError(f"expected N or WxH, got {value!r}")
        w = int(m.group(1))
        h = int(m.group(2)) if m.group(2) is not None else w
    elif _is_int(value):
        w = h = value
    elif isinstance(value, (tuple, list)) and len(value) == 2 and all(_is_int(v) for v in value):
        w, h = value
    else:
        raise argparse.ArgumentTypeError(f"expected N or WxH, got {flag_text(value)!r}")
    if w <= 0 or h <= 0:
        raise argparse.ArgumentTypeError(f"image size must be positive, got {flag_text(value)!r}")
    if w > MAX_IMAGE_SIDE or h > MAX_IMAGE_SIDE:
        raise argparse.ArgumentTypeError(
            f"each side must be at most {MAX_IMAGE_SIDE} pixels (a larger image does not fit a conversion "
            f"process's memory; {LIMITS_DOC}), got {flag_text(value)!r}"
        )
    return w, h


def flag_text(value: Any) -> str:
    """A Python API value as its flag's text, for messages: ``(320, 240)`` -> ``320x240``, ``0.5`` -> ``0.5``."""
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return f"{value[0]}x{value[1]}"
    return str(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def typed(number_type: Callable[[str], Any], value: Any) -> Any:
    """``number_type(value)`` of a flag's text, or of a Python value of that number_type (an int for a float too; never
    a bool); ValueError for anything else."""
    if isinstance(value, str):
        return number_type(value)
    if _is_int(value) or (number_type is float and isinstance(value, float)):
        return number_type(value)
    raise ValueError(f"not a {number_type.__name__}: {value!r}")


def _checked(number_type: Callable[[str], Any], valid: Callable[[Any], bool], expected: str, bound: str):
    """An argparse type (of a flag's text, or of the Python API's value): ``number_type(value)`` when ``valid``;
    else one line saying what was expected."""

    def parse(given: Any) -> Any:
        try:
            value = typed(number_type, given)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {flag_text(given)!r}") from None
        if not valid(value):
            raise argparse.ArgumentTypeError(f"must be {bound}, got {flag_text(given)!r}")
        return value

    return parse


def positive(number_type: Callable[[str], Any], at_most: Optional[int] = None, why: str = "") -> Callable[[str], Any]:
    """An argparse type for a number above 0 and, when given, at most ``at_most`` (``why`` says why)."""
    if at_most is None:
        parse = _checked(number_type, lambda v: v > 0, "a positive number", "positive")
    else:
        bound = f"positive and at most {at_most} ({why}; {LIMITS_DOC})"
        parse = _checked(number_type, lambda v: 0 < v <= at_most, "a positive number", bound)
    parse.__name__ = f"positive {number_type.__name__}"
    return parse


fraction = _checked(float, lambda v: 0.0 <= v <= 1.0, "a number in [0, 1]", "in [0, 1]")
quality = _checked(int, lambda v: 1 <= v <= 100, "an integer 1..100", "between 1 and 100")
