"""Work items placed at launch (conversion/placement.py, pipeline/write_placed_items.py,
transforms/read_placed_shards.py): the same shards, bytes and rejections as work items placed and shuffled in
the job."""

from __future__ import annotations

import os

import apache_beam as beam
import images as I
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to
from helpers.datasets import write_tree

from img2tfrecord.conversion import placed_items
from img2tfrecord.conversion.converter import ImageConverter
from img2tfrecord.conversion.placement import place_all, shard_keys
from img2tfrecord.images.options import ImageOptions
from img2tfrecord.model import ERRORS, WorkItem
from img2tfrecord.pipeline.write_placed_items import place_listing
from img2tfrecord.schemas import output_files
from img2tfrecord.transforms.assign_shards import AssignShardsFn
from img2tfrecord.transforms.beam_tfrecord_sink import ShardSinks
from img2tfrecord.transforms.write_shards import WriteShards

LABELS = ["cat", "dog"]
SPLITS = (("train", 0.6), ("test", 0.4))
NUM_SHARDS = {"train": 3, "test": 2}
SEED = 5
OPTIONS = ImageOptions(size=(16, 16), format="jpeg")


def _items(root) -> list:
    files = {f"{c}/img_{i:02d}.jpg": I.jpeg(20 + i, 14 + i) for c in LABELS for i in range(9)}
    files["cat/broken.jpg"] = I.jpeg(20, 20)[:40]  # truncated: rejected while converting
    files["stray.jpg"] = I.jpeg(20, 20)  # in no class folder: rejected while placing
    write_tree(str(root), files)
    return [WorkItem(os.path.join(str(root), *rel.split("/")), rel, len(data)) for rel, data in sorted(files.items())]


def _converter() -> ImageConverter:
    return ImageConverter(OPTIONS, "class", SPLITS, SEED)


def test_place_all_puts_each_item_where_the_jobs_assignment_does(tmp_path):
    items = _items(tmp_path)
    placement = place_all(_converter(), items, NUM_SHARDS)
    assert placement.keys == shard_keys(NUM_SHARDS)  # every shard, an empty one too
    in_job, rejected = {}, []
    for item in items:
        for out in AssignShardsFn(_converter()).process(item, NUM_SHARDS):
            if isinstance(out, beam.pvalue.TaggedOutput):
                rejected.append(out.value)
            else:
                in_job.setdefault(out[0], []).append(out[1])
    for key, placed in placement.shards():
        assert placed == sorted(in_job.get(key, []), key=lambda i: (i.position, i.relpath)), key
    assert placement.rejected == rejected and [r["relpath"] for r in rejected] == ["stray.jpg"]
    placed, _ = place_listing(placement, [], str(tmp_path / "run"), spread=False)
    assert placed.num_inputs == len(items)


def test_placed_items_read_back_by_block_and_a_damaged_block_is_a_value_error(tmp_path):
    placement = place_all(_converter(), _items(tmp_path), NUM_SHARDS)
    data, blocks = placed_items.encode(dict(placement.shards()))
    assert [(b.split, b.shard) for b in blocks] == placement.keys
    for block in blocks:
        part = data[block.offset : block.offset + block.length]
        assert placed_items.decode(part, block) == placement.items_of((block.split, block.shard))
    block = blocks[0]
    with pytest.raises(ValueError, match="damaged"):
        placed_items.decode(b"\0" + data[block.offset + 1 : block.offset + block.length], block)
    with pytest.raises(ValueError, match="expected"):
        placed_items.decode(data[blocks[1].offset : blocks[1].offset + blocks[1].length], block._replace(num_items=99))


def _write(out: str, items, placed_at_launch: bool):
    """WriteShards over ``items``, placed in the job or at launch, its error rows checked; -> the shard bytes."""
    run = os.path.join(out, output_files.run_folder("0123456789abcdef"))
    sinks = ShardSinks(out, "none", os.path.join(run, output_files.RUN_SHARDS_DIR))
    converter = _converter()
    placed = None
    if placed_at_launch:
        placed, data = place_listing(place_all(converter, items, NUM_SHARDS), [], run, spread=False)
        data.copy_to(placed.path)
    options = PipelineOptions(["--runner=FnApiRunner", "--direct_running_mode=in_memory"])
    placement = place_all(converter, items, NUM_SHARDS)
    converted = (converter(i.item, LABELS) for _, found in placement.shards() for i in found)
    rejected = placement.rejected + [row for tag, row in converted if tag == ERRORS]
    assert sorted(r["relpath"] for r in rejected) == ["cat/broken.jpg", "stray.jpg"]
    with beam.Pipeline(options=options) as p:
        labels = beam.pvalue.AsSingleton(p | "Labels" >> beam.Create([LABELS]))
        start = p if placed_at_launch else p | "Items" >> beam.Create(items)
        written = start | WriteShards(converter, sinks, run, 1, labels, NUM_SHARDS, placed=placed)
        assert_that(written[ERRORS], equal_to(rejected), label="Rejected")
        assert_that(
            written["shards"] | beam.Map(lambda s: s.split), equal_to(["test"] * 2 + ["train"] * 3), label="Splits"
        )
    shards = {}
    for name in sorted(os.listdir(out)):
        if output_files.parse_shard_file_name(name):
            with open(os.path.join(out, name), "rb") as f:
                shards[name] = f.read()
    return shards


def test_shards_placed_at_launch_are_the_bytes_of_shards_placed_in_the_job(tmp_path):
    items = _items(tmp_path / "in")
    in_job = _write(str(tmp_path / "job"), items, placed_at_launch=False)
    at_launch = _write(str(tmp_path / "launch"), items, placed_at_launch=True)
    assert len(in_job) == sum(NUM_SHARDS.values()) and any(in_job.values())
    assert at_launch == in_job
