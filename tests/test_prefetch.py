"""The first shards converted ahead while a run starts (conversion/pool.py ``prefetch``, pipeline/fast_start.py
``prefetch_first_shards``): the same outputs in the same order as converted when put, whatever is put."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import time

import images as I
import pytest
from crashing import CountingConverter, CrashingConverter
from helpers.datasets import write_tree

from img2tfrecord.conversion import pool as pool_module
from img2tfrecord.conversion.converter import ImageConverter
from img2tfrecord.conversion.placement import Placement
from img2tfrecord.conversion.pool import CRASH_MESSAGE, ConversionPool, close_started, start_early
from img2tfrecord.images.options import ImageOptions
from img2tfrecord.model import ShardItem, WorkItem
from img2tfrecord.pipeline import fast_start, launch
from img2tfrecord.pipeline.kinds.detection import Detection
from img2tfrecord.pipeline.kinds.folder import Folder
from img2tfrecord.pipeline.kinds.ledger import ListedItems

SPLITS = (("train", 1.0),)
LABELS = ["cat", "dog"]
OPTIONS = ImageOptions(size=(16, 16), format="jpeg")
SEED = 3


def _converter(cls=ImageConverter, **kwargs):
    return cls(OPTIONS, "class", SPLITS, SEED, **kwargs)


def _items(root, n, crash=()):
    files = {
        f"{LABELS[i % 2]}/img_{i:03d}{'_crash' if i in crash else ''}.jpg": I.jpeg(20 + i % 7, 14) for i in range(n)
    }
    files["cat/broken.jpg"] = I.jpeg(20, 20)[:40]  # an error row, converted ahead as any other output
    write_tree(str(root), files)
    return [WorkItem(os.path.join(str(root), *rel.split("/")), rel, len(data)) for rel, data in sorted(files.items())]


def _read(pool, shards, labels=LABELS):
    """``shards`` put one by one as the shard writer puts them, read as it reads them; -> (item, output) pairs."""
    got = []
    for shard in shards:
        pool.put(shard, labels)
        got.extend(pool.outputs(drain=False))
    got.extend(pool.outputs(drain=True))
    return got


def _wait(futures, seconds=60):
    deadline = time.monotonic() + seconds
    while not all(f.done() for f in futures) and time.monotonic() < deadline:
        time.sleep(0.02)


def test_prefetched_outputs_equal_converted_ones_item_for_item_and_are_not_converted_again(tmp_path):
    items = _items(tmp_path / "in", 40)
    log = str(tmp_path / "converted.log")
    converter = _converter(CountingConverter, log_path=log)
    shards = [items[:17], items[17:30], items[30:]]
    with ConversionPool(converter, 2, batch_size=4) as pool:
        pool.prefetch([shards[0], shards[1][:6]], list(LABELS))  # the second shard cut by the budget
        assert pool.prefetched == 23 and pool.pending == 0
        got = _read(pool, shards)
        assert pool.prefetched == 0
    assert [item for item, _ in got] == items
    plain = _converter()
    assert [out for _, out in got] == [plain(i, LABELS) for i in items]
    with open(log) as f:
        converted = f.read().split()
    assert sorted(converted) == sorted(i.relpath for i in items)  # each item once: the puts took what was ahead


@pytest.mark.parametrize("settled", [True, False], ids=["converted-ahead", "still-converting"])
def test_a_put_that_matches_a_later_shard_or_none_keeps_queue_order(tmp_path, settled):
    """Items put before a shard taken from ahead come out before it; a put that matches nothing cancels
    what has not started (converted again when put), and a later put takes what is left."""
    items = _items(tmp_path / "in", 60)
    a, b, c, d = items[:20], items[20:35], items[35:50], items[50:]
    log = str(tmp_path / "converted.log")
    converter = _converter(CountingConverter, log_path=log)
    with ConversionPool(converter, 2, batch_size=4) as pool:
        pool.prefetch([a, b], LABELS)
        if settled:
            _wait(_prefetched_futures(pool))
        pool.put(d[:3], LABELS)  # less than a batch, matching nothing: comes out before what is put next
        got = list(pool.outputs(drain=False))
        got.extend(_read(pool, [b, c, a, d[3:]]))  # b is the second shard ahead, c none, a taken last
        assert pool.prefetched == 0
    order = d[:3] + b + c + a + d[3:]
    plain = _converter()
    assert [item for item, _ in got] == order
    assert [out for _, out in got] == [plain(i, LABELS) for i in order]
    if settled:
        with open(log) as f:
            assert sorted(f.read().split()) == sorted(i.relpath for i in items)  # nothing converted twice


def _prefetched_futures(pool):
    return [batch.future for ahead in pool._prefetched for batch in ahead.batches]


def test_a_put_with_other_classes_is_converted_with_them_not_taken_from_ahead(tmp_path):
    items = _items(tmp_path / "in", 12)
    other = ["ant", "cat", "dog"]  # another class list: other class ids
    plain = _converter()
    with ConversionPool(plain, 2, batch_size=4) as pool:
        pool.prefetch([items], LABELS)
        got = _read(pool, [items], labels=other)
    assert [out for _, out in got] == [plain(i, other) for i in items]
    assert [out for _, out in got] != [plain(i, LABELS) for i in items]


def _expected(converter, item):
    if "crash" in item.relpath:
        return converter.crashed(item, CRASH_MESSAGE)
    return _converter()(item, LABELS)


def test_a_prefetched_batch_whose_worker_died_is_converted_again_one_item_at_a_time(tmp_path):
    items = _items(tmp_path / "in", 20, crash={4})  # in the first batch converted ahead
    converter = _converter(CrashingConverter)
    with ConversionPool(converter, 2, batch_size=4) as pool:
        pool.prefetch([items[:12]], LABELS)
        _wait(_prefetched_futures(pool))  # the pool broke while the run was starting
        got = _read(pool, [items[:12], items[12:]])
    assert [item for item, _ in got] == items
    assert [out for _, out in got] == [_expected(converter, i) for i in items]


class _Recorder:
    """A pool's ``prefetch`` as ``prefetch_first_shards`` calls it."""

    def __init__(self):
        self.calls = []

    def prefetch(self, shards, labels):
        self.calls.append((shards, labels))


