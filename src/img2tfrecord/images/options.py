"""What a run does to every image (``ImageOptions``), what it gives back (``ConvertedImage``), and its errors.

No Beam and no TensorFlow here or anywhere in ``img2tfrecord.images``.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import TYPE_CHECKING, Dict, Optional, Tuple

from img2tfrecord.images.geometry import ImageTransform

if TYPE_CHECKING:  # Pillow is not needed to read the option constants (the CLI parser does)
    from PIL import Image

RESIZE_MODES = ("stretch", "fit", "fill")
# How pixels are resampled to --image-size: "fast" sends a JPEG in RGB or greyscale through
# libjpeg-turbo and OpenCV (images/fast_jpeg.py); "bicubic" keeps every image on Pillow's BICUBIC.
RESAMPLE_FAST, RESAMPLE_BICUBIC = "fast", "bicubic"
RESAMPLE_MODES = (RESAMPLE_FAST, RESAMPLE_BICUBIC)
FAST_JPEG_MODES = ("RGB", "L")  # Pillow modes of the JPEGs --resample fast decodes (CMYK stays on Pillow)
FORMATS = ("keep", "jpeg", "png", "raw")  # raw: uint8 pixels, row-major height x width x channels
LOSSLESS_FORMATS = frozenset({"png", "raw"})  # stored formats whose decoded pixels are the encoded ones
# Formats whose original bytes may be stored as they are (TensorFlow decodes them).
# MPO is how Pillow names a JPEG carrying extra pictures (many phone and camera
# photos): the file is a JPEG whose first picture is the one decoded.
KEEPABLE_FORMATS = {"JPEG": "jpeg", "MPO": "jpeg", "PNG": "png"}
DEFAULT_MAX_PIXELS = 89_478_485  # Pillow's own decompression-bomb threshold
DEFAULT_MAX_FILE_MB = 64.0
DEFAULT_DECODE_TIMEOUT_S = 30.0
# Formats Pillow can read that are never opened: EPS is a PostScript program, which
# Pillow hands to Ghostscript to get pixels. Inputs are data and are never run.
NEVER_OPENED_FORMATS = frozenset({"EPS"})


IMAGE_LIBRARIES = ("pillow", "simplejpeg", "opencv-python-headless")  # what decodes, resizes and encodes


def image_library_versions() -> Dict[str, str]:
    """The installed version of each image library (without importing them), for ``dataset.json``."""
    from importlib import metadata

    versions = {}
    for name in IMAGE_LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


class ImageError(Exception):
    """An input that cannot become a record. ``reason`` is a short stable category."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclasses.dataclass(frozen=True)
class ImageOptions:
    """How every image is converted; fixed for a run."""

    size: Optional[Tuple[int, int]] = None  # (width, height); None keeps each image's size
    resize: str = "fill"
    channels: int = 3
    format: str = "keep"
    quality: int = 90
    max_pixels: int = DEFAULT_MAX_PIXELS
    max_file_bytes: int = int(DEFAULT_MAX_FILE_MB * 1024 * 1024)
    decode_timeout_s: float = DEFAULT_DECODE_TIMEOUT_S  # per image: see Deadline
    resample: str = RESAMPLE_FAST

    def __post_init__(self):
        if self.resize not in RESIZE_MODES:
            raise ValueError(f"resize must be one of {', '.join(RESIZE_MODES)}, got {self.resize!r}")
        if self.resample not in RESAMPLE_MODES:
            raise ValueError(f"resample must be one of {', '.join(RESAMPLE_MODES)}, got {self.resample!r}")
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {self.format!r}")
        if self.channels not in (1, 3):
            raise ValueError(f"channels must be 1 or 3, got {self.channels!r}")
        if self.size is not None and (self.size[0] <= 0 or self.size[1] <= 0):
            raise ValueError(f"image size must be positive, got {self.size[0]}x{self.size[1]}")
        if not 1 <= self.quality <= 100:
            raise ValueError(f"quality must be between 1 and 100, got {self.quality}")
        if self.max_pixels <= 0:
            raise ValueError(f"max_pixels must be positive, got {self.max_pixels}")
        if self.max_file_bytes <= 0:
            raise ValueError(f"max_file_bytes must be positive, got {self.max_file_bytes}")
        if not self.decode_timeout_s > 0:
            raise ValueError(f"decode_timeout_s must be positive, got {self.decode_timeout_s}")

    @property
    def mode(self) -> str:
        return "RGB" if self.channels == 3 else "L"


@dataclasses.dataclass(frozen=True)
class ConvertedImage:
    encoded: bytes
    format: str  # "jpeg" / "png" / "raw"
    height: int
    width: int
    channels: int
    # The pixels that were encoded (RGB/L, width x height), kept only when asked for
    # (convert_image(..., keep_pixels=True)) and only when the image was encoded here;
    # None when the original file is stored byte for byte. See pixel_sums.
    pixels: Optional[Image.Image] = dataclasses.field(default=None, compare=False, repr=False)
    # Where each source pixel went (images.geometry); None only for images built by hand.
    transform: Optional[ImageTransform] = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.encoded).hexdigest()
