"""Every pair of 64-bit hashes within a Hamming distance, found with faiss's binary hash tables.

Exact, by the pigeonhole principle: the 64 bits are cut into ``t`` blocks of
``b`` bits, and table ``i`` (a ``faiss.IndexBinaryHash`` over block ``i``)
finds the hashes whose block differs from the query's in at most ``f_i``
bits (faiss's ``nflip``). With ``sum(f_i + 1) > d``, two hashes at most ``d``
bits apart differ in at most ``f_i`` bits of some block ``i``, so some table
finds them. A pair is kept from the first table that finds it only.

The plan (``t``, ``b``, the ``f_i``) is the cheapest by a cost model of the
hash lookups (``sum`` of the blocks' ``1 + C(b, 1) + ... + C(b, f_i)``) and the
candidates each lookup compares (``n / 2**b`` for spread hashes); see
docs/inspect-verify-report.md for the complexity.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from img2tfrecord.report.perceptual_hash import HASH_BITS, MAX_NEAR_DUPLICATE_DISTANCE

if TYPE_CHECKING:
    import numpy as np

_BATCH = 1 << 15  # queries per faiss call, at most
_FIRST_BATCH = 1 << 10  # queries of the first call, before the results per query are known
_MIN_BATCH = 16  # queries per faiss call, at least
_RESULTS = 1 << 18  # results per faiss call aimed at: bounds one call's memory whatever the neighbours per hash
_LOOKUP_COST = 20.0  # one hash-table lookup, in candidate comparisons (measured: about 170 ns against 8 ns)
_MAX_BLOCK_BITS = 32


class Plan(NamedTuple):
    """``len(flips)`` blocks of ``bits`` bits; block ``i`` is searched within ``flips[i]`` flipped bits."""

    bits: int
    flips: Tuple[int, ...]

    def block(self, i: int) -> Tuple[int, int]:
        """(shift, mask) of block ``i`` in a hash."""
        return i * self.bits, ((1 << self.bits) - 1) << (i * self.bits)


def _lookups(bits: int, flips: int) -> int:
    return sum(math.comb(bits, k) for k in range(flips + 1))


def plan(count: int, max_distance: int) -> Plan:
    """The cheapest exact plan for ``count`` distinct hashes and distances up to ``max_distance``."""
    needed = max_distance + 1  # sum(f_i + 1) must reach this
    best = None
    for tables in range(2, HASH_BITS + 1):
        bits = min(_MAX_BLOCK_BITS, HASH_BITS // tables)
        per, extra = divmod(needed, tables)
        # f_i + 1 is per or per + 1; a block with f_i + 1 == 0 is not searched at all
        flips = tuple([per] * extra + [per - 1] * (tables - extra) if per else [0] * extra)
        lookups = sum(_lookups(bits, f) for f in flips)
        cost = lookups * (_LOOKUP_COST + count / 2.0**bits)
        if best is None or cost < best[0]:
            best = (cost, Plan(bits, flips))
    assert best is not None
    return best[1]


def _rotated_codes(values: np.ndarray, shift: int) -> np.ndarray:
    """The hashes rotated right by ``shift`` bits, as faiss codes (8 little-endian bytes each): the block
    starting at bit ``shift`` becomes the low bits faiss's hash table reads."""
    import numpy as np

    s = np.uint64(shift)
    rotated = (values >> s) | (values << np.uint64(HASH_BITS - shift)) if shift else values
    return np.ascontiguousarray(rotated.astype("<u8")).view(np.uint8).reshape(-1, 8)


def _range_search(index, queries: np.ndarray, radius: int) -> Tuple[np.ndarray, np.ndarray]:
    """(lims, ids) of one faiss range search: the hashes strictly within ``radius`` bits of each query."""
    lims, _, found = index.range_search(queries, radius)
    return lims, found


class _Batches:
    """Query batch sizes that keep one faiss call's results near :data:`_RESULTS`, whatever the number of
    neighbours per hash: the next batch is sized by the results per query of the last one."""

    def __init__(self) -> None:
        self.size = _FIRST_BATCH

    def seen(self, queries: int, results: int) -> None:
        per_query = max(results, 1) / max(queries, 1)
        self.size = int(min(_BATCH, 2 * queries, max(_MIN_BATCH, _RESULTS / per_query)))  # at most doubling


def _indexes(values: np.ndarray, chosen: Plan) -> Iterator[Tuple[int, np.ndarray, object]]:
    """``(table, codes, index)`` of each table of the plan, built one at a time."""
    import faiss

    for table, flips in enumerate(chosen.flips):
        codes = _rotated_codes(values, chosen.block(table)[0])
        index = faiss.IndexBinaryHash(HASH_BITS, chosen.bits)
        index.nflip = flips
        index.add(codes)
        yield table, codes, index


def _checked_plan(values: np.ndarray, max_distance: int, chosen: Optional[Plan]) -> Plan:
    if not 0 <= max_distance <= MAX_NEAR_DUPLICATE_DISTANCE:
        raise ValueError(f"max_distance must be in 0..{MAX_NEAR_DUPLICATE_DISTANCE}, got {max_distance}")
    chosen = chosen or plan(len(values), max_distance)
    if sum(f + 1 for f in chosen.flips) <= max_distance:
        raise ValueError(f"{chosen} does not find every pair within {max_distance} bits")
    return chosen


