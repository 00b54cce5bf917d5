"""End-to-end: the real ``img2tfrecord convert`` CLI on generated images, read back with TensorFlow."""

from __future__ import annotations

import gc
import glob
import hashlib
import io
import json
import os
import shutil
import threading
import time

import pytest
from conftest import built_once, convert, run_cli, shard_digests
from helpers.outputs import read_records
from helpers.shared_outputs import converted_once
from PIL import Image

from img2tfrecord.conversion.seeded_hashes import shuffle_key
from img2tfrecord.readers.records import read_manifest
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import output_files

tf = pytest.importorskip("tensorflow")

ONE = ("--processes", "1")  # where the number of conversion processes is not the point
MESSY_OPTIONS = ("--splits", "train=0.6,validation=0.2,test=0.2", "--num-shards", "2")
MESSY = (*MESSY_OPTIONS, "--seed", "3")


def write_image(path: str, size=(40, 30), color=(200, 30, 30), fmt="JPEG") -> bytes:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format=fmt)
    with open(path, "wb") as f:
        f.write(buf.getvalue())
    return buf.getvalue()


def make_dataset(root: str, classes=("cat", "dog", "emu"), per_class=6) -> dict:
    """Good images: relpath -> bytes."""
    files = {}
    for ci, name in enumerate(classes):
        for i in range(per_class):
            fmt = "PNG" if i % 3 == 0 else "JPEG"
            rel = f"{name}/{name}_{i}.{'png' if fmt == 'PNG' else 'jpg'}"
            files[rel] = write_image(os.path.join(root, rel), (30 + 7 * i, 20 + 5 * ci), (40 * ci, 20 * i, 90), fmt)
    return files


