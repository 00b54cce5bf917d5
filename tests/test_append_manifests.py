"""``convert --append`` over CSV/JSONL manifests: new rows become a generation, changed rows are refused
or withdrawn, and the history holds what one run over the final manifest writes."""

from __future__ import annotations

import json
import os
import shutil

import images as I
import pytest
from conftest import convert, shard_digests
from gcs_emulator import gcs_fixture, upload_tree  # noqa: F401 - the gcs fixture
from helpers.outputs import append_refusal, records_by_relpath

from img2tfrecord import api
from img2tfrecord.conversion import appends
from img2tfrecord.errors import UsageError
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas.ledger import LedgerEntry, ledger_bytes, parse_ledger, row_text
from img2tfrecord.verification.output_checks import verify

OPTIONS = dict(splits={"train": 0.7, "validation": 0.3}, seed=5, image_size=32, analyze=False, processes=1)
BEAM = ["--runner=FnApiRunner", "--direct_running_mode=in_memory"]
LABELS = ("cat", "dog", "owl")


def _convert(src: str, out: str, **extra):
    return api.convert(src, out, pipeline_options=BEAM, **{**OPTIONS, **extra})


def _write_rows(path: str, rows) -> None:
    with open(path, "w", encoding="utf-8") as f:
        if path.endswith(".csv"):
            columns = [c for c in ("path", "label", "split") if c in rows[0]]
            f.write(",".join(columns) + "\n")
            for row in rows:
                f.write(",".join(row.get(c, "") for c in columns) + "\n")
        else:
            for row in rows:
                f.write((json.dumps(row) if isinstance(row, dict) else row) + "\n")


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """24 photos in ``img/`` (one truncated, named by no row yet) and their rows, three labels."""
    root = str(tmp_path_factory.mktemp("manifest-pool"))
    os.makedirs(os.path.join(root, "img", "more"))
    rows = []
    for i in range(24):
        relpath = f"img/{'more/' if i % 4 == 0 else ''}{i:02d}.jpg"
        with open(os.path.join(root, relpath), "wb") as f:
            f.write(I.jpeg(40 + i, 30, I.noise(4, 3, seed=i).resize((40 + i, 30))))
        rows.append({"path": relpath, "label": LABELS[i % 3]})
    with open(os.path.join(root, "img", "broken.jpg"), "wb") as f:
        f.write(I.truncated_jpeg())
    return root, rows


def _equals_a_full_run(listing: str, out: str, tmp_path):
    """Assert that ``out`` holds, split for split, the records of one run over ``listing`` now, and verifies;
    -> that run's manifest."""
    full = str(tmp_path / "full")
    doc = _convert(listing, full)
    assert records_by_relpath(out) == records_by_relpath(full)
    report = verify(out)
    assert report.ok, report.text()
    return doc


def _copy(pool_root: str, dst: str) -> str:
    shutil.copytree(pool_root, dst)
    return dst


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_appended_rows_give_the_records_of_one_run_over_the_final_manifest(pool, tmp_path, kind):
    root, rows = pool
    src = _copy(root, str(tmp_path / "in"))
    listing = os.path.join(src, f"labels.{kind}")
    bad = [{"path": "img/broken.jpg", "label": "cat"}, {"path": "img/missing.jpg", "label": "dog"}]
    _write_rows(listing, rows[:10] + bad[:1])
    out = str(tmp_path / "out")
    first = _convert(listing, out)
    assert first.accounting.inputs == 11 and first.accounting.rejected_by_reason == {"truncated": 1}
    # The nightly export grew: new rows, one naming an image not there yet.
    _write_rows(listing, rows[:17] + bad)
    second = _convert(listing, out, append=True)
    g = second.generations[-1]
    assert (g.number, g.inputs, g.written, g.rejected) == (1, 8, 7, 1)
    # The missing image is not tried again while it is still missing: nothing new, no byte changed.
    before = {name: os.path.getmtime(os.path.join(out, name)) for name in os.listdir(out)}
    proc = convert(
        listing, out, "--append", "--splits", "train=0.7,validation=0.3", "--seed", "5", "--image-size", "32"
    )
    assert proc.returncode == 0 and "nothing new since generation 1" in proc.stderr, proc.stderr[-2000:]
    assert {name: os.path.getmtime(os.path.join(out, name)) for name in os.listdir(out)} == before
    # It appears with the rest of the rows: the next generation converts it.
    shutil.copy(os.path.join(src, rows[0]["path"]), os.path.join(src, "img", "missing.jpg"))
    _write_rows(listing, rows + bad)
    third = _convert(listing, out, append=True)
    assert (third.generations[-1].inputs, third.generations[-1].written) == (8, 8)
    assert _equals_a_full_run(listing, out, tmp_path).labels == third.labels == LABELS
    # Each generation counts what it tried (the image missing in generation 1 is a rejection there); the
    # output counts each input once, by its latest outcome: the missing image is written, not rejected.
    assert (third.generations[1].rejected, third.generations[-1].retried) == (1, {"not_found": 1})
    acc = third.accounting
    assert (acc.inputs, acc.written) == (len(rows) + 2, len(rows) + 1) and acc.inputs == acc.written + acc.rejected
    assert acc.rejected_by_reason == {"truncated": 1}


