"""``convert --dedupe``: the real CLI on a dataset with planted exact duplicates and bad files.

Copies are planted within a class, across classes, and across splits (names picked with the
converter's own ``assign_split``); a run without ``--dedupe`` shows them written twice and in two
splits, a run with it writes each content once, under the first relative path, and reports every
other copy in ``errors.jsonl``.
"""

from __future__ import annotations

import collections
import hashlib
import io
import itertools
import json
import os
import signal
import subprocess
import tarfile
import time
import zipfile
from typing import Dict, List

import apache_beam as beam
import images as I
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to
from conftest import ROOT, cli_command, cli_env, convert, shard_digests
from helpers.cli import run_in_process

from img2tfrecord import faults
from img2tfrecord.conversion.converter import ImageConverter
from img2tfrecord.conversion.seeded_hashes import assign_split, parse_splits
from img2tfrecord.images.options import ImageOptions
from img2tfrecord.model import DUPLICATE, ERRORS, InlineMember, RowPlacement, WorkItem
from img2tfrecord.readers import records
from img2tfrecord.schemas import features, output_files
from img2tfrecord.sources.archives import member_path
from img2tfrecord.transforms.dedupe import Dedupe

SEED = 3
SPLITS = "train=0.5,validation=0.25,test=0.25"
ONE = ("--processes", "1")  # dedupe happens before the conversion processes: their number is not the point
ARGS = ("--format", "keep", "--num-shards", "2", "--splits", SPLITS, "--seed", str(SEED), "--no-analyze", *ONE)


def photo(seed: int) -> bytes:
    return I.save(I.noise(40, 32, seed), "JPEG", quality=85)


class Planted:
    """relpath -> bytes of the input, and what ``--dedupe`` must make of it."""

    def __init__(self) -> None:
        self.splits = parse_splits(SPLITS)
        self.files: Dict[str, bytes] = {}
        seeds = itertools.count(1)
        for cls in ("bird", "cat", "dog"):
            for i in range(4):
                self.files[f"{cls}/p_{i}.jpg"] = photo(next(seeds))
        self.files["cat/zz_copy.jpg"] = self.files["cat/p_3.jpg"]  # within a class
        self.files["dog/twin.jpg"] = self.files["bird/p_1.jpg"]  # across classes: bird's sorts first
        leak = photo(next(seeds))  # copies in every split and two classes
        for cls, split in (("dog", "train"), ("cat", "validation"), ("dog", "test"), ("cat", "test")):
            self.files[self._named(cls, "leak", split)] = leak
        self.files["cat/broken.jpg"] = I.truncated_jpeg(40, 32)
        self.files["dog/notes.jpg"] = I.text_as_jpg()
        self.files["dog/notes_copy.jpg"] = I.text_as_jpg()  # a copy of a rejected file
        # No class folder, and sorts before its copy: rejected as such, and its copy is still written.
        self.files["aaa.jpg"] = self.files["cat/p_0.jpg"]
        self.bad = {"cat/broken.jpg": "truncated", "dog/notes.jpg": "not_an_image", "aaa.jpg": "no_class_folder"}

    def split_of(self, relpath: str) -> str:
        return assign_split(relpath, SEED, self.splits)

    def _named(self, cls: str, stem: str, split: str) -> str:
        return next(
            name
            for name in (f"{cls}/{stem}_{i:03d}.jpg" for i in itertools.count())
            if name not in self.files and self.split_of(name) == split
        )

    def copies(self) -> List[List[str]]:
        """The relpaths of each content, in sort order, among the files that have a class folder."""
        by_content = collections.defaultdict(list)
        for relpath in sorted(self.files):
            if "/" in relpath:
                by_content[self.files[relpath]].append(relpath)
        return list(by_content.values())

    def duplicates(self) -> Dict[str, str]:
        """Each copy left out -> the relpath kept."""
        return {copy: group[0] for group in self.copies() for copy in group[1:]}

    def written(self) -> Dict[str, str]:
        """sha256 of each content written -> the relpath it is written under."""
        return {
            hashlib.sha256(self.files[group[0]]).hexdigest(): group[0]
            for group in self.copies()
            if group[0] not in self.bad
        }

    def write(self, root: str) -> None:
        for relpath, data in self.files.items():
            os.makedirs(os.path.dirname(os.path.join(root, relpath)), exist_ok=True)
            with open(os.path.join(root, relpath), "wb") as f:
                f.write(data)


