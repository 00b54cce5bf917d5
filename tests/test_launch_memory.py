"""The launch's memory flat in the number of inputs: the listing held compactly (pipeline/file_table.py), the
ledger and the placed items streamed (schemas/ledger.py, conversion/placed_items.py), an append's comparison
a merge of sorted ledgers (conversion/appends.py); each gives what the whole-in-memory forms gave."""

from __future__ import annotations

import gzip
import json
import os
import random
import tracemalloc

from img2tfrecord import api
from img2tfrecord.conversion import appends, placed_items
from img2tfrecord.conversion.placement import Placement
from img2tfrecord.model import ShardItem, WorkItem
from img2tfrecord.pipeline.file_table import FileTable
from img2tfrecord.pipeline.launch import launch, place
from img2tfrecord.pipeline.write_placed_items import place_listing
from img2tfrecord.schemas.ledger import LedgerEntry, LedgerFile, iter_ledger, ledger_bytes, ledger_chunks


def _empty_files(root: str, count: int, classes: int = 100) -> None:
    for i in range(count):
        folder = os.path.join(root, f"class_{i % classes:03d}")
        os.makedirs(folder, exist_ok=True)
        open(os.path.join(folder, f"image_{i:06d}.jpg"), "wb").close()


def _launched(root: str, out: str):
    launched = launch(api.config_of(root, out, dict(format="keep", analyze=False)))
    return launched, place(launched)


def test_a_launch_holds_well_under_100_bytes_per_input(tmp_path):
    """10,000 inputs: what the launch holds once it has placed them, and its peak on the way (the work items,
    ledger entries and placement as Python objects took about 700 and 1,000 bytes per input)."""
    count = 10_000
    small, large = str(tmp_path / "small"), str(tmp_path / "large")
    _empty_files(small, 200)
    _empty_files(large, count)
    warm, warm_placement = _launched(small, str(tmp_path / "out"))  # the modules a launch imports, imported first
    place_listing(warm_placement, warm.listing.items.rejected, str(tmp_path / "run"), spread=False)
    tracemalloc.start()
    try:
        launched, placement = _launched(large, str(tmp_path / "out"))
        held, peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        placed_shards, data = place_listing(placement, [], str(tmp_path / "run"), spread=False)
        _, writing = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(launched.listing.entries) == count and placed_shards.num_inputs == count
    assert held / count < 100 and peak / count < 200, (held / count, peak / count)
    assert writing - held < 2**21, writing - held  # one batch of a shard's items at a time, not the shard
    data.close()


def test_a_file_table_sorts_folders_alone_and_merges_only_those_that_interleave():
    rows = [
        ("/in/b/2.jpg", 2, 2.0),
        ("/in/b/1.jpg", 1, 1.0),
        ("/in/a.jpg", 3, 3.0),  # a file beside folders: "a.jpg" < "a/x.jpg" < "a0/y.jpg"
        ("/in/a0/y.jpg", 4, 4.0),
        ("/in/a/x.jpg", 5, 5.0),
        ("/in/a/z\0.jpg", 6, 6.0),  # a remote name may hold the separator the table joins names with
    ]
    table = FileTable.of_rows(rows)
    assert list(table) == rows and table[3] == rows[3] and table[-1] == rows[-1] and table[1:3] == rows[1:3]
    in_order = table.sorted_by(lambda path: path[len("/in/") :])
    assert list(in_order) == sorted(rows, key=lambda row: row[0][len("/in/") :])
    assert [in_order[i] for i in range(len(in_order))] == list(in_order)
    kept = table.filtered(lambda path: "/b/" not in path)
    assert list(kept) == [row for row in rows if "/b/" not in row[0]]
    assert table.filtered(lambda path: True) is table


def test_ledger_chunks_are_the_bytes_of_the_whole_ledger_and_read_back_in_batches():
    rng = random.Random(3)
    entries = sorted(
        LedgerEntry(f"n{i % 97:05d}/img_{i:07d}.jpg", rng.randrange(10**6), 1.7e9 + rng.random()) for i in range(60_000)
    )
    data = b"".join(ledger_chunks(entries))
    lines = "".join(
        json.dumps({"relpath": e.relpath, "size": e.size, "mtime": e.mtime}) + "\n" for e in entries
    ).encode("ascii")
    assert data == gzip.compress(lines, compresslevel=6, mtime=0) == ledger_bytes(reversed(entries))
    assert list(iter_ledger(data, "x")) == entries == list(LedgerFile(data, "x"))


def _generation(number, entries, rejected=None, withdrawn=()):
    data = b"".join(ledger_chunks(sorted(entries)))
    return appends.GenerationInputs(number, LedgerFile(data, f"g{number}"), rejected or {}, frozenset(withdrawn))


def test_an_append_over_many_inputs_compares_as_the_whole_in_memory_comparison_did():
    """Many recorded inputs over generations that reject, retry and withdraw: the merge of the sorted ledgers
    gives the outcomes and the changes the dictionaries of every input gave."""
    rng = random.Random(7)
    names = [f"c{i % 50:02d}/{i:06d}.jpg" for i in range(30_000)]
    entry = {name: LedgerEntry(name, rng.randrange(1, 9), 1.0) for name in names}
    first = [entry[n] for n in names[:20_000]]
    rejected = {n: rng.choice(["corrupt", "not_found"]) for n in rng.sample(names[:20_000], 300)}
    second = [entry[n] for n in rng.sample(sorted(rejected), 100)] + [entry[n] for n in names[20_000:25_000]]
    withdrawn = rng.sample(names[:20_000], 50)
    third = [entry[n]._replace(size=99) for n in withdrawn[:20]]  # converted again after a change
    generations = [
        _generation(0, first, rejected),
        _generation(1, second, {n: "decode_timeout" for n in names[24_000:24_010]}),
        _generation(2, third, withdrawn=withdrawn),
    ]
    recorded = appends.outcomes(generations)
    assert list(appends.recorded_in_order(generations)) == [found for _, found in sorted(recorded.items())]
    listing = [entry[n]._replace(mtime=2.0) if i % 997 == 0 else entry[n] for i, n in enumerate(names)]
    listing = sorted(e for i, e in enumerate(listing) if i % 1013)  # some removed
    for retry in (False, True):
        streamed = appends.compare_in_order(listing, appends.recorded_in_order(generations), retry)
        assert streamed == appends.compare(listing, recorded, retry)
    assert streamed.new and streamed.changed and streamed.removed and streamed.retried and streamed.unchanged


def test_placed_items_are_written_a_batch_at_a_time_and_read_back_whole(tmp_path):
    items = [WorkItem(f"/in/{i}.jpg", f"{i}.jpg", i) for i in range(3000)]
    shards = {("train", 0): [ShardItem(i % 700, item.relpath, item) for i, item in enumerate(items)]}
    placement = Placement.of_shards(shards)
    ordered = placement.items_of(("train", 0))
    assert ordered == sorted(shards[("train", 0)], key=lambda s: (s.position, s.relpath))  # equal positions too
    data, (block,) = placed_items.encode({("train", 0): ordered})
    assert placed_items.decode(data, block) == ordered and block.num_items == 3000
