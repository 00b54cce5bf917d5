"""``img2tfrecord verify`` on good outputs and on damaged copies of them (the fixtures are never modified)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil

import pytest
from conftest import manifest_to_edit, write_manifest_doc
from helpers.cli import run_in_process
from helpers.outputs import frame

from img2tfrecord.readers import records
from img2tfrecord.schemas import example_proto, output_files
from img2tfrecord.schemas import features as keys
from img2tfrecord.verification.output_checks import verify


def _copy(src, tmp_path, name="out"):
    dst = tmp_path / name
    shutil.copytree(src, dst)
    return dst


def _first_shard(path, split="train"):
    return records.read_manifest(str(path)).splits[split].shards[0].file


def _verify(path, *extra):
    proc = run_in_process("verify", str(path), *extra)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc


def _failed(path, *fragments):
    proc = _verify(path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.startswith("FAILED:"), proc.stdout
    for fragment in fragments:
        assert fragment in proc.stdout, (fragment, proc.stdout)
    return proc.stdout


# ---------------------------------------------------------------------------
# The framing reader and the Example parser on real shards.


def test_framing_reader_agrees_with_tensorflow(converted_sample):
    tf = pytest.importorskip("tensorflow")
    doc = records.read_manifest(converted_sample)
    for split in doc.splits:
        for path, count in records.shard_paths(converted_sample, doc, split):
            ours = [data for _, _, data in records.iter_records(path)]
            theirs = [r.numpy() for r in tf.data.TFRecordDataset(path)]
            assert ours == theirs and len(ours) == count
            for data in ours[:3]:
                values = records.parse_example(data, doc.spec)
                reference = tf.train.Example.FromString(data).features.feature
                assert values[keys.IMAGE_ENCODED] == reference[keys.IMAGE_ENCODED].bytes_list.value[0]
                assert values[keys.CLASS_LABEL] == reference[keys.CLASS_LABEL].int64_list.value[0]


def test_framing_equals_tensorflow_writer(tmp_path):
    tf = pytest.importorskip("tensorflow")
    payloads = [b"", b"x", os.urandom(1000)]
    path = str(tmp_path / "r.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for p in payloads:
            writer.write(p)
    with open(path, "rb") as f:
        assert f.read() == b"".join(frame(p) for p in payloads)


# ---------------------------------------------------------------------------
# Good outputs.


def test_good_outputs_pass(converted_sample, converted_keep):
    for path in (converted_sample, converted_keep):
        proc = _verify(path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        doc = records.read_manifest(path)
        total = sum(info.num_examples for info in doc.splits.values())
        shards = sum(len(info.shards) for info in doc.splits.values())
        assert (
            proc.stdout.strip().splitlines()[0].startswith(f"OK: {path}: {total} records in {shards} shards verified")
        )


def test_json_report(converted_sample):
    proc = _verify(converted_sample, "--json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and report["ok"] is True and report["problems"] == []
    assert report["analysis_checked"] is True
    assert report["records_checked"] == sum(
        i.num_examples for i in records.read_manifest(converted_sample).splits.values()
    )


def test_gzip_output_passes_and_truncation_is_caught(converted_sample, tmp_path):
    out = _copy(converted_sample, tmp_path)
    doc = manifest_to_edit(out)
    for info in doc["splits"].values():
        for shard in info["shards"]:
            plain = out / shard["file"]
            shard["file"] += ".gz"
            with gzip.open(out / shard["file"], "wb") as g:
                g.write(plain.read_bytes())
            os.remove(plain)
            shard["num_bytes"] = os.path.getsize(out / shard["file"])
        info["num_bytes"] = sum(s["num_bytes"] for s in info["shards"])
    doc["compression"] = doc["options"]["compression"] = "gzip"
    write_manifest_doc(out, doc)
    assert _verify(out).returncode == 0
    shard = out / doc["splits"]["train"]["shards"][1]["file"]
    shard.write_bytes(shard.read_bytes()[:-200])
    _failed(out, f"{shard.name}: record ", "broken gzip stream", "record count unknown")


# ---------------------------------------------------------------------------
# Damaged copies.


def test_flipped_byte_in_record_data(converted_sample, tmp_path):
    out = _copy(converted_sample, tmp_path)
    name = _first_shard(out)
    path = out / name
    record = list(records.scan_records(str(path)))[3]
    data = bytearray(path.read_bytes())
    data[record.offset + 12 + len(record.data) // 2] ^= 0x40
    path.write_bytes(bytes(data))
    text = _failed(out, f"{name}: record 3 (byte {record.offset}): data checksum mismatch")
    assert "1 problem(s)" in text  # the framing holds: the rest of the shard still checks out


def test_flipped_byte_in_record_header(converted_sample, tmp_path):
    out = _copy(converted_sample, tmp_path)
    name = _first_shard(out)
    path = out / name
    record = list(records.scan_records(str(path)))[2]
    data = bytearray(path.read_bytes())
    data[record.offset + 1] ^= 0x01
    path.write_bytes(bytes(data))
    _failed(out, f"{name}: record 2 (byte {record.offset}): length checksum mismatch", "record count unknown")


def test_truncated_shard(converted_sample, tmp_path):
    out = _copy(converted_sample, tmp_path)
    name = _first_shard(out, "validation")
    path = out / name
    path.write_bytes(path.read_bytes()[:-500])
    _failed(out, f"{name}: record ", "truncated", "record count unknown", "file size mismatch")


def test_deleted_shard(converted_sample, tmp_path):
    out = _copy(converted_sample, tmp_path)
    name = _first_shard(out, "test")
    os.remove(out / name)
    _failed(out, f"{name}: shard listed in dataset.json is missing on disk")


def test_shard_on_disk_not_in_manifest(converted_sample, tmp_path):
    out = _copy(converted_sample, tmp_path)
    shutil.copy(out / _first_shard(out), out / "train-00007-of-00008.tfrecord")
    _failed(out, "train-00007-of-00008.tfrecord: shard file on disk is not listed in dataset.json")


def test_manifest_count_mismatch(converted_sample, tmp_path):
    out = _copy(converted_sample, tmp_path)
    doc = manifest_to_edit(out)
    shard = doc["splits"]["train"]["shards"][1]
    actual = shard["num_records"]
    shard["num_records"] += 1
    write_manifest_doc(out, doc)
    _failed(
        out,
        f"{shard['file']}: record count mismatch: shard holds {actual} record(s), dataset.json lists {actual + 1}",
        "split train: num_examples is",
    )


def test_tf_transform_output_is_checked(converted_sample, tmp_path):
    assert "tf.Transform output)" in _verify(converted_sample).stdout
    out = _copy(converted_sample, tmp_path)
    os.remove(out / output_files.TRANSFORM_FN_DIR / "saved_model.pb")
    with open(out / output_files.TRANSFORM_FN_DIR / "assets" / "label", "a", encoding="utf-8") as f:
        f.write("not_a_class\n")
    schema = (out / output_files.SCHEMA_FILE).read_text(encoding="utf-8")
    (out / output_files.SCHEMA_FILE).write_text(schema.replace('"image/width"', '"image/wide"'), encoding="utf-8")
    (out / output_files.RAW_METADATA_DIR / output_files.SCHEMA_FILE).write_text("garbage {\n", encoding="utf-8")
    doc = manifest_to_edit(out)
    stats = doc[output_files.STATISTICS]
    stats["num_examples"] += 1
    stats["examples_per_class"][doc["labels"][0]] += 1
    stats["pixel_std"] = [0.2, 1.5]
    doc["options"]["exact_statistics"] = True  # and the statistics say they are not exact
    write_manifest_doc(out, doc)
    _failed(
        out,
        "transform_fn: no saved_model.pb: the exported tf.Transform output is incomplete",
        "transform_fn/assets/label: differs from labels.txt",
        "schema.pbtxt: names features not in dataset.json's feature_spec: ['image/wide']; "
        "lacks features of dataset.json's feature_spec: ['image/width']",
        "metadata/schema.pbtxt: not a tensorflow_metadata Schema",
        f"dataset.json statistics: count {stats['num_examples']} examples, "
        f"split train holds {stats['num_examples'] - 1}",
        "dataset.json statistics: examples per class differ from split train's",
        "dataset.json statistics: pixel_std is [0.2, 1.5], not one value in [0, 1] per channel (3)",
        "dataset.json statistics: exact is False, not what the options (--exact-statistics) give",
    )


def test_output_without_statistics_skips_the_tf_transform_checks(converted_sample, tmp_path):
    out = _copy(converted_sample, tmp_path)
    shutil.rmtree(out / output_files.TRANSFORM_FN_DIR)
    doc = manifest_to_edit(out)
    del doc[output_files.STATISTICS]
    write_manifest_doc(out, doc)
    proc = _verify(out)
    assert proc.returncode == 0, proc.stdout
    assert "sha256 keys)" in proc.stdout and "tf.Transform" not in proc.stdout


def test_missing_success_file(converted_sample, tmp_path):
    out = _copy(converted_sample, tmp_path)
    os.remove(out / output_files.SUCCESS_FILE)
    _failed(out, "no _SUCCESS file: the conversion is incomplete")


def test_record_contents(converted_sample, tmp_path):
    """Records with intact checksums but wrong contents: sha256 key, label, image bytes, size, missing feature."""
    out = _copy(converted_sample, tmp_path)
    doc = manifest_to_edit(out)
    name = _first_shard(out)
    path = out / name
    originals = [data for _, _, data in records.iter_records(str(path))]
    assert len(originals) >= 6
    changed = []
    for i, data in enumerate(originals):
        ex = example_proto.Example.FromString(data)
        feature = ex.features.feature
        if i == 0:
            feature[keys.KEY_SHA256].bytes_list.value[0] = b"0" * 64
        elif i == 1:
            label = feature[keys.CLASS_LABEL].int64_list.value[0]
            feature[keys.CLASS_LABEL].int64_list.value[0] = (label + 1) % len(doc["labels"])
        elif i == 2:
            cut = feature[keys.IMAGE_ENCODED].bytes_list.value[0][:300]
            feature[keys.IMAGE_ENCODED].bytes_list.value[0] = cut
            feature[keys.KEY_SHA256].bytes_list.value[0] = hashlib.sha256(cut).hexdigest().encode()
        elif i == 3:
            feature[keys.IMAGE_WIDTH].int64_list.value[0] = 65
        elif i == 4:
            del feature[keys.FILENAME]
        elif i == 5:
            feature[keys.CLASS_LABEL].int64_list.value[0] = 99
        changed.append(ex.SerializeToString())
    path.write_bytes(b"".join(frame(d) for d in changed))
    doc["splits"]["train"]["shards"][0]["num_bytes"] = os.path.getsize(path)
    write_manifest_doc(out, doc)
    _failed(
        out,
        f"{name}: record 0 (byte 0): image/key/sha256 does not match the image bytes",
        f"{name}: record 1 ",
        "in dataset.json, record says",
        f"{name}: record 2 ",
        "image does not decode",
        "record declares 65x64 (WxH)",
        f"feature {keys.FILENAME} missing",
        "label 99 out of range",
    )


def test_manifest_class_counts_mismatch(converted_sample, tmp_path):
    out = _copy(converted_sample, tmp_path)
    doc = manifest_to_edit(out)
    per_class = doc["splits"]["validation"]["examples_per_class"]
    a, b = sorted(per_class)[:2]
    per_class[a] += 1
    per_class[b] -= 1
    write_manifest_doc(out, doc)
    _failed(
        out,
        "dataset: split validation: examples per class differ from dataset.json",
        f"{a}: {per_class[a] - 1} found, {per_class[a]} listed",
    )


def test_problems_are_capped_per_shard(converted_sample, tmp_path):
    out = _copy(converted_sample, tmp_path)
    name = _first_shard(out)
    path = out / name
    data = bytearray(path.read_bytes())
    found = list(records.scan_records(str(path)))
    for record in found:
        data[record.offset + 12 + 5] ^= 0xFF
    path.write_bytes(bytes(data))
    report = verify(str(out), max_problems_per_scope=4)
    assert not report.ok
    assert len([p for p in report.problems if p.scope == name]) == 4
    assert report.omitted[name] == len(found) - 4
    assert f"{name}: ... and {len(found) - 4} more problem(s)" in report.text()


def test_garbage_manifest_and_missing_directory(converted_sample, tmp_path):
    out = _copy(converted_sample, tmp_path)
    (out / output_files.MANIFEST_FILE).write_text("{not json")
    _failed(out, "dataset.json: dataset.json is not valid JSON")
    proc = _verify(tmp_path / "missing")
    assert proc.returncode == 2 and "no such directory" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda doc: doc["splits"]["train"].update(num_examples="x"),
            "splits.train.num_examples is 'x', not a count",
        ),
        (lambda doc: doc.update(compression="lzma"), "compression is 'lzma'; expected one of none, gzip"),
    ],
    ids=["count", "compression"],
)
def test_manifest_field_of_the_wrong_type_is_one_problem_naming_it(converted_sample, tmp_path, edit, message):
    out = _copy(converted_sample, tmp_path)
    doc = manifest_to_edit(out)
    edit(doc)
    write_manifest_doc(out, doc)
    _failed(out, f"{output_files.MANIFEST_FILE}: {message}", "1 problem(s)")
    report = verify(str(out))
    assert [str(p) for p in report.problems] == [f"{output_files.MANIFEST_FILE}: {message}"]