@pytest.mark.e2e
def test_relabelled_and_removed_rows_are_refused_then_withdrawn_with_accept_changes(pool, tmp_path):
    root, rows = pool
    src = _copy(root, str(tmp_path / "in"))
    listing = os.path.join(src, "labels.csv")
    _write_rows(listing, rows)
    out = str(tmp_path / "out")
    _convert(listing, out)
    edited = [dict(r) for r in rows if r["path"] != "img/05.jpg"]
    edited[2]["label"] = "dog" if edited[2]["label"] != "dog" else "cat"
    _write_rows(listing, edited)
    line = append_refusal(lambda: _convert(listing, out, append=True))
    assert f"1 input(s) changed since they were converted (e.g. {edited[2]['path']})" in line
    assert "1 converted input(s) removed (e.g. img/05.jpg)" in line and "--accept-changes" in line
    doc = _convert(listing, out, append=True, accept_changes=True)
    assert sorted(w.relpath for w in doc.generations[-1].withdrawn) == sorted(["img/05.jpg", edited[2]["path"]])
    _equals_a_full_run(listing, out, tmp_path)


@pytest.mark.e2e
def test_new_labels_new_splits_and_repeated_rows_are_refused_with_one_line(pool, tmp_path):
    root, rows = pool
    src = _copy(root, str(tmp_path / "in"))
    listing = os.path.join(src, "labels.csv")
    with_split = [dict(r, split="train" if i % 3 else "test") for i, r in enumerate(rows)]
    _write_rows(listing, with_split[:12])
    out = str(tmp_path / "out")
    options = dict(OPTIONS, splits=None)
    api.convert(listing, out, pipeline_options=BEAM, **options)
    base = with_split[:12] + [dict(with_split[12], label="zebra")]
    _write_rows(listing, base)
    with pytest.raises(UsageError, match=r"1 new label\(s\) \('zebra'\).*--allow-new-classes"):
        api.convert(listing, out, pipeline_options=BEAM, append=True, **options)
    doc = api.convert(listing, out, pipeline_options=BEAM, append=True, allow_new_classes=True, **options)
    assert doc.labels == LABELS + ("zebra",)
    _write_rows(listing, base + [dict(with_split[13], split="validation")])
    with pytest.raises(UsageError, match=r"names split\(s\) validation the output does not have"):
        api.convert(listing, out, pipeline_options=BEAM, append=True, **options)
    _write_rows(listing, base + [with_split[13], with_split[0]])
    with pytest.raises(
        UsageError,
        match=r"1 image\(s\) are named more than once, by two manifest rows or annotations \(e.g. img/more/00.jpg\)",
    ):
        api.convert(listing, out, pipeline_options=BEAM, append=True, **options)
    # --plan says the same before anything runs, and what the append would convert.
    _write_rows(listing, base + with_split[13:15])
    plan = api.plan(listing, out, append=True, pipeline_options=BEAM, **options)
    assert plan.append is not None and (plan.append.generation, plan.append.new, plan.append.unchanged) == (2, 2, 13)
    assert plan.inputs == 2 and plan.append.refused is None


