"""The TFRecord codec (img2tfrecord/tfrecord_codec.py): framing, checksums, reads, offsets and index files."""

from __future__ import annotations

import gzip
import io
import os
import re
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from img2tfrecord import tfrecord_codec as codec
from img2tfrecord.readers.records import RandomAccessFile

RECORDS = [b"", b"x", b"hello tfrecord", bytes(range(256)) * 40, b"\x00" * 70000]


def _file(records) -> bytes:
    return b"".join(codec.encode_record(r) for r in records)


def _offsets(records):
    offsets, offset = [], 0
    for r in records:
        offsets.append((offset, codec.framed_length(len(r))))
        offset += codec.framed_length(len(r))
    return offsets


def _save(tmp_path, data: bytes, name: str = "shard.tfrecord") -> str:
    path = str(tmp_path / name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def _read(data: bytes, **kwargs):
    return list(codec.read_records(io.BytesIO(data), **kwargs))


# -- framing --------------------------------------------------------------------------------------


def test_a_record_is_framed_as_length_crc_data_crc():
    framed = codec.encode_record(b"abc")
    assert len(framed) == codec.framed_length(3) == 3 + 16
    assert framed[:8] == (3).to_bytes(8, "little")
    assert int.from_bytes(framed[8:12], "little") == codec.masked_crc32c(framed[:8])
    assert framed[12:15] == b"abc"
    assert int.from_bytes(framed[15:], "little") == codec.masked_crc32c(b"abc")


def test_masked_crc32c_masks_as_tensorflow_does():
    # CRC32C("123456789") = 0xE3069283, TensorFlow's check value; then rotated right by 15 plus the mask delta.
    crc = 0xE3069283
    assert codec.masked_crc32c(b"123456789") == (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_records_round_trip_with_their_indexes_and_offsets():
    found = _read(_file(RECORDS))
    assert [r.data for r in found] == RECORDS
    assert [r.index for r in found] == list(range(len(RECORDS)))
    assert [(r.offset, codec.framed_length(len(r.data))) for r in found] == _offsets(RECORDS)
    assert all(r.data_crc_ok for r in found)
    assert _read(b"") == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=12))
def test_any_records_round_trip_sequentially_and_by_offset(records):
    data = _file(records)
    assert [r.data for r in _read(data)] == records
    assert [r.data for r in _read(data, size=len(data))] == records
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "shard.tfrecord")
        with open(path, "wb") as out:
            out.write(data)
        with RandomAccessFile(path) as f:
            entries = codec.walk_offsets(f)
            assert entries == _offsets(records)
            assert [codec.read_record_at(f, i, o, n) for i, (o, n) in enumerate(entries)] == records


# -- agreement with TensorFlow --------------------------------------------------------------------


