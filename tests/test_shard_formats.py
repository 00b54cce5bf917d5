"""The shard file formats without a pipeline: WebDataset samples and tar shards, ArrayRecord files, names, options.

Every record a conversion writes goes through these writers; a WebDataset sample must give back the
record it was made from byte for byte, since ``verify``, ``inspect``, ``report`` and the TF-free
readers check and parse those records.
"""

from __future__ import annotations

import io
import json
import tarfile

import images as I
import pytest

from img2tfrecord import api
from img2tfrecord.conversion.examples import (
    StoredObject,
    encode_detection_example,
    encode_example,
    encode_sequence_example,
)
from img2tfrecord.images.options import ConvertedImage
from img2tfrecord.model import MetadataValue
from img2tfrecord.readers import records
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import output_files
from img2tfrecord.shard_formats import ShardContext, adapter, array_records, tar_shards, webdataset_samples
from img2tfrecord.tfrecord_codec import RecordError, TruncatedRecordError

JPEG = ConvertedImage(I.jpeg(20, 12), "jpeg", 12, 20, 3)
PNG = ConvertedImage(I.png(8, 6), "png", 6, 8, 3)
RAW = ConvertedImage(bytes(range(24)), "raw", 2, 4, 3)
BOX = StoredObject(0.1, 0.2, 0.7, 0.9, 2, "dog", False, True, "left", False, 33.5)
METADATA = (
    MetadataValue("camera", "bytes", (b"x100",)),
    MetadataValue("raw_bytes", "bytes", (b"\xff\xfe", b"ok")),  # not UTF-8: base64 in the JSON
    MetadataValue("tags", "bytes", ()),
    MetadataValue("score", "float", (0.25, 1.0)),
    MetadataValue("count", "int64", (7,)),
)

RECORDS = {
    "classification": (encode_example(JPEG, 1, "dog", "dog/a.b.jpg"), False),
    "unlabeled png": (encode_example(PNG, None, None, "x/1.png"), False),
    "raw pixels": (encode_example(RAW, 0, "cat", "cat/r.png"), False),
    "metadata": (encode_example(JPEG, 0, "cat", "cat/m.jpg", METADATA), False),
    "detection": (encode_detection_example(JPEG, "a/1.jpg", "17", [BOX, BOX._replace(label=1, view="")]), False),
    "detection without boxes": (encode_detection_example(PNG, "a/2.png", "a/2", []), False),
    "clip": (encode_sequence_example([JPEG, JPEG, JPEG], 2, "emu", "emu/clip1"), True),
}


@pytest.mark.parametrize("name", RECORDS)
def test_a_sample_gives_back_its_record_byte_for_byte(name):
    record, sequence = RECORDS[name]
    members = dict(webdataset_samples.sample_members(record, sequence))
    assert webdataset_samples.record_from_members(members, sequence) == record


def test_a_sample_holds_the_image_the_label_and_the_other_features_as_json():
    members = dict(webdataset_samples.sample_members(RECORDS["classification"][0]))
    assert set(members) == {"jpg", "cls", "json"}
    assert members["jpg"] == JPEG.encoded and members["cls"] == b"1"
    doc = json.loads(members["json"])
    assert doc[keys.FILENAME] == "dog/a.b.jpg" and doc[keys.CLASS_TEXT] == "dog" and doc[keys.CLASS_LABEL] == 1
    assert (doc[keys.IMAGE_WIDTH], doc[keys.IMAGE_HEIGHT], doc[keys.IMAGE_FORMAT]) == (20, 12, "jpeg")
    assert keys.IMAGE_ENCODED not in doc
    detection = json.loads(dict(webdataset_samples.sample_members(RECORDS["detection"][0]))["json"])
    assert detection[keys.OBJECT_CLASS_TEXT] == ["dog", "dog"] and detection[keys.OBJECT_CLASS_LABEL] == [2, 1]
    assert detection[keys.BBOX_XMIN] == pytest.approx([0.2, 0.2])  # a list even of one value per box
    assert (
        json.loads(dict(webdataset_samples.sample_members(RECORDS["detection without boxes"][0]))["json"])[
            keys.BBOX_XMIN
        ]
        == []
    )
    assert set(dict(webdataset_samples.sample_members(RECORDS["unlabeled png"][0]))) == {"png", "json"}
    assert "raw" in dict(webdataset_samples.sample_members(RECORDS["raw pixels"][0]))
    clip = dict(webdataset_samples.sample_members(*RECORDS["clip"]))
    assert sorted(clip) == ["00000.jpg", "00001.jpg", "00002.jpg", "cls", "json"]


