"""Where each work item goes: its split, its shard and its position in the shard, or why it has none.

The shard step places a job's work items one by one (``transforms/assign_shards.py``); a launcher
that already holds the input's whole listing places them all at once (:func:`place_all`), so that the
job starts converting without first shuffling every work item into its shard. Both go through
:func:`place`. No Beam here.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Tuple, Union

from img2tfrecord.conversion.converter import Converter
from img2tfrecord.conversion.sharding import assign_shard, shuffle_key
from img2tfrecord.model import ErrorRow, ShardItem, error_row
from img2tfrecord.sources.layout import PlacementError

ShardKey = Tuple[str, int]  # (split, shard)


def place(
    converter: Converter[Any], item: Any, num_shards: Mapping[str, int]
) -> Tuple[Optional[ShardKey], Union[ShardItem, ErrorRow]]:
    """``(key, ShardItem)`` for an item with a place; ``(None, error row)`` for one without (rejected). The
    seed of its shard and position is the converter's."""
    relpath = converter.relpath_of(item)
    try:
        split = converter.split_of(item)
    except PlacementError:
        _, row = converter(item, [])  # the converter's own rejection of it, read nothing
        return None, row
    if split not in num_shards:
        message = f"split {split!r} was not seen when the run was planned (splits: {', '.join(num_shards)})"
        return None, error_row(converter.path_of(item), relpath, "unknown_split", message)
    seed = converter.seed
    return (split, assign_shard(relpath, seed, num_shards[split])), ShardItem(shuffle_key(relpath, seed), relpath, item)


def shard_keys(num_shards: Mapping[str, int]) -> List[ShardKey]:
    """Every shard of a run, in (split, shard) order: a shard no item goes to is written too (empty)."""
    return [(split, shard) for split, n in sorted(num_shards.items()) for shard in range(n)]


def writing_order(items: Iterable[ShardItem]) -> List[ShardItem]:
    """A shard's items in the order its records are written: by seeded position, then relpath."""
    return sorted(items, key=lambda i: (i.position, i.relpath))


class Placement(NamedTuple):
    """A run's work items placed at launch: every shard's items in writing order, and the rejected ones."""

    shards: Dict[ShardKey, List[ShardItem]]
    rejected: List[ErrorRow]


def place_all(converter: Converter[Any], items: Iterable[Any], num_shards: Mapping[str, int]) -> Placement:
    """Every item of ``items`` placed (:func:`place`), grouped by shard as the job's shuffle would group them."""
    shards: Dict[ShardKey, List[ShardItem]] = {key: [] for key in shard_keys(num_shards)}
    rejected: List[ErrorRow] = []
    for item in items:
        key, value = place(converter, item, num_shards)
        if key is None:
            rejected.append(value)  # type: ignore[arg-type]
        else:
            shards[key].append(value)  # type: ignore[arg-type]
    return Placement({key: writing_order(found) for key, found in shards.items()}, rejected)
