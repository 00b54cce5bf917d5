"""The input mistakes of a new user's first hour, each run as the real command.

Each mistake gets one clear line naming the fix and spoils nothing: the exit code says what
happened, and the input (and, for a usage error, everything around it) is as it was.
"""

from __future__ import annotations

import json
import os
import shutil

import images as I
import pytest
from conftest import convert, shard_digests
from helpers.cli import run_in_process
from helpers.datasets import photos, write_old_output, write_tree, write_zip_raw_names
from helpers.outputs import assert_plan_is_the_run, one_line, snapshot

from img2tfrecord import api
from img2tfrecord.commands.errors import UsageError
from img2tfrecord.readers.records import read_manifest
from img2tfrecord.schemas import output_files

FAST = ("--no-analyze",)  # the analysis is not what these runs and plans are about


def refused(tmp_path, *args: str) -> str:
    """Run ``convert ARGS``; assert exit 2, one stderr line, nothing written and nothing under
    ``tmp_path`` changed; -> that line."""
    before = snapshot(str(tmp_path))
    proc = run_in_process("convert", *args)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stdout == ""
    assert snapshot(str(tmp_path)) == before, "a refused command changed the input or the output"
    return one_line(proc)


# -- an output inside the input --------------------------------------------------------------------


@pytest.mark.parametrize("where", ["child", "dotted", "link", "glob", "gs"])
def test_an_output_inside_the_input_is_refused_before_anything_starts(tmp_path, where):
    src = str(tmp_path / "photos")
    photos(src)
    os.symlink(src, str(tmp_path / "alias"))
    given, output = {
        "child": (src, os.path.join(src, "out")),
        "dotted": (src + "/", os.path.join(src, "cat", "..", "records")),
        "link": (str(tmp_path / "alias"), os.path.join(src, "records")),  # the same folder by another name
        "glob": (src + "/*/*.jpg", os.path.join(src, "records")),
        "gs": ("gs://bucket/photos", "gs://bucket/photos/records"),  # compared as names: nothing is contacted
    }[where]
    for extra in ((), ("--plan",)) if where == "child" else ((),):  # --plan refuses as a run does
        line = refused(tmp_path, "--input", given, "--output", output, *extra)
        assert line.startswith(f"img2tfrecord: error: --output {output} is inside --input {given}: "), line
        assert line.endswith("-tfrecords") and "give an --output outside the input" in line, line


def test_an_old_output_inside_the_input_never_becomes_a_class(tmp_path):
    src = str(tmp_path / "photos")
    files = photos(src)
    write_old_output(os.path.join(src, "records"))  # left there by an older version, or copied in
    before = snapshot(src)
    out = str(tmp_path / "out")

    proc = run_in_process("convert", "--input", src, "--output", out, "--plan", "--json", *FAST)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout)
    assert found["skipped_outputs"] == ["records/done", "records/killed"]
    warned = [line for line in proc.stderr.splitlines() if "img2tfrecord output" in line]
    assert warned == [
        "WARNING 2 folder(s) hold an img2tfrecord output (dataset.json, _SUCCESS, .tmp-run-*), so their files "
        "are not inputs: 'records/done', 'records/killed'"
    ], proc.stderr
    assert not any("empty class folder" in line for line in proc.stderr.splitlines()), proc.stderr

    proc = convert(src, out, *FAST)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [line for line in proc.stderr.splitlines() if line.startswith("WARNING")] == warned, proc.stderr
    doc = read_manifest(out)
    assert doc.labels == ("cat", "dog")
    assert doc.accounting.inputs == doc.accounting.written == len(files)
    assert doc.accounting.skipped == 0 and doc.accounting.rejected == 0
    assert_plan_is_the_run(found, doc)
    assert snapshot(src) == before


# -- a flat folder, a folder without images, a run that writes nothing ------------------------------


def test_a_flat_folder_is_refused_and_the_manifest_it_points_to_converts(tmp_path):
    src = str(tmp_path / "photos")
    files = photos(src)
    cat = os.path.join(src, "cat")
    for given in (cat + "/", cat + "/*.jpg"):
        line = refused(tmp_path, "--input", given, "--output", str(tmp_path / "out"))
        assert "but no class folders (SRC/<class>/<file>): point --input at the folder above it, " in line, line
        assert f"{src}/, if its sub-folders are the classes" in line and "no label column" in line, line
    # The fix the line names works: a manifest without a label column makes an unlabeled dataset.
    listed = str(tmp_path / "cats.csv")
    cats = sorted(rel for rel in files if rel.startswith("cat/"))
    with open(listed, "w") as f:
        f.write("path\n" + "".join(os.path.join(src, rel) + "\n" for rel in cats))
    before = snapshot(src)
    out = str(tmp_path / "out")
    proc = convert(listed, out, *FAST)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = read_manifest(out)
    assert doc.labeled is False and doc.labels == () and doc.accounting.written == len(cats)
    assert os.path.exists(os.path.join(out, output_files.SUCCESS_FILE)) and snapshot(src) == before


def test_a_folder_without_images_is_refused(tmp_path):
    src = str(tmp_path / "notes")
    write_tree(src, {"a/readme.txt": b"hello", "b/list.csv.bak": b"path\n"})
    line = refused(tmp_path, "--input", src, "--output", str(tmp_path / "out"))
    assert line.startswith(f"img2tfrecord: error: no images in --input {src}: its 2 file(s) ("), line
    assert line.endswith("point --input at a folder of images with one sub-folder per class"), line


