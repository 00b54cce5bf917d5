"""A run's work items placed at launch (folders, manifests, detection annotations, clips; not archives).

They are made from the listing the launcher already holds (its ledger) and grouped by shard before
Beam is imported (``launch.placed``, ``conversion/placement.py``); the launcher writes the bytes, one
shard at a time, to a local file it copies into the run's staging folder, where each shard's writer
reads its own block (``transforms/read_placed_shards.py``). The job then starts converting at once instead
of first discovering and shuffling every work item.
"""

from __future__ import annotations

from typing import List, Sequence, Tuple

from apache_beam.io.filesystems import FileSystems

from img2tfrecord.conversion import placed_items
from img2tfrecord.conversion.placement import Placement
from img2tfrecord.model import ErrorRow
from img2tfrecord.pipeline.staged_files import LaunchFile
from img2tfrecord.schemas import output_files
from img2tfrecord.transforms.read_placed_shards import PlacedShards


def place_listing(
    placement: Placement, rejected: Sequence[ErrorRow], run_dir: str, spread: bool
) -> Tuple[PlacedShards, LaunchFile]:
    """``(what the graph reads, the file written locally)`` for the work items of a listing placed in their
    shards (``launch.placed``: images, or clips with ``--sequence``) and the rows the listing ``rejected``;
    ``spread``: the runner spreads the shards over workers (not a local runner). The run copies the file to
    the staging folder once it holds the output (``LaunchFile.copy_to``)."""
    data = LaunchFile()
    blocks = data.write(lambda out: placed_items.write_blocks(out, placement.streams()))
    all_rejected: List[ErrorRow] = [*rejected, *placement.rejected]
    placed = PlacedShards(
        path=FileSystems.join(run_dir, output_files.RUN_PLACED_FILE),
        blocks=tuple(blocks),
        rejected=tuple(all_rejected),
        spread=spread,
    )
    return placed, data
