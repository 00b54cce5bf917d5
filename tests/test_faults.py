"""Faults in the middle of a run: a worker failing and retried, the whole process killed, the disk full.

What is real here, locally:

* Beam's ``BundleBasedDirectRunner`` retries a failed bundle (up to 4
  attempts) and throws away everything the failed attempt output, as
  Dataflow does. ``test_retried_bundles_neither_duplicate_nor_lose_records``
  runs the conversion and writing transforms of the pipeline on it, with a
  converter that fails the first attempt of some elements after emitting
  records and a shard writer that fails once mid-shard. (The whole graph
  does not run on that runner: it hands ``FinalizeOutput`` an empty list of
  shards, which the accounting check turns into a failed run rather than a
  wrong manifest.) The default local runner, FnApiRunner, does not retry:
  a failure fails the run.
* So for the default runner the tests check what matters after any failure:
  no ``_SUCCESS``, no partial shard under a final name, and a re-run with
  ``--overwrite`` writes exactly the right records and leaves no staging
  folders. The failures are real: SIGKILL of the ``convert`` process, and
  a file-size limit (``RLIMIT_FSIZE``) that makes the shard writes fail the
  way a full disk does.
"""
from __future__ import annotations

import glob
import json
import os
import resource
import signal
import subprocess
import sys
import time

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

import images as I
from conftest import ROOT, convert
from img2tfrecord import schemas
from img2tfrecord.schemas import manifest
from img2tfrecord.transforms.convert import ERRORS, ConvertFn
from img2tfrecord.transforms.converter import ImageConverter
from img2tfrecord.transforms.discover import DiscoverClasses, DiscoverImages
from img2tfrecord.transforms.image import ImageOptions
from img2tfrecord.transforms.report import WriteErrorReport
from img2tfrecord.transforms.shuffle import ShuffleItems
from img2tfrecord.transforms.write import WriteSplit
from test_convert_cli import read_records
from test_hostile import FAST

tf = pytest.importorskip("tensorflow")


