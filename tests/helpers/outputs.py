"""Reading outputs back: records, error rows, in-process conversions, stderr lines, folder snapshots, plans."""

from __future__ import annotations

import json
import os
import struct

import pytest
from conftest import IN_MEMORY

from img2tfrecord import tfrecord_codec
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.fast_start import start
from img2tfrecord.pipeline.launch import launch
from img2tfrecord.readers import records
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas.dataset_json import DatasetManifest


def read_records(output: str):
    """split -> list of parsed feature dicts (numpy values), via tf.data and the schema's spec."""
    tf = pytest.importorskip("tensorflow")
    doc = records.read_manifest(str(output))
    spec = keys.feature_spec(doc.spec)
    out = {}
    for split, info in doc.splits.items():
        paths = [os.path.join(output, s.file) for s in info.shards]
        ds = tf.data.TFRecordDataset(paths, compression_type="GZIP" if doc.compression == "gzip" else "")
        out[split] = [{k: v.numpy() for k, v in tf.io.parse_single_example(r, spec).items()} for r in ds]
    return doc, out


def records_by_relpath(output: str, with_image: bool = False) -> dict:
    """split -> {relpath: (label id, class name[, image bytes])} of every record a reader returns, read
    without TensorFlow; a relpath read twice in a split fails."""
    from img2tfrecord.readers import datasource

    doc = records.read_manifest(str(output))
    found = {}
    for split in doc.splits:
        rows = {}
        for example in datasource.iter_split(output, split, decode=False):
            relpath = example[keys.FILENAME].decode()
            assert relpath not in rows, f"{relpath} read twice in {split}"
            row = (int(example[keys.CLASS_LABEL]), example[keys.CLASS_TEXT].decode())
            rows[relpath] = (*row, example[keys.IMAGE_ENCODED]) if with_image else row
        found[split] = rows
    return found


def convert_in_process(input_path, output, **options):
    config = ConvertConfig(input=input_path, output=str(output), analyze=False, **options)
    doc = start(launch(config), list(IN_MEMORY))
    assert doc is not None
    return doc


def error_rows(output):
    with open(os.path.join(output, output_files.ERRORS_FILE)) as f:
        return [json.loads(line) for line in f if line.strip()]


def frame(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return (
        length
        + struct.pack("<I", tfrecord_codec.masked_crc32c(length))
        + data
        + struct.pack("<I", tfrecord_codec.masked_crc32c(data))
    )


def snapshot(path: str) -> dict:
    """Every file and folder under ``path``: relpath -> (is a folder, size, modification time)."""
    found = {}
    for folder, dirs, names in os.walk(path):
        for name in dirs + names:
            full = os.path.join(folder, name)
            st = os.lstat(full)
            found[os.path.relpath(full, path)] = (os.path.isdir(full), st.st_size, st.st_mtime_ns)
    return found


def one_line(proc) -> str:
    """The one line a failed command printed on stderr (log lines at INFO aside)."""
    lines = [line for line in proc.stderr.strip().splitlines() if not line.startswith("INFO ")]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0]


def assert_plan_is_the_run(found: dict, doc: DatasetManifest, boxes: bool = True) -> None:
    """Inputs, junk, splits, records and shards per split and records per class (and ``boxes`` per class) are
    the run's."""
    acc = doc.accounting
    assert (found["inputs"], found["skipped"]["count"], found["rejected"]["count"]) == (
        acc.inputs,
        acc.skipped,
        acc.rejected,
    )
    assert found["classes"] == list(doc.labels)
    assert set(found["splits"]) == set(doc.splits)
    for name, info in doc.splits.items():
        planned = found["splits"][name]
        assert planned["examples"] == info.num_examples, name
        assert planned["examples_per_class"] == info.examples_per_class, name
        assert planned["num_shards"] == len(info.shards), name
        if boxes and info.boxes_per_class is not None:
            assert planned["boxes_per_class"] == info.boxes_per_class, name


def append_refusal(call) -> str:
    """The one line ``call()`` (an append) is refused with, as a UsageError; the local file listing the
    changed and removed inputs that the line names is read back and removed."""
    from img2tfrecord.errors import UsageError

    with pytest.raises(UsageError) as refused:
        call()
    line = str(refused.value)
    if "the list is in " in line:
        listed = line.rsplit("the list is in ", 1)[1].rstrip(")")
        with open(listed, encoding="utf-8") as f:
            assert all(json.loads(row)["change"] in ("changed", "removed") for row in f)
        os.remove(listed)
    return line
