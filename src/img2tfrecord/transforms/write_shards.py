"""The shard step's graph: group work items by shard, stream each shard's records into its file, commit the files.

    work items -> AssignShards: ((split, shard), ShardItem)     seeded hashes of the relpath
               -> GroupByKey                                     the shuffle: small tuples only
    (or, placed at launch: ReadPlacedShards, one block per shard  no shuffle: transforms/read_placed_shards.py)
               -> WriteShard: one shard file per group           convert in the seeded order, write as converted
               -> CommitSplit: one rename per split              temp files renamed to their final names

Every shard is written through its split's ``ShardSink``
(``beam_tfrecord_sink.py``: Beam's file sink, temp files in the run's
folder). A shard that no item hashes to is still written (empty), so the
count of writer results is the split's shard count. Each finished shard
leaves a done file (``done_files.py``), so a ``--resume``d run replays
finished shards instead of converting them again. Encoded images never
cross a shuffle: they go from the converter straight into the file (tar.gz
members, which cannot be seeked to, carry their bytes in the work item).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Union

import apache_beam as beam

from img2tfrecord.conversion.converter import Converter
from img2tfrecord.model import ERRORS
from img2tfrecord.transforms.assign_shards import AssignShardsFn, every_shard
from img2tfrecord.transforms.beam_tfrecord_sink import ShardSinks
from img2tfrecord.transforms.commit_split import CommitSplitFn, split_key
from img2tfrecord.transforms.launch_values import launch_value
from img2tfrecord.transforms.read_placed_shards import PlacedShards, ReadPlacedShards
from img2tfrecord.transforms.shard_writer import ANALYSIS, WriteFaults, WriteShardsFn


def _placeholders(unused_start: Any, num_shards: Dict[str, int]) -> List[Tuple[Tuple[str, int], None]]:
    return every_shard(num_shards)


class WriteShards(beam.PTransform):
    """Work items -> ``{"shards": CommittedShard, "errors": error rows, "analysis": analysis rows}``.

    ``sinks`` says where the splits are written; ``num_shards`` is each split's shard count, a dict
    or the side input of a one-element PCollection of it (counts computed in the graph);
    ``label_names`` is the side input of the sorted class list; ``faults`` is a test's fault plan
    (``img2tfrecord.faults``), None in a run. ``placed``: the work items were placed at launch; the
    transform is then applied to the pipeline's start, not to work items.
    """

    def __init__(
        self,
        converter: Converter[Any],
        sinks: ShardSinks,
        run_dir: str,
        processes: int,
        label_names,
        num_shards: Union[Dict[str, int], beam.pvalue.AsSideInput],
        batch_size: int = 32,
        resume: bool = False,
        faults: Optional[WriteFaults] = None,
        placed: Optional[PlacedShards] = None,
    ):
        super().__init__()
        self._converter = converter
        self._sinks = sinks
        self._run_dir = run_dir
        self._processes = processes
        self._label_names = label_names
        self._num_shards = num_shards
        self._batch_size = batch_size
        self._resume = resume
        self._faults = faults
        self._placed = placed

    def expand(self, items):
        num_shards = self._num_shards
        if isinstance(num_shards, dict):
            counts = launch_value(items.pipeline, "ShardCounts", dict(num_shards))
            num_shards = beam.pvalue.AsSingleton(counts)
        if self._placed is not None:
            found = items.pipeline | "PlacedShards" >> ReadPlacedShards(self._placed)
            grouped, rejected = found["shards"], found[ERRORS]
        else:
            placed = items | "AssignShards" >> beam.ParDo(
                AssignShardsFn(self._converter), num_shards=num_shards
            ).with_output_types(Tuple[Tuple[str, int], Any]).with_outputs(ERRORS, main="placed")
            every = launch_value(items.pipeline, "Start", None) | "EveryShard" >> beam.FlatMap(
                _placeholders, num_shards=num_shards
            ).with_output_types(Tuple[Tuple[str, int], Any])
            grouped = (placed.placed, every) | "WithEveryShard" >> beam.Flatten() | "GroupByShard" >> beam.GroupByKey()
            rejected = placed[ERRORS]
        # The main output's type is declared, not inferred: Beam's inference reads the bytecode of ``process``.
        written = grouped | "WriteShard" >> (
            beam.ParDo(
                WriteShardsFn(
                    self._converter,
                    self._sinks,
                    self._run_dir,
                    self._processes,
                    self._batch_size,
                    self._resume,
                    self._faults,
                ),
                label_names=self._label_names,
                num_shards=num_shards,
            )
            .with_output_types(Any)
            .with_outputs(ERRORS, ANALYSIS, main="results")
        )
        committed = (
            written.results
            | "KeyBySplit" >> beam.Map(split_key)
            | "GroupBySplit" >> beam.GroupByKey()
            | "CommitSplit" >> beam.ParDo(CommitSplitFn(self._sinks, self._faults), num_shards=num_shards)
        )
        errors = (rejected, written[ERRORS]) | "ShardErrors" >> beam.Flatten()
        return {"shards": committed, ERRORS: errors, ANALYSIS: written[ANALYSIS]}
