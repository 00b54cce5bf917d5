"""Images in, stored images out: decode, validate, orient, resize, encode, pixel statistics (Pillow; JPEGs to
resize through libjpeg-turbo and OpenCV with --resample fast).

The names below are imported on first use, so that ``img2tfrecord.images.options``
(the option constants the CLI parser needs) loads without Pillow.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
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

_LAZY = {
    **dict.fromkeys(("convert_image", "normalise_mode", "resize_image", "target_size"), "img2tfrecord.images.convert"),
    **dict.fromkeys(
        (
            "DEFAULT_DECODE_TIMEOUT_S",
            "DEFAULT_MAX_FILE_MB",
            "DEFAULT_MAX_PIXELS",
            "FORMATS",
            "KEEPABLE_FORMATS",
            "LOSSLESS_FORMATS",
            "RESIZE_MODES",
            "ConvertedImage",
            "ImageError",
            "ImageOptions",
        ),
        "img2tfrecord.images.options",
    ),
    "pixel_sums": "img2tfrecord.images.statistics",
}


def __getattr__(name):
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'img2tfrecord.images' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
