"""Archives (zip, tar, tar.gz) and manifests (CSV, JSONL) as inputs: the records of the equivalent folder."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import tarfile
from unittest import mock

import images as I
import pytest
from conftest import convert
from helpers.datasets import JUNK, dataset_files, write_old_output, write_tar, write_tree, write_zip
from helpers.outputs import convert_in_process, error_rows

from img2tfrecord.conversion.seeded_hashes import parse_splits
from img2tfrecord.images.options import ImageOptions
from img2tfrecord.model import ErrorEntry, MemberEntry, WorkItem
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.kinds import plan_input
from img2tfrecord.readers import records as rec
from img2tfrecord.schemas import example_proto
from img2tfrecord.schemas import features as keys
from img2tfrecord.sources import archives, input_paths

SPLITS = "train=0.5,validation=0.25,test=0.25"
SEED = 5


def plan_of(config: ConvertConfig):
    """The launch plan of ``config``'s input."""
    return plan_input(config)[1]


def record_set(output):
    """{(filename, sha256, label, class, split)} of every record, read without TensorFlow."""
    doc = rec.read_manifest(str(output))
    out = set()
    for split, info in doc.splits.items():
        for shard in info.shards:
            for _, _, data in rec.iter_records(os.path.join(output, shard.file), doc.compression.value):
                f = example_proto.Example.FromString(data).features.feature
                label = f[keys.CLASS_LABEL].int64_list.value[0] if keys.CLASS_LABEL in f else None
                text = f[keys.CLASS_TEXT].bytes_list.value[0].decode() if keys.CLASS_TEXT in f else None
                encoded = f[keys.IMAGE_ENCODED].bytes_list.value[0]
                assert f[keys.KEY_SHA256].bytes_list.value[0].decode() == hashlib.sha256(encoded).hexdigest()
                out.add(
                    (
                        f[keys.FILENAME].bytes_list.value[0].decode(),
                        hashlib.sha256(encoded).hexdigest(),
                        label,
                        text,
                        split,
                    )
                )
    return out


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    base = tmp_path_factory.mktemp("sources")
    files = dataset_files()
    root = str(base / "flowers")
    write_tree(root, {**files, **JUNK})
    with open(os.path.join(root, "labels.csv"), "w", newline="") as f:  # at the root: relpaths as the folder's
        w = csv.writer(f)
        w.writerow(["path", "label"])
        for rel in sorted(files):
            w.writerow(["./" + rel if rel.startswith("emu") else rel, rel.split("/")[0]])
    archives = str(base / "archives")
    os.makedirs(archives)
    write_zip(os.path.join(archives, "flowers.zip"), {**files, **JUNK}, top="flowers")
    write_tar(os.path.join(archives, "flowers.tar"), {"./" + rel: data for rel, data in {**files, **JUNK}.items()})
    write_tar(os.path.join(archives, "flowers.tar.gz"), files, top="flowers", mode="w:gz")
    return {"files": files, "root": root, "archives": archives, "base": base}


@pytest.fixture(scope="module")
def folder_records(inputs):
    out = inputs["base"] / "out_folder"
    # The folder conversion sees labels.csv too: a file outside any class folder, one error row.
    convert_in_process(inputs["root"], out, splits=parse_splits(SPLITS), seed=SEED)
    got = record_set(out)
    assert {r[0] for r in got} == set(inputs["files"])
    assert [e["relpath"] for e in error_rows(out)] == ["labels.csv"]
    return got


@pytest.mark.parametrize("name", ["flowers.zip", "flowers.tar", "flowers.tar.gz"])
def test_an_archive_gives_the_records_of_its_folder(inputs, folder_records, name, tmp_path):
    """Each archive through the CLI (in this process): the records of its folder."""
    out = str(tmp_path / "out")
    proc = convert(os.path.join(inputs["archives"], name), out, "--splits", SPLITS, "--seed", str(SEED))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert record_set(out) == folder_records
    acc = rec.read_manifest(out).accounting
    assert acc is not None
    assert acc.inputs == acc.written == len(inputs["files"]) and acc.rejected == 0
    assert acc.skipped == (0 if name.endswith(".gz") else len(JUNK))
    assert error_rows(out) == []
    # --format keep: the stored bytes are the members' bytes.
    assert {r[1] for r in folder_records} == {hashlib.sha256(d).hexdigest() for d in inputs["files"].values()}


