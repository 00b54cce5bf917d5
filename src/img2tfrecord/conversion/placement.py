"""Where each work item goes: its split, its shard and its position in the shard, or why it has none.

The shard step places a job's work items one by one (``transforms/assign_shards.py``); a launcher
that already holds the input's whole listing places them all at once (:func:`place_all`), so that the
job starts converting without first shuffling every work item into its shard. Both go through
:func:`place`. No Beam here.
"""

from __future__ import annotations

from array import array
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from img2tfrecord.conversion.converter import Converter
from img2tfrecord.conversion.seeded_hashes import assign_shard, shuffle_key
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


class Placement:
    """A run's work items placed at launch: every shard's items and the rejected ones.

    Held as arrays, each shard's indices into the placed sequence (``array("I")``) and every item's position
    (``array("Q")``), not as ``ShardItem`` objects: a listing of a million files is not held twice. A shard's
    ``ShardItem``s are made as they are read (``shard_item`` of an index)."""

    def __init__(
        self,
        members: Dict[ShardKey, array],
        positions: array,
        shard_item: Callable[[int], ShardItem],
        rejected: List[ErrorRow],
    ):
        self._members, self._positions, self._shard_item = members, positions, shard_item
        self.rejected = rejected

    @classmethod
    def of_shards(cls, shards: Mapping[ShardKey, Sequence[ShardItem]], rejected: Sequence[ErrorRow] = ()) -> Placement:
        """A placement of ``shards`` given whole."""
        found = [item for items in shards.values() for item in items]
        members, start = {}, 0
        for key, items in shards.items():
            members[key] = array("I", range(start, start + len(items)))
            start += len(items)
        return cls(members, array("Q", (item.position for item in found)), found.__getitem__, list(rejected))

    @property
    def keys(self) -> List[ShardKey]:
        """Every shard, in (split, shard) order (:func:`shard_keys`)."""
        return list(self._members)

    def count(self, key: ShardKey) -> int:
        """How many work items shard ``key`` holds."""
        return len(self._members[key])

    def iter_items(self, key: ShardKey) -> Iterator[ShardItem]:
        """Shard ``key``'s items in writing order (:func:`writing_order`: by position, then relpath), made as
        they are read."""
        import numpy as np  # sorts a shard's positions in arrays, not one Python object per item

        members = self._members[key]
        if not members:
            return iter(())
        indices = np.frombuffer(members, dtype=np.uint32)
        positions = np.frombuffer(self._positions, dtype=np.uint64)[indices]
        by_position = np.argsort(positions, kind="stable")  # stable: equal positions keep the listing's order
        order = indices[by_position]
        in_order = positions[by_position]
        for start in np.flatnonzero(in_order[1:] == in_order[:-1]).tolist():  # a hash collision: by relpath
            end = start + 2
            while end < len(order) and in_order[end] == in_order[start]:
                end += 1
            run = sorted(order[start:end].tolist(), key=lambda i: self._shard_item(i).relpath)
            order[start:end] = run
        return map(self._shard_item, map(int, order))

    def items_of(self, key: ShardKey) -> List[ShardItem]:
        """Shard ``key``'s items in writing order, as a list."""
        return list(self.iter_items(key))

    def shards(self) -> Iterator[Tuple[ShardKey, List[ShardItem]]]:
        """``(key, its items in writing order)`` of every shard, one shard made at a time."""
        for key in self._members:
            yield key, self.items_of(key)

    def streams(self) -> Iterator[Tuple[ShardKey, Iterator[ShardItem]]]:
        """``(key, its items in writing order, made as they are read)`` of every shard."""
        for key in self._members:
            yield key, self.iter_items(key)


def place_all(converter: Converter[Any], items: Sequence[Any], num_shards: Mapping[str, int]) -> Placement:
    """Every item of ``items`` placed (:func:`place`), grouped by shard as the job's shuffle would group them."""
    members: Dict[ShardKey, array] = {key: array("I") for key in shard_keys(num_shards)}
    positions = array("Q")
    rejected: List[ErrorRow] = []
    for index, item in enumerate(items):
        key, value = place(converter, item, num_shards)
        if key is None:
            rejected.append(value)  # type: ignore[arg-type]
            positions.append(0)
        else:
            members[key].append(index)
            positions.append(value.position)  # type: ignore[union-attr]
    relpath_of = converter.relpath_of

    def shard_item(index: int) -> ShardItem:
        item = items[index]
        return ShardItem(positions[index], relpath_of(item), item)

    return Placement(members, positions, shard_item, rejected)
