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
landed in different groups. Groups are listed with the groups that cross
splits first, then the larger ones.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from img2tfrecord.report import perceptual_hash

EXACT = "exact"
NEAR = "near"
_SPLIT_RANK = {"train": 0, "validation": 1, "test": 2}


@dataclasses.dataclass(frozen=True)
class Located:
    """One record and where it is."""

    split: str
    shard: str
    index: int
    offset: int
    filename: str
    class_name: str
    sha256: str
    dhash: Optional[int]


@dataclasses.dataclass
class Content:
    """One distinct stored image: its records, and its hash distance to the group's first content."""

    sha256: str
    dhash: Optional[int]
    records: List[Located]
    distance: int = 0


@dataclasses.dataclass
class Group:
    kind: str  # EXACT or NEAR
    contents: List[Content]
    pairs: Dict[str, int]  # split pair -> duplicate pairs of records

    @property
    def records(self) -> List[Located]:
        return [r for c in self.contents for r in c.records]

    @property
    def splits(self) -> List[str]:
        return split_order({r.split for r in self.records})

    @property
    def classes(self) -> List[str]:
        return sorted({r.class_name for r in self.records})

    @property
    def crosses_splits(self) -> bool:
        return len(self.splits) > 1

    @property
    def largest_distance(self) -> int:
        """The largest hash distance of a content to the group's first one (0 for an exact group)."""
        return max(c.distance for c in self.contents)


@dataclasses.dataclass
class Duplicates:
    max_distance: int
    groups: List[Group]  # exact and near, crossing groups first
    exact_pairs: Dict[str, int]
    near_pairs: Dict[str, int]
    unhashed: int  # records whose image did not decode: in exact groups only


def _split_rank(split: str) -> Tuple[int, str]:
    return (_SPLIT_RANK.get(split, len(_SPLIT_RANK)), split)


def split_order(splits: Iterable[str]) -> List[str]:
    """train, validation, test, then any other split names alphabetically."""
    return sorted(set(splits), key=_split_rank)


def pair_key(a: str, b: str) -> str:
    first, second = split_order([a, b]) if a != b else (a, b)
    return f"{first}/{second}"


def is_cross_split(key: str) -> bool:
    first, second = key.split("/", 1)
    return first != second


def _split_counts(items: Sequence[Located]) -> collections.Counter:
    return collections.Counter(r.split for r in items)


def _pairs_within(counts: Mapping[str, int], into: Dict[str, int]) -> None:
    names = split_order(counts)
    for i, a in enumerate(names):
        if counts[a] > 1:
            into[pair_key(a, a)] = into.get(pair_key(a, a), 0) + counts[a] * (counts[a] - 1) // 2
        for b in names[i + 1 :]:
            into[pair_key(a, b)] = into.get(pair_key(a, b), 0) + counts[a] * counts[b]


def _pairs_between(left: Mapping[str, int], right: Mapping[str, int], into: Dict[str, int]) -> None:
    for a, m in left.items():
        for b, n in right.items():
            into[pair_key(a, b)] = into.get(pair_key(a, b), 0) + m * n


def _ordered(pairs: Dict[str, int]) -> Dict[str, int]:
    """Cross-split keys first, each side in split order; zero counts left out."""

    def rank(key: str) -> Tuple:
        a, b = key.split("/", 1)
        return (a == b, _split_rank(a), _split_rank(b))

    return {k: pairs[k] for k in sorted(pairs, key=rank) if pairs[k]}


def _sort_records(items: List[Located]) -> List[Located]:
    rank = {s: i for i, s in enumerate(split_order({r.split for r in items}))}
    return sorted(items, key=lambda r: (rank[r.split], r.filename, r.shard, r.index))


def near_groups(count: int, near: Sequence[perceptual_hash.NearPair]) -> Dict[int, int]:
    """Position -> the position leading its group, for the positions ``0..count-1`` that are in a near group.

    Every member is a near pair of its leader (see the module docstring): the
    first position not yet grouped that has near pairs among the positions not
    yet grouped leads itself and them. Positions left out are in no group.
    """
    neighbours: Dict[int, List[int]] = collections.defaultdict(list)
    for pair in near:
        neighbours[pair.first].append(pair.second)
        neighbours[pair.second].append(pair.first)
    leader_of: Dict[int, int] = {}
    for i in range(count):
        if i in leader_of:
            continue
        others = sorted(j for j in neighbours.get(i, ()) if j not in leader_of)
        if others:
            for j in [i, *others]:
                leader_of[j] = i
    return leader_of


def find_duplicates(items: Sequence[Located], max_distance: int) -> Duplicates:
    """Exact and near-duplicate groups of ``items`` (see the module docstring)."""
    by_sha: Dict[str, List[Located]] = collections.defaultdict(list)
    for item in items:
        by_sha[item.sha256].append(item)
    contents = [Content(sha, recs[0].dhash, _sort_records(recs)) for sha, recs in by_sha.items()]
    contents.sort(key=lambda c: (c.records[0].filename, c.sha256))

    groups: List[Group] = []
    exact_pairs: Dict[str, int] = {}
    for content in contents:
        if len(content.records) > 1:
            pairs: Dict[str, int] = {}
            _pairs_within(_split_counts(content.records), pairs)
            _pairs_within(_split_counts(content.records), exact_pairs)
            groups.append(Group(EXACT, [Content(content.sha256, content.dhash, content.records)], _ordered(pairs)))

    hashed = [c for c in contents if c.dhash is not None]
    dhashes = [c.dhash for c in contents if c.dhash is not None]  # hashed's, in the same order
    near = perceptual_hash.near_pairs(dhashes, max_distance)
    leader_of = near_groups(len(hashed), near)
    members: Dict[int, List[int]] = collections.defaultdict(list)
    for i in sorted(leader_of):
        members[leader_of[i]].append(i)
    group_pairs: Dict[int, Dict[str, int]] = collections.defaultdict(dict)
    near_pairs: Dict[str, int] = {}
    for pair in near:
        left, right = _split_counts(hashed[pair.first].records), _split_counts(hashed[pair.second].records)
        _pairs_between(left, right, near_pairs)
        leader = leader_of.get(pair.first)
        if leader is not None and leader == leader_of.get(pair.second):
            _pairs_between(left, right, group_pairs[leader])
    for leader, group in members.items():
        first = dhashes[leader]
        group_contents = [
            Content(hashed[i].sha256, hashed[i].dhash, hashed[i].records, perceptual_hash.hamming(first, dhashes[i]))
            for i in group
        ]
        groups.append(Group(NEAR, group_contents, _ordered(group_pairs[leader])))

    groups.sort(key=lambda g: (not g.crosses_splits, g.kind != EXACT, -len(g.records), g.records[0].filename))
    return Duplicates(
        max_distance=max_distance,
        groups=groups,
        exact_pairs=_ordered(exact_pairs),
        near_pairs=_ordered(near_pairs),
        unhashed=sum(len(c.records) for c in contents if c.dhash is None),
    )