def found_per_table(values: np.ndarray, max_distance: int, chosen: Optional[Plan] = None) -> np.ndarray:
    """Per hash of ``values`` (uint64, distinct), the most hashes one table finds within ``max_distance``
    bits of it, itself included (uint32): above 1 when another hash is that close, and the number of results
    that hash adds to a faiss call of :func:`later_neighbours` over the same or a subset holding its neighbours.
    One table at a time and no pair kept: the memory is a table's and one call's results."""
    import numpy as np

    values = np.asarray(values, dtype=np.uint64)
    chosen = _checked_plan(values, max_distance, chosen)
    most = np.ones(len(values), dtype=np.uint32)
    if len(values) < 2:
        return most
    batches = _Batches()
    for _, codes, index in _indexes(values, chosen):
        start = 0
        while start < len(values):
            stop = min(len(values), start + batches.size)
            lims, found = _range_search(index, codes[start:stop], max_distance + 1)  # distance < radius
            batches.seen(stop - start, len(found))
            np.maximum(most[start:stop], np.diff(lims).astype(np.uint32), out=most[start:stop])
            del found, lims
            start = stop
        del index
    return most


def near_pair_batches(
    values: np.ndarray, max_distance: int, chosen: Optional[Plan] = None
) -> Iterator[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(first, second, distance)`` arrays of the pairs of positions ``first < second`` whose hashes
    (``values``, uint64, distinct or not) are at most ``max_distance`` bits apart; each pair in one batch only.
    ``chosen`` replaces :func:`plan`'s (it must be exact for ``max_distance``)."""
    import numpy as np

    values = np.asarray(values, dtype=np.uint64)
    for _, first, second in later_neighbours(values, max_distance, chosen):
        if len(first):
            yield first, second, np.bitwise_count(values[first] ^ values[second]).astype(np.uint8)


def later_neighbours(
    values: np.ndarray, max_distance: int, chosen: Optional[Plan] = None, per_query: Optional[np.ndarray] = None
) -> Iterator[Tuple[int, np.ndarray, np.ndarray]]:
    """``(stop, first, second)``: the pairs of positions ``first < second`` whose hashes (``values``, uint64)
    are at most ``max_distance`` bits apart, by ranges of ``first``: each batch holds every pair whose
    ``first`` is at least the previous batch's ``stop`` (0 for the first) and below its own, so a caller may
    act on the positions below ``stop`` once it is seen. Every table is held meanwhile, and each batch
    comes from faiss calls of about :data:`_RESULTS` results: never every pair at once. ``per_query``
    (:func:`found_per_table` of each hash) sizes the calls exactly; without it they are sized by the
    results per query of the call before."""
    import numpy as np

    values = np.asarray(values, dtype=np.uint64)
    chosen = _checked_plan(values, max_distance, chosen)
    if len(values) < 2:
        if len(values):
            yield len(values), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return
    masks = [np.uint64(chosen.block(i)[1]) for i in range(len(chosen.flips))]
    tables = list(_indexes(values, chosen))
    batches = _Batches()
    start = 0
    total = None if per_query is None else np.cumsum(per_query, dtype=np.int64)
    while start < len(values):
        if total is None:
            stop = min(len(values), start + batches.size)
        else:  # the queries whose results add up to _RESULTS, one at least
            before = int(total[start - 1]) if start else 0
            stop = int(np.searchsorted(total, before + _RESULTS, side="right"))
            stop = min(len(values), start + _BATCH, max(start + 1, stop))
        parts_first, parts_second = [], []
        results = 0
        for table, codes, index in tables:
            lims, found = _range_search(index, codes[start:stop], max_distance + 1)  # distance < radius
            results = max(results, len(found))
            first = np.repeat(np.arange(start, stop, dtype=np.int64), np.diff(lims).astype(np.int64))
            keep = found > first  # each pair once, and not the query itself
            first, second = first[keep], found[keep]
            del keep, found, lims
            xor = values[first] ^ values[second]
            for earlier in range(table):  # a pair an earlier table could find was kept there
                fresh = np.bitwise_count(xor & masks[earlier]) > chosen.flips[earlier]
                first, second, xor = first[fresh], second[fresh], xor[fresh]
            parts_first.append(first)
            parts_second.append(second)
        batches.seen(stop - start, results)
        first, second = np.concatenate(parts_first), np.concatenate(parts_second)
        del parts_first, parts_second
        yield stop, first, second
        start = stop


class NearPair(NamedTuple):
    """Positions ``first < second`` in the hashed sequence, and their Hamming distance."""

    first: int
    second: int
    distance: int


def near_pairs(hashes: Sequence[int], max_distance: int) -> List[NearPair]:
    """Every pair of positions whose hashes differ in at most ``max_distance`` bits, sorted; for small inputs."""
    import numpy as np

    out: List[NearPair] = []
    values = np.asarray([int(h) for h in hashes], dtype=np.uint64)
    for first, second, distance in near_pair_batches(values, max_distance):
        out.extend(NearPair(*p) for p in zip(first.tolist(), second.tolist(), distance.tolist()))
    return sorted(out)
