"""The 64-bit difference hash of an image, and the pairs of hashes within a Hamming distance.

The difference hash (dHash): the image in grayscale, shrunk to 9x8 pixels
by box averaging; bit ``8*y + x`` (counted from the most significant bit) is
1 when pixel ``(x + 1, y)`` is brighter than pixel ``(x, y)``. Re-encoding,
small brightness or contrast changes and resizing move few bits; a
different picture moves about half of them. A flat image hashes to 0.

Pairs are found without comparing every hash with every other: two hashes
within distance ``d`` agree exactly on at least one of ``d + 1`` disjoint
bit bands (pigeonhole), so only hashes that share a band value are
compared. For uniformly spread hashes that is about ``(d + 1) / 2**(64 / (d + 1))``
of all pairs (1/73 at ``d = 6``), each compared in vectorised numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, NamedTuple, Sequence, Tuple

if TYPE_CHECKING:
    import numpy as np

HASH_BITS = 64
DEFAULT_NEAR_DUPLICATE_DISTANCE = 6
MAX_NEAR_DUPLICATE_DISTANCE = 16
_HASH_SIZE = (9, 8)  # (width, height) of the shrunk image
_BLOCK_ELEMENTS = 1 << 22  # at most this many hash comparisons held in memory at once


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


class NearPair(NamedTuple):
    """Indices ``first < second`` into the hashed sequence, and their Hamming distance."""

    first: int
    second: int
    distance: int


def _bands(max_distance: int) -> List[Tuple[int, int]]:
    """``max_distance + 1`` disjoint ``(shift, width)`` bit bands covering all 64 bits."""
    count = max_distance + 1
    bands, shift = [], 0
    for i in range(count):
        width = HASH_BITS // count + (1 if i < HASH_BITS % count else 0)
        bands.append((shift, width))
        shift += width
    return bands


def near_pairs(hashes: Sequence[int], max_distance: int) -> List[NearPair]:
    """Every pair of positions whose hashes differ in at most ``max_distance`` bits, sorted.

    Each pair appears once. ``max_distance`` is in 0..:data:`MAX_NEAR_DUPLICATE_DISTANCE`.
    """
    if not 0 <= max_distance <= MAX_NEAR_DUPLICATE_DISTANCE:
        raise ValueError(f"max_distance must be in 0..{MAX_NEAR_DUPLICATE_DISTANCE}, got {max_distance}")
    import numpy as np  # deferred: the CLI's parser imports this module for its constants

    values = np.asarray([int(h) for h in hashes], dtype=np.uint64)
    if len(values) < 2:
        return []
    bands = _bands(max_distance)
    masks = [np.uint64(((1 << width) - 1) << shift) for shift, width in bands]
    found: List[NearPair] = []
    for band, (shift, width) in enumerate(bands):
        keys = (values >> np.uint64(shift)) & np.uint64((1 << width) - 1)
        order = np.argsort(keys, kind="stable")
        cuts = np.flatnonzero(np.diff(keys[order])) + 1
        for members in np.split(order, cuts):
            if len(members) > 1:
                found.extend(_bucket_pairs(values, members, max_distance, masks[:band]))
    return sorted(found)


def _bucket_pairs(values: np.ndarray, members: np.ndarray, max_distance: int, earlier_masks) -> List[NearPair]:
    """The near pairs among hashes that share one band, less those an earlier band already found."""
    import numpy as np

    members = np.sort(members)
    hashes = values[members]
    size = len(members)
    rows_per_block = max(1, _BLOCK_ELEMENTS // size)
    out: List[NearPair] = []
    for start in range(0, size - 1, rows_per_block):
        stop = min(size - 1, start + rows_per_block)
        xor = hashes[start:stop, None] ^ hashes[None, :]
        keep = np.bitwise_count(xor) <= max_distance
        keep &= np.arange(size)[None, :] > np.arange(start, stop)[:, None]  # each pair once
        rows, cols = np.nonzero(keep)
        diffs = xor[rows, cols]
        for mask in earlier_masks:  # a pair that agrees on an earlier band was found there
            fresh = (diffs & mask) != 0
            rows, cols, diffs = rows[fresh], cols[fresh], diffs[fresh]
        distances = np.bitwise_count(diffs)
        for r, c, d in zip(rows.tolist(), cols.tolist(), distances.tolist()):
            out.append(NearPair(int(members[start + r]), int(members[c]), int(d)))
    return out
