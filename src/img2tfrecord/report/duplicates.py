"""Exact and near-duplicate groups of records, and how many duplicate pairs cross splits.

* An **exact** group: the records sharing one ``image/key/sha256`` (identical
  stored bytes), when there are two or more.
* A **near** group: distinct stored images (contents) whose difference
  hashes are each at most ``max_distance`` bits from the group's first
  content, never joined through a chain of pairs. Contents are taken in
  order of their first file name; the first one not yet in a group that has
  near pairs among the others not yet in a group leads a group of itself
  and them. Each content lists every record that stores it, so a near
  group may hold exact duplicates too.

Pairs are counted per unordered pair of splits (key ``"train/test"``,
splits in :func:`split_order`): every two records of an exact group, and
every two records of two contents that are a near pair. A group's counts
hold its own pairs; the totals hold every pair, also one whose contents
landed in different groups.

:func:`search` works on a :class:`~.record_table.RecordTable` and hands each
group to a callback as it is formed (exact groups in content order, then
near groups in the order of their first content), keeping none: only the
records that are in some group are ever turned into Python values. Contents
with equal hashes are searched once (their pairs counted by multiplication),
and the pairs of distinct hashes come from :mod:`.near_search`, a range of
hashes at a time, in the order of their first content: never all at once
(they grow with the square of a group's size). Because a content's neighbours
before it in that order are always grouped already when its turn comes, its
later neighbours decide its turn, and each range's pairs are folded into the
groups' counts once its turns are taken.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from img2tfrecord.report import near_search
from img2tfrecord.report.record_table import Located, RecordTable, from_located, split_order

if TYPE_CHECKING:
    import numpy as np

__all__ = ["EXACT", "NEAR", "Content", "Duplicates", "Group", "Located", "find_duplicates", "search", "split_order"]

EXACT = "exact"
NEAR = "near"
_SPLIT_RANK = {"train": 0, "validation": 1, "test": 2}
_CHUNK = 1 << 18  # rows compared at once


@dataclasses.dataclass
class Content:
    """One distinct stored image: its records, and its hash distance to the group's first content."""

    sha256: str
    dhash: Optional[int]
    records: List[Located]
    distance: int = 0


@dataclasses.dataclass
class Group:
    match: str  # EXACT or NEAR
    contents: List[Content]
    pairs: Dict[str, int]  # split pair -> duplicate pairs of records

    @property
    def records(self) -> List[Located]:
        return [r for c in self.contents for r in c.records]

    @property
    def size(self) -> int:
        return sum(len(c.records) for c in self.contents)

    @property
    def splits(self) -> List[str]:
        return split_order({r.split for c in self.contents for r in c.records})

    @property
    def classes(self) -> List[str]:
        return sorted({r.class_name for c in self.contents for r in c.records})

    @property
    def crosses_splits(self) -> bool:
        return len(self.splits) > 1

    @property
    def largest_distance(self) -> int:
        """The largest hash distance of a content to the group's first one (0 for an exact group)."""
        return max(c.distance for c in self.contents)


def rank_key(group: Group) -> Tuple:
    """The order groups are shown in: crossing splits first, exact before near, larger first, then by file name."""
    return (not group.crosses_splits, group.match != EXACT, -group.size, group.contents[0].records[0].filename)


@dataclasses.dataclass
class MatchTotals:
    """Groups of one match (exact or near), counted as they are formed."""

    groups: int = 0
    groups_crossing_splits: int = 0
    records: int = 0

    def count(self, group: Group) -> None:
        self.groups += 1
        self.groups_crossing_splits += group.crosses_splits
        self.records += group.size


@dataclasses.dataclass
class Duplicates:
    max_distance: int
    groups: List[Group]  # the groups kept by the caller (find_duplicates: all of them, in rank_key order)
    exact_pairs: Dict[str, int]
    near_pairs: Dict[str, int]
    unhashed: int  # records whose image did not decode: in exact groups only
    exact: MatchTotals = dataclasses.field(default_factory=MatchTotals)
    near: MatchTotals = dataclasses.field(default_factory=MatchTotals)


def pair_key(a: str, b: str) -> str:
    first, second = split_order([a, b]) if a != b else (a, b)
    return f"{first}/{second}"


def is_cross_split(key: str) -> bool:
    first, second = key.split("/", 1)
    return first != second


def _split_rank(split: str) -> Tuple[int, str]:
    return (_SPLIT_RANK.get(split, len(_SPLIT_RANK)), split)


