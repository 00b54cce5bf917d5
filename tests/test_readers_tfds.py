"""A converted output read with TensorFlow Datasets, through the metadata ``convert`` writes."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow_datasets as tfds
from conftest import convert, manifest_to_edit

from img2tfrecord.readers import datasource, records
from img2tfrecord.readers.tfds_metadata import write_tfds_metadata
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import labels as label_map
from img2tfrecord.schemas import output_files, tfds_layout
from img2tfrecord.schemas.dataset_json import Compression, DatasetManifest, RecordType, TfdsStatus

NO_ANALYSIS = ("--no-analyze", "--num-shards", "3")


@pytest.fixture(scope="module")
def jpeg_output(sample_dir, tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("tfds_jpeg") / "out")
    proc = convert(sample_dir, out, "--image-size", "64", "--splits", "train=0.8,test=0.2", *NO_ANALYSIS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _written_by_convert(out)
    return out


def _written_by_convert(out: str) -> None:
    """convert wrote the TFDS files, the same ones write_tfds_metadata writes for an older output."""
    assert records.read_manifest(out).tfds == TfdsStatus(readable=True)
    written = {}
    for name in tfds_layout.FILE_NAMES:
        with open(os.path.join(out, name), encoding="utf-8") as f:
            written[name] = f.read()
    assert write_tfds_metadata(out) is None
    for name in tfds_layout.FILE_NAMES:
        with open(os.path.join(out, name), encoding="utf-8") as f:
            assert f.read() == written[name], name


def _get(example, key):
    """The value of a record key in a TFDS example: keys nest on '/'."""
    for part in key.split("/"):
        example = example[part]
    return example


def _compare(out: str, split: str, max_pixel_error: int):
    """Every TFDS example of ``split`` against the TensorFlow-free reader's (TFDS interleaves the shards)."""
    builder = tfds.builder_from_directory(out)
    source = datasource.SplitDataSource(out, split)
    by_name = {source[i][keys.FILENAME]: source[i] for i in range(len(source))}
    got = list(tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)))
    assert sorted(_get(e, keys.FILENAME) for e in got) == sorted(by_name)
    spec = records.read_manifest(out).spec
    for i, example in enumerate(got):
        ours = by_name[_get(example, keys.FILENAME)]
        for key in spec:
            if key != keys.IMAGE_ENCODED:
                assert _get(example, key) == ours[key], key
        image = _get(example, keys.IMAGE_ENCODED)
        assert image.dtype == np.uint8 and image.shape == ours[keys.DECODED_IMAGE].shape
        diff = np.abs(image.astype(int) - ours[keys.DECODED_IMAGE].astype(int))
        assert diff.max() <= max_pixel_error and diff.mean() < 2, (i, diff.max(), diff.mean())
    return builder


def test_tfds_reads_every_split_as_written(jpeg_output):
    doc = records.read_manifest(jpeg_output)
    builder = tfds.builder_from_directory(jpeg_output)
    info = builder.info
    assert {name: s.num_examples for name, s in info.splits.items()} == {
        name: s.num_examples for name, s in doc.splits.items()
    }
    assert [s.num_shards for s in info.splits.values()] == [3, 3]
    with open(os.path.join(jpeg_output, output_files.LABELS_FILE), encoding="utf-8") as f:
        names = label_map.parse_labels_text(f.read())
    assert info.features["image"]["class"]["label"].names == names == list(doc.labels)
    assert info.features["image"]["encoded"].shape == (64, 64, 3)
    for split in ("train", "test"):
        # TFDS decodes JPEG with TensorFlow's default (fast) DCT, Pillow with the accurate one.
        _compare(jpeg_output, split, max_pixel_error=8)


def test_tfds_reads_original_files_of_varied_sizes(sample_dir, tmp_path):
    out = str(tmp_path / "keep")
    proc = convert(sample_dir, out, *NO_ANALYSIS)  # --format keep: the original JPEG and PNG bytes
    assert proc.returncode == 0, proc.stderr[-3000:]
    _written_by_convert(out)
    builder = tfds.builder_from_directory(out)
    assert builder.info.features["image"]["encoded"].shape == (None, None, 3)
    _compare(out, "train", max_pixel_error=8)
    formats = {e[keys.IMAGE_FORMAT] for e in datasource.iter_split(out, "train", decode=False)}
    assert formats == {b"jpeg", b"png"}


def test_raw_output_fails_to_load_with_our_message(sample_dir, tmp_path):
    out = str(tmp_path / "raw")
    proc = convert(sample_dir, out, "--image-size", "16", "--format", "raw", *NO_ANALYSIS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = records.read_manifest(out)
    assert doc.tfds is not None
    reason = doc.tfds.reason
    assert reason is not None and "--format raw" in reason and write_tfds_metadata(out) == reason
    assert tfds_layout.status(doc) == TfdsStatus(readable=False, reason=reason) == doc.tfds
    with pytest.raises(tfds_layout.NotATfdsDatasetError) as e:
        tfds.builder_from_directory(out)
    assert str(e.value) == reason
    assert len(datasource.SplitDataSource(out, "train")[0][keys.DECODED_IMAGE]) == 16  # our readers still read it


def test_outputs_tfds_cannot_read_say_why(jpeg_output):
    doc = records.read_manifest(jpeg_output)
    assert tfds_layout.status(doc) == TfdsStatus(readable=True)
    sequence = doc.replace(record_type=RecordType.SEQUENCE_EXAMPLE)
    assert "SequenceExample" in tfds_layout.unsupported_reason(sequence)
    gzip = doc.replace(compression=Compression.GZIP)
    assert "uncompressed TFRecord files only" in tfds_layout.unsupported_reason(gzip)
    renamed_json = manifest_to_edit(jpeg_output)
    renamed_json["splits"]["train"]["shards"][0]["file"] = "train-00000-of-00009.tfrecord"
    renamed = DatasetManifest.from_json(renamed_json)
    assert "does not follow {SPLIT}-{SHARD_X_OF_Y}.tfrecord" in tfds_layout.unsupported_reason(renamed)
    assert tfds_layout.FEATURES_FILE in tfds_layout.metadata_files(sequence)
