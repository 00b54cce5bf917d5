"""dataset.json as typed objects: every field checked on reading, the same bytes on writing."""

import json
import os

import pytest

from img2tfrecord.schemas import dataset_json as dm
from img2tfrecord.schemas import features, output_files, tfds_layout


def detection_manifest() -> dm.DatasetManifest:
    shard = dm.ShardInfo("train-00000-of-00001.tfrecord", 2, 300, "ab" * 32, "index/train-00000-of-00001.tfrecord.idx")
    return dm.DatasetManifest(
        tool_version="0.1.0",
        created="2026-01-01T00:00:00+00:00",
        input="/data/voc",
        options={"image_size": [640, 480], "channels": 3, "format": "jpeg", "seed": 7},
        compression=dm.Compression.NONE,
        labels=("cat", "dog"),
        splits={
            "train": dm.SplitInfo(
                num_examples=2,
                num_bytes=300,
                examples_per_class={},
                shards=(shard,),
                boxes_per_class={"cat": 3},
                dropped_boxes={"clipped_to_image": 1},
            )
        },
        accounting=dm.Accounting(inputs=3, written=2, rejected=1, rejected_by_reason={"undecodable": 1}),
        task=dm.Task.DETECTION,
        run_fingerprint="f" * 16,
    )


@pytest.mark.e2e  # its outputs are conversions
def test_a_real_output_reads_and_writes_back_byte_for_byte(converted_sample, converted_keep):
    for output in (converted_sample, converted_keep):
        with open(os.path.join(output, output_files.MANIFEST_FILE), encoding="utf-8") as f:
            text = f.read()
        doc = dm.loads(text)
        assert dm.dumps(doc) == text
        assert doc.accounting is not None
        assert doc.accounting.inputs == doc.accounting.written + doc.accounting.rejected
        assert doc.num_examples == doc.accounting.written
        assert all(info.listed_records == info.num_examples for info in doc.splits.values())
        assert doc.tfds == tfds_layout.status(doc)


def test_a_built_manifest_round_trips_and_derives_what_it_can():
    doc = detection_manifest()
    again = dm.loads(dm.dumps(doc))
    assert again == doc
    assert doc.is_detection and not doc.is_sequence
    assert doc.files["label_map"] == output_files.LABEL_MAP_FILE
    assert doc.spec == features.feature_spec_json(detection=True)
    assert doc.image_size == (640, 480) and doc.channels == 3 and doc.image_format == "jpeg"
    assert json.loads(dm.dumps(doc))["num_classes"] == 2
    assert [name for name, _ in doc.shards()] == ["train"]


def test_a_classification_manifest_has_no_box_counts_and_an_unlabeled_spec():
    doc = dm.DatasetManifest(
        tool_version="0.1.0",
        created="",
        input="in.csv",
        options={},
        compression=dm.Compression.GZIP,
        labels=(),
        splits={"train": dm.SplitInfo(0, 0, {}, ())},
        accounting=None,
        labeled=False,
        record_type=dm.RecordType.SEQUENCE_EXAMPLE,
    )
    written = json.loads(dm.dumps(doc))
    assert output_files.BOXES_PER_CLASS not in written["splits"]["train"]
    assert "label_map" not in written["files"] and "accounting" not in written
    assert doc.spec == features.feature_spec_json(labeled=False, sequence=True)
    assert doc.image_size is None and doc.channels is None


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d["splits"]["train"]["shards"][0].update(num_records="2"), "splits.train.shards[0].num_records"),
        (lambda d: d["splits"]["train"].update(num_examples=-1), "splits.train.num_examples is -1, not a count"),
        (lambda d: d.update(compression="zip"), "compression is 'zip'; expected one of none, gzip"),
        (lambda d: d.update(task="segmentation"), "task is 'segmentation'; expected one of classification, detection"),
        (lambda d: d.update(labels="cat"), "labels is not a list"),
        (lambda d: d.update(labels=["cat", 3]), "labels[1] is 3, not a string"),
        (lambda d: d["accounting"].update(rejected_by_reason={"undecodable": True}), "rejected_by_reason.undecodable"),
        (lambda d: d.update(splits=[]), "splits is list, not an object"),
        (lambda d: d.update(tfds={"readable": "yes"}), "tfds.readable is 'yes', not true or false"),
        (lambda d: d.update(format_version=output_files.FORMAT_VERSION + 1), "this img2tfrecord reads up to"),
        (lambda d: d.update(tool="other"), "was not written by img2tfrecord"),
    ],
)
def test_a_wrong_field_is_named(change, message):
    doc = detection_manifest().to_json()
    change(doc)
    with pytest.raises(dm.DatasetJsonError, match=message.replace("[", r"\[").replace("]", r"\]")):
        dm.DatasetManifest.from_json(doc)


def test_text_that_is_not_json_says_so():
    with pytest.raises(dm.DatasetJsonError, match="dataset.json is not valid JSON"):
        dm.loads("{'splits': }")