def test_members_that_are_not_a_sample_are_refused():
    with pytest.raises(webdataset_samples.SampleError, match="no .json"):
        webdataset_samples.record_from_members({"jpg": b"x"})
    with pytest.raises(webdataset_samples.SampleError, match="2 image members"):
        webdataset_samples.record_from_members({"jpg": b"x", "png": b"y", "json": b"{}"})
    with pytest.raises(webdataset_samples.SampleError, match="not JSON"):
        webdataset_samples.record_from_members({"json": b"{"})


def _tar(recs, sequence=False, stem="train-000003"):
    buffer = io.BytesIO()
    writer = adapter("webdataset").open_writer(buffer, ShardContext(stem, sequence))
    entries = [writer.write(r) for r in recs]
    writer.close()
    return buffer.getvalue(), entries


def test_a_tar_shard_reads_back_its_records_in_order_and_by_its_index_lines():
    recs = [RECORDS["classification"][0], RECORDS["metadata"][0], RECORDS["unlabeled png"][0]]
    data, entries = _tar(recs)
    assert data == _tar(recs)[0], "the same records give the same bytes"
    with tarfile.open(fileobj=io.BytesIO(data)) as t:  # plain tar: keys without dots, record order
        names = t.getnames()
    assert names[:3] == ["train-000003-000000.jpg", "train-000003-000000.cls", "train-000003-000000.json"]
    assert all(name.count(".") == 1 for name in names)
    assert [r.data for r in tar_shards.read_records(io.BytesIO(data))] == recs
    assert tar_shards.walk_samples(io.BytesIO(data)) == entries
    for i, (offset, length) in enumerate(entries):
        assert tar_shards.record_in_range(data[offset : offset + length], i, offset) == recs[i]
    clips, _ = _tar([RECORDS["clip"][0]] * 2, sequence=True)
    assert [r.data for r in tar_shards.read_records(io.BytesIO(clips), sequence=True)] == [RECORDS["clip"][0]] * 2


@pytest.mark.parametrize(
    "name", ["a.jpg", "train-000003-000012.00001.png", "x" * 100, "d" * 20 + "/" + "y" * 90, "é.json"]
)
@pytest.mark.parametrize("size", [0, 1, 511, 512, 12_345, 8**11 - 1])
def test_a_member_header_is_the_one_tarfile_writes(name, size):
    expected = tar_shards._member(name, size).tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict")
    assert tar_shards.member_header(name, size) == expected


def test_a_cut_tar_shard_is_a_record_error_naming_the_record():
    data, entries = _tar([RECORDS["classification"][0]] * 3)
    cut = entries[2][0] + 700  # inside the third sample's image
    with pytest.raises(RecordError) as raised:
        list(tar_shards.read_records(io.BytesIO(data[:cut])))
    assert isinstance(raised.value, TruncatedRecordError) and raised.value.index == 2