def test_a_csv_manifest_gives_the_records_of_its_folder(inputs, folder_records, tmp_path):
    out = tmp_path / "out"
    doc = convert_in_process(os.path.join(inputs["root"], "labels.csv"), out, splits=parse_splits(SPLITS), seed=SEED)
    assert record_set(out) == folder_records
    assert doc.labeled is True and doc.accounting.rejected == 0


def test_bad_archives_are_reported_and_the_others_converted(inputs, tmp_path):
    files = inputs["files"]
    cats = {k: v for k, v in files.items() if k.startswith("cat/")}
    dogs = {k: v for k, v in files.items() if k.startswith("dog/")}
    emus = {k: v for k, v in files.items() if k.startswith("emu/")}
    folder = tmp_path / "shards"
    os.makedirs(folder)
    write_zip(str(folder / "part-0.zip"), cats)
    write_tar(str(folder / "part-1.tar.gz"), dogs, mode="w:gz")
    with open(folder / "part-2.zip", "wb") as f:
        f.write(b"PK\x03\x04" + b"this is not a zip archive" * 20)
    write_tar(str(folder / "part-3.tar"), emus)
    data = (folder / "part-3.tar").read_bytes()
    # Cut inside the data of the third member: two members survive whole.
    with tarfile.open(folder / "part-3.tar") as t:
        third = t.getmembers()[2]
    cut = third.offset_data + third.size // 2
    (folder / "part-3.tar").write_bytes(data[:cut])

    out = tmp_path / "out"
    doc = convert_in_process(str(folder / "*"), out)
    written = {r[0] for r in record_set(out)}
    survivors = set(sorted(emus)[:2])
    assert written == set(cats) | set(dogs) | survivors
    errors = {(os.path.basename(e["path"].split(archives.MEMBER_SEPARATOR)[0]), e["reason"]) for e in error_rows(out)}
    assert errors == {("part-2.zip", "corrupt_archive"), ("part-3.tar", "truncated_archive")}
    third_name = sorted(emus)[2]
    assert any(e["relpath"] == third_name for e in error_rows(out))
    acc = doc.accounting
    assert acc.inputs == acc.written + acc.rejected == len(written) + 2


def test_a_truncated_tar_gz_keeps_the_members_before_the_cut(inputs, tmp_path):
    files = inputs["files"]
    path = tmp_path / "cut.tar.gz"
    write_tar(str(path), files, mode="w:gz")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    out = tmp_path / "out"
    doc = convert_in_process(str(path), out)
    rows = error_rows(out)
    assert [e["reason"] for e in rows] == ["truncated_archive"]
    assert rows[0]["path"].startswith(str(path))
    written = {r[0] for r in record_set(out)}
    assert written and written < set(files)
    assert doc.accounting.inputs == len(written) + 1


def test_manifest_rows_with_splits_missing_files_and_bad_rows(inputs, tmp_path):
    files = inputs["files"]
    root = inputs["root"]
    manifest_path = tmp_path / "list.jsonl"
    rows = []
    expected = {}
    for i, rel in enumerate(sorted(files)):
        split = ("train", "val", "test")[i % 3]
        label = "feline" if rel.startswith("cat") else "other"
        # Absolute paths: the manifest lives outside the dataset.
        rows.append({"path": os.path.join(root, rel), "label": label, "split": split})
        expected[os.path.join(root, rel)] = (label, {"val": "validation"}.get(split, split))
    rows.append({"path": os.path.join(root, "cat", "missing.jpg"), "label": "feline", "split": "train"})
    rows.append({"path": os.path.join(root, "dog", "dog_0.jpg"), "split": "train"})  # no label
    rows.append({"label": "feline", "split": "train"})  # no path
    manifest_path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "not json\n")

    out = tmp_path / "out"
    doc = convert_in_process(str(manifest_path), out, splits=parse_splits("train=0.5,test=0.5"))
    assert sorted(doc.splits) == ["test", "train", "validation"]  # the manifest's splits, not --splits
    assert doc.labels == ("feline", "other")
    got = {(r[0], r[3], r[4]) for r in record_set(out)}
    assert got == {(path, label, split) for path, (label, split) in expected.items()}
    assert all(r[2] == doc.labels.index(r[3]) for r in record_set(out))
    reasons = sorted(e["reason"] for e in error_rows(out))
    assert reasons == ["bad_manifest_row", "bad_manifest_row", "missing_label", "not_found"]
    missing = [e for e in error_rows(out) if e["reason"] == "not_found"][0]
    assert missing["path"].endswith("missing.jpg")
    acc = doc.accounting
    assert acc.inputs == len(files) + 4 and acc.rejected == 4