def _ordered(pairs: Mapping[str, int]) -> Dict[str, int]:
    """Cross-split keys first, each side in split order; zero counts left out."""

    def rank(key: str) -> Tuple:
        a, b = key.split("/", 1)
        return (a == b, _split_rank(a), _split_rank(b))

    return {k: int(pairs[k]) for k in sorted(pairs, key=rank) if pairs[k]}


def _as_pairs(upper: np.ndarray, splits: Sequence[str]) -> Dict[str, int]:
    """Pair counts from an upper-triangular split x split matrix (``[s, t]``, s <= t, split ids in rank order)."""
    out: Dict[str, int] = {}
    for s in range(len(splits)):
        for t in range(s, len(splits)):
            if upper[s, t]:
                out[pair_key(splits[s], splits[t])] = int(round(float(upper[s, t])))
    return _ordered(out)


def _between(outer: np.ndarray) -> np.ndarray:
    """The unordered pair counts of ``sum(x ⊗ y)`` over pairs of record sets x, y: an upper-triangular matrix."""
    import numpy as np

    return np.triu(outer + outer.T, 1) + np.diag(np.diag(outer))


def _within(total: np.ndarray, squares: np.ndarray) -> np.ndarray:
    """The pairs among record sets whose split counts add up to ``total``, each of them counted with
    ``squares = sum(x ⊗ x)`` over the sets: pairs inside one set are not counted."""
    import numpy as np

    outer = np.outer(total, total) - squares
    return np.triu(outer, 1) + np.diag(np.diag(outer) / 2)


def _within_many(totals: np.ndarray, squares: np.ndarray) -> np.ndarray:
    """:func:`_within` of many sets of record sets at once: ``totals`` (m, k), ``squares`` (m, k, k)."""
    import numpy as np

    outer = totals[:, :, None] * totals[:, None, :] - squares
    k = totals.shape[1]
    upper = np.triu(np.ones((k, k), dtype=bool), 1)
    return outer * upper + outer * np.eye(k) / 2


def _one_content_pairs(counts: np.ndarray) -> np.ndarray:
    """Every pair of records of one content, from its split counts."""
    import numpy as np

    ones = np.diag(counts.astype(np.float64))
    return _within(counts.astype(np.float64), ones)