def plant_bad_files(root: str) -> dict:
    """Bad inputs: relpath -> expected reason. Also junk that must be skipped."""
    good = io.BytesIO()
    Image.effect_noise((256, 256), 60).convert("RGB").save(good, format="JPEG")
    bad = {
        "cat/empty.jpg": (b"", "empty_file"),
        "dog/truncated.jpg": (good.getvalue()[: len(good.getvalue()) // 2], "truncated"),
        "emu/notes.jpg": (b"<html><body>not an image</body></html>", "not_an_image"),
        "stray.jpg": (good.getvalue(), "no_class_folder"),
    }
    for rel, (data, _) in bad.items():
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)
    for junk in (".DS_Store", "cat/Thumbs.db", "__MACOSX/cat/._a.jpg"):
        os.makedirs(os.path.dirname(os.path.join(root, junk)) or root, exist_ok=True)
        with open(os.path.join(root, junk), "wb") as f:
            f.write(b"junk")
    return {rel: reason for rel, (_, reason) in bad.items()}


def split_membership(records_by_split):
    return {split: sorted(r[keys.FILENAME].decode() for r in records) for split, records in records_by_split.items()}


@pytest.fixture(scope="module")
def messy_input(tmp_path_factory):
    """(root, good: relpath -> bytes, bad: relpath -> reason), written once per session for the xdist workers."""

    def build(folder: str) -> None:
        root = os.path.join(folder, "in")
        good = make_dataset(root)
        bad = plant_bad_files(root)
        with open(os.path.join(folder, "planted.json"), "w", encoding="utf-8") as f:
            json.dump({"good": sorted(good), "bad": bad}, f)

    folder = built_once(tmp_path_factory, "convert-cli-messy-input", build)
    with open(os.path.join(folder, "planted.json"), encoding="utf-8") as f:
        planted = json.load(f)
    root = os.path.join(folder, "in")
    good = {rel: open(os.path.join(root, rel), "rb").read() for rel in planted["good"]}
    return root, good, planted["bad"]


@pytest.fixture(scope="module")
def messy_output(messy_input, tmp_path_factory):
    """The default runner with two conversion processes and the analysis: statistics are compared below."""
    root, _, _ = messy_input
    _, out, proc = converted_once(
        tmp_path_factory, "convert-cli-messy", root, *MESSY, "--processes", "2", runner=(), analyze=True
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out, proc


@pytest.fixture(scope="module")
def messy_again(messy_input, tmp_path_factory):
    """``messy_output``'s conversion run again, in one process instead of two."""
    root, _, _ = messy_input
    _, out, proc = converted_once(
        tmp_path_factory, "convert-cli-messy-one-process", root, *MESSY, *ONE, runner=(), analyze=True
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


@pytest.fixture(scope="module")
def other_seed(messy_input, tmp_path_factory):
    """``messy_input`` converted with seed 4 instead of 3, in one process, under an error budget its rejections
    exceed (``--max-error-rate 0.05``): every record written, then exit 3. -> (output, finished command); once
    per session for the xdist workers."""
    root, _, _ = messy_input
    args = (*MESSY_OPTIONS, "--seed", "4", "--max-error-rate", "0.05", *ONE)
    _, out, proc = converted_once(tmp_path_factory, "convert-cli-messy-other-seed", root, *args)
    return out, proc


def test_every_input_is_a_record_or_an_error(messy_input, messy_output):
    root, good, bad = messy_input
    out, proc = messy_output
    doc, records = read_records(out)
    acc = doc.accounting
    written = sum(len(r) for r in records.values())
    assert acc.inputs == len(good) + len(bad)
    assert acc.written == written == len(good)
    assert acc.rejected == len(bad)
    assert acc.inputs == acc.written + acc.rejected
    assert acc.skipped == 3
    errors = [json.loads(line) for line in open(os.path.join(out, output_files.ERRORS_FILE))]
    assert {e["relpath"]: e["reason"] for e in errors} == bad
    assert all(e["error"] and e["path"].endswith(e["relpath"]) for e in errors)
    assert acc.rejected_by_reason == {r: list(bad.values()).count(r) for r in set(bad.values())}
    assert sorted(f for split in split_membership(records).values() for f in split) == sorted(good)
    assert "records written" in proc.stdout and "rejected" in proc.stdout
    mean = ", ".join(f"{v:.4f}" for v in doc.statistics["pixel_mean"])
    assert f"train pixel mean [{mean}], std [" in proc.stdout and "(tf.Transform output: transform_fn/)" in proc.stdout
    assert os.path.exists(os.path.join(out, output_files.SUCCESS_FILE))
    assert not glob.glob(os.path.join(out, "beam-temp-*"))


def test_records_carry_every_feature_correctly(messy_input, messy_output):
    root, good, _ = messy_input
    out, _ = messy_output
    doc, records = read_records(out)
    labels = open(os.path.join(out, output_files.LABELS_FILE)).read().split("\n")[:-1]
    assert labels == ["cat", "dog", "emu"] == list(doc.labels)
    for split_records in records.values():
        for r in split_records:
            rel = r[keys.FILENAME].decode()
            encoded = r[keys.IMAGE_ENCODED]
            # No resize and RGB input: the original bytes are stored untouched.
            assert encoded == good[rel]
            assert r[keys.KEY_SHA256].decode() == hashlib.sha256(encoded).hexdigest()
            assert r[keys.CLASS_TEXT].decode() == rel.split("/")[0]
            assert r[keys.CLASS_LABEL] == labels.index(rel.split("/")[0])
            img = Image.open(io.BytesIO(encoded))
            assert (r[keys.IMAGE_WIDTH], r[keys.IMAGE_HEIGHT]) == img.size
            assert r[keys.IMAGE_CHANNELS] == 3
            assert r[keys.IMAGE_FORMAT].decode() == {"JPEG": "jpeg", "PNG": "png"}[img.format]


def test_manifest_counts_match_the_shards(messy_output):
    out, _ = messy_output
    doc, records = read_records(out)
    assert set(doc.splits) == {"train", "validation", "test"}
    for split, info in doc.splits.items():
        assert info.num_examples == len(records[split])
        assert [s.file for s in info.shards] == [output_files.shard_file_name(split, i, 2) for i in range(2)]
        for shard in info.shards:
            path = os.path.join(out, shard.file)
            assert shard.num_records == sum(1 for _ in tf.data.TFRecordDataset(path))
            assert shard.num_bytes == os.path.getsize(path)
        per_class = {}
        for r in records[split]:
            name = r[keys.CLASS_TEXT].decode()
            per_class[name] = per_class.get(name, 0) + 1
        assert info.examples_per_class == per_class
    assert sorted(glob.glob(os.path.join(out, "*.tfrecord"))) == sorted(
        os.path.join(out, s.file) for info in doc.splits.values() for s in info.shards
    )


def test_same_seed_same_records_other_seed_other_split(messy_output, messy_again, other_seed):
    out, _ = messy_output
    _, first = read_records(out)
    doc_a = read_manifest(out)
    doc_b, second = read_records(messy_again)
    assert split_membership(first) == split_membership(second)
    for split in doc_a.splits:
        assert doc_a.splits[split].examples_per_class == doc_b.splits[split].examples_per_class
        assert sorted(r[keys.KEY_SHA256] for r in first[split]) == sorted(r[keys.KEY_SHA256] for r in second[split])
    other, proc = other_seed  # exit 3 (test_error_budget_exit_3), every record written
    assert os.path.exists(os.path.join(other, output_files.SUCCESS_FILE)), proc.stderr[-3000:]
    assert split_membership(read_records(other)[1]) != split_membership(first)


def test_shards_are_byte_identical_whatever_the_processes_and_the_run(messy_output, messy_again):
    """The same input, options and seed: the same shard files (names, bytes), error report and statistics,
    converted in two processes by one run and in one process by another."""
    out, _ = messy_output

    def content(output):
        doc = read_manifest(output)
        with open(os.path.join(output, output_files.ERRORS_FILE), encoding="utf-8") as f:
            errors = sorted(f.read().splitlines())
        shards = {split: info.shards for split, info in doc.splits.items()}
        return shard_digests(output), shards, errors, doc.labels, doc.accounting, doc.statistics

    assert content(out) == content(messy_again)
    doc = read_manifest(out)
    for info in doc.splits.values():  # dataset.json's sha256 is the file's
        for shard in info.shards:
            assert shard_digests(out)[shard.file] == shard.sha256
            assert shard.index == output_files.index_file(shard.file)


def test_records_are_shuffled_within_shards(tmp_path):
    root = str(tmp_path / "in")
    make_dataset(root, classes=("a", "b", "c", "d"), per_class=15)
    out = str(tmp_path / "out")
    assert convert(root, out, "--num-shards", "1", *ONE).returncode == 0
    _, records = read_records(out)
    order = [r[keys.CLASS_TEXT].decode() for r in records["train"]]
    assert sorted(order) == sorted(["a", "b", "c", "d"] * 15)
    # Listing order is class by class; the written order must not be.
    runs = sum(1 for x, y in zip(order, order[1:]) if x != y)
    assert runs > 20, order
    # It is exactly the seeded order, and another seed gives another order of the same records.
    names = [r[keys.FILENAME].decode() for r in records["train"]]
    assert names == sorted(names, key=lambda n: (shuffle_key(n, 0), n))
    other = str(tmp_path / "other")
    assert convert(root, other, "--num-shards", "1", "--seed", "1", *ONE).returncode == 0
    other_names = [r[keys.FILENAME].decode() for r in read_records(other)[1]["train"]]
    assert sorted(other_names) == sorted(names) and other_names != names
    assert other_names == sorted(names, key=lambda n: (shuffle_key(n, 1), n))


def test_adding_a_file_moves_no_other_file(tmp_path):
    root = str(tmp_path / "in")
    make_dataset(root, per_class=10)
    splits = ("--splits", "train=0.5,validation=0.25,test=0.25", "--seed", "11", *ONE)
    first = str(tmp_path / "first")
    assert convert(root, first, *splits).returncode == 0
    write_image(os.path.join(root, "dog", "new_one.jpg"))
    write_image(os.path.join(root, "zebra", "z.jpg"))
    second = str(tmp_path / "second")
    assert convert(root, second, *splits).returncode == 0
    before = {f: s for s, fs in split_membership(read_records(first)[1]).items() for f in fs}
    after = {f: s for s, fs in split_membership(read_records(second)[1]).items() for f in fs}
    assert set(after) == set(before) | {"dog/new_one.jpg", "zebra/z.jpg"}
    assert all(after[f] == s for f, s in before.items())


def test_split_folders_are_used_as_given(tmp_path):
    root = str(tmp_path / "in")
    for rel in (
        "train/cat/1.jpg",
        "train/cat/2.jpg",
        "train/dog/1.jpg",
        "val/dog/3.jpg",
        "val/ant/4.jpg",
        "test/cat/5.jpg",
    ):
        write_image(os.path.join(root, rel))
    out = str(tmp_path / "out")
    proc = convert(root, out, *ONE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc, records = read_records(out)
    assert doc.labels == ("ant", "cat", "dog")
    assert split_membership(records) == {
        "test": ["test/cat/5.jpg"],
        "train": ["train/cat/1.jpg", "train/cat/2.jpg", "train/dog/1.jpg"],
        "validation": ["val/ant/4.jpg", "val/dog/3.jpg"],
    }
    # A class seen only in validation still takes its id from the one sorted list.
    ant = [r for r in records["validation"] if r[keys.CLASS_TEXT] == b"ant"][0]
    assert ant[keys.CLASS_LABEL] == 0


def test_resize_gzip_and_shard_size(tmp_path):
    root = str(tmp_path / "in")
    make_dataset(root, per_class=8)
    out = str(tmp_path / "out")
    proc = convert(
        root,
        out,
        "--image-size",
        "48x32",
        "--resize",
        "fit",
        "--format",
        "png",
        "--compression",
        "gzip",
        "--shard-size-mb",
        "0.002",
        "--channels",
        "1",
        *ONE,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc, records = read_records(out)
    shards = doc.splits["train"].shards
    assert len(shards) > 1 and all(s.file.endswith(".tfrecord.gz") for s in shards)
    assert len(records["train"]) == 24
    for r in records["train"]:
        assert (r[keys.IMAGE_WIDTH], r[keys.IMAGE_HEIGHT], r[keys.IMAGE_CHANNELS]) == (48, 32, 1)
        assert r[keys.IMAGE_FORMAT] == b"png"
        assert tf.io.decode_png(r[keys.IMAGE_ENCODED]).shape == (32, 48, 1)
    assert doc.options["image_size"] == [48, 32]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--splits", "train=0.7,test=0.2"], "sum to 1"),
        (["--image-size", "0"], "positive"),
        (["--image-size", "abc"], "N or WxH"),
        (["--format", "gif"], "invalid choice"),
        (["--quality", "101"], "between 1 and 100"),
        (["--num-shards", "2", "--shard-size-mb", "4"], "not allowed with"),
        (["--image-sise", "3"], "unrecognized argument --image-sise"),
        (["--direct_num_workers", "x"], "invalid pipeline option"),
    ],
)
def test_bad_flags_exit_2_with_one_line(tmp_path, args, message):
    root = str(tmp_path / "in")
    write_image(os.path.join(root, "a", "1.jpg"))
    out = str(tmp_path / "out")
    proc = convert(root, out, *args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert not os.path.exists(out)


def test_the_program_exits_with_mains_code_after_freezing_the_heap(monkeypatch):
    # ``run`` is the console script and ``python -m img2tfrecord``: main's code, and the objects left
    # frozen so that interpreter shutdown does not collect them.
    from img2tfrecord import cli

    seen, guarded = [], []
    monkeypatch.setattr(cli, "main", lambda argv=None: seen.append(argv) or 2)
    monkeypatch.setattr(cli, "exit_within", guarded.append)  # its thread would end this test process
    try:
        with pytest.raises(SystemExit) as exit_info:
            cli.run(["inspect", "somewhere"])
        assert exit_info.value.code == 2 and seen == [["inspect", "somewhere"]]
        assert guarded == [2]  # the process ends with main's code even if something would hold its exit
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_no_matches_and_missing_input_exit_2(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    for source, says in (
        (str(empty), "no input files match"),
        (str(tmp_path / "missing"), "no such file or folder"),
        (str(tmp_path / "missing" / "*.jpg"), "no input files match"),
    ):
        proc = convert(source, str(tmp_path / "out"))
        assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert not os.path.exists(tmp_path / "out")


def test_refuses_non_empty_output_and_overwrites_only_its_own(messy_input, messy_again, tmp_path):
    root, _, _ = messy_input
    out = shutil.copytree(messy_again, str(tmp_path / "out"))  # a finished, analysed conversion of root
    own = [
        "_SUCCESS",
        "dataset.json",
        "errors.jsonl",
        "labels.txt",
        "index",
        "ledger",
        "dataset_info.json",
        "features.json",
        "image-class-label.labels.txt",
    ]
    # the tf.Transform analysis (transforms/analyze.py); its temp folders are gone
    analysis = ["transform_fn", "transformed_metadata", "metadata", "schema.pbtxt"]
    shards = [output_files.shard_file_name(split, i, 2) for split in ("train", "validation", "test") for i in range(2)]
    assert sorted(os.listdir(out)) == sorted(own + analysis + shards)
    proc = convert(root, out)
    assert proc.returncode == 2 and "--overwrite to replace it, or --append to add" in proc.stderr
    proc = convert(root, out, "--overwrite", "--num-shards", "1", *ONE)  # one split, without the analysis
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(os.listdir(out)) == sorted(own + ["train-00000-of-00001.tfrecord"])
    with open(os.path.join(out, "notes.txt"), "w") as f:
        f.write("mine")
    proc = convert(root, out, "--overwrite")
    assert proc.returncode == 2 and "notes.txt" in proc.stderr
    assert os.path.exists(os.path.join(out, "notes.txt"))


def test_error_budget_exit_3(other_seed):
    out, proc = other_seed  # 4 of 22 inputs rejected: over 5%
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "error budget exceeded" in proc.stderr
    assert os.path.exists(os.path.join(out, output_files.SUCCESS_FILE))


def test_python_dash_m_and_console_script_agree(tmp_path):
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("img2tfrecord ")
    exe = shutil.which("img2tfrecord", path=os.path.dirname(__import__("sys").executable))
    if exe is None:
        pytest.skip("console script not installed in this environment")
    import subprocess

    assert subprocess.run([exe, "--version"], capture_output=True, text=True).stdout == proc.stdout


def test_the_exit_guard_ends_the_process_with_the_commands_code_after_its_grace(monkeypatch):
    from img2tfrecord import cli

    ended = threading.Event()
    codes = []
    monkeypatch.setattr(cli, "EXIT_GRACE_S", 0.05)
    started = time.monotonic()
    cli.exit_within(3, end=lambda code: (codes.append((code, time.monotonic() - started)), ended.set()))
    assert ended.wait(10) and len(codes) == 1
    code, after_s = codes[0]
    assert code == 3 and after_s >= 0.05  # the command's code, once its grace is over