def test_unlabeled_manifest(inputs, tmp_path):
    pytest.importorskip("tensorflow")
    import img2tfrecord
    from img2tfrecord.verification.output_checks import verify

    files = inputs["files"]
    manifest_path = os.path.join(inputs["root"], "unlabeled.csv")
    with open(manifest_path, "w") as f:
        f.write("path\n" + "".join(rel + "\n" for rel in sorted(files)))
    try:
        out = tmp_path / "out"
        doc = convert_in_process(manifest_path, out, image=ImageOptions(size=(8, 8), format="jpeg"))
    finally:
        os.remove(manifest_path)
    assert doc.labeled is False and doc.labels == () and doc.num_classes == 0
    assert keys.CLASS_LABEL not in doc.spec and keys.CLASS_TEXT not in doc.spec
    assert doc.splits["train"].num_examples == len(files)
    assert doc.splits["train"].examples_per_class == {}
    assert {r[2] for r in record_set(out)} == {None}
    images = img2tfrecord.load(str(out), batch_size=4)
    batch = next(iter(images))
    assert tuple(batch.shape) == (4, 8, 8, 3)  # images only
    assert verify(str(out)).ok


def test_plan_of_inputs(inputs, tmp_path):
    archives = inputs["archives"]
    plan = plan_of(ConvertConfig(input=os.path.join(archives, "flowers.zip"), output=str(tmp_path / "o")))
    assert (
        plan.input.kind == "archives" and plan.input.layout == "class" and plan.sizing.num_files == len(inputs["files"])
    )
    split_zip = tmp_path / "split.zip"
    write_zip(str(split_zip), {"train/cat/a.jpg": I.jpeg(8, 8), "val/cat/b.jpg": I.jpeg(8, 8)}, top="data")
    plan = plan_of(ConvertConfig(input=str(split_zip), output=str(tmp_path / "o")))
    assert plan.input.layout == "split" and plan.input.split_names == ("train", "validation")
    plan = plan_of(ConvertConfig(input=os.path.join(inputs["root"], "labels.csv"), output=str(tmp_path / "o")))
    assert plan.input.kind == "manifest" and plan.input.labeled and not plan.input.has_split_column
    bad = tmp_path / "bad.csv"
    bad.write_text("path,label,split\ncat/a.jpg,cat,tr-ain\n")
    from img2tfrecord.pipeline.plan_model import PlanError

    with pytest.raises(PlanError, match="tr-ain"):
        plan_of(ConvertConfig(input=str(bad), output=str(tmp_path / "o")))
    with pytest.raises(PlanError, match="no archives"):
        plan_of(ConvertConfig(input=str(tmp_path / "none-*.zip"), output=str(tmp_path / "o")))


def test_top_folder_rule():
    strip = archives.top_folder_to_strip
    assert strip(["flowers/cat/a.jpg", "flowers/dog/b.jpg", "flowers/LICENSE"]) == "flowers/"
    assert strip(["cat/a.jpg", "cat/b.jpg"]) == ""  # one class, no wrapper
    assert strip(["train/cat/a.jpg", "train/dog/b.jpg"]) == ""  # a split folder is never a wrapper
    assert strip(["a/cat/x.jpg", "b/dog/y.jpg"]) == ""
    assert strip(["clips/run/c1/f1.png", "clips/run/c1/f2.png"], archives.MIN_DEPTH_SEQUENCES) == "clips/"
    assert strip(["run/c1/f1.png", "run/c1/f2.png"], archives.MIN_DEPTH_SEQUENCES) == ""
    assert archives.normalise_member_name("./a//b/./c.jpg") == "a/b/c.jpg"


