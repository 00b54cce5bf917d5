"""The 64-bit difference hash of an image, and the distance between two hashes.

The difference hash (dHash): the image in grayscale, shrunk to 9x8 pixels
by box averaging; bit ``8*y + x`` (counted from the most significant bit) is
1 when pixel ``(x + 1, y)`` is brighter than pixel ``(x, y)``. Re-encoding,
small brightness or contrast changes and resizing move few bits; a
different picture moves about half of them. A flat image hashes to 0.

The pairs of hashes within a distance are :mod:`.near_search`'s.
"""

from __future__ import annotations

HASH_BITS = 64
DEFAULT_NEAR_DUPLICATE_DISTANCE = 6
MAX_NEAR_DUPLICATE_DISTANCE = 16
_HASH_SIZE = (9, 8)  # (width, height) of the shrunk image


def difference_hash(image) -> int:
    """The 64-bit dHash of a PIL image (any mode)."""
    import numpy as np
    from PIL import Image

    gray = image.convert("L").resize(_HASH_SIZE, Image.Resampling.BOX)
    pixels = np.asarray(gray, dtype=np.int16)
    bits = (pixels[:, 1:] > pixels[:, :-1]).ravel()
    return int.from_bytes(np.packbits(bits).tobytes(), "big")


def hamming(a: int, b: int) -> int:
    return (a ^ b).bit_count()
