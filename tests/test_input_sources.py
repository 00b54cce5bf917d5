"""Every input source (``sources/inputs/``) gives the same work items, junk names and error rows read in
this process (what ``--plan`` runs) and as the pipeline's ``Discover`` step (its Beam joins included)."""

from __future__ import annotations

import csv
import os
from typing import Callable, Dict

import apache_beam as beam
import images as I
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to
from helpers.datasets import JUNK, write_tar, write_tree, write_zip
from helpers.detection_inputs import VOC_TOP, pack, write_bad_voc, write_coco
from helpers.shared_builds import write_box_manifest, write_split_coco

from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.kinds import plan_input
from img2tfrecord.pipeline.listing import list_input, listing_once
from img2tfrecord.sources.inputs import ERRORS, FILES, SKIPPED, Discovered, discover
from img2tfrecord.transforms.discover import Discover

IMAGES = {
    "cat/a.jpg": I.jpeg(20, 16),
    "cat/b.png": I.png(12, 10),
    "dog/c.jpg": I.jpeg(18, 14),
    "dog/d.txt": b"not an image, found only when converted",
}


def _folder(root: str) -> str:
    write_tree(os.path.join(root, "in"), {**IMAGES, **JUNK})
    return os.path.join(root, "in")


def _zip(root: str) -> str:
    write_zip(os.path.join(root, "a.zip"), {**IMAGES, **JUNK}, top="flowers")  # a wrapping folder, stripped
    write_tar(os.path.join(root, "b.tar.gz"), IMAGES, mode="w:gz")
    with open(os.path.join(root, "c.zip"), "wb") as f:
        f.write(b"not a zip")
    return os.path.join(root, "*")


def _manifest(root: str) -> str:
    write_tree(os.path.join(root, "img"), IMAGES)
    path = os.path.join(root, "list.csv")
    with open(path, "w", newline="") as f:
        rows = csv.writer(f)
        rows.writerow(["path", "label"])
        rows.writerow(["img/cat/a.jpg", "cat"])
        rows.writerow(["img/dog/c.jpg", "dog"])
        rows.writerow(["", "dog"])  # no path: an error row
        rows.writerow(["img/missing.jpg", "cat"])  # found missing only when converted
    return path


def _voc(root: str) -> str:
    write_bad_voc(os.path.join(root, "voc"))
    return os.path.join(root, "voc")


def _voc_tar(root: str) -> str:
    write_bad_voc(os.path.join(root, "voc"))
    return pack(os.path.join(root, "voc"), os.path.join(root, "voc.tar.gz"), VOC_TOP)


def _coco(root: str) -> str:
    return write_split_coco(os.path.join(root, "coco"))


def _coco_zip(root: str) -> str:
    write_coco(os.path.join(root, "coco"), {"a": 1, "b": 6})
    return pack(os.path.join(root, "coco"), os.path.join(root, "coco.zip"))


def _boxes(root: str) -> str:
    return write_box_manifest(os.path.join(root, "boxes"))


INPUTS: Dict[str, Callable[[str], str]] = {
    "folder": _folder,
    "archives": _zip,
    "manifest": _manifest,
    "voc": _voc,
    "voc_tar": _voc_tar,
    "coco": _coco,
    "coco_zip": _coco_zip,
    "boxes": _boxes,
}
TASKS = {"voc": "detection", "voc_tar": "detection", "coco": "detection", "coco_zip": "detection", "boxes": "detection"}


def _found(kind: str, tmp_path):
    given = INPUTS[kind](str(tmp_path))
    config = ConvertConfig(input=given, output=str(tmp_path / "out"), analyze=False, task=TASKS.get(kind))
    with listing_once():
        kind, plan = plan_input(config)
        source = kind.source(config, plan)
        here = discover(source, list_input)
    return source, here


def _rows(found: Discovered):
    return sorted((row["path"], row["reason"]) for row in found.errors)


@pytest.mark.e2e
@pytest.mark.parametrize("kind", sorted(INPUTS))
def test_a_source_gives_the_same_findings_in_this_process_and_in_the_pipeline(kind, tmp_path):
    source, here = _found(kind, tmp_path)
    assert here.files, "every input gives some work items"
    options = PipelineOptions(["--runner=FnApiRunner", "--direct_running_mode=in_memory"])
    with test_pipeline.TestPipeline(argv=[], options=options) as p:
        found = p | Discover(source)
        assert_that(found[FILES], equal_to(here.files), label="files")
        assert_that(found[SKIPPED], equal_to(here.skipped), label="skipped")
        reasons = found[ERRORS] | beam.Map(lambda row: (row["path"], row["reason"]))
        assert_that(reasons, equal_to(_rows(here)), label="errors")


def test_a_folder_source_skips_junk_and_rejects_nothing_it_cannot_judge_unread(tmp_path):
    _, found = _found("folder", tmp_path)
    assert [f.relpath for f in found.files] == sorted(IMAGES)  # d.txt is judged when converted, not here
    assert sorted(found.skipped) == sorted(JUNK) and not found.errors


def test_an_archive_source_strips_the_wrapping_folder_and_reports_a_bad_archive(tmp_path):
    _, found = _found("archives", tmp_path)
    relpaths = sorted(f.relpath for f in found.files)
    assert relpaths == sorted([*IMAGES, *IMAGES]), "flowers/ is stripped from a.zip's names"
    assert [(os.path.basename(p), r) for p, r in _rows(found)] == [("c.zip", "not_an_archive")]
    assert sorted(found.skipped) == sorted(f"{tmp_path}/a.zip!/flowers/{name}" for name in JUNK)


def test_a_manifest_source_gives_a_row_without_a_path_as_an_error(tmp_path):
    _, found = _found("manifest", tmp_path)
    assert sorted(f.relpath for f in found.files) == ["img/cat/a.jpg", "img/dog/c.jpg", "img/missing.jpg"]
    assert [reason for _, reason in _rows(found)] == ["bad_manifest_row"]


def test_a_listing_digest_hashes_the_json_line_of_each_entry():
    """The digest formats a listing's entries directly; its bytes stay those of json.dumps (an old
    output's fingerprint still matches), whatever the name holds."""
    import hashlib
    import json

    from img2tfrecord.pipeline.listing import digest

    entries = [
        ("class0/a.jpg", 12),
        ('ü/\udcff"\\\n\t.jpg', 2**70, 1.5e-300),
        ("x", 1723456789.123456, 3),
        ("", 0, 0.0),
        ("flag", True),  # not a plain number: json.dumps itself
        ["a list", 1],
        ("odd", float("nan")),
    ]
    expected = hashlib.sha256()
    for entry in entries:
        expected.update(json.dumps(entry, sort_keys=True, default=str).encode("utf-8", "surrogateescape") + b"\n")
    assert digest(entries) == expected.hexdigest()
