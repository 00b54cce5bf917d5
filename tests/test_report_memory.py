"""The duplicate search on corpora of large near-duplicate groups (video frames, tiles, scans): the groups
equal a brute-force reading of the documented rule, and the pairs within the distance are never all held
at once, whatever the groups' sizes (faiss calls of a bounded number of results, groups formed a range of
hashes at a time)."""

from __future__ import annotations

import collections
import random
from typing import Dict, List

import numpy as np
import pytest

from img2tfrecord.report import duplicates as dup
from img2tfrecord.report import near_search

DISTANCE = 6


@pytest.fixture
def small_calls(monkeypatch):
    """faiss calls of about 300 results, every call's result count recorded."""
    monkeypatch.setattr(near_search, "_RESULTS", 300)
    monkeypatch.setattr(near_search, "_FIRST_BATCH", 4)
    monkeypatch.setattr(near_search, "_MIN_BATCH", 1)
    calls: List[int] = []
    real = near_search._range_search

    def recorded(index, queries, radius):
        lims, found = real(index, queries, radius)
        calls.append(len(found))
        return lims, found

    monkeypatch.setattr(near_search, "_range_search", recorded)
    return calls


def _frames(seed: int, groups: int, size: int) -> List[int]:
    """Hashes of ``groups`` groups of ``size`` frames, each frame within 3 bits of its group's base (so any
    two frames of a group within 6), some frames alike; shuffled."""
    rng = random.Random(seed)
    hashes = []
    for _ in range(groups):
        base = rng.getrandbits(64)
        for _ in range(size):
            h = base
            for _ in range(rng.randint(0, 3)):
                h ^= 1 << rng.randrange(64)
            hashes.append(h)
    for _ in range(groups * size // 20):  # distinct images between them
        hashes.append(rng.getrandbits(64))
    rng.shuffle(hashes)
    return hashes


def test_large_groups_follow_the_rule(small_calls):
    rng = random.Random(3)
    hashes = _frames(3, groups=12, size=150)
    splits = ["train", "validation", "test"]
    items = []
    dhash_of: Dict[str, int] = {}
    for i, h in enumerate(hashes):
        sha = f"{i + 100:064x}" if rng.random() > 0.05 else f"{rng.randrange(40):064x}"  # a few exact copies
        h = dhash_of.setdefault(sha, h)
        items.append(dup.Located(rng.choice(splits), f"s{i % 7}", i, i, f"f{i:05d}.jpg", "c", sha, h))
    found = dup.find_duplicates(items, DISTANCE)

    # The reference, on contents (distinct sha256) in order of their first file name, over a full matrix.
    contents: Dict[str, List[dup.Located]] = collections.defaultdict(list)
    for item in items:
        contents[item.sha256].append(item)
    shas = sorted(contents, key=lambda s: (min(r.filename for r in contents[s]), s))
    values = np.array([contents[s][0].dhash for s in shas], dtype=np.uint64)
    close = np.bitwise_count(values[:, None] ^ values[None, :]) <= DISTANCE
    np.fill_diagonal(close, False)
    grouped = np.zeros(len(shas), dtype=bool)
    expected = []
    for i in range(len(shas)):
        if grouped[i]:
            continue
        others = np.flatnonzero(close[i] & ~grouped)
        if len(others):
            members = [i, *others.tolist()]
            grouped[members] = True
            expected.append(sorted((shas[m], int(values[i] ^ values[m]).bit_count()) for m in members))
    got = [sorted((c.sha256, c.distance) for c in g.contents) for g in found.groups if g.match == dup.NEAR]
    assert sorted(got) == sorted(expected) and len(expected) >= 12
    assert sum(len(g) for g in expected) > 0.9 * len(shas)

    near_total: collections.Counter = collections.Counter()
    for i, j in np.argwhere(np.triu(close, 1)):
        for a in contents[shas[i]]:
            for b in contents[shas[j]]:
                near_total[dup.pair_key(a.split, b.split)] += 1
    assert found.near_pairs == {k: n for k, n in near_total.items() if n}
    pairs = int(np.triu(close, 1).sum())
    assert pairs > 100_000 and len(small_calls) > 100
    assert max(small_calls) < 4_000, "one faiss call's results are bounded, not every pair"


def test_later_neighbours_come_in_bounded_ranges(small_calls):
    values = np.array(_frames(5, groups=4, size=400), dtype=np.uint64)
    close = np.bitwise_count(values[:, None] ^ values[None, :]) <= DISTANCE
    expected = {(int(a), int(b)) for a, b in np.argwhere(np.triu(close, 1))}
    seen, done, largest = set(), 0, 0
    for stop, first, second in near_search.later_neighbours(values, DISTANCE):
        assert ((first >= done) & (first < stop) & (second > first)).all()
        seen.update(zip(first.tolist(), second.tolist()))
        largest = max(largest, len(first))
        done = stop
    assert done == len(values) and seen == expected
    assert largest < len(expected) / 20, "a range's pairs, never all of them"
    distinct = np.unique(values)
    close = np.bitwise_count(distinct[:, None] ^ distinct[None, :]) <= DISTANCE
    per_query = near_search.found_per_table(distinct, DISTANCE)
    assert ((per_query > 1) == (close.sum(axis=1) > 1)).all() and (per_query <= close.sum(axis=1)).all()
    small_calls.clear()
    for _ in near_search.later_neighbours(distinct, DISTANCE, per_query=per_query):
        pass
    assert max(small_calls) <= max(300, int(per_query.max())), "sized by the results each query adds"
