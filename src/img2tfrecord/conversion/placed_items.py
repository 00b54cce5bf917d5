"""A run's placed work items (``.tmp-run-*/placed-items.bin``, ``output_files.RUN_PLACED_FILE``).

The launcher of a folder run groups the work items by shard (``conversion/placement.py``) and writes
each shard's items, in writing order, as one block: zlib-compressed pickles of lists of its
``ShardItem``s as plain tuples (a named tuple pickles several times slower), a thousand per list
so that a shard is never held whole as rows; a ``--sequence`` clip is a row of four, its frames'
tuples last. The job reads each shard's block by its offset (:class:`Block`). The file is private to
one run, written and read by the same img2tfrecord in the same Python, and removed with the run's
staging folder: it is not part of an output. Nothing here opens a file: the caller gives the stream
the blocks are written to.
"""

from __future__ import annotations

import io
import pickle
import zlib
from typing import BinaryIO, Iterable, List, Mapping, NamedTuple, Sequence, Tuple

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
    out = io.BytesIO()
    blocks = write_blocks(out, shards.items())
    return out.getvalue(), blocks


def write_blocks(out: BinaryIO, shards: Iterable[Tuple[Tuple[str, int], Iterable[ShardItem]]]) -> List[Block]:
    """Write the file's bytes to ``out``, one shard's block at a time and each block a batch of rows at a
    time (the blocks of ``shards``, in their order); -> the blocks."""
    blocks: List[Block] = []
    offset = 0
    for (split, shard), items in shards:
        compressor = zlib.compressobj(1)
        length = count = 0
        batch: List[tuple] = []
        for item in items:
            batch.append(_row(item))
            count += 1
            if len(batch) == _BATCH:
                length += _write(out, compressor.compress(pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)))
                batch = []
        if batch or not count:
            length += _write(out, compressor.compress(pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)))
        length += _write(out, compressor.flush())
        blocks.append(Block(split, shard, offset, length, count))
        offset += length
    return blocks


_BATCH = 1024  # rows pickled at once


def _write(out: BinaryIO, data: bytes) -> int:
    out.write(data)
    return len(data)


def decode(data: bytes, block: Block) -> List[ShardItem]:
    """One block's items from its bytes; ValueError when they are not the block's ``num_items`` items."""
    rows: List[tuple] = []
    try:
        raw = zlib.decompress(data)
        stream = io.BytesIO(raw)
        while stream.tell() < len(raw):
            batch = pickle.load(stream)
            if not isinstance(batch, list):
                raise pickle.UnpicklingError("not a batch of rows")
            rows.extend(batch)
    except (zlib.error, pickle.UnpicklingError, EOFError) as e:
        raise ValueError(f"placed items of shard {block.split}/{block.shard} are damaged: {e}") from None
    if len(rows) != block.num_items:
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