def search(table: RecordTable, max_distance: int, emit: Callable[[Group], None]) -> Duplicates:
    """Find the groups of ``table`` (see the module docstring), handing each to ``emit``; returns the totals
    (with no groups: ``emit`` keeps what it needs)."""
    import numpy as np

    splits = table.splits
    k = len(splits)
    found = Duplicates(max_distance, [], {}, {}, int(np.count_nonzero(~table.hashed)))
    n = len(table)
    if n == 0:
        return found

    # Contents: runs of equal digests.
    words = np.ascontiguousarray(table.sha256).view(">u8").reshape(n, 4)
    order = np.lexsort(words.T[::-1])
    new = np.ones(n, dtype=bool)
    for start in range(1, n, _CHUNK):  # in chunks: no second copy of every digest
        stop = min(n, start + _CHUNK)
        new[start:stop] = (words[order[start:stop]] != words[order[start - 1 : stop - 1]]).any(axis=1)
    small: Any = np.int32 if n < 2**31 else np.int64  # row and content numbers: half the memory of int64
    starts = np.flatnonzero(new).astype(small)
    ends = np.append(starts[1:], n).astype(small)
    content_of_row = np.empty(n, dtype=small)
    content_of_row[order] = np.cumsum(new, dtype=small) - 1
    del new
    first_row = order[starts]
    sizes = ends - starts

    # Distinct hashes of the contents that decoded, and which of them have another within the distance
    # (no pair kept: the pairs come again, a range of hashes at a time, while the groups are formed).
    content_value = np.full(len(starts), -1, dtype=small)
    decoded = np.flatnonzero(table.hashed[first_row])
    values, value_of = np.unique(table.dhash[first_row[decoded]], return_inverse=True)
    del first_row
    content_value[decoded] = value_of
    multiplicity = np.bincount(value_of, minlength=len(values)).astype(small)
    del decoded, value_of
    per_query = near_search.found_per_table(values, max_distance)
    near_value = (multiplicity >= 2) | (per_query > 1)

    # Only contents in some group need their first file name: the rule's order.
    in_near = (content_value >= 0) & (near_value[np.maximum(content_value, 0)] if len(values) else False)
    del near_value
    involved = np.flatnonzero((sizes >= 2) | in_near)
    if table.sha_text is None:
        # Contents are numbered in digest order, which is their sha256 text's: a stable sort by first file
        # name alone gives the (file name, sha256) order, with one string held per content instead of two.
        ordered = np.array(
            sorted(involved.tolist(), key=lambda c: _first_name(table, order[starts[c] : ends[c]])), dtype=small
        )
    else:
        ordered = np.array(
            sorted(involved.tolist(), key=lambda c: _content_key(table, order[starts[c] : ends[c]])), dtype=small
        )
    del involved

    def content(c: int, distance: int = 0) -> Content:
        rows = order[starts[c] : ends[c]]
        located = _sort_records([table.located(int(r)) for r in rows])
        return Content(located[0].sha256, located[0].dhash, located, distance)

    def split_counts(c: int) -> np.ndarray:
        return np.bincount(table.split_ids(order[starts[c] : ends[c]]), minlength=k)

    exact_total = np.zeros((k, k))
    for c in ordered.tolist():
        if sizes[c] >= 2:
            pairs = _one_content_pairs(split_counts(c))
            exact_total += pairs
            group = Group(EXACT, [content(c)], _as_pairs(pairs, splits))
            found.exact.count(group)
            emit(group)
    found.exact_pairs = _as_pairs(exact_total, splits)

    # Near groups, over the distinct hashes in some group, numbered anew in the order of their first content
    # ("ranks"); near_contents are the contents of those hashes, in order.
    near_contents = ordered[in_near[ordered]]
    del ordered, in_near
    content_hash = content_value[near_contents].astype(np.int64)
    _, first_at = np.unique(content_hash, return_index=True)
    near = content_hash[np.sort(first_at)]  # near[i]: the hash numbered i
    del first_at
    renumber = np.full(len(values), -1, dtype=np.int64)
    renumber[near] = np.arange(len(near))
    content_rank = renumber[content_hash]
    del renumber, content_hash
    # Split counts per near content (rows of other contents left out), per hash, and per hash the pairs of its
    # contents' records (records of one content are an exact group's pairs, not a near one's).
    slot = np.full(len(starts), -1, dtype=np.int64)
    slot[near_contents] = np.arange(len(near_contents))
    row_slot = slot[content_of_row]
    del slot, content_of_row
    mine = np.flatnonzero(row_slot >= 0)
    counts = np.bincount(row_slot[mine] * k + table.split_ids(mine), minlength=len(near_contents) * k).reshape(
        len(near_contents), k
    )
    del row_slot, mine
    by_rank = np.argsort(content_rank, kind="stable")  # positions in near_contents, by hash, each in order
    rank_starts = np.searchsorted(content_rank[by_rank], np.arange(len(near) + 1))
    per_value = np.zeros((len(near), k))
    for s in range(k):
        per_value[:, s] = np.bincount(content_rank, weights=counts[:, s], minlength=len(near))
    multi = np.flatnonzero(np.diff(rank_starts) > 1)  # hashes of two contents or more: pairs among them
    multi_of_rank = np.full(len(near), -1, dtype=np.int64)
    multi_of_rank[multi] = np.arange(len(multi))
    in_multi = multi_of_rank[content_rank]
    del content_rank, multi_of_rank
    mine = np.flatnonzero(in_multi >= 0)
    squares = np.zeros((len(multi), k, k))
    for s in range(k):
        for t in range(k):
            squares[:, s, t] = np.bincount(
                in_multi[mine], weights=counts[mine, s] * counts[mine, t], minlength=len(multi)
            )
    del counts, in_multi, mine
    within = _within_many(per_value[multi], squares)  # (len(multi), k, k)
    del squares

    exhausted = np.zeros(len(near), dtype=bool)
    group_of_value = np.full(len(near), -1, dtype=np.int64)
    leaders: List[int] = []
    between = np.zeros((k, k))
    group_between = np.zeros((0, k, k))
    ranked_values = values[near]
    done = 0
    for stop, first, second in near_search.later_neighbours(ranked_values, max_distance, per_query=per_query[near]):
        # Every pair whose first hash ranks below stop is here: the hashes done..stop-1 take their turns.
        by_first = np.argsort(first, kind="stable")
        later = second[by_first]
        bounds = np.searchsorted(first[by_first], np.arange(done, stop + 1))
        del by_first
        for value in range(done, stop):  # in the order of first contents
            if exhausted[value]:
                continue
            # Its earlier neighbours are in groups already: had one not been, it would have led this one.
            others = later[bounds[value - done] : bounds[value - done + 1]]
            others = others[~exhausted[others]]
            if not len(others) and multiplicity[near[value]] < 2:
                continue
            exhausted[value] = True
            exhausted[others] = True
            group_of_value[value] = group_of_value[others] = len(leaders)
            leaders.append(value)
        del later, bounds
        done = stop
        # The pairs' counts: every group a pair's first hash can be in is formed, with all its members.
        between += per_value[first].T @ per_value[second]
        group = group_of_value[first]
        same = (group >= 0) & (group == group_of_value[second])
        if len(group_between) < len(leaders):
            grown = np.zeros((max(len(leaders), 2 * len(group_between)), k, k))
            grown[: len(group_between)] = group_between
            group_between = grown
        if same.any():
            group_between[: len(leaders)] += _grouped_outer(
                group[same], per_value[first[same]], per_value[second[same]], len(leaders)
            )
        del first, second, group, same
    del ranked_values, exhausted, per_query

    found.near_pairs = _as_pairs(_between(between) + within.sum(axis=0), splits)
    group_within = np.zeros((len(leaders), k, k))
    for s in range(k):
        for t in range(k):  # a hash of two contents always is in a group
            group_within[:, s, t] = np.bincount(group_of_value[multi], weights=within[:, s, t], minlength=len(leaders))
    del within, multi
    grouped = np.flatnonzero(group_of_value >= 0)
    members_by_group = grouped[np.argsort(group_of_value[grouped], kind="stable")]
    member_starts = np.searchsorted(group_of_value[members_by_group], np.arange(len(leaders) + 1))
    del grouped, group_of_value

    for g, leader in enumerate(leaders):
        pairs = _between(group_between[g]) + group_within[g]
        members = members_by_group[member_starts[g] : member_starts[g + 1]]
        slots = np.sort(np.concatenate([by_rank[rank_starts[v] : rank_starts[v + 1]] for v in members]))
        first_hash = values[near[leader]]
        group = Group(
            NEAR,
            [content(c, int(first_hash ^ values[content_value[c]]).bit_count()) for c in near_contents[slots].tolist()],
            _as_pairs(pairs, splits),
        )
        found.near.count(group)
        emit(group)
    return found


