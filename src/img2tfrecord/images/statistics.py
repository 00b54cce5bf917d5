"""Per-channel pixel sums of a stored image, for the tf.Transform statistics."""

from __future__ import annotations

import io
import operator
from typing import List, Tuple

from PIL import Image

from img2tfrecord.images.decode import decoding
from img2tfrecord.images.options import LOSSLESS_FORMATS, ConvertedImage, ImageError

_LEVELS = tuple(range(256))
_SQUARED_LEVELS = tuple(k * k for k in _LEVELS)


def pixel_sums(image: ConvertedImage, exact: bool = False) -> Tuple[List[int], List[int]]:
    """Per-channel sum and sum of squares of a stored image's uint8 pixels, as exact integers.

    Where the pixels come from:

    * PNG and raw pixels are lossless: the pixels that were encoded
      (``image.pixels``) are the stored ones, and are used when kept.
    * An image re-encoded as JPEG (lossy): by default the pixels given to
      the JPEG encoder, which costs a histogram; the stored image differs
      from them by the JPEG loss (docs/tf-transform.md gives how much). With
      ``exact`` the stored bytes are decoded again, as a reader decodes
      them, at the cost of one JPEG decode per image.
    * An original JPEG or PNG stored byte for byte (no pixels kept): its
      bytes are decoded.

    Decoding is Pillow's full decode: for JPEG, libjpeg's accurate integer
    DCT with fancy upsampling, bit for bit what
    ``tf.io.decode_jpeg(..., dct_method="INTEGER_ACCURATE")`` returns, which
    is how ``img2tfrecord.load`` and the exported tf.Transform graph decode.
    The sums come from Pillow's histogram (256 counts per channel), so no
    pixel array is built.
    """
    mode = "RGB" if image.channels == 3 else "L"
    if image.pixels is not None and (image.format in LOSSLESS_FORMATS or not exact):
        img = image.pixels
        if img.mode != mode or img.size != (image.width, image.height):
            raise ValueError(
                f"the kept pixels are {img.mode} {img.width}x{img.height}, not {mode} {image.width}x{image.height}"
            )
    elif image.format == "raw":
        img = Image.frombuffer(mode, (image.width, image.height), image.encoded, "raw", mode, 0, 1)
    else:
        with decoding(image.encoded, image.format):
            img = Image.open(io.BytesIO(image.encoded), formats=["JPEG", "PNG"])
            img.load()
        if img.mode != mode or img.size != (image.width, image.height):
            raise ImageError(
                "corrupt",
                f"the stored image decodes as {img.mode} {img.width}x{img.height}, "
                f"not {mode} {image.width}x{image.height}",
            )
    histogram = img.histogram()
    sums, squares = [], []
    for band in range(image.channels):
        counts = histogram[band * 256 : (band + 1) * 256]
        sums.append(sum(map(operator.mul, _LEVELS, counts)))
        squares.append(sum(map(operator.mul, _SQUARED_LEVELS, counts)))
    return sums, squares
