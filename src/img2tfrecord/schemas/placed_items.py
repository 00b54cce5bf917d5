"""A run's placed work items (``.tmp-run-*/placed-items.bin``, ``manifest.RUN_PLACED_FILE``).

The launcher of a folder run groups the work items by shard (``conversion/placement.py``) and writes
each shard's items, in writing order, as one block: a zlib-compressed pickle of its ``ShardItem``
list as plain tuples (a named tuple pickles several times slower); a ``--sequence`` clip is a row
of four, its frames' tuples last. The job reads each shard's block
by its offset (:class:`Block`). The file is private to one run, written and read by the same
img2tfrecord in the same Python, and removed with the run's staging folder: it is not part of an
output. Nothing here does I/O.
"""

from __future__ import annotations

import pickle
import zlib
from typing import List, Mapping, NamedTuple, Sequence, Tuple

from img2tfrecord.model import Clip, ShardItem, WorkItem


class Block(NamedTuple):
    """Where one shard's items are in the file."""

    split: str
    shard: int
    offset: int
    length: int
    num_items: int  # its work items


def encode(shards: Mapping[Tuple[str, int], Sequence[ShardItem]]) -> Tuple[bytes, List[Block]]:
    """The file's bytes and its blocks, one per shard, in the order of ``shards`` (items of ``WorkItem``s
    or ``Clip``s)."""
    parts: List[bytes] = []
    blocks: List[Block] = []
    offset = 0
    for (split, shard), items in shards.items():
        rows = [_row(i) for i in items]
        data = zlib.compress(pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL), 1)
        blocks.append(Block(split, shard, offset, len(data), len(items)))
        parts.append(data)
        offset += len(data)
    return b"".join(parts), blocks


def decode(data: bytes, block: Block) -> List[ShardItem]:
    """One block's items from its bytes; ValueError when they are not the block's ``num_items`` items."""
    try:
        rows = pickle.loads(zlib.decompress(data))
    except (zlib.error, pickle.UnpicklingError, EOFError) as e:
        raise ValueError(f"placed items of shard {block.split}/{block.shard} are damaged: {e}") from None
    if not isinstance(rows, list) or len(rows) != block.num_items:
        raise ValueError(f"placed items of shard {block.split}/{block.shard}: expected {block.num_items} items")
    return [ShardItem(row[0], row[1], _item(row)) for row in rows]


def _row(found: ShardItem) -> tuple:
    item = found.item
    if isinstance(item, Clip):
        return found.position, found.relpath, (item.relpath, item.is_clip), tuple(tuple(f) for f in item.frames)
    return found.position, found.relpath, tuple(item)


def _item(row: tuple):
    if len(row) == 4:
        (relpath, is_clip), frames = row[2], row[3]
        return Clip(relpath, is_clip, tuple(WorkItem(*fields) for fields in frames))
    return WorkItem(*row[2])
