"""img2tfrecord.beam in a user's pipeline: the records and the output folder `convert` writes, rejections as rows."""

from __future__ import annotations

import csv
import json
import os
from typing import List, Tuple

import apache_beam as beam
import images as I
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to
from conftest import IN_MEMORY, convert

from img2tfrecord import UsageError
from img2tfrecord.beam import ExamplesToTFRecords, ImageRef, ImagesToExamples, ImagesToTFRecords
from img2tfrecord.conversion.record_sizes import SAMPLE_SIZE, seeded_sample
from img2tfrecord.conversion.seeded_hashes import assign_split, parse_splits
from img2tfrecord.readers import records
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas.dataset_json import DatasetManifest
from img2tfrecord.schemas.example_proto import Example
from img2tfrecord.verification.output_checks import verify

OPTIONS = {"image_size": 32, "splits": "train=0.7,test=0.3", "seed": 4}
FLAGS = ("--image-size", "32", "--splits", "train=0.7,test=0.3", "--seed", "4")
# convert's worker pool is not what these comparisons are about.
ONE_PROCESS = ("--processes", "1")


def references(sample_dir: str, tmp_path) -> list:
    """(uri, label) of every sample image, a missing file and a file that is no image."""
    refs = [
        (os.path.join(sample_dir, c, name), c)
        for c in sorted(os.listdir(sample_dir))
        for name in sorted(os.listdir(os.path.join(sample_dir, c)))
    ]
    notes = tmp_path / "notes.jpg"
    notes.write_bytes(I.text_as_jpg())
    return refs + [(str(tmp_path / "missing.jpg"), "circle"), (str(notes), "square")]


def csv_manifest(tmp_path, refs) -> str:
    """``refs`` as the rows of ``lists/refs.csv``, outside the images' folder: relpaths are the whole paths."""
    listing = tmp_path / "lists" / "refs.csv"
    listing.parent.mkdir()
    with open(listing, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "label"])
        w.writerows(refs)
    return str(listing)


def written(output: str):
    """(split, class name, serialized record) of every record of an output, and its error rows."""
    doc = records.read_manifest(output)
    found = []
    for split in doc.splits:
        for path, _ in records.shard_paths(output, doc, split):
            for _, _, data in records.iter_records(path):
                example = records.parse_example(data, doc.spec)
                found.append((split, example["image/class/text"].decode(), data))
    with open(os.path.join(output, output_files.ERRORS_FILE), encoding="utf-8") as f:
        errors = [json.loads(line) for line in f]
    return found, list(doc.labels), errors


def run(refs, **options):
    """The transform in a test pipeline; -> its three outputs, checked inside the pipeline by ``check``."""
    pipeline = BeamTestPipeline(options=beam.options.pipeline_options.PipelineOptions(list(IN_MEMORY)))
    converted = pipeline | beam.Create(refs) | ImagesToExamples(**options)
    return pipeline, converted