def test_archive_member_names_that_are_not_text_become_bad_name_entries(tmp_path):
    """A tar member name of Latin-1 bytes or with a line break: a bad_name entry shown as local names are."""
    path = str(tmp_path / "names.tar")
    good = I.jpeg(8, 8)
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT, encoding="utf-8", errors="surrogateescape") as t:
        for name in ("cat/ok.jpg", "cat/caf\udce9.jpg", "cat/two\nlines.jpg"):
            info = tarfile.TarInfo(name)
            info.size = len(good)
            t.addfile(info, io.BytesIO(good))
    entries = list(archives.list_archive(path, os.path.getsize(path), 1 << 30))
    assert [e.name for e in entries if isinstance(e, MemberEntry)] == ["cat/ok.jpg"]
    assert [e[:2] for e in entries if isinstance(e, ErrorEntry)] == [
        ("cat/caf\\xe9.jpg", "bad_name"),
        ("cat/two\\nlines.jpg", "bad_name"),
    ]


def _listed(path: str) -> list:
    return list(archives.list_archive(path, os.path.getsize(path), 1 << 30))


def test_a_file_named_like_an_archive_that_is_none_is_not_an_archive(tmp_path):
    """An empty file or a text file named .zip/.tar/.tar.gz is no archive at all, which a damaged or cut
    archive (``corrupt_archive``, ``truncated_archive``) is."""
    named = {
        "empty.zip": b"",
        "x.tar.gz": b"a text file, not an archive\n",
        "page.tar": b"<html>" + b"not found " * 80 + b"</html>",
        "photo.zip": I.jpeg(8, 8),
    }
    for name, data in named.items():
        (tmp_path / name).write_bytes(data)
        entries = _listed(str(tmp_path / name))
        assert [e.reason for e in entries] == [archives.NOT_AN_ARCHIVE], (name, entries)
    assert "the file is empty" in _listed(str(tmp_path / "empty.zip"))[0].message
    assert "starts with b'a text file, not'" in _listed(str(tmp_path / "x.tar.gz"))[0].message
    cut = str(tmp_path / "cut.tar.gz")
    write_tar(cut, {"cat/a.jpg": I.jpeg(64, 64)}, mode="w:gz")
    with open(cut, "r+b") as f:
        f.truncate(os.path.getsize(cut) // 2)
    assert [e.reason for e in _listed(cut) if isinstance(e, ErrorEntry)] == ["truncated_archive"]


def test_an_archive_inside_an_archive_is_rejected_as_nested(tmp_path):
    inner = str(tmp_path / "inner.zip")
    write_zip(inner, {"cat/a.jpg": I.jpeg(8, 8)})
    outer = str(tmp_path / "outer.tar")
    write_tar(outer, {"cat/b.jpg": I.jpeg(8, 8), "cat/more.zip": open(inner, "rb").read(), "dogs.tar.gz": b"x"})
    entries = _listed(outer)
    assert [e.name for e in entries if isinstance(e, MemberEntry)] == ["cat/b.jpg"]
    assert [e[:2] for e in entries if isinstance(e, ErrorEntry)] == [
        ("cat/more.zip", archives.NESTED_ARCHIVE),
        ("dogs.tar.gz", archives.NESTED_ARCHIVE),
    ]


@pytest.mark.parametrize(
    "text, delimiter, rows",
    [
        ("path;label\na.jpg;cat\n", ";", [{"path": "a.jpg", "label": "cat"}]),
        ("\ufeffLabel\tPath\n\ndog\tb,1.jpg\n", "\t", [{"path": "b,1.jpg", "label": "dog"}]),  # BOM, blank line
        ('"path","label"\n"c;2.jpg","emu"\n', ",", [{"path": "c;2.jpg", "label": "emu"}]),
        ("path\nd.jpg\n", ",", [{"path": "d.jpg"}]),  # one column: unlabeled
        ("e.jpg;cat;train\nf.jpg;dog;test\n", ";", [{"path": "e.jpg", "label": "cat", "split": "train"}]),
    ],
    ids=["semicolon", "tab", "quoted-comma", "one-column", "no-header-semicolon"],
)
def test_a_csv_manifests_delimiter_is_read_from_its_first_row(tmp_path, text, delimiter, rows):
    path = tmp_path / "m.csv"
    path.write_text(text, encoding="utf-8")
    from img2tfrecord.sources import manifests

    assert manifests.manifest_head(str(path)).delimiter == delimiter
    assert [row for _, row in manifests.manifest_rows(str(path))][: len(rows)] == rows


def test_a_csv_manifest_whose_delimiter_cannot_be_told_is_refused_naming_what_it_saw(tmp_path):
    from img2tfrecord.pipeline.plan_model import PlanError

    path = tmp_path / "m.csv"
    path.write_text("cat;1.jpg,dog\n", encoding="utf-8")
    config = ConvertConfig(input=str(path), output=str(tmp_path / "out"), analyze=False)
    with pytest.raises(PlanError) as info:
        plan_of(config)
    assert str(info.value) == (
        f"{path}: cannot tell the delimiter: the first line 'cat;1.jpg,dog' names no 'path' column and holds "
        "commas and semicolons; give the manifest a header row (path,label[,split]) with one delimiter"
    )


# -- an earlier output inside the input, and inputs that can give no record ------------------------


def test_folders_holding_an_output_are_found_from_a_listing():
    from img2tfrecord.sources import layout

    relpaths = [
        "cat/a.jpg",
        "out/dataset.json",
        "out/train-00000-of-00001.tfrecord",
        "out/index/train-00000-of-00001.tfrecord.idx",
        "out/old/_SUCCESS",  # inside another output: covered by it
        "dog/b.jpg",
        "dog/run/.tmp-run-0123456789abcdef/shards/train/x",  # a killed run's staging folder
        "emu/_SUCCESS.jpg",
    ]
    assert layout.output_folders(relpaths) == ("dog/run", "out")
    assert layout.output_folders(["dataset.json", "cat/a.jpg"]) == ("",)  # the root itself
    assert layout.in_folders("out/index/x.idx", ("out",)) and not layout.in_folders("outside/a.jpg", ("out",))
    base = "/data/photos/"
    assert layout.folder_entry(base, base + "out/dataset.json", 10, ("out",)) is None
    assert layout.folder_entry(base, base + "out/.hidden", 10, ("out",)) is None  # not even counted as junk
    assert layout.folder_entry(base, base + "outside/a.jpg", 10, ("out",)) == WorkItem(
        base + "outside/a.jpg", "outside/a.jpg", 10
    )


def test_launch_plan_preview_and_local_checks_leave_out_an_old_output(inputs, tmp_path, caplog):
    from img2tfrecord.pipeline.inputs import scan_local_input
    from img2tfrecord.pipeline.launch import launch

    root = str(tmp_path / "photos")
    write_tree(root, inputs["files"])
    write_old_output(os.path.join(root, "records"))
    config = ConvertConfig(input=root, output=str(tmp_path / "o"))
    with caplog.at_level("WARNING"):
        plan = plan_of(config)
    assert plan.input.skipped_outputs == ("records/done", "records/killed")
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "'records/done', 'records/killed'" in warnings[0], warnings
    assert plan.sizing.num_files == len(inputs["files"]) and plan.input.layout == "class"
    items, junk, errors = launch(config, preview=True).listed_units()
    assert sorted(f.relpath for f in items) == sorted(inputs["files"])
    assert junk == [] and errors == []
    report = scan_local_input(plan.input.base, plan.input.pattern, plan.input.layout)
    assert report.files == len(inputs["files"]) and report.empty_class_folders == []
    # A launch walks the folder once: its listing, then the local check over the same walk.
    from img2tfrecord.pipeline import listing as listing_module

    walks = []
    walk = os.walk

    def counted(top, *args, **kwargs):
        walks.append(top)
        return walk(top, *args, **kwargs)

    with mock.patch.object(listing_module.os, "walk", counted), listing_module.listing_once():
        plan = plan_of(config)
        assert scan_local_input(plan.input.base, plan.input.pattern, plan.input.layout) == report
    assert walks == [root]
    # An input that is itself an output.
    from img2tfrecord.pipeline.plan_model import PlanError

    with pytest.raises(PlanError, match="is an img2tfrecord output"):
        plan_of(ConvertConfig(input=os.path.join(root, "records", "done"), output=str(tmp_path / "o")))


def test_an_output_inside_the_input_is_recognised_on_every_filesystem(tmp_path):
    inside = input_paths.output_inside_input
    photos = str(tmp_path / "photos")
    os.makedirs(photos)
    os.symlink(photos, str(tmp_path / "link"))
    assert inside(photos, photos + "/records") and inside(photos + "/", photos + "/a/b/")
    assert inside(str(tmp_path / "link"), photos + "/records")  # links resolved
    assert inside(photos, str(tmp_path / "link" / "records"))
    assert inside(photos, photos + "/x/../records") and inside(photos + "/*/*.jpg", photos + "/records")
    assert not inside(photos, photos + "-records") and not inside(photos, str(tmp_path))
    assert inside("gs://b/photos", "gs://b/photos/records/") and inside("gs://b/photos/", "gs://b/photos")
    assert not inside("gs://b/photos", "gs://b/photos-records") and not inside("gs://b/photos", photos)
    assert not inside(str(tmp_path / "a.zip"), str(tmp_path / "out"))  # an archive's folder is not listed
    assert not inside(str(tmp_path / "list.csv"), str(tmp_path / "out"))


def test_inputs_that_can_give_no_record_are_refused_at_launch(inputs, tmp_path):
    from img2tfrecord.pipeline.plan_model import PlanError

    def refused(path: str) -> str:
        with pytest.raises(PlanError) as info:
            plan_of(ConvertConfig(input=path, output=str(tmp_path / "o")))
        return str(info.value)

    cats = {k.split("/", 1)[1]: v for k, v in inputs["files"].items() if k.startswith("cat/")}
    flat = str(tmp_path / "photos" / "cat")
    write_tree(flat, cats)
    message = refused(flat)
    assert f"holds {len(cats)} file(s) but no class folders" in message
    assert f"point --input at the folder above it, {tmp_path / 'photos'}/" in message and "manifest" in message
    assert f"folder above it, {tmp_path / 'photos'}/" in refused(flat + "/*.jpg")
    split = str(tmp_path / "split")
    write_tree(split, {"train/a.jpg": I.jpeg(8, 8), "val/b.jpg": I.jpeg(8, 8)})
    assert "split folders but no class folders" in refused(split)
    texts = str(tmp_path / "texts")
    write_tree(texts, {"a/notes.txt": b"hello", "b/data.bin": b"\0\1\2"})
    assert refused(texts).startswith(f"no images in --input {texts}: its 2 file(s)")
    # A name without an image suffix: the content decides.
    write_tree(str(tmp_path / "noext"), {"cat/IMG_0001": I.jpeg(8, 8)})
    assert plan_of(ConvertConfig(input=str(tmp_path / "noext"), output=str(tmp_path / "o"))).sizing.num_files == 1
    flat_zip = str(tmp_path / "flat.zip")
    write_zip(flat_zip, cats)
    assert "no class folders (<class>/<file> inside)" in refused(flat_zip)
    empty_zip = str(tmp_path / "empty.zip")
    write_zip(empty_zip, {})
    assert "the archive(s) hold no files" in refused(empty_zip)
    # The way out the message names: a manifest without a label column, an unlabeled dataset.
    listed = tmp_path / "photos" / "cat" / "list.csv"
    listed.write_text("path\n" + "".join(f"{name}\n" for name in sorted(cats)))
    plan = plan_of(ConvertConfig(input=str(listed), output=str(tmp_path / "o")))
    assert plan.input.kind == "manifest" and not plan.input.labeled and plan.sizing.num_files == len(cats)