def make_images(root: str, classes: int, per_class: int, size=(96, 72), bad: int = 0) -> dict:
    """relpath -> bytes: noisy JPEGs (slow enough to convert), and ``bad`` truncated ones per class."""
    files = {}
    w, h = size
    for c in range(classes):
        for i in range(per_class):
            data = I.jpeg(w, h, I.noise(max(1, w // 10), max(1, h // 10), seed=c * 1000 + i).resize((w, h)))
            files[f"class{c}/img_{i:04d}.jpg"] = data
        for i in range(bad):
            files[f"class{c}/broken_{i}.jpg"] = I.truncated_jpeg()
    for relpath, data in files.items():
        path = os.path.join(root, relpath)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return files


def final_shards(out: str):
    return sorted(n for n in os.listdir(out) if manifest.parse_shard_file_name(n))


def assert_shards_complete(out: str) -> None:
    """Every file under a final shard name holds whole records (TensorFlow checks every CRC)."""
    for name in final_shards(out):
        for _ in tf.data.TFRecordDataset(os.path.join(out, name)):
            pass


def assert_exact_output(out: str, files: dict) -> None:
    doc, records = read_records(out)
    names = [r[schemas.FILENAME].decode() for rs in records.values() for r in rs]
    good = sorted(k for k in files if "broken" not in k)
    assert sorted(names) == good, "records lost or duplicated"
    errors = [json.loads(line) for line in open(os.path.join(out, manifest.ERRORS_FILE))]
    assert sorted(e["relpath"] for e in errors) == sorted(k for k in files if "broken" in k)
    acc = doc["accounting"]
    assert acc["inputs"] == len(files) == acc["written"] + acc["rejected"]
    assert os.path.exists(os.path.join(out, manifest.SUCCESS_FILE))
    assert not [n for n in os.listdir(out) if n.startswith(manifest.TEMP_PREFIXES)]


# -- a worker failing mid-bundle, retried ---------------------------------------------------------


class FlakyConvertFn(ConvertFn):
    """ConvertFn whose first attempt at some files fails after the file's record was emitted."""

    def __init__(self, *args, marks: str, fail: frozenset, **kwargs):
        super().__init__(*args, **kwargs)
        self._marks = marks
        self._fail = fail

    def process(self, source, label_names):
        yield from super().process(source, label_names)
        relpath = source[1]
        mark = os.path.join(self._marks, relpath.replace("/", "__"))
        if relpath in self._fail and not os.path.exists(mark):
            open(mark, "w").close()
            raise RuntimeError(f"simulated worker failure at {relpath}")


_WRITES = {"failed": 0, "count": 0}


def _flaky_write(original):
    def write_encoded_record(self, file_handle, value):
        _WRITES["count"] += 1
        if _WRITES["count"] == 3 and not _WRITES["failed"]:
            _WRITES["failed"] += 1
            raise IOError("simulated worker failure while writing a shard")
        return original(self, file_handle, value)

    return write_encoded_record


def test_retried_bundles_neither_duplicate_nor_lose_records(tmp_path, monkeypatch):
    from apache_beam.io import tfrecordio

    root = str(tmp_path / "in")
    files = make_images(root, classes=2, per_class=12, size=(32, 24), bad=1)
    marks = tmp_path / "marks"
    marks.mkdir()
    fail = frozenset({"class0/img_0003.jpg", "class1/img_0007.jpg", "class1/broken_0.jpg"})
    monkeypatch.setattr(tfrecordio._TFRecordSink, "write_encoded_record",  # pylint: disable=protected-access
                        _flaky_write(tfrecordio._TFRecordSink.write_encoded_record))  # pylint: disable=protected-access
    _WRITES.update(failed=0, count=0)
    out = str(tmp_path / "out")
    fn = FlakyConvertFn(ImageConverter(ImageOptions(), "class", (("train", 1.0),), 0), marks=str(marks), fail=fail)
    with beam.Pipeline(options=PipelineOptions(["--runner=BundleBasedDirectRunner"])) as p:
        discovered = p | "Discover" >> DiscoverImages(root + "/**", root + "/")
        labels = discovered.files | "Classes" >> DiscoverClasses("class")
        converted = (
            discovered.files
            | "Shuffle" >> ShuffleItems(seed=0, buckets=2)
            | "Convert" >> beam.ParDo(fn, label_names=beam.pvalue.AsSingleton(labels)).with_outputs(ERRORS, main="records")
        )
        _ = (
            converted.records
            | "Example" >> beam.Map(lambda record: record[2])
            | "Write" >> WriteSplit(out, "train", 2, "none")
        )
        _ = converted[ERRORS] | "Errors" >> WriteErrorReport(out)

    assert sorted(os.listdir(marks)) == sorted(f.replace("/", "__") for f in fail), "the failures did not happen"
    assert _WRITES["failed"] == 1
    names = []
    for shard in final_shards(out):
        for raw in tf.data.TFRecordDataset(os.path.join(out, shard)):
            names.append(tf.train.Example.FromString(raw.numpy()).features.feature[schemas.FILENAME].bytes_list.value[0].decode())
    assert sorted(names) == sorted(k for k in files if "broken" not in k)
    errors = [json.loads(line)["relpath"] for line in open(os.path.join(out, manifest.ERRORS_FILE))]
    assert sorted(errors) == ["class0/broken_0.jpg", "class1/broken_0.jpg"]
    assert final_shards(out) == [manifest.shard_file_name("train", i, 2) for i in range(2)]
    assert not glob.glob(os.path.join(out, "beam-temp-*")), "a failed attempt's staging files were left"


# -- the whole process killed ---------------------------------------------------------------------


def _cli(*args):
    return [sys.executable, "-m", "img2tfrecord", *args]


def _env():
    return dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")


def test_sigkill_mid_run_then_overwrite_gives_the_complete_output(tmp_path):
    root = str(tmp_path / "in")
    files = make_images(root, classes=4, per_class=150, size=(320, 240), bad=2)
    out = str(tmp_path / "out")
    args = ("convert", "--input", root, "--output", out, "--image-size", "96", "--format", "png", "--num-shards", "3", *FAST)
    proc = subprocess.Popen(_cli(*args), cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while not glob.glob(os.path.join(out, "beam-temp-*")):
            assert proc.poll() is None, "the run ended before it could be killed: " + proc.stdout.read().decode()[-2000:]
            assert time.monotonic() < deadline, "no staging folder appeared"
            time.sleep(0.01)
        time.sleep(0.3)  # in the middle of converting
        assert proc.poll() is None, "the run ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    assert not os.path.exists(os.path.join(out, manifest.SUCCESS_FILE))
    assert glob.glob(os.path.join(out, "beam-temp-*")), "the kill came after the run had finished writing"
    assert_shards_complete(out)

    again = convert(root, out, "--image-size", "96", "--format", "png", "--num-shards", "3", *FAST, runner=())
    assert again.returncode == 2 and "--overwrite" in again.stderr  # an unfinished output is not silently reused
    again = convert(root, out, "--image-size", "96", "--format", "png", "--num-shards", "3", "--overwrite", *FAST, runner=())
    assert again.returncode == 0, again.stderr[-3000:]
    assert_exact_output(out, files)
    assert final_shards(out) == [manifest.shard_file_name("train", i, 3) for i in range(3)]


# -- the disk full ---------------------------------------------------------------------------------


def _limit_file_size(limit: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # writes past it fail with EFBIG

    return apply


def test_writes_failing_mid_run_exit_1_then_overwrite_recovers(tmp_path):
    root = str(tmp_path / "in")
    files = make_images(root, classes=2, per_class=40, size=(160, 120), bad=1)
    out = str(tmp_path / "out")
    args = ("convert", "--input", root, "--output", out, "--format", "png", "--num-shards", "1",
            "--runner=FnApiRunner", "--direct_running_mode=in_memory", *FAST)
    proc = subprocess.run(_cli(*args), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300,
                          preexec_fn=_limit_file_size(256 * 1024))
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-3000:])
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("img2tfrecord: pipeline failed:") and "File too large" in last, last
    assert not os.path.exists(os.path.join(out, manifest.SUCCESS_FILE))
    assert final_shards(out) == []  # shards are written under staging names and renamed only when whole
    assert_shards_complete(out)

    again = convert(root, out, "--format", "png", "--num-shards", "1", "--overwrite", *FAST)
    assert again.returncode == 0, again.stderr[-3000:]
    assert_exact_output(out, files)