def test_the_records_and_shards_are_those_convert_writes_from_a_manifest_of_the_same_uris(sample_dir, tmp_path):
    """ImagesToExamples gives convert's records; ExamplesToTFRecords places them in convert's shards."""
    refs = references(sample_dir, tmp_path)
    listing = csv_manifest(tmp_path, refs)
    out = str(tmp_path / "out")
    proc = convert(listing, out, *FLAGS, "--num-shards", "3", *ONE_PROCESS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected, labels, errors = written(out)
    assert len(expected) == len(refs) - 2 and {e["reason"] for e in errors} == {"not_found", "not_an_image"}

    pipeline, converted = run([ImageRef(uri, label) for uri, label in refs], **OPTIONS)
    assert_that(
        converted["examples"] | beam.Map(lambda e: (e.split, e.class_name, e.example)),
        equal_to([tuple(e) for e in expected]),
        label="SameRecords",
    )
    shards_dir = str(tmp_path / "shards")
    placed = converted["examples"] | ExamplesToTFRecords(shards_dir, ["train", "test"], seed=4, num_shards=3)
    doc = records.read_manifest(out)
    assert_that(
        placed["shards"] | beam.Map(lambda c: (c.file, c.num_records, c.sha256, c.index_file)),
        equal_to([(s.file, s.num_records, s.sha256, s.index) for split in doc.splits.values() for s in split.shards]),
        label="SameShards",
    )
    assert_that(
        converted["rejected"] | beam.Map(lambda row: (row["relpath"], row["reason"])),
        equal_to([(e["relpath"], e["reason"]) for e in errors]),
        label="SameRejections",
    )
    assert_that(converted["labels"], equal_to([labels]), label="SameClassIds")
    pipeline.run().wait_until_finish()


def test_every_reference_is_a_record_or_a_row_with_its_reason(sample_dir, tmp_path):
    good = os.path.join(sample_dir, "circle", sorted(os.listdir(os.path.join(sample_dir, "circle")))[0])
    refs = [
        {"uri": good, "label": "circle"},
        {"path": good, "label": 7},  # "path" is taken for "uri"; an int label is its text
        {"label": "circle"},  # no uri
        {"uri": good, "label": 1.5},
        {"uri": good, "label": True},
        {"uri": good},  # no label
        {"uri": good, "label": "two\nlines"},
        "not a reference",
        ImageRef(good, "circle", boxes=[("dot", 1, 1, 5, 5)]),  # boxes, and the task is classification
    ]
    pipeline, converted = run(refs, image_size=16)
    assert_that(converted["examples"] | beam.Map(lambda e: e.class_name), equal_to(["circle", "7"]), label="Records")
    assert_that(
        converted["rejected"] | beam.Map(lambda row: row["reason"]),
        equal_to(
            ["bad_reference", "bad_label", "bad_label", "missing_label", "bad_label", "bad_reference", "bad_reference"]
        ),
        label="Rows",
    )
    assert_that(converted["labels"], equal_to([["7", "circle"]]), label="Labels")
    pipeline.run().wait_until_finish()


def test_unlabeled_references_and_an_empty_collection(sample_dir):
    good = os.path.join(sample_dir, "square", sorted(os.listdir(os.path.join(sample_dir, "square")))[0])
    pipeline, converted = run([ImageRef(good, "ignored")], image_size=16, labeled=False)
    assert_that(converted["examples"] | beam.Map(lambda e: e.class_name), equal_to([None]), label="Unlabeled")
    assert_that(converted["labels"], equal_to([[]]), label="NoClasses")
    pipeline.run().wait_until_finish()

    pipeline, converted = run([], image_size=16)
    assert_that(converted["examples"], equal_to([]), label="NoRecords")
    assert_that(converted["rejected"], equal_to([]), label="NoRows")
    pipeline.run().wait_until_finish()


def test_options_are_checked_when_the_transform_is_built():
    with pytest.raises(UsageError, match=r"argument --format: invalid choice: 'gif'"):
        ImagesToExamples(format="gif")
    with pytest.raises(UsageError, match="split fractions must sum to 1"):
        ImagesToExamples(splits={"train": 0.5, "test": 0.7})
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'num_shards'"):
        ImagesToExamples(num_shards=3)  # type: ignore[call-arg]


def _write_folder(refs, output: str, **options) -> None:
    """ImagesToTFRecords in a pipeline of its own, run to the end."""
    with beam.Pipeline(options=beam.options.pipeline_options.PipelineOptions(list(IN_MEMORY))) as p:
        _ = p | beam.Create(refs) | ImagesToTFRecords(output, **options)


def _comparable(output: str) -> Tuple[DatasetManifest, List[str]]:
    """An output's manifest without what names the run (time, input, fingerprint), and its error rows."""
    doc = records.read_manifest(output)
    assert doc.run_fingerprint, output
    with open(os.path.join(output, output_files.ERRORS_FILE), encoding="utf-8") as f:
        errors = sorted(f.read().splitlines())
    return doc.replace(created="", input="", run_fingerprint=None), errors


def test_images_to_tfrecords_writes_the_folder_convert_writes_from_the_same_rows(sample_dir, tmp_path):
    """Shard counts sized in the graph, shards, indexes, statistics and error rows equal convert's."""
    refs = references(sample_dir, tmp_path)
    listing = csv_manifest(tmp_path, refs)
    out = str(tmp_path / "cli")
    small_shards = ("--shard-size-mb", "0.01")  # several shards per split, counted from a sample
    proc = convert(listing, out, *FLAGS, *small_shards, *ONE_PROCESS, analyze=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected, errors = _comparable(out)
    assert all(len(split.shards) > 1 for split in expected.splits.values())
    # convert also records the manifest's rows it converted (its ledger), which a later --append compares;
    # rows given to a pipeline have no listing to record.
    assert [g.number for g in expected.generations] == [0]

    in_beam = str(tmp_path / "beam")
    _write_folder([ImageRef(uri, label) for uri, label in refs], in_beam, **OPTIONS, shard_size_mb=0.01)
    assert _comparable(in_beam) == (expected.replace(generations=()), errors)
    assert sorted(os.listdir(in_beam)) == sorted(set(os.listdir(out)) - {output_files.LEDGER_DIR})
    for index in os.listdir(os.path.join(out, output_files.INDEX_DIR)):
        with open(os.path.join(out, output_files.INDEX_DIR, index), "rb") as a:
            with open(os.path.join(in_beam, output_files.INDEX_DIR, index), "rb") as b:
                assert a.read() == b.read(), index
    report = verify(in_beam)
    assert report.ok, report.problems


def test_images_to_tfrecords_returns_the_manifest_and_takes_fixed_shard_counts(sample_dir, tmp_path):
    refs = [ImageRef(uri, label) for uri, label in references(sample_dir, tmp_path)]
    out = str(tmp_path / "out")
    pipeline = BeamTestPipeline(options=beam.options.pipeline_options.PipelineOptions(list(IN_MEMORY)))
    written = (
        pipeline
        | beam.Create(refs)
        | ImagesToTFRecords(
            out, image_size=16, splits={"train": 0.5, "test": 0.5}, num_shards=3, compression="gzip", analyze=False
        )
    )
    assert_that(
        written | beam.Map(lambda doc: (doc.accounting.inputs, doc.accounting.written + doc.accounting.rejected)),
        equal_to([(len(refs), len(refs))]),
    )
    pipeline.run().wait_until_finish()
    doc = records.read_manifest(out)
    assert {name: len(split.shards) for name, split in doc.splits.items()} == {"test": 3, "train": 3}
    assert doc.compression.value == "gzip" and doc.statistics is None
    assert doc.accounting.rejected_by_reason == {"not_found": 1, "not_an_image": 1}
    assert os.path.exists(os.path.join(out, output_files.SUCCESS_FILE))


def test_images_to_tfrecords_refuses_a_used_output_and_fails_on_an_empty_input(sample_dir, tmp_path):
    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match=r"already holds 1 file\(s\)"):
        _write_folder([], str(used), analyze=False)
    assert os.listdir(used) == ["notes.txt"]  # nothing written, nothing removed

    empty = str(tmp_path / "empty")
    with pytest.raises(Exception, match="no records written, no inputs"):
        _write_folder([], empty, analyze=False)
    assert not os.path.exists(os.path.join(empty, output_files.SUCCESS_FILE))

    good = os.path.join(sample_dir, "circle", sorted(os.listdir(os.path.join(sample_dir, "circle")))[0])
    _write_folder([ImageRef(good, "circle")], empty, analyze=False, overwrite=True)  # a rerun replaces it
    assert records.read_manifest(empty).accounting.written == 1


def test_references_with_boxes_give_the_detection_folder_of_a_manifest_of_boxes(tmp_path):
    """task="detection": each reference's boxes, in source pixels, as the rows of a manifest of boxes."""
    from helpers.detection_inputs import RECTS, write_csv

    root = str(tmp_path / "in")
    listing = write_csv(root, {"a": 1, "b": 6, "c": 3}, extra_rows="images/a.jpg,cat,5,5,1,1\n")  # an empty box
    out = str(tmp_path / "cli")
    proc = convert(
        listing, out, "--task", "detection", "--image-size", "64", "--resize", "fill", "--seed", "2", *ONE_PROCESS
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    boxes = [
        {"label": label, "xmin": x0, "ymin": y0, "xmax": x1, "ymax": y1}
        for label, ((x0, y0, x1, y1), _) in RECTS.items()
    ]
    refs = [
        ImageRef(os.path.join(root, "images", "a.jpg"), boxes=[*boxes, ("cat", 5, 5, 1, 1)]),
        {"uri": os.path.join(root, "images", "b.jpg"), "boxes": boxes},
        ImageRef(os.path.join(root, "images", "c.jpg"), label="ignored", boxes=[tuple(b.values()) for b in boxes]),
    ]
    in_beam = str(tmp_path / "beam")
    _write_folder(refs, in_beam, root=root, task="detection", image_size=64, resize="fill", seed=2)
    expected, errors = _comparable(out)
    assert [g.number for g in expected.generations] == [0]  # convert's ledger (see above)
    assert _comparable(in_beam) == (expected.replace(generations=()), errors)
    with (
        open(os.path.join(in_beam, output_files.LABEL_MAP_FILE)) as a,
        open(os.path.join(out, output_files.LABEL_MAP_FILE)) as b,
    ):
        assert a.read() == b.read()
    report = verify(in_beam)
    assert report.ok, report.problems


def test_boxes_are_checked_as_the_rows_of_a_manifest_of_boxes(sample_dir):
    good = os.path.join(sample_dir, "circle", sorted(os.listdir(os.path.join(sample_dir, "circle")))[0])
    refs = [
        ImageRef(
            good,
            boxes=[("dot", 1, 1, 5, 5), ("dot", 1, 1, "x", 5), "not a box", {"label": "", "xmin": 0}],
            metadata={"camera": "left"},
        ),
        ImageRef(good, boxes="dot,1,1,5,5"),
        ImageRef(good, boxes=[]),  # an image without boxes
    ]
    pipeline, converted = run(refs, image_size=16, task="detection", require_boxes=True)

    def summary(converted_example):
        feature = Example.FromString(converted_example.example).features.feature
        dropped = len(feature["image/object/bbox/xmin"].float_list.value)
        return converted_example.split, dropped, list(feature["metadata/camera"].bytes_list.value)

    assert_that(converted["examples"] | beam.Map(summary), equal_to([("train", 1, [b"left"])]), label="OneRecord")
    assert_that(
        converted["rejected"] | beam.Map(lambda row: row["reason"]),
        equal_to(["bad_reference", "no_boxes"]),
        label="Rows",
    )
    assert_that(converted["labels"], equal_to([["dot"]]), label="Labels")
    pipeline.run().wait_until_finish()
    # A reference with boxes given to the classification task: test_every_reference_is_a_record_or_a_row_...
    with pytest.raises(UsageError, match="--require-boxes applies to detection"):
        ImagesToExamples(require_boxes=True)


def test_metadata_is_copied_into_the_records_and_every_reader_still_reads_them(sample_dir, tmp_path):
    import tensorflow as tf

    import img2tfrecord

    names = sorted(os.listdir(os.path.join(sample_dir, "square")))[:3]
    metadata = {"photographer": "ann", "year": 2024, "score": 0.5, "tags": ["a", "b"], "raw": b"\x00", "gone": None}
    refs = [
        ImageRef(os.path.join(sample_dir, "square", names[0]), "square", metadata=metadata),
        {"uri": os.path.join(sample_dir, "square", names[1]), "label": "square", "metadata": {"flags": [True, 2]}},
        ImageRef(os.path.join(sample_dir, "square", names[2]), "square", metadata={"bad": {"nested": 1}}),
        ImageRef(os.path.join(sample_dir, "square", names[2]), "square", metadata={"no spaces": 1}),
    ]
    out = str(tmp_path / "out")
    _write_folder(refs, out, image_size=16, analyze=False)
    doc = records.read_manifest(out)
    assert doc.accounting.rejected_by_reason == {"bad_metadata": 2}
    with open(os.path.join(out, output_files.ERRORS_FILE)) as f:
        messages = sorted(json.loads(line)["error"] for line in f)
    assert "metadata 'bad': {'nested': 1} is not a string, bytes, number or bool" in messages[0]
    assert "metadata name 'no spaces'" in messages[1]
    found = {}
    for path, _ in records.shard_paths(out, doc, "train"):
        for raw in tf.data.TFRecordDataset(path):
            feature = tf.train.Example.FromString(raw.numpy()).features.feature
            found[feature["image/filename"].bytes_list.value[0].decode()] = {
                k: v for k, v in feature.items() if k.startswith("metadata/")
            }
    first = found[os.path.join(sample_dir, "square", names[0])]
    assert sorted(first) == [
        "metadata/photographer",
        "metadata/raw",
        "metadata/score",
        "metadata/tags",
        "metadata/year",
    ]
    assert first["metadata/tags"].bytes_list.value == [b"a", b"b"] and first["metadata/raw"].bytes_list.value == [
        b"\x00"
    ]
    assert first["metadata/year"].int64_list.value == [2024] and first["metadata/score"].float_list.value == [0.5]
    assert found[os.path.join(sample_dir, "square", names[1])]["metadata/flags"].int64_list.value == [1, 2]
    images, labels = next(iter(img2tfrecord.load(out, split="train", batch_size=2)))
    assert images.shape[0] == 2 and list(labels.numpy()) == [0, 0]
    report = verify(out)
    assert report.ok, report.problems


def test_examples_to_tfrecords_sizes_shards_from_the_records_and_rejects_other_splits(sample_dir, tmp_path):
    refs = [ImageRef(uri, label) for uri, label in references(sample_dir, tmp_path)][:-2]
    out = str(tmp_path / "out")
    pipeline = BeamTestPipeline(options=beam.options.pipeline_options.PipelineOptions(list(IN_MEMORY)))
    converted = pipeline | beam.Create(refs) | ImagesToExamples(image_size=16, splits="train=0.5,test=0.5", seed=1)
    placed = converted["examples"] | ExamplesToTFRecords(out, ["train"], seed=1, shard_size_mb=0.01, compression="gzip")
    splits = parse_splits("train=0.5,test=0.5")
    in_train = sum(1 for ref in refs if assign_split(ref.uri, 1, splits) == "train")
    assert_that(
        placed["rejected"] | beam.Map(lambda row: row["reason"]),
        equal_to(["unknown_split"] * (len(refs) - in_train)),
        label="OtherSplits",
    )
    pipeline.run().wait_until_finish()
    files = sorted(os.listdir(out))
    assert files and all(f.startswith("train-") and f.endswith(".tfrecord.gz") for f in files)  # staging removed
    assert len(files) > 1 and files[0].endswith(f"-of-{len(files):05d}.tfrecord.gz")
    assert sum(1 for f in files for _ in records.iter_records(os.path.join(out, f), "gzip")) == in_train
    with pytest.raises(UsageError, match="num_shards: 0 is not a positive integer"):
        ExamplesToTFRecords(out, num_shards=0)


def test_the_size_sample_does_not_depend_on_the_order_of_the_references():
    paths = [(f"/images/{i}.jpg", f"{i}.jpg") for i in range(100)]
    sample = seeded_sample(paths, seed=5)
    assert len(sample) == SAMPLE_SIZE and sample == seeded_sample(reversed(paths), seed=5)
    assert sample != seeded_sample(paths, seed=6)


def test_images_to_tfrecords_options_are_checked_when_the_transform_is_built(tmp_path):
    out = str(tmp_path / "out")
    with pytest.raises(UsageError, match=r"argument --compression: invalid choice: 'zip'"):
        ImagesToTFRecords(out, compression="zip")
    with pytest.raises(UsageError, match="--exact-statistics applies to the analysis"):
        ImagesToTFRecords(out, analyze=False, exact_statistics=True)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'sequence'"):
        ImagesToTFRecords(out, sequence=True)  # type: ignore[call-arg]
    assert not os.path.exists(out)
