"""img2tfrecord.beam.ImagesToExamples inside a user's pipeline: the records `convert` writes, rejections as rows."""

from __future__ import annotations

import csv
import json
import os

import apache_beam as beam
import images as I
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to
from conftest import IN_MEMORY, convert

from img2tfrecord import UsageError
from img2tfrecord.beam import ImageRef, ImagesToExamples
from img2tfrecord.readers import records
from img2tfrecord.schemas import manifest

OPTIONS = {"image_size": 32, "splits": "train=0.7,test=0.3", "seed": 4}
FLAGS = ("--image-size", "32", "--splits", "train=0.7,test=0.3", "--seed", "4")


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


def written(output: str):
    """(split, class name, serialized record) of every record of an output, and its error rows."""
    doc = records.read_manifest(output)
    found = []
    for split in doc.splits:
        for path, _ in records.shard_paths(output, doc, split):
            for _, _, data in records.iter_records(path):
                example = records.parse_example(data, doc.spec)
                found.append((split, example["image/class/text"].decode(), data))
    with open(os.path.join(output, manifest.ERRORS_FILE), encoding="utf-8") as f:
        errors = [json.loads(line) for line in f]
    return found, list(doc.labels), errors


def run(refs, **options):
    """The transform in a test pipeline; -> its three outputs, checked inside the pipeline by ``check``."""
    pipeline = BeamTestPipeline(options=beam.options.pipeline_options.PipelineOptions(list(IN_MEMORY)))
    converted = pipeline | beam.Create(refs) | ImagesToExamples(**options)
    return pipeline, converted


def test_the_records_are_those_convert_writes_from_a_manifest_of_the_same_uris(sample_dir, tmp_path):
    refs = references(sample_dir, tmp_path)
    listing = tmp_path / "lists" / "refs.csv"  # outside the images' folder: relpaths are the whole paths
    listing.parent.mkdir()
    with open(listing, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "label"])
        w.writerows(refs)
    out = str(tmp_path / "out")
    proc = convert(str(listing), out, *FLAGS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    expected, labels, errors = written(out)
    assert len(expected) == len(refs) - 2 and {e["reason"] for e in errors} == {"not_found", "not_an_image"}

    pipeline, converted = run([ImageRef(uri, label) for uri, label in refs], **OPTIONS)
    assert_that(converted["examples"] | beam.Map(tuple), equal_to([tuple(e) for e in expected]), label="SameRecords")
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
    ]
    pipeline, converted = run(refs, image_size=16)
    assert_that(converted["examples"] | beam.Map(lambda e: e.class_name), equal_to(["circle", "7"]), label="Records")
    assert_that(
        converted["rejected"] | beam.Map(lambda row: row["reason"]),
        equal_to(["bad_reference", "bad_label", "bad_label", "missing_label", "bad_label", "bad_reference"]),
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
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'num_shards'; takes image_size"):
        ImagesToExamples(num_shards=3)