def _content_key(table: RecordTable, rows: np.ndarray) -> Tuple[str, str]:
    """(first file name, sha256) of a content: its records in split order, then by file name, shard, index."""
    return _first_name(table, rows), table.digest_text(_first_row(table, rows))


def _first_name(table: RecordTable, rows: np.ndarray) -> str:
    return table.filename(_first_row(table, rows))


def _first_row(table: RecordTable, rows: np.ndarray) -> int:
    """The row of a content's first record: in split order, then by file name, shard, index."""
    if len(rows) == 1:
        row = int(rows[0])
    else:
        row = min(
            (int(r) for r in rows),
            key=lambda r: (
                int(table.split_of_shard[table.shard[r]]),
                table.filename(r),
                table.shard_files[table.shard[r]],
                int(table.index[r]),
            ),
        )
    return row


def _sort_records(items: List[Located]) -> List[Located]:
    rank = {s: i for i, s in enumerate(split_order({r.split for r in items}))}
    return sorted(items, key=lambda r: (rank[r.split], r.filename, r.shard, r.index))


def _grouped_outer(group: np.ndarray, left: np.ndarray, right: np.ndarray, groups: int) -> np.ndarray:
    """Per group, ``sum(left[i] ⊗ right[i])`` over the rows ``i`` of that group: (groups, k, k)."""
    import numpy as np

    k = left.shape[1] if left.ndim == 2 else 0
    out = np.zeros((groups, k, k))
    for s in range(k):
        for t in range(k):
            out[:, s, t] = np.bincount(group, weights=left[:, s] * right[:, t], minlength=groups)
    return out


def find_duplicates(items: Sequence[Located], max_distance: int) -> Duplicates:
    """Exact and near-duplicate groups of ``items`` (see the module docstring), every group kept, ranked."""
    groups: List[Group] = []
    found = search(from_located(items), max_distance, groups.append)
    found.groups = sorted(groups, key=rank_key)
    return found