def test_a_folder_of_archives_or_of_manifests_names_the_input_that_converts_them(tmp_path):
    dumps, exports = str(tmp_path / "dumps"), str(tmp_path / "exports")
    write_tree(dumps, {"day1.zip": b"PK\x05\x06" + bytes(18), "day2.tar.gz": b"\x1f\x8b"})
    write_tree(exports, {"labels.csv": b"path,label\na.jpg,cat\n"})
    line = refused(tmp_path, "--input", dumps, "--output", str(tmp_path / "out"))
    assert line.endswith(f"are archives; convert them with --input '{dumps}/*'"), line
    line = refused(tmp_path, "--input", exports, "--output", str(tmp_path / "out"))
    assert line.endswith(f"are manifests; give one as --input, e.g. {exports}/labels.csv"), line


def test_a_mistyped_input_or_an_output_that_is_a_file_is_named(tmp_path):
    src = str(tmp_path / "photos")
    photos(src)
    typo = str(tmp_path / "photo")
    line = refused(tmp_path, "--input", typo, "--output", str(tmp_path / "out"))
    assert line == f"img2tfrecord: error: --input {typo}: no such file or folder ({typo}); check the path", line
    (tmp_path / "out.txt").write_text("notes")
    line = refused(tmp_path, "--input", src, "--output", str(tmp_path / "out.txt"))
    assert line.endswith("out.txt is a file: give a folder (it is created if missing)"), line


def test_a_run_that_writes_no_record_fails_without_success(tmp_path):
    src = str(tmp_path / "broken")
    write_tree(src, {"cat/a.jpg": I.text_as_jpg(), "dog/b.jpg": I.empty()})
    before = snapshot(src)
    out = str(tmp_path / "out")
    proc = convert(src, out, *FAST)
    assert proc.returncode == 3, proc.stderr[-3000:]
    line = one_line(proc)
    assert line.startswith(
        "img2tfrecord: error budget exceeded: no records written, 2 of 2 inputs rejected; no _SUCCESS was written"
    ), line
    assert not os.path.exists(os.path.join(out, output_files.SUCCESS_FILE))
    assert os.listdir(out) == [output_files.ERRORS_FILE]  # why it failed, and nothing else
    with open(os.path.join(out, output_files.ERRORS_FILE), encoding="utf-8") as f:
        assert len(f.read().splitlines()) == 2
    assert snapshot(src) == before


# -- zip member names --------------------------------------------------------------------------------


def test_a_zip_without_the_utf8_flag_gives_the_records_of_its_folder(tmp_path):
    files = {
        "chat_été/chaton_été_猫.jpg": I.jpeg(20, 14),
        "chat_été/ordinaire.png": I.png(12, 10),
        "犬/子犬_ß.jpg": I.jpeg(16, 18),
        "犬/dog.jpg": I.jpeg(18, 16),
    }
    src = str(tmp_path / "photos")
    write_tree(src, files)
    archive = str(tmp_path / "photos.zip")  # as `zip -r photos.zip photos` on Linux writes it
    write_zip_raw_names(archive, {f"photos/{rel}".encode(): data for rel, data in files.items()})
    options = ("--splits", "train=0.5,test=0.5", "--seed", "3", *FAST)
    from_folder, from_zip = str(tmp_path / "from_folder"), str(tmp_path / "from_zip")
    for given, out in ((src, from_folder), (archive, from_zip)):
        proc = convert(given, out, *options)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert shard_digests(from_zip) == shard_digests(from_folder) != {}
    assert read_manifest(from_zip).labels == read_manifest(from_folder).labels == ("chat_été", "犬")
    assert read_manifest(from_zip).accounting.written == len(files)


# -- --splits val, --image-size past its bound, a glob the shell expanded -----------------------------


def test_val_in_splits_makes_the_validation_split(tmp_path):
    src = str(tmp_path / "photos")
    photos(src, per_class=6)
    out = str(tmp_path / "out")
    proc = run_in_process(
        "convert", "--input", src, "--output", out, "--splits", "train=0.5,val=0.5", "--plan", "--json", *FAST
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(json.loads(proc.stdout)["splits"]) == ["train", "validation"]


def test_an_image_size_past_its_bound_is_refused_when_parsed(tmp_path):
    src = str(tmp_path / "photos")
    photos(src)
    line = refused(tmp_path, "--input", src, "--output", str(tmp_path / "out"), "--image-size", "100000")
    assert line == (
        "img2tfrecord convert: error: argument --image-size: each side must be at most 16384 pixels (a larger "
        "image does not fit a conversion process's memory; docs/options.md#bounds), got '100000'"
    )


def test_a_glob_the_shell_expanded_gets_a_hint_to_quote_it(tmp_path):
    src = str(tmp_path / "photos")
    files = photos(src)
    expanded = [os.path.join(src, rel) for rel in sorted(files) if rel.endswith(".jpg")]  # photos/*/*.jpg
    line = refused(tmp_path, "--input", *expanded, "--output", str(tmp_path / "out"))
    assert line == (
        f"img2tfrecord: error: unrecognized argument {expanded[1]} "
        f"(quote a glob so that the shell does not expand it: --input '{src}/*/*.jpg')"
    )


def test_stray_words_that_are_no_expanded_glob_get_no_hint(tmp_path):
    src = str(tmp_path / "photos")
    photos(src)
    shutil.copytree(src, str(tmp_path / "more"))
    for strays in (["records2"], [str(tmp_path / "missing.jpg")], [str(tmp_path / "more")]):
        with pytest.raises(UsageError) as info:
            api.check_pipeline_args(strays, [], os.path.join(src, "cat", "cat_000.jpg"))
        assert str(info.value) == f"unrecognized argument {strays[0]}"
    with pytest.raises(UsageError) as info:
        api.check_pipeline_args([str(tmp_path / "more")], [], src)  # photos/ more/: `--input *`
    assert str(info.value).endswith(f"--input '{tmp_path}/*')")
