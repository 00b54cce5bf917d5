"""``convert --append --accept-changes``: records of changed and removed inputs withdrawn, and no reader returns them.

Real conversions of real image files in this process (``api.convert``); the outputs are compared
record for record with a full conversion of the same final input.
"""

from __future__ import annotations

import json
import os
import shutil

import images as I
import pytest
from conftest import cli_env
from helpers.cli import run_in_process
from helpers.datasets import make_images
from helpers.outputs import records_by_relpath
from helpers.processes import kill_when

from img2tfrecord import api, faults, inspection
from img2tfrecord.conversion import appends
from img2tfrecord.readers import datasource, records
from img2tfrecord.schemas import dataset_json, output_files
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas.generations import CHANGED, REMOVED
from img2tfrecord.schemas.ledger import LedgerEntry
from img2tfrecord.verification.output_checks import verify

OPTIONS = dict(
    splits={"train": 0.7, "validation": 0.3}, seed=5, image_size=32, analyze=False, processes=1, num_shards=2
)
BEAM = ["--runner=FnApiRunner", "--direct_running_mode=in_memory"]
CHANGED_FILE = "class0/img_0000.jpg"
REMOVED_FILE = "class1/img_0001.jpg"
NEW_FILE = "class2/new.jpg"


def _convert(src: str, out: str, **extra) -> dataset_json.DatasetManifest:
    return api.convert(src, out, pipeline_options=BEAM, **{**OPTIONS, **extra})


def _doc(out: str) -> dataset_json.DatasetManifest:
    return records.read_manifest(out)


@pytest.fixture(scope="module")
def accepted(tmp_path_factory):
    """An output, then its input changed (one file rewritten, one removed, one added) and appended with
    --accept-changes; and a full conversion of that final input."""
    root = tmp_path_factory.mktemp("accept-changes")
    src, out, full = str(root / "in"), str(root / "out"), str(root / "full")
    make_images(src, classes=3, per_class=10, size=(48, 40))
    first = _convert(src, out)
    with open(os.path.join(src, CHANGED_FILE), "wb") as f:
        f.write(I.jpeg(30, 30))
    os.remove(os.path.join(src, REMOVED_FILE))
    with open(os.path.join(src, NEW_FILE), "wb") as f:
        f.write(I.jpeg(36, 28))
    refused = run_in_process("convert", "--input", src, "--output", out, *_flags(), "--append")
    assert refused.returncode == 2 and "pass --accept-changes to withdraw them" in refused.stderr
    appended = _convert(src, out, append=True, accept_changes=True)
    _convert(src, full)
    return src, out, full, first, appended


def _flags():
    return ("--splits", "train=0.7,validation=0.3", "--seed", "5", "--image-size", "32", "--num-shards", "2")


@pytest.mark.e2e
def test_accepted_changes_read_as_a_full_run_over_the_final_input(accepted):
    _, out, full, first, appended = accepted
    # The changed file's new image, the removed one gone, the new one in.
    assert records_by_relpath(out, with_image=True) == records_by_relpath(full, with_image=True)
    doc = _doc(out)
    withdrawn = {w.relpath: w for w in doc.generations[-1].withdrawn}
    assert {r: w.change for r, w in withdrawn.items()} == {CHANGED_FILE: CHANGED, REMOVED_FILE: REMOVED}
    assert {r: w.label for r, w in withdrawn.items()} == {CHANGED_FILE: "class0", REMOVED_FILE: "class1"}
    assert all(not w.file.startswith(tuple(f"{s}-g" for s in doc.splits)) for w in withdrawn.values())
    full_doc = _doc(full)
    for split, info in doc.splits.items():
        assert info.num_examples == full_doc.splits[split].num_examples == doc.live_records(split)
        assert {k: v for k, v in info.examples_per_class.items() if v} == {
            k: v for k, v in full_doc.splits[split].examples_per_class.items() if v
        }
    acc = doc.accounting
    assert acc is not None and acc.withdrawn == 2
    assert acc.inputs == acc.written + acc.rejected == first.accounting.inputs + 2  # the changed file and the new one
    assert doc.generations[-1].inputs == 2
    assert appended.to_json() == doc.to_json()
    assert doc.format_version == 2  # an earlier reader refuses it instead of reading stale records
    assert full_doc.format_version == 1
    report = verify(out)
    assert report.ok, report.text()
    # verify reads every record, the withdrawn ones too, and says how many of them are withdrawn.
    assert (report.records_checked, report.withdrawn_checked) == (acc.written, 2)
    assert f"{acc.written} records (2 of them withdrawn, which readers skip) in " in report.text()
    assert doc.tfds is not None and not doc.tfds.readable and "withdrawn records" in doc.tfds.reason