def test_an_array_record_shard_reads_back_its_records_in_order_and_at_random(tmp_path):
    path = str(tmp_path / "train-00000-of-00001.array_record")
    recs = [r for r, sequence in RECORDS.values() if not sequence]
    writer = array_records.ArrayRecordShardWriter(path)
    for r in recs:
        writer.write(r)
    writer.close()
    assert [d for _, _, d in records.iter_records(path, file_format="array_record")] == recs
    with array_records.ArrayRecordShard(path) as shard:
        assert len(shard) == len(recs) and shard.read([3, 0]) == [recs[3], recs[0]]
    data = (tmp_path / "train-00000-of-00001.array_record").read_bytes()
    (tmp_path / "cut.array_record").write_bytes(data[: len(data) // 2])
    with pytest.raises(TruncatedRecordError, match="not an ArrayRecord file, or cut short"):
        array_records.ArrayRecordShard(str(tmp_path / "cut.array_record"))
    flipped = bytearray(data)
    flipped[data.index(recs[2]) + 40] ^= 0xFF  # inside record 2: its chunk's hash fails
    (tmp_path / "flipped.array_record").write_bytes(bytes(flipped))
    read = []
    with pytest.raises(RecordError, match="corrupt record") as raised:
        for _, _, d in records.iter_records(str(tmp_path / "flipped.array_record"), file_format="array_record"):
            read.append(d)
    assert raised.value.index == 2 and read == recs[:2]


def test_shard_names_patterns_and_their_parse():
    name = output_files.shard_file_name
    assert name("train", 3, 4, file_format="array_record") == "train-00003-of-00004.array_record"
    assert name("train", 3, 4, file_format="webdataset") == "train-000003.tar"
    assert name("val", 0, 1, generation=2, file_format="webdataset") == "val-g00002-000000.tar"
    assert output_files.parse_shard_file_name("val-g00002-000007.tar") == {
        "split": "val",
        "generation": 2,
        "index": 7,
        "count": None,
    }
    assert output_files.parse_shard_file_name("train-00003-of-00004.array_record")["count"] == 4
    assert output_files.parse_shard_file_name("train-0003.tar") is None
    assert output_files.shard_pattern("train", 4, file_format="webdataset") == "train-{000000..000003}.tar"
    assert output_files.shard_pattern("train", 1, generation=1, file_format="webdataset") == "train-g00001-000000.tar"
    with pytest.raises(ValueError):
        output_files.shard_suffix("gzip", "webdataset")


def test_file_format_flags_are_checked_before_any_work():
    with pytest.raises(api.UsageError, match="--file-format: invalid choice: 'hdf5'"):
        api.config_of("in", "out", {"file_format": "hdf5"})
    for file_format in ("array_record", "webdataset"):
        with pytest.raises(api.UsageError, match="--compression gzip compresses TFRecord shards, not"):
            api.config_of("in", "/tmp/x-out", {"file_format": file_format, "compression": "gzip"})
    config = api.config_of("in", "/tmp/x-out", {"file_format": "webdataset"})
    assert config.file_format == "webdataset" and config.options_json()["file_format"] == "webdataset"


@pytest.mark.parametrize("name", [n for n, (_, sequence) in RECORDS.items() if not sequence])
def test_a_parquet_row_taken_without_parsing_the_image_is_the_row_of_the_parsed_record(name):
    """The writer takes the image out of the serialized record (``_split_image``) instead of parsing it: the
    row is the one the parsed record gives, and it gives the record back byte for byte."""
    from img2tfrecord.schemas.example_proto import Example
    from img2tfrecord.shard_formats import parquet_shards

    record = RECORDS[name][0]
    assert parquet_shards._split_image(record) is not None
    row = parquet_shards.row_of(record)
    parsed = parquet_shards._row(Example.FromString(record).features.feature, None)
    assert {**row, "image": dict(row["image"], bytes=bytes(row["image"]["bytes"]))} == parsed
    assert parquet_shards.record_from_row(parsed) == record


def test_a_record_laid_out_otherwise_is_parsed_whole_for_its_parquet_row():
    from img2tfrecord.schemas.example_proto import Example
    from img2tfrecord.shard_formats import parquet_shards

    two = Example.FromString(RECORDS["classification"][0])
    two.features.feature["image/encoded"].bytes_list.value.append(b"another")
    none = Example.FromString(RECORDS["classification"][0])
    del none.features.feature["image/encoded"]
    for example in (two, none):
        record = example.SerializeToString(deterministic=True)
        assert parquet_shards._split_image(record) is None
        assert parquet_shards.record_from_row(parquet_shards.row_of(record)) == record
    for cut in (b"", b"\x0a", b"\x0a\x05\x0a\x03", RECORDS["classification"][0][:-4], b"\x12\x00"):
        assert parquet_shards._split_image(cut) is None
