"""Deterministic split, shard and in-shard order of work items.

All three are seeded hashes of an image's path relative to the input root, so a
file's split, its shard and its place in the shard never depend on which other
files exist: adding images never moves old ones between splits, and the same
seed and input always give the same bytes in every shard.
"""

from __future__ import annotations

import hashlib
from typing import Any, Dict, List, Sequence, Tuple

from img2tfrecord.schemas.output_files import SPLIT_NAME_RE
from img2tfrecord.sources.split_folders import split_of_folder

DEFAULT_SPLIT = "train"
_TOLERANCE = 1e-6

Splits = Tuple[Tuple[str, float], ...]


def parse_splits(text: str) -> Splits:
    """``"train=0.8,validation=0.1,test=0.1"`` -> ``(("train", 0.8), ...)``; ValueError if malformed
    (:func:`splits_of`)."""
    pairs: List[Tuple[str, Any]] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"expected NAME=FRACTION, got {part!r}")
        pairs.append((name, value))
    return splits_of(pairs)


def splits_of(pairs: Sequence[Tuple[Any, Any]]) -> Splits:
    """``[("train", 0.8), ("val", "0.2")]`` -> ``(("train", 0.8), ("validation", 0.2))``: each name a split
    name, each fraction a number in (0, 1], no split twice, the fractions summing to 1; ValueError if not.

    A name is read as a split folder's is (:func:`split_of_folder`): ``val`` is ``validation``.
    """
    splits: List[Tuple[str, float]] = []
    spelled: Dict[str, str] = {}  # split -> the name it was given as
    for name, value in pairs:
        if not isinstance(name, str) or not SPLIT_NAME_RE.match(name):
            raise ValueError(f"split name {name!r} may only use letters, digits and '_'")
        try:
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise ValueError(value)
            fraction = float(value)
        except ValueError:
            raise ValueError(f"fraction of split {name!r} is not a number: {value!r}") from None
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"fraction of split {name!r} must be in (0, 1], got {value}")
        given, name = name, split_of_folder(name) or name  # "val" names validation, as a split folder does
        if name in spelled:
            also = f" (as {spelled[name]!r} and {given!r})" if spelled[name] != given else ""
            raise ValueError(f"split {name!r} is given twice{also}")
        spelled[name] = given
        splits.append((name, fraction))
    if not splits:
        raise ValueError("no splits given")
    total = sum(f for _, f in splits)
    if abs(total - 1.0) > _TOLERANCE:
        raise ValueError(f"split fractions must sum to 1, they sum to {total:g}")
    return tuple(splits)


def _unit_hash(tag: str, seed: int, relpath: str) -> int:
    # surrogateescape: a local name that is not UTF-8 hashes by its bytes (it is rejected later, not lost)
    digest = hashlib.sha256(f"{tag}\0{seed}\0{relpath}".encode("utf-8", "surrogateescape")).digest()
    return int.from_bytes(digest[:8], "big")


def assign_split(relpath: str, seed: int, splits: Splits) -> str:
    """The split of one file: where a seeded hash of its relative path falls in the fractions."""
    if len(splits) == 1:
        return splits[0][0]
    u = _unit_hash("split", seed, relpath) / 2.0**64
    cumulative = 0.0
    for name, fraction in splits:
        cumulative += fraction
        if u < cumulative:
            return name
    return splits[-1][0]


def shuffle_key(relpath: str, seed: int) -> int:
    """A seeded 64-bit key: a record's position inside its shard."""
    return _unit_hash("shuffle", seed, relpath)


def assign_shard(relpath: str, seed: int, num_shards: int) -> int:
    """The shard of one work item within its split, from a seeded hash independent of the split's."""
    if num_shards < 1:
        raise ValueError(f"num_shards must be at least 1, got {num_shards}")
    return _unit_hash("shard", seed, relpath) % num_shards