@pytest.mark.e2e
def test_no_reader_returns_a_withdrawn_record(accepted):
    _, out, full, _, _ = accepted
    expected = records_by_relpath(full, with_image=True)
    for split, rows in expected.items():
        source = datasource.SplitDataSource(out, split, decode=False)
        assert len(source) == len(rows)
        at_random = {source[i][keys.FILENAME].decode(): source[i][keys.IMAGE_ENCODED] for i in range(len(source))}
        assert at_random == {relpath: row[2] for relpath, row in rows.items()}
        shares = [
            e[keys.FILENAME].decode()
            for k in range(3)
            for e in datasource.iter_split(out, split, shard_index=k, num_shards=3, decode=False)
        ]
        assert sorted(shares) == sorted(rows)
    summary = inspection.summarise(out)
    for split, info in summary["splits"].items():
        assert info["num_examples"] == len(expected[split])
        assert info["images"]["records_read"] == len(expected[split])
    shards = [s for info in summary["splits"].values() for s in info["shards"]]
    assert sum(s.get("withdrawn", 0) for s in shards) == 2
    doc = _doc(out)
    sampled = {
        (name, index)
        for split in doc.splits
        for name, index, _ in inspection.sample_records(out, doc, split, limit=1000)
    }
    assert not sampled & {(w.file, w.index) for w in doc.withdrawals}
    assert len(sampled) == sum(len(rows) for rows in expected.values())
    # TFDS reads whole shards: a shard with withdrawn records is read from a copy of its live records, in its place.
    tfds = pytest.importorskip("tensorflow_datasets")
    from img2tfrecord.readers.tfds_builder import tfds_builder
    from img2tfrecord.schemas.tfds_layout import NotATfdsDatasetError

    with pytest.raises(NotATfdsDatasetError, match=r"withdrawn records.*tfds_builder\(path\)"):
        tfds.builder_from_directory(out)
    builder = tfds_builder(out)
    for split, rows in expected.items():
        in_order = [
            example["image"]["filename"].decode()
            for example in tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False))
        ]
        source = datasource.SplitDataSource(out, split, decode=False)
        assert in_order == [source[i][keys.FILENAME].decode() for i in range(len(source))]
        assert sorted(in_order) == sorted(rows)
        assert builder.info.splits[split].num_examples == len(rows)


@pytest.mark.e2e
def test_dali_inputs_index_only_the_live_records(accepted, tmp_path):
    from img2tfrecord.readers.dali_index import dali_inputs
    from img2tfrecord.readers.records import RandomAccessFile, parse_example
    from img2tfrecord.tfrecord_codec import parse_index, read_record_at

    _, out, full, _, _ = accepted
    doc = _doc(out)
    withdrawn_files = {w.file for w in doc.withdrawals}
    for split, rows in records_by_relpath(full).items():
        shards, indexes = dali_inputs(out, split, str(tmp_path / "idx"))
        found = []
        for shard, index in zip(shards, indexes):
            rewritten = os.path.basename(shard) in withdrawn_files
            assert index.startswith(str(tmp_path / "idx")) == rewritten  # the output's own index otherwise
            with open(index) as f, RandomAccessFile(shard) as data:
                for i, (offset, length) in enumerate(parse_index(f.read(), index)):
                    record = parse_example(read_record_at(data, i, offset, length), doc.spec)
                    found.append(record[keys.FILENAME].decode())
        assert sorted(found) == sorted(rows)  # what DALI reads: every live record once, none withdrawn


