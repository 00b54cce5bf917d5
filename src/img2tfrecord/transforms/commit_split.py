"""The commit of a split: its written shards and their indexes moved to their final names, sizes checked."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from img2tfrecord.model import CommittedShard, ShardResult
from img2tfrecord.schemas import output_files
from img2tfrecord.transforms import done_files
from img2tfrecord.transforms.beam_tfrecord_sink import ShardSinks
from img2tfrecord.transforms.shard_writer import NO_FAULTS, WriteFaults


def split_key(result: ShardResult) -> Tuple[str, ShardResult]:
    return result.split, result


def _make_folder(folder: str) -> None:
    """Make ``folder`` where a filesystem has folders (made meanwhile by another worker is fine)."""
    if not FileSystems.exists(folder):
        try:
            FileSystems.mkdirs(folder)
        except OSError:
            pass


def _rename_into(src: str, dst: str) -> None:
    _make_folder(dst.rsplit("/", 1)[0])
    FileSystems.rename([src], [dst])


class CommitSplitFn(beam.DoFn):
    """``(split, [ShardResult])`` -> the split's CommittedShards, under their final names.

    Index files move first, then the sink renames the shards (a resumed
    commit skips those already renamed), then each final file's size is
    checked against what its writer counted. ``num_shards`` (a side input)
    is each split's shard count; ``faults`` is a test's fault plan, a run has none.
    """

    def __init__(self, sinks: ShardSinks, faults: Optional[WriteFaults] = None):
        self._sinks = sinks
        self._faults = faults or NO_FAULTS

    def process(self, element, num_shards: Dict[str, int]):
        split, results = element
        sink = self._sinks.sink(split, num_shards[split])
        by_shard: Dict[int, ShardResult] = {}
        for r in results:
            by_shard.setdefault(r.shard, r)  # a retried shard step writes the same bytes
        if sorted(by_shard) != list(range(sink.shard_count)):
            missing = sorted(set(range(sink.shard_count)) - set(by_shard))
            raise RuntimeError(f"split {split}: no result for shard(s) {missing[:10]} of {sink.shard_count}")
        ordered = [by_shard[i] for i in range(sink.shard_count)]
        committed = []
        for r in ordered:
            index = None
            if r.index_path:
                index = output_files.index_file(sink.final_name(r.shard))
                final_index = FileSystems.join(sink.output_dir, index)
                if FileSystems.exists(r.index_path):
                    damage = done_files.index_damage(r.index_path, r)
                    if damage is not None:
                        raise OSError(f"{r.index_path}: {damage} (changed in the staging folder)")
                    if FileSystems.exists(final_index):
                        FileSystems.delete([final_index])
                    _rename_into(r.index_path, final_index)
                elif not FileSystems.exists(final_index):
                    raise OSError(f"the index of {sink.final_name(r.shard)} is missing: {r.index_path}")
            committed.append(
                CommittedShard(
                    split,
                    sink.final_name(r.shard),
                    r.num_records,
                    r.num_bytes,
                    r.sha256,
                    index,
                    r.class_counts,
                    r.box_counts,
                    r.dropped_boxes,
                )
            )
        # Existing final files are kept: a resumed commit needs them, and the launcher has
        # already refused or cleared stale shards.
        _make_folder(sink.output_dir)
        sink.commit([r.temp_path for r in ordered])
        self._faults.split_committed()
        wrong = done_files.wrong_size(sink.output_dir, committed)
        if wrong is not None:
            shard, path, size = wrong
            raise OSError(f"{path}: {size} bytes after the commit, but its writer wrote {shard.num_bytes}")
        yield from committed