@pytest.mark.e2e
def test_a_manifest_append_on_cloud_storage_writes_the_bytes_of_a_local_one(gcs, pool, tmp_path):
    """Rows naming images on gs:// are stamped from one listing per folder; the history matches local's."""
    from img2tfrecord import storage

    root, rows = pool
    local = _copy(root, str(tmp_path / "in"))
    remote = gcs.url("manifest-append", "in")
    upload_tree(local, remote)
    outputs = {}
    for where, base in (("local", local), ("remote", remote)):
        listing = f"{base}/labels.csv"  # relative paths: the relpaths, and so the shards, of both are the same
        staged = str(tmp_path / f"{where}.csv")
        for count in (15, len(rows)):
            _write_rows(staged, rows[:count])
            storage.write_bytes(listing, open(staged, "rb").read())
            out = str(tmp_path / f"out-{where}")
            outputs[where] = (out, _convert(listing, out, append=True))
    (local_out, local_doc), (remote_out, remote_doc) = outputs["local"], outputs["remote"]
    assert [g.inputs for g in remote_doc.generations] == [g.inputs for g in local_doc.generations] == [15, 9]
    assert shard_digests(remote_out) == shard_digests(local_out)
    with open(os.path.join(remote_out, output_files.ledger_file(1)), "rb") as f:
        assert all(e.size > 0 and e.mtime > 0 for e in parse_ledger(f.read(), "ledger"))


def test_a_manifest_rows_entry_keeps_its_label_and_split_and_reads_back():
    entries = [
        LedgerEntry("img/a.jpg", 10, 1.5, row_text("cat", None)),
        LedgerEntry("img/b.jpg", 11, 2.5, row_text("é\tx", "train")),
        LedgerEntry("/data/labels.csv:7", -1, 0.0, row_text("cat", None)),
        LedgerEntry("class0/c.jpg", 12, 3.0),  # a folder's file: no row
    ]
    data = ledger_bytes(entries)
    assert parse_ledger(data, "ledger") == sorted(entries)
    assert ledger_bytes(parse_ledger(data, "ledger")) == data
    assert entries[1].placement() == ("é\tx", "train") and entries[3].placement() == (None, None)
    relabelled = entries[0]._replace(row=row_text("dog", None))
    assert entries[0].changed(relabelled) and not entries[0].changed(entries[0]._replace())


def test_a_row_whose_image_is_missing_then_and_now_is_not_tried_again():
    missing = LedgerEntry("img/x.jpg", -1, 0.0, row_text("cat", None))
    recorded = {missing.relpath: (missing, "not_found")}
    assert appends.compare([missing], recorded).unchanged == 1
    assert appends.compare([missing], recorded, retry_rejected=True).retried == (missing,)
    arrived = missing._replace(size=120, mtime=9.0)
    assert appends.compare([arrived], recorded).retried == (arrived,)
    # A folder's file rejected as not found but listed again is tried again, as before.
    listed = LedgerEntry("c/y.jpg", 5, 1.0)
    assert appends.compare([listed], {listed.relpath: (listed, "not_found")}).retried == (listed,)


def test_the_ledger_of_a_manifest_run_is_written_with_its_generation(pool, tmp_path):
    root, rows = pool
    src = _copy(root, str(tmp_path / "in"))
    listing = os.path.join(src, "labels.jsonl")
    _write_rows(listing, rows[:3] + ["not json", {"label": "cat"}])
    out = str(tmp_path / "out")
    doc = _convert(listing, out)
    assert [g.number for g in doc.generations] == [0]
    with open(os.path.join(out, output_files.ledger_file(0)), "rb") as f:
        entries = parse_ledger(f.read(), "ledger")
    keys = [e.relpath for e in entries]
    assert keys == sorted([f"{listing}:4", f"{listing}:5", *(r["path"] for r in rows[:3])])
    by_key = {e.relpath: e for e in entries}
    assert by_key[rows[1]["path"]].size == os.path.getsize(os.path.join(src, rows[1]["path"]))
    assert by_key[rows[1]["path"]].placement() == (rows[1]["label"], None)
    assert doc.accounting.inputs == 5 == doc.accounting.written + doc.accounting.rejected


@pytest.mark.e2e
def test_a_row_that_named_no_image_and_is_gone_is_not_missed(pool, tmp_path):
    """A bad row (no path, not JSON) gave no record: deleting it from the manifest changes nothing."""
    root, rows = pool
    src = _copy(root, str(tmp_path / "in"))
    listing = os.path.join(src, "rows.jsonl")
    _write_rows(listing, rows[:6] + ["{not json", {"label": "cat"}])
    out = str(tmp_path / "out")
    first = _convert(listing, out)
    assert first.accounting.rejected_by_reason == {"bad_manifest_row": 2}
    _write_rows(listing, rows[:6])
    assert _convert(listing, out, append=True).generations == first.generations  # nothing new, nothing refused