def test_the_codec_writes_the_bytes_tf_io_tfrecordwriter_writes(tmp_path):
    tf = pytest.importorskip("tensorflow")
    path = str(tmp_path / "tf.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for r in RECORDS:
            writer.write(r)
    with open(path, "rb") as f:
        assert f.read() == _file(RECORDS)


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_tf_data_reads_what_the_codec_writes(tmp_path, compression):
    tf = pytest.importorskip("tensorflow")
    data = _file(RECORDS)
    path = _save(tmp_path, gzip.compress(data) if compression == "gzip" else data)
    dataset = tf.data.TFRecordDataset(path, compression_type="GZIP" if compression == "gzip" else "")
    assert [t.numpy() for t in dataset] == RECORDS


def test_the_codec_reads_a_gzip_file_tensorflow_wrote(tmp_path):
    tf = pytest.importorskip("tensorflow")
    path = str(tmp_path / "tf.tfrecord.gz")
    with tf.io.TFRecordWriter(path, options=tf.io.TFRecordOptions(compression_type="GZIP")) as writer:
        for r in RECORDS:
            writer.write(r)
    with gzip.open(path, "rb") as stream:
        assert [r.data for r in codec.read_records(stream)] == RECORDS


# -- checksums ------------------------------------------------------------------------------------


def test_corrupt_data_is_flagged_and_the_walk_goes_on():
    data = bytearray(_file(RECORDS))
    offset, _ = _offsets(RECORDS)[2]
    data[offset + 12] ^= 0x01  # the first data byte of record 2
    found = _read(bytes(data))
    assert [r.data_crc_ok for r in found] == [True, True, False, True, True]
    assert found[2].data != RECORDS[2] and found[3].data == RECORDS[3]
    assert all(r.data_crc_ok for r in _read(bytes(data), check_crc=False))


def test_a_corrupt_length_ends_the_walk_at_that_record():
    data = bytearray(_file(RECORDS))
    offset, _ = _offsets(RECORDS)[3]
    data[offset + 9] ^= 0x10  # the length's checksum
    found = []
    with pytest.raises(codec.RecordError, match="length checksum mismatch") as e:
        for r in codec.read_records(io.BytesIO(bytes(data))):
            found.append(r.data)
    assert (e.value.index, e.value.offset) == (3, offset)
    assert str(e.value).startswith(f"record 3 at byte {offset}: ")
    assert found == RECORDS[:3]
    assert not isinstance(e.value, (codec.TruncatedRecordError, codec.MisframedRecordError))


# -- truncation -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cut, message",
    [
        (5, "truncated header: 5 of 12 bytes"),
        (12 + 2, "truncated data: 2 of 14 bytes"),
        (12 + 14 + 1, "truncated: data checksum missing"),
    ],
)
def test_a_stream_cut_inside_a_record_is_truncated_at_that_record(cut, message):
    records = [b"first record", b"hello tfrecord"]
    start = codec.framed_length(len(records[0]))
    data = _file(records)[: start + cut]
    with pytest.raises(codec.TruncatedRecordError, match=message) as e:
        _read(data)
    assert (e.value.index, e.value.offset) == (1, start)


def test_a_known_size_reports_a_record_running_past_the_end_before_reading_it():
    data = _file(RECORDS)[:-3]
    last, _ = _offsets(RECORDS)[-1]
    with pytest.raises(codec.TruncatedRecordError, match=rf"runs past the end of the file \({len(data)} bytes\)") as e:
        _read(data, size=len(data))
    assert (e.value.index, e.value.offset) == (len(RECORDS) - 1, last)


