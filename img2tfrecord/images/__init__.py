"""Images in, stored images out: decode, validate, orient, resize, encode, pixel statistics (Pillow only)."""

from img2tfrecord.images.convert import convert_image, normalise_mode, resize_image, target_size  # noqa: F401
from img2tfrecord.images.options import (  # noqa: F401
    DEFAULT_DECODE_TIMEOUT_S,
    DEFAULT_MAX_FILE_MB,
    DEFAULT_MAX_PIXELS,
    FORMATS,
    KEEPABLE_FORMATS,
    LOSSLESS_FORMATS,
    RESIZE_MODES,
    ConvertedImage,
    ImageError,
    ImageOptions,
)
from img2tfrecord.images.statistics import pixel_sums  # noqa: F401