def read_back(out: str) -> List[dict]:
    """Every record of an output, TF-free: split, filename, sha256 of the stored bytes, image/key/sha256."""
    doc = records.read_manifest(out)
    found = []
    for split in doc.splits:
        for path, _ in records.shard_paths(out, doc, split):
            for _, _, data in records.iter_records(path, doc.compression.value):
                example = records.parse_example(data, doc.spec)
                found.append(
                    {
                        "split": split,
                        "filename": example[features.FILENAME].decode(),
                        "content": hashlib.sha256(example[features.IMAGE_ENCODED]).hexdigest(),
                        "key": example[features.KEY_SHA256].decode(),
                    }
                )
    return found


def error_rows(out: str) -> List[dict]:
    with open(os.path.join(out, output_files.ERRORS_FILE), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def exact_groups(out: str, target: str) -> dict:
    os.makedirs(target)
    proc = run_in_process("report", out, "--output", target, "--processes", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(os.path.join(target, "report.json"), encoding="utf-8") as f:
        return json.load(f)["duplicates"]["exact"]


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """(Planted, input folder); the input also holds a named pipe, which cannot be read."""
    data = Planted()
    root = str(tmp_path_factory.mktemp("dedupe") / "photos")
    data.write(root)
    os.mkfifo(os.path.join(root, "bird", "pipe.jpg"))
    return data, root


@pytest.fixture(scope="module")
def deduped(planted, tmp_path_factory):
    _, root = planted
    out = str(tmp_path_factory.mktemp("deduped") / "out")
    proc = convert(root, out, *ARGS, "--dedupe")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc.stdout


def test_without_dedupe_the_planted_copies_are_written_again_and_cross_splits(planted, tmp_path):
    data, root = planted
    out = str(tmp_path / "out")
    proc = convert(root, out, *ARGS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = read_back(out)
    splits = collections.defaultdict(set)
    for r in found:
        splits[r["content"]].add(r["split"])
    assert len(found) == len(data.files) - len(data.bad) - 1  # every copy but the rejected notes_copy
    assert max(len(s) for s in splits.values()) == 3, "the leak is in train, validation and test"
    written_twice = [g for g in data.copies() if len(g) > 1 and g[0] not in data.bad]
    exact = exact_groups(out, str(tmp_path / "report"))
    assert exact["groups"] == len(written_twice) == 3
    assert exact["groups_crossing_splits"] == sum(len({data.split_of(r) for r in g}) > 1 for g in written_twice) >= 1


def test_each_content_is_written_once_under_its_first_relpath(planted, deduped):
    data, _ = planted
    out, _ = deduped
    found = read_back(out)
    assert sorted(r["content"] for r in found) == sorted(data.written())
    assert {r["content"]: r["filename"] for r in found} == data.written()
    for r in found:  # --format keep: the stored bytes are the source file's
        assert r["key"] == r["content"] == hashlib.sha256(data.files[r["filename"]]).hexdigest()
        assert r["split"] == data.split_of(r["filename"])


def test_every_copy_left_out_is_a_duplicate_row_naming_the_kept_file(planted, deduped):
    data, _ = planted
    out, _ = deduped
    rows = error_rows(out)
    duplicates = {r["relpath"]: r for r in rows if r["reason"] == DUPLICATE}
    assert {relpath: r["error"].split("same bytes as ")[1].split(",")[0] for relpath, r in duplicates.items()} == (
        data.duplicates()
    )
    assert len(duplicates) == 6 and {"cat/zz_copy.jpg", "dog/twin.jpg", "dog/notes_copy.jpg"} <= set(duplicates)
    others = {r["relpath"]: r["reason"] for r in rows if r["reason"] != DUPLICATE}
    # The named pipe could not be read for its digest: the converter still reports it.
    assert others == {**data.bad, "bird/pipe.jpg": "unreadable"}


def test_the_accounting_holds_and_the_summary_lists_duplicates(planted, deduped):
    data, _ = planted
    out, stdout = deduped
    acc = records.read_manifest(out).accounting
    inputs = len(data.files) + 1  # and the named pipe
    assert acc.inputs == inputs == acc.written + acc.rejected
    assert acc.written == len(data.written())
    assert acc.rejected_by_reason == dict(sorted(collections.Counter(r["reason"] for r in error_rows(out)).items()))
    assert acc.rejected_by_reason[DUPLICATE] == len(data.duplicates())
    assert f"  {DUPLICATE}: {len(data.duplicates())}" in stdout.splitlines()
    assert records.read_manifest(out).options["dedupe"] is True


def test_a_second_run_writes_the_same_bytes_and_report_finds_no_exact_duplicate(planted, deduped, tmp_path):
    _, root = planted
    out, _ = deduped
    again = str(tmp_path / "again")
    proc = convert(root, again, *ARGS, "--dedupe")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert shard_digests(again) == shard_digests(out) != {}
    exact = exact_groups(out, str(tmp_path / "report"))
    assert (exact["groups"], exact["records"], exact["pairs"]) == (0, 0, {})


def test_resume_with_another_dedupe_is_refused_and_the_same_one_finishes(planted, deduped, tmp_path):
    """A run killed before ``_SUCCESS``: ``--dedupe`` is part of what a ``--resume`` must repeat."""
    _, root = planted
    reference, _ = deduped
    out = str(tmp_path / "out")
    marker = str(tmp_path / "paused")
    env = cli_env({faults.ENV: "pause:finalizing", faults.MARKER_ENV: marker})
    cmd = cli_command("convert", "--input", root, "--output", out, *ARGS, "--dedupe")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while not os.path.exists(marker):
            assert proc.poll() is None and time.monotonic() < deadline, "the run never paused before _SUCCESS"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert not os.path.exists(os.path.join(out, output_files.SUCCESS_FILE))

    refused = convert(root, out, *ARGS, "--resume", runner=())
    assert refused.returncode == 2 and "differently: --dedupe is false here but true" in refused.stderr, refused.stderr[
        -2000:
    ]
    assert len(refused.stderr.strip().splitlines()) == 1
    resumed = convert(root, out, *ARGS, "--dedupe", "--resume", runner=())
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert shard_digests(out) == shard_digests(reference)
    assert records.read_manifest(out).accounting == records.read_manifest(reference).accounting


def test_dedupe_with_sequence_is_a_usage_error(tmp_path):
    proc = run_in_process(
        "convert", "--input", str(tmp_path), "--output", str(tmp_path / "out"), "--sequence", "--dedupe"
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "img2tfrecord: error: --dedupe compares single files; a --sequence clip is many frames: give one of them"
    ]


def test_archives_zip_and_tar_gz_members_are_deduped(tmp_path):
    """A glob of a zip and a tar.gz: copies inside one archive and the same relpath in both."""
    one, two, three = photo(101), photo(102), photo(103)
    in_zip = {"cat/a.jpg": one, "cat/b.jpg": two, "dog/a_copy.jpg": one, "dog/c.jpg": three}
    in_tgz = {"cat/a.jpg": one, "dog/d.jpg": photo(104), "dog/e.jpg": photo(104)}
    folder = tmp_path / "archives"
    folder.mkdir()
    with zipfile.ZipFile(folder / "part-1.zip", "w") as z:
        for name, data in in_zip.items():
            z.writestr(name, data, zipfile.ZIP_DEFLATED)
    with tarfile.open(folder / "part-2.tar.gz", "w:gz") as t:
        for name, data in in_tgz.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    out = str(tmp_path / "out")
    proc = convert(str(folder / "part-*"), out, *ARGS, "--dedupe")
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = read_back(out)
    assert sorted(r["filename"] for r in found) == ["cat/a.jpg", "cat/b.jpg", "dog/c.jpg", "dog/d.jpg"]
    assert len({r["content"] for r in found}) == 4
    zipped, tgz = str(folder / "part-1.zip"), str(folder / "part-2.tar.gz")
    duplicates = {r["path"]: r["error"] for r in error_rows(out) if r["reason"] == DUPLICATE}
    assert sorted(duplicates) == [
        member_path(zipped, "dog/a_copy.jpg"),
        member_path(tgz, "cat/a.jpg"),
        member_path(tgz, "dog/e.jpg"),
    ]
    assert duplicates[member_path(zipped, "dog/a_copy.jpg")].startswith("same bytes as cat/a.jpg,")
    # The same relpath in two archives: the message names the kept member by its path.
    assert duplicates[member_path(tgz, "cat/a.jpg")].startswith(f"same bytes as {member_path(zipped, 'cat/a.jpg')},")
    assert duplicates[member_path(tgz, "dog/e.jpg")].startswith("same bytes as dog/d.jpg,")
    acc = records.read_manifest(out).accounting
    assert acc.inputs == 7 == acc.written + acc.rejected and acc.rejected_by_reason == {DUPLICATE: 3}


def test_detection_copies_keep_the_first_images_boxes(tmp_path):
    """Copies of an image's bytes under other names, with other boxes: the first name and its boxes are kept."""
    root = tmp_path / "boxes"
    (root / "images").mkdir(parents=True)
    same, other = photo(201), photo(202)
    for name, data in (("a.jpg", same), ("b.jpg", same), ("c.jpg", other)):
        (root / "images" / name).write_bytes(data)
    rows = [
        "path,label,xmin,ymin,xmax,ymax",
        "images/b.jpg,dog,1,1,20,20",
        "images/b.jpg,dog,2,2,30,30",
        "images/a.jpg,cat,5,5,25,25",
        "images/c.jpg,cat,0,0,10,10",
    ]
    (root / "boxes.csv").write_text("\n".join(rows) + "\n")
    out = str(tmp_path / "out")
    proc = convert(str(root / "boxes.csv"), out, "--dedupe", "--no-analyze", "--format", "keep", *ONE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = records.read_manifest(out)
    assert doc.accounting.inputs == 3 == doc.accounting.written + doc.accounting.rejected
    assert doc.splits["train"].boxes_per_class == {"cat": 2}
    assert sorted(r["filename"] for r in read_back(out)) == ["images/a.jpg", "images/c.jpg"]
    (row,) = error_rows(out)
    assert (row["relpath"], row["reason"]) == ("images/b.jpg", DUPLICATE)
    assert row["error"].startswith("same bytes as images/a.jpg,") and "2 box(es) are not written" in row["error"]


def test_the_dedupe_transform_keeps_the_first_copy_and_passes_on_what_it_cannot_compare(tmp_path):
    """The transform alone, in a TestPipeline: members carrying their bytes, a missing file, a misplaced copy."""
    same, other = photo(301), photo(302)

    def member(archive: str, relpath: str, data: bytes) -> WorkItem:
        return WorkItem(member_path(archive, relpath), relpath, len(data), InlineMember(data))

    kept = member("b.tgz", "cat/1.jpg", same)
    items = [
        member("c.tgz", "cat/1.jpg", same),  # the same relpath in a later archive
        member("a.tgz", "dog/2.jpg", same),
        kept,
        member("a.tgz", "cat/3.jpg", other),
        member("a.tgz", "0.jpg", same),  # outside a class folder: sorts first, but has no place
        WorkItem(str(tmp_path / "gone.jpg"), "cat/gone.jpg", 0, row=RowPlacement(None, "cat")),  # cannot be read
    ]
    converter = ImageConverter(ImageOptions(format="keep"), "class", (("train", 1.0),), 0)
    options = PipelineOptions(["--runner=FnApiRunner", "--direct_running_mode=in_memory"])
    with test_pipeline.TestPipeline(argv=[], options=options) as p:
        out = p | beam.Create(items, reshuffle=False) | Dedupe(converter, ["train"])
        passed = out["items"] | "Relpaths" >> beam.Map(lambda i: (i.path, i.relpath))
        rows = out[ERRORS] | "Rows" >> beam.Map(lambda r: (r["path"], r["reason"], r["error"].split(", the copy")[0]))
        assert_that(
            passed,
            equal_to([(i.path, i.relpath) for i in (kept, items[3], items[4], items[5])]),
            label="passed",
        )
        assert_that(
            rows,
            equal_to(
                [
                    (items[0].path, DUPLICATE, f"same bytes as {kept.path}"),
                    (items[1].path, DUPLICATE, "same bytes as cat/1.jpg"),
                ]
            ),
            label="rows",
        )