def _launched(sizes_per_shard, labels=("a", "b"), config=None, kind=Folder()):
    """``(launch, its placement, the placement's shards)``."""
    shards = {
        ("train", n): [ShardItem(i, f"{n}/{i}", WorkItem(f"/in/{n}/{i}", f"{n}/{i}", size)) for i, size in enumerate(s)]
        for n, s in enumerate(sizes_per_shard)
    }
    listing = launch.Listing(
        ledger=None, entries=(), items=ListedItems(), labels=list(labels) if labels is not None else None
    )
    launched = launch.Launch(config=config or _config(), kind=kind, plan=None, converter=None, listing=listing)
    return launched, Placement.of_shards(shards), shards


@pytest.mark.parametrize(
    "sizes, expected",
    [
        ([[1] * 300, [], [1] * 900, [1] * 50], [300, 724]),  # items: the empty shard skipped, the third one cut
        ([[20 * 2**20] * 2, [20 * 2**20] * 3], [2, 1]),  # bytes: 3 x 20 MiB fit in 64 MiB, a fourth does not
        ([[70 * 2**20]], []),  # one item over the budget: nothing ahead
    ],
)
def test_the_launch_converts_ahead_the_first_shards_in_placement_order_within_its_bounds(sizes, expected):
    launched, placement, shards = _launched(sizes)
    pool = _Recorder()
    count = fast_start.prefetch_first_shards(launched, placement, pool)
    ((given, labels),) = pool.calls
    assert [len(s) for s in given] == expected and count == sum(expected)
    assert labels == ["a", "b"]  # the launch's classes, as the shard writer gets them
    non_empty = [found for found in shards.values() if found]
    assert all(s == [i.item for i in found][: len(s)] for s, found in zip(given, non_empty))  # prefixes, in order
    assert count <= fast_start.PREFETCH_ITEMS and sum(i.size for s in given for i in s) <= fast_start.PREFETCH_BYTES


