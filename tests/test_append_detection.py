"""``convert --append`` over detection annotations beside their images (Pascal VOC, COCO, manifests of
boxes), also packed in archives: newly annotated images become a generation; a changed or removed one
is refused, or its record withdrawn with ``--accept-changes``."""

from __future__ import annotations

import os
import shutil

import pytest
from helpers.detection_inputs import RECTS, pack, write_coco, write_csv, write_voc
from helpers.outputs import append_refusal

from img2tfrecord import api
from img2tfrecord.errors import UsageError
from img2tfrecord.readers import datasource
from img2tfrecord.readers.records import read_manifest
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas.dataset_json import DatasetManifest
from img2tfrecord.verification.output_checks import verify

OPTIONS = dict(splits={"train": 0.6, "test": 0.4}, seed=5, image_size=64, analyze=False, processes=1)
BEAM = ["--runner=FnApiRunner", "--direct_running_mode=in_memory"]
IMAGES = {f"img{i:02d}": 1 if i % 4 else 6 for i in range(14)}  # some EXIF-rotated


def _convert(src: str, out: str, **extra):
    return api.convert(src, out, pipeline_options=BEAM, **{**OPTIONS, "task": "detection", **extra})


def _objects(output: str) -> dict:
    """relpath -> (split, classes of its objects, their boxes) of every record a reader returns."""
    doc = read_manifest(output)
    found = {}
    for split in doc.splits:
        for example in datasource.iter_split(output, split, decode=False):
            relpath = example[keys.FILENAME].decode()
            assert relpath not in found, f"{relpath} read twice"
            found[relpath] = (split, list(example["image/object/class/text"]), list(example["image/object/bbox/xmin"]))
    return found


def _same_as_a_full_run(src: str, out: str, tmp_path, dropped: bool = True) -> DatasetManifest:
    """Assert ``out`` holds, image for image, the records, splits and box counts of one run over ``src``
    (``dropped``: its dropped boxes too, which count every record written, withdrawn ones included)."""
    full = str(tmp_path / "full")
    doc = _convert(src, full)
    assert _objects(out) == _objects(full)
    appended = read_manifest(out)
    for name, info in doc.splits.items():
        split = appended.splits[name]
        assert (split.num_examples, split.boxes_per_class) == (info.num_examples, info.boxes_per_class)
        if dropped:
            assert split.dropped_boxes == info.dropped_boxes
    report = verify(out)
    assert report.ok, report.text()
    return appended


@pytest.mark.e2e
def test_newly_annotated_voc_images_give_the_records_of_one_run_over_all_of_them(tmp_path):
    pool, src = str(tmp_path / "pool"), str(tmp_path / "in")
    write_voc(pool, IMAGES)
    for folder in ("JPEGImages", "Annotations"):
        os.makedirs(os.path.join(src, folder))
    later = sorted(IMAGES)[10:]

    def arrive(names):
        for name in names:
            shutil.copy2(os.path.join(pool, "JPEGImages", f"{name}.jpg"), os.path.join(src, "JPEGImages"))
            shutil.copy2(os.path.join(pool, "Annotations", f"{name}.xml"), os.path.join(src, "Annotations"))

    arrive(sorted(IMAGES)[:10])
    out = str(tmp_path / "out")
    assert [g.number for g in _convert(src, out, append=True).generations] == [0]  # the first night
    arrive(later)
    second = _convert(src, out, append=True)
    assert (second.generations[-1].inputs, second.generations[-1].written) == (4, 4)
    assert _convert(src, out, append=True).generations == second.generations  # nothing new
    doc = _same_as_a_full_run(src, out, tmp_path)
    assert sum(doc.splits[s].boxes_per_class["cat"] for s in doc.splits) == len(IMAGES)