@pytest.mark.e2e
def test_load_skips_withdrawn_records(accepted):
    pytest.importorskip("tensorflow")
    import img2tfrecord

    _, out, full, _, _ = accepted
    for split, rows in records_by_relpath(full, with_image=True).items():
        ds = img2tfrecord.load(out, split, batch_size=None, as_dict=True, image_size=None)
        names = sorted(example[keys.FILENAME].numpy().decode() for example in ds)
        assert names == sorted(rows)
        assert int(ds.cardinality()) == len(rows)


@pytest.mark.e2e
def test_a_removed_input_added_again_is_new_and_nothing_new_changes_no_byte(accepted, tmp_path):
    src, _, _, _, _ = accepted
    copy_src, copy_out = str(tmp_path / "in"), str(tmp_path / "out")
    shutil.copytree(src, copy_src)
    _convert(copy_src, copy_out)
    # Removing one, with nothing to convert: a generation that only withdraws.
    os.remove(os.path.join(copy_src, "class2/img_0002.jpg"))
    doc = _convert(copy_src, copy_out, append=True, accept_changes=True)
    last = doc.generations[-1]
    assert (last.inputs, last.shards, [w.relpath for w in last.withdrawn]) == (0, {}, ["class2/img_0002.jpg"])
    assert verify(copy_out).ok
    # The removed file back: new again, converted into the next generation.
    with open(os.path.join(copy_src, REMOVED_FILE), "wb") as f:
        f.write(I.jpeg(40, 30))
    doc = _convert(copy_src, copy_out, append=True)
    assert doc.generations[-1].inputs == 1
    full = str(tmp_path / "full")
    _convert(copy_src, full)
    assert records_by_relpath(copy_out, with_image=True) == records_by_relpath(full, with_image=True)
    before = {name: os.stat(os.path.join(copy_out, name)).st_mtime_ns for name in os.listdir(copy_out)}
    again = run_in_process(
        "convert", "--input", copy_src, "--output", copy_out, *_flags(), "--append", "--accept-changes"
    )
    assert again.returncode == 0 and "nothing new since generation" in again.stderr
    assert {name: os.stat(os.path.join(copy_out, name)).st_mtime_ns for name in os.listdir(copy_out)} == before


@pytest.mark.e2e
def test_an_accepting_append_killed_while_committing_is_finished_by_resume(accepted, tmp_path):
    src, _, full, _, _ = accepted
    first_src, copy_out = str(tmp_path / "in"), str(tmp_path / "out")
    shutil.copytree(src, first_src)
    os.remove(os.path.join(first_src, NEW_FILE))  # the changes of the fixture, made again
    _convert(first_src, copy_out)
    shutil.copy(os.path.join(src, NEW_FILE), os.path.join(first_src, NEW_FILE))
    os.remove(os.path.join(first_src, "class0", "img_0005.jpg"))
    with open(os.path.join(first_src, "class2", "img_0004.jpg"), "wb") as f:
        f.write(I.jpeg(26, 30))
    before = open(os.path.join(copy_out, output_files.MANIFEST_FILE)).read()
    marker = str(tmp_path / "paused")
    env = cli_env({faults.ENV: "pause:committing", faults.MARKER_ENV: marker})
    command = ("convert", "--input", first_src, "--output", copy_out, *_flags(), "--append", "--accept-changes")
    assert kill_when(command, lambda: os.path.exists(marker), "paused at committing", env=env) < 0
    report = verify(copy_out)  # the previous generation, whole: nothing withdrawn yet
    assert report.ok, report.text()
    assert _manifest_text(copy_out) == before
    resumed = _convert(first_src, copy_out, append=True, accept_changes=True, resume=True)
    assert sorted(w.relpath for w in resumed.generations[-1].withdrawn) == [
        "class0/img_0005.jpg",
        "class2/img_0004.jpg",
    ]
    reference = str(tmp_path / "full")
    _convert(first_src, reference)
    assert records_by_relpath(copy_out, with_image=True) == records_by_relpath(reference, with_image=True)
    assert verify(copy_out).ok