def test_a_cut_gzip_stream_is_truncated_and_a_foreign_one_is_an_error():
    compressed = gzip.compress(_file(RECORDS))
    with pytest.raises(codec.TruncatedRecordError, match="broken gzip stream"):
        list(codec.read_records(gzip.GzipFile(fileobj=io.BytesIO(compressed[: len(compressed) // 2]))))
    not_gzip = b"\x1f\x8c" + compressed[2:]
    with pytest.raises(codec.RecordError, match="broken gzip stream: Not a gzipped file") as e:
        list(codec.read_records(gzip.GzipFile(fileobj=io.BytesIO(not_gzip))))
    assert (e.value.index, e.value.offset) == (0, 0) and not isinstance(e.value, codec.TruncatedRecordError)


# -- random access and offsets --------------------------------------------------------------------


def test_records_are_read_by_offset_with_or_without_their_length(tmp_path):
    path = _save(tmp_path, _file(RECORDS))
    with RandomAccessFile(path) as f:
        assert codec.walk_offsets(f) == _offsets(RECORDS)
        for i, (offset, length) in enumerate(_offsets(RECORDS)):
            assert codec.read_record_at(f, i, offset, length) == RECORDS[i]
            assert codec.read_record_at(f, i, offset) == RECORDS[i]


def test_an_offset_or_length_that_misses_the_framing_is_misframed(tmp_path):
    path = _save(tmp_path, _file(RECORDS))
    (o1, l1), (o2, l2) = _offsets(RECORDS)[1:3]
    with RandomAccessFile(path) as f:
        with pytest.raises(codec.MisframedRecordError, match="no record header here") as e:
            codec.read_record_at(f, 2, o2 + 1, l2)
        assert (e.value.index, e.value.offset) == (2, o2 + 1)
        with pytest.raises(codec.MisframedRecordError, match="no record header here"):
            codec.read_record_at(f, 2, o2 + 1)
        with pytest.raises(codec.MisframedRecordError, match=f"the record here takes {l1} bytes, not {l2}"):
            codec.read_record_at(f, 1, o1, l2)
        with pytest.raises(codec.MisframedRecordError, match="a record takes at least 16 bytes, not 12"):
            codec.read_record_at(f, 1, o1, 12)


def test_random_access_checks_the_data_and_the_end_of_the_file(tmp_path):
    data = bytearray(_file(RECORDS))
    offset, length = _offsets(RECORDS)[3]
    data[offset + 20] ^= 0x01
    last, last_length = _offsets(RECORDS)[-1]
    path = _save(tmp_path, bytes(data[:-1]))
    with RandomAccessFile(path) as f:
        with pytest.raises(codec.RecordError, match="data checksum mismatch") as e:
            codec.read_record_at(f, 3, offset, length)
        assert not isinstance(e.value, codec.MisframedRecordError)
        with pytest.raises(codec.TruncatedRecordError, match=f"{last_length - 1} of the record's {last_length} bytes"):
            codec.read_record_at(f, 4, last, last_length)
        with pytest.raises(codec.TruncatedRecordError, match="runs past the end of the file") as e:
            codec.walk_offsets(f)
        assert (e.value.index, e.value.offset) == (4, last)


def test_walking_offsets_reads_only_headers_and_checks_their_lengths(tmp_path):
    data = bytearray(_file(RECORDS))
    offset, _ = _offsets(RECORDS)[1]
    data[offset + 12] ^= 0x01  # data corruption: invisible to a header walk
    with RandomAccessFile(_save(tmp_path, bytes(data), "data.tfrecord")) as f:
        assert codec.walk_offsets(f) == _offsets(RECORDS)
    data[offset] ^= 0x01  # the length itself
    with RandomAccessFile(_save(tmp_path, bytes(data), "length.tfrecord")) as f:
        with pytest.raises(codec.RecordError, match="length checksum mismatch") as e:
            codec.walk_offsets(f)
        assert (e.value.index, e.value.offset) == (1, offset)
    with RandomAccessFile(_save(tmp_path, _file(RECORDS)[:7], "header.tfrecord")) as f:
        with pytest.raises(codec.TruncatedRecordError, match="truncated header: 7 of 12 bytes"):
            codec.walk_offsets(f)


# -- index files ----------------------------------------------------------------------------------


def test_index_files_round_trip_as_offset_length_lines(tmp_path):
    path = _save(tmp_path, _file(RECORDS))
    with RandomAccessFile(path) as f:
        entries = codec.walk_offsets(f)
    text = codec.index_text(entries)
    assert text == "".join(f"{o} {n}\n" for o, n in _offsets(RECORDS))
    assert codec.parse_index(text) == entries
    assert codec.parse_index(text.replace("\n", "\r\n") + "\n\n") == entries  # blank lines, CRLF
    assert codec.index_text([]) == "" and codec.parse_index("") == []


@pytest.mark.parametrize(
    "text, problem",
    [
        ("0 16\n16 abc\n", "line 2 is not 'offset length': '16 abc'"),
        ("0 16 7\n", "line 1 is not 'offset length'"),
        ("0 15\n", "line 1 is not a record's offset and length: '0 15'"),
        ("-16 16\n", "line 1 is not a record's offset and length"),
    ],
)
def test_a_malformed_index_names_its_path_and_line(text, problem):
    with pytest.raises(ValueError, match="^" + re.escape(f"out/x.idx: {problem}")):
        codec.parse_index(text, "out/x.idx")