@pytest.mark.e2e
def test_corrected_and_removed_annotations_are_refused_then_withdrawn_with_accept_changes(tmp_path):
    src = str(tmp_path / "coco")
    write_coco(src, dict(list(IMAGES.items())[:8]))
    listing = os.path.join(src, "annotations", "instances_data.json")
    out = str(tmp_path / "out")
    _convert(listing, out)

    def correct_and_remove(doc):
        doc["annotations"][0]["bbox"][0] += 2  # an annotator moved one object of the first image
        doc["annotations"][1]["category_id"] = doc["annotations"][0]["category_id"]  # and relabelled another
        doc["images"].pop()  # the last image is no longer annotated
        doc["annotations"] = [a for a in doc["annotations"] if a["image_id"] != len(doc["images"]) + 1]

    edited = str(tmp_path / "edited")
    write_coco(edited, dict(list(IMAGES.items())[:8]), change=correct_and_remove)
    shutil.copy(os.path.join(edited, "annotations", "instances_data.json"), listing)  # the images stay as they were
    line = append_refusal(lambda: _convert(listing, out, append=True))
    assert "1 annotated image(s) changed since they were converted (e.g. images/img00.jpg)" in line
    assert "1 converted annotated image(s) removed (e.g. images/img07.jpg)" in line and "--accept-changes" in line
    doc = _convert(listing, out, append=True, accept_changes=True)
    withdrawn = doc.generations[-1].withdrawn
    assert sorted(w.relpath for w in withdrawn) == ["images/img00.jpg", "images/img07.jpg"]
    assert all(w.boxes and sum(w.boxes.values()) >= 2 for w in withdrawn)  # each record's objects, per class
    # Readers and the split's box counts see the corrected annotations only, as a rebuild would.
    _same_as_a_full_run(listing, out, tmp_path, dropped=False)


@pytest.mark.e2e
def test_new_classes_of_objects_in_a_manifest_of_boxes_are_refused_then_added_with_the_next_ids(tmp_path):
    src = str(tmp_path / "boxes")
    listing = write_csv(src, dict(list(IMAGES.items())[:8]))
    out = str(tmp_path / "out")
    first = _convert(listing, out)
    shutil.copy(os.path.join(src, "images", "img00.jpg"), os.path.join(src, "images", "new.jpg"))
    (x0, y0, x1, y1), _ = RECTS["cat"]  # a box that stays inside the 64 px crop
    with open(listing, "a") as f:
        f.write(f"images/new.jpg,zebra,{x0},{y0},{x1},{y1}\n")
    with pytest.raises(UsageError, match=r"1 new class\(es\) of objects \('zebra'\).*--allow-new-classes"):
        _convert(listing, out, append=True)
    doc = _convert(listing, out, append=True, allow_new_classes=True)
    assert doc.labels == first.labels + ("zebra",) and doc.generations[-1].inputs == 1
    with open(os.path.join(out, output_files.LABEL_MAP_FILE)) as f:
        assert "zebra" in f.read()
    assert _objects(out)["images/new.jpg"][1] == [b"zebra"]
    assert verify(out).ok


@pytest.mark.e2e
def test_annotated_images_in_new_archives_give_the_records_of_one_run_over_all_of_them(tmp_path):
    """VOC folders packed in archives (zip and tar.gz): an archive is the entry, its annotations joined
    with its images by the pipeline, its new classes and sizes found at launch."""
    names = sorted(IMAGES)
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    os.makedirs(src)
    for number, (part, archive) in enumerate(((names[:8], "day1.zip"), (names[8:], "day2.tar.gz"))):
        voc = str(tmp_path / f"voc{number}")
        write_voc(voc, {name: IMAGES[name] for name in part})
        pack(voc, os.path.join(src, archive), top="VOC")
        doc = _convert(os.path.join(src, "*"), out, append=True)
    assert [g.inputs for g in doc.generations] == [8, 6]
    _same_as_a_full_run(os.path.join(src, "*"), out, tmp_path)
    # day1.zip exported again: one image annotated with one more object, its last image gone.
    voc = str(tmp_path / "voc-again")
    write_voc(voc, {name: IMAGES[name] for name in names[:7]})
    xml = os.path.join(voc, "Annotations", names[0] + ".xml")
    more = (
        "<object><name>cat</name><bndbox><xmin>30</xmin><ymin>30</ymin><xmax>60</xmax><ymax>60</ymax></bndbox></object>"
    )
    with open(xml) as f:
        text = f.read().replace("</annotation>", more + "</annotation>")
    with open(xml, "w") as f:
        f.write(text)
    pack(voc, os.path.join(src, "day1.zip"), top="VOC")
    line = append_refusal(lambda: _convert(os.path.join(src, "*"), out, append=True))
    assert "1 archive(s) changed since they were converted (e.g. day1.zip)" in line
    doc = _convert(os.path.join(src, "*"), out, append=True, accept_changes=True)
    assert {w.archive for w in doc.generations[-1].withdrawn} == {"day1.zip"} and len(
        doc.generations[-1].withdrawn
    ) == 8
    shutil.rmtree(str(tmp_path / "full"))
    _same_as_a_full_run(os.path.join(src, "*"), out, tmp_path, dropped=False)