def _manifest_text(out: str) -> str:
    with open(os.path.join(out, output_files.MANIFEST_FILE), encoding="utf-8") as f:
        return f.read()


@pytest.mark.e2e
def test_verify_finds_a_withdrawal_that_names_another_record(accepted, tmp_path):
    _, out, _, _, _ = accepted
    copy = str(tmp_path / "out")
    shutil.copytree(out, copy)
    path = os.path.join(copy, output_files.MANIFEST_FILE)
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    withdrawal = doc["generations"][-1]["withdrawn"][0]
    withdrawal["index"] = (withdrawal["index"] + 1) % next(
        s["num_records"] for s in doc["splits"][withdrawal["split"]]["shards"] if s["file"] == withdrawal["file"]
    )
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    report = verify(copy)
    assert not report.ok
    assert f"dataset.json withdrew {withdrawal['relpath']!r}" in report.text()


def test_accept_changes_applies_to_append():
    proc = run_in_process("convert", "--input", "in", "--output", "out", "--accept-changes")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].endswith("--accept-changes applies to --append")


def test_locate_places_records_by_the_shard_writers_order():
    seed, shards = 3, {"train": 2}
    ledger = tuple(LedgerEntry(f"c/{i}.jpg", 1, 1.0) for i in range(12))
    generations = [
        appends.GenerationInputs(0, ledger, {"c/5.jpg": "corrupt"}, frozenset(), shards),
        appends.GenerationInputs(1, (LedgerEntry("c/7.jpg", 2, 2.0),), {}, frozenset({"c/7.jpg"}), {"train": 1}),
    ]
    found = appends.locate({"c/3.jpg": REMOVED, "c/7.jpg": CHANGED}, generations, lambda r: "train", seed)
    by = {w.relpath: w for w in found}
    assert by["c/7.jpg"].file == output_files.shard_file_name("train", 0, 1, generation=1) and by["c/7.jpg"].index == 0
    from img2tfrecord.conversion.seeded_hashes import assign_shard, shuffle_key

    shard = assign_shard("c/3.jpg", seed, 2)
    mates = sorted(
        (e.relpath for e in ledger if e.relpath != "c/5.jpg" and assign_shard(e.relpath, seed, 2) == shard),
        key=lambda r: (shuffle_key(r, seed), r),
    )
    assert by["c/3.jpg"].file == output_files.shard_file_name("train", shard, 2)
    assert by["c/3.jpg"].index == mates.index("c/3.jpg")
    with pytest.raises(ValueError, match="no generation holds a record of c/5.jpg"):
        appends.locate({"c/5.jpg": REMOVED}, generations, lambda r: "train", seed)


def test_a_shard_maps_each_live_index_to_its_record_past_the_withdrawn_ones():
    from img2tfrecord.readers.split_shards import ShardInfo

    for withdrawn in (frozenset(), frozenset({0}), frozenset({2, 5}), frozenset({3, 4, 5}), frozenset({7})):
        shard = ShardInfo("s.tfrecord", 8, None, None, "s.idx", withdrawn)
        live = [i for i in range(8) if i not in withdrawn]
        assert [shard.physical(k) for k in range(shard.live_records)] == live


@pytest.mark.e2e
def test_report_counts_live_records_and_names_the_withdrawn_ones(accepted, tmp_path):
    _, out, full, _, _ = accepted
    html = str(tmp_path / "report.html")
    proc = run_in_process("report", out, "--output", html, "--processes", "1")
    assert proc.returncode == 0, proc.stderr
    with open(str(tmp_path / "report.json"), encoding="utf-8") as f:
        facts = json.load(f)
    expected = records_by_relpath(full)
    assert facts["read"]["records"] == sum(len(rows) for rows in expected.values())
    assert {split: info["num_examples"] for split, info in facts["splits"].items()} == {
        split: len(rows) for split, rows in expected.items()
    }
    assert sum(row["withdrawn"] for row in facts["shards"]) == 2
    with open(html, encoding="utf-8") as f:
        page = f.read()
    assert sum(page.count(f"(+{n} withdrawn)") * n for n in (1, 2)) == 2  # in the shard table