def _config(**changes):
    from img2tfrecord.pipeline.config import ConvertConfig

    fields = dict(input="/in", output="/out", image=OPTIONS, splits=None, seed=SEED, shard_size_mb=100)
    fields.update(num_shards=None, analyze=False)
    fields.update(changes)
    return ConvertConfig(**fields)


def test_the_launch_converts_nothing_ahead_where_the_writer_may_not_put_the_same_items():
    def prefetch(launched, placement, unused_shards):
        return fast_start.prefetch_first_shards(launched, placement, pool)

    pool = _Recorder()
    assert prefetch(*_launched([[1] * 10], config=_config(resume=True))) == 0  # finished shards are replayed
    assert prefetch(*_launched([[1]], labels=None)) == 0  # classes unknown
    analysed = _launched([[1]], config=_config(analyze=True))
    assert prefetch(*analysed) == 0  # TensorFlow is imported meanwhile
    assert not pool.calls
    boxes = _launched([[1] * 2], config=_config(analyze=True), kind=Detection())  # detection: no analysis
    assert prefetch(*boxes) == 2
    pool.calls.clear()
    appended = _launched([[1] * 3], labels=("zebra", "ant"))  # the output's class order, kept by the append
    assert prefetch(*appended) == 3
    assert pool.calls[0][1] == ["zebra", "ant"]


def test_a_prefetching_pool_nobody_takes_is_closed_without_waiting_for_its_work(tmp_path):
    items = _items(tmp_path / "in", 300)
    before = set(multiprocessing.active_children())
    pool = start_early(_converter(), 2, 4)
    pool.prefetch([items], LABELS)
    started = time.monotonic()
    close_started()
    assert time.monotonic() - started < 30
    assert not pool_module._STARTED and pool not in pool_module._OPEN
    assert not set(multiprocessing.active_children()) - before


def _shard_digests(out):
    from img2tfrecord.schemas import output_files

    found = {}
    for name in sorted(os.listdir(out)):
        if output_files.parse_shard_file_name(name):
            with open(os.path.join(out, name), "rb") as f:
                found[name] = hashlib.sha256(f.read()).hexdigest()
    return found


@pytest.mark.e2e
def test_a_local_run_takes_the_shards_converted_ahead_and_writes_the_same_bytes(tmp_path, monkeypatch):
    from img2tfrecord import api

    src = str(tmp_path / "in")
    write_tree(src, {f"c{i % 3}/{i:03d}.jpg": I.jpeg(30 + i % 5, 20) for i in range(90)})
    placements, taken = [], []
    real_place, real_take = launch.place_all, ConversionPool._take_prefetched

    def take(self, *args):
        found = real_take(self, *args)
        taken.extend(found.items if found else [])
        return found

    monkeypatch.setattr(launch, "place_all", lambda *a: placements.append(1) or real_place(*a))
    monkeypatch.setattr(ConversionPool, "_take_prefetched", take)
    options = dict(processes=2, analyze=False, image_size=16, num_shards=3, seed=3)
    monkeypatch.setattr(fast_start, "PREFETCH_ITEMS", 40)  # the first shard and part of the second
    api.run_config(api.config_of(src, str(tmp_path / "ahead"), options), own_process=True)
    assert placements == [1]  # placed once, at launch
    assert len(taken) == 40  # the writer took every item converted ahead
    api.convert(src, str(tmp_path / "plain"), **options)  # a library caller's run: nothing converted ahead
    assert len(taken) == 40
    assert _shard_digests(str(tmp_path / "ahead")) == _shard_digests(str(tmp_path / "plain"))
    assert len(_shard_digests(str(tmp_path / "plain"))) == 3
    assert not pool_module._STARTED and not pool_module._OPEN
