"""Faults in the middle of a run: a worker failing and retried, the whole process killed, the disk full.

What is real here, locally:

* Beam's ``BundleBasedDirectRunner`` retries a failed bundle (up to 4
  attempts) and throws away everything the failed attempt output, as
  Dataflow does. ``test_retried_bundles_neither_duplicate_nor_lose_records``
  runs the shard step of the pipeline (``WriteShards``) on it, with a
  converter that fails the first attempt of some elements after converting
  them and a shard writer that fails once mid-shard. (The whole graph
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

import dataclasses
import glob
import hashlib
import json
import os
import re
import resource
import signal
import subprocess

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from conftest import ROOT, cli_command, cli_env, convert
from helpers.cli import FAST
from helpers.datasets import make_images
from helpers.outputs import read_records
from helpers.processes import kill_when

from img2tfrecord import faults
from img2tfrecord.conversion.converter import ImageConverter
from img2tfrecord.images.options import ImageOptions
from img2tfrecord.model import ERRORS
from img2tfrecord.readers.records import read_manifest
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas.dataset_json import DatasetManifest
from img2tfrecord.sources.inputs.folder import FolderSource
from img2tfrecord.transforms.beam_tfrecord_sink import ShardSink, ShardSinks
from img2tfrecord.transforms.discover import Discover, DiscoverClasses
from img2tfrecord.transforms.finalize import write_error_report
from img2tfrecord.transforms.write_shards import WriteShards

tf = pytest.importorskip("tensorflow")


def final_shards(out: str):
    return sorted(n for n in os.listdir(out) if output_files.parse_shard_file_name(n))


def assert_shards_complete(out: str) -> None:
    """Every file under a final shard name holds whole records (TensorFlow checks every CRC)."""
    for name in final_shards(out):
        for _ in tf.data.TFRecordDataset(os.path.join(out, name)):
            pass


def assert_exact_output(out: str, files: dict) -> None:
    doc, records = read_records(out)
    names = [r[keys.FILENAME].decode() for rs in records.values() for r in rs]
    good = sorted(k for k in files if "broken" not in k)
    assert sorted(names) == good, "records lost or duplicated"
    errors = [json.loads(line) for line in open(os.path.join(out, output_files.ERRORS_FILE))]
    assert sorted(e["relpath"] for e in errors) == sorted(k for k in files if "broken" in k)
    acc = doc.accounting
    assert acc.inputs == len(files) == acc.written + acc.rejected
    assert os.path.exists(os.path.join(out, output_files.SUCCESS_FILE))
    assert not [n for n in os.listdir(out) if n.startswith(output_files.TEMP_PREFIXES)]


# -- a worker failing mid-bundle, retried ---------------------------------------------------------


class FlakyConverter(ImageConverter):
    """Fails its first attempt at some files, as a lost worker would (the bundle is retried)."""

    def __init__(self, *args, marks: str, fail: frozenset, **kwargs):
        super().__init__(*args, **kwargs)
        self._marks = marks
        self._fail = fail

    def __call__(self, source, label_names):
        output = super().__call__(source, label_names)
        relpath = source.relpath
        mark = os.path.join(self._marks, relpath.replace("/", "__"))
        if relpath in self._fail and not os.path.exists(mark):
            open(mark, "w").close()
            raise RuntimeError(f"simulated worker failure at {relpath}")
        return output


_WRITES = {"failed": 0, "count": 0}


def _flaky_write(original):
    def write_encoded_record(self, file_handle, value):
        _WRITES["count"] += 1
        if _WRITES["count"] == 3 and not _WRITES["failed"]:
            _WRITES["failed"] += 1
            raise OSError("simulated worker failure while writing a shard")
        return original(self, file_handle, value)

    return write_encoded_record


def test_retried_bundles_neither_duplicate_nor_lose_records(tmp_path, monkeypatch):
    """The shard step on a runner that retries failed bundles: every shard committed once, whole."""
    root = str(tmp_path / "in")
    files = make_images(root, classes=2, per_class=12, size=(32, 24), bad=1)
    marks = tmp_path / "marks"
    marks.mkdir()
    fail = frozenset({"class0/img_0003.jpg", "class1/broken_0.jpg"})  # with the failed write: 3 of 4 attempts
    monkeypatch.setattr(ShardSink, "write_encoded_record", _flaky_write(ShardSink.write_encoded_record))
    _WRITES.update(failed=0, count=0)
    out = str(tmp_path / "out")
    run = os.path.join(out, output_files.run_folder("0000111122223333"))
    sinks = ShardSinks(out, "none", os.path.join(run, output_files.RUN_SHARDS_DIR))
    converter = FlakyConverter(ImageOptions(), "class", (("train", 1.0),), 0, marks=str(marks), fail=fail)
    with beam.Pipeline(options=PipelineOptions(["--runner=BundleBasedDirectRunner"])) as p:
        discovered = p | "Discover" >> Discover(FolderSource(root + "/**", root + "/"))
        labels = discovered["files"] | "Classes" >> DiscoverClasses("class")
        written = discovered["files"] | "WriteShards" >> WriteShards(
            converter,
            sinks,
            run,
            processes=1,
            label_names=beam.pvalue.AsSingleton(labels),
            num_shards={"train": 2},
        )
        errors_file = os.path.join(out, output_files.ERRORS_FILE)
        _ = (
            written[ERRORS]
            | "Errors" >> beam.combiners.ToList()
            | "ErrorReport" >> beam.Map(lambda rows: write_error_report(errors_file, rows))
        )

    assert sorted(os.listdir(marks)) == sorted(f.replace("/", "__") for f in fail), "the failures did not happen"
    assert _WRITES["failed"] == 1
    names = []
    for shard in final_shards(out):
        for raw in tf.data.TFRecordDataset(os.path.join(out, shard)):
            names.append(
                tf.train.Example.FromString(raw.numpy()).features.feature[keys.FILENAME].bytes_list.value[0].decode()
            )
    assert sorted(names) == sorted(k for k in files if "broken" not in k)
    errors = [json.loads(line)["relpath"] for line in open(os.path.join(out, output_files.ERRORS_FILE))]
    assert sorted(errors) == ["class0/broken_0.jpg", "class1/broken_0.jpg"]
    assert final_shards(out) == [output_files.shard_file_name("train", i, 2) for i in range(2)]
    assert not glob.glob(os.path.join(run, output_files.RUN_SHARDS_DIR, "train", "*")), (
        "a failed attempt's staging files were left"
    )


# -- the whole process killed ---------------------------------------------------------------------


def _run_folder(out: str):
    found = glob.glob(os.path.join(out, output_files.RUN_FOLDER_PREFIX + "*"))
    return found[0] if found else None


def _done_files(out: str):
    folder = _run_folder(out)
    return sorted(glob.glob(os.path.join(folder, output_files.RUN_DONE_DIR, "*.json"))) if folder else []


def _shard_digests(out: str) -> dict:
    found = {}
    for name in final_shards(out) + sorted(os.listdir(os.path.join(out, output_files.INDEX_DIR))):
        path = (
            os.path.join(out, name)
            if output_files.parse_shard_file_name(name)
            else os.path.join(out, output_files.INDEX_DIR, name)
        )
        with open(path, "rb") as f:
            found[name] = hashlib.sha256(f.read()).hexdigest()
    return found


def _comparable(doc: DatasetManifest) -> DatasetManifest:
    """The manifest without the times it was written at."""
    return doc.replace(created="", generations=tuple(dataclasses.replace(g, created="") for g in doc.generations))


KILL_ARGS = ("--image-size", "96", "--format", "png", "--num-shards", "8", "--splits", "train=0.5,test=0.5")


def test_sigkill_mid_run_then_resume_converts_only_the_rest_and_gives_the_same_bytes(tmp_path):
    root = str(tmp_path / "in")
    files = make_images(root, classes=4, per_class=80, size=(320, 240), bad=2)
    reference = str(tmp_path / "reference")
    done = convert(root, reference, *KILL_ARGS, *FAST, runner=())
    assert done.returncode == 0, done.stderr[-3000:]

    out = str(tmp_path / "out")
    args = ("convert", "--input", root, "--output", out, *KILL_ARGS, *FAST)
    assert kill_when(args, lambda: len(_done_files(out)) >= 3, "three shards finished") == -signal.SIGKILL
    finished = _done_files(out)
    assert 3 <= len(finished) < 16, "the kill came after every shard was written"
    stamps = {path: os.stat(path).st_mtime_ns for path in finished}

    # Other options, seed or input: refused, and nothing is touched.
    before = sorted(os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs)
    other = convert(root, out, *KILL_ARGS, "--seed", "1", "--resume", *FAST, runner=())
    assert other.returncode == 2 and "was started differently: --seed is 1 here but " in other.stderr, other.stderr[
        -2000:
    ]
    assert len(other.stderr.strip().splitlines()) == 1
    assert sorted(os.path.join(d, f) for d, _, fs in os.walk(out) for f in fs) == before

    resumed = convert(root, out, *KILL_ARGS, "--resume", *FAST, runner=())
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    kept = int(resumed.stderr.split(" finished shard(s) kept")[0].rsplit(" ", 1)[-1])
    assert kept >= len(finished)
    assert not any(os.path.exists(p) and os.stat(p).st_mtime_ns != t for p, t in stamps.items())
    assert_exact_output(out, files)
    assert _shard_digests(out) == _shard_digests(reference)
    assert _comparable(read_manifest(out)) == _comparable(read_manifest(reference))

    # Resuming a finished output of the same run does nothing and says so.
    again = convert(root, out, *KILL_ARGS, "--resume", *FAST, runner=())
    assert again.returncode == 0 and "nothing to resume" in again.stderr
    assert _shard_digests(out) == _shard_digests(reference)


# -- the disk full ---------------------------------------------------------------------------------


def _limit_file_size(limit: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # writes past it fail with EFBIG

    return apply


def test_writes_failing_mid_run_exit_1_then_overwrite_recovers(tmp_path):
    root = str(tmp_path / "in")
    files = make_images(root, classes=2, per_class=40, size=(160, 120), bad=1)
    out = str(tmp_path / "out")
    args = (
        "convert",
        "--input",
        root,
        "--output",
        out,
        "--format",
        "png",
        "--num-shards",
        "1",
        "--runner=FnApiRunner",
        "--direct_running_mode=in_memory",
        *FAST,
    )
    proc = subprocess.run(
        cli_command(*args),
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_limit_file_size(256 * 1024),
    )
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-3000:])
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("img2tfrecord: the run failed while converting and writing shards: File too large"), last
    assert not os.path.exists(os.path.join(out, output_files.SUCCESS_FILE))
    assert final_shards(out) == []  # shards are written under staging names and renamed only when whole
    assert_shards_complete(out)

    again = convert(root, out, "--format", "png", "--num-shards", "1", "--overwrite", *FAST)
    assert again.returncode == 0, again.stderr[-3000:]
    assert_exact_output(out, files)


# -- a kill at each phase, at a known point (img2tfrecord/faults.py) ------------------------------

PHASE_ARGS = ("--image-size", "48", "--num-shards", "3", "--splits", "train=0.5,test=0.5", *FAST)


@pytest.fixture(scope="module")
def phase_input(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("phases") / "in")
    files = make_images(root, classes=3, per_class=20, size=(96, 72), bad=1)
    reference = str(tmp_path_factory.mktemp("phases_reference") / "out")
    done = convert(root, reference, *PHASE_ARGS, runner=())
    assert done.returncode == 0, done.stderr[-3000:]
    return root, files, reference


def _assert_final_shards_whole(out: str, reference: str) -> None:
    """A file under a final shard name is never partial: it is byte for byte the finished shard."""
    expected = _shard_digests(reference)
    for name in final_shards(out):
        with open(os.path.join(out, name), "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == expected[name], f"{name} is not whole"


def test_a_kill_while_converting_then_overwrite_gives_the_same_output(tmp_path, phase_input):
    root, files, reference = phase_input
    out = str(tmp_path / "out")
    marker = str(tmp_path / "paused")
    env = cli_env({faults.ENV: "pause:converting", faults.MARKER_ENV: marker})
    args = ("convert", "--input", root, "--output", out, *PHASE_ARGS)
    assert kill_when(args, lambda: os.path.exists(marker), "paused while converting", env=env) == -signal.SIGKILL
    again = convert(root, out, *PHASE_ARGS, "--overwrite", runner=())
    assert again.returncode == 0, again.stderr[-3000:]
    assert _shard_digests(out) == _shard_digests(reference)


# -- the accounting guard -------------------------------------------------------------------------


def test_counts_that_do_not_add_up_fail_the_run_without_success(tmp_path, phase_input):
    root, _, _ = phase_input
    out = str(tmp_path / "out")
    args = ("convert", "--input", root, "--output", out, *PHASE_ARGS)
    env = cli_env({faults.ENV: "drop_record"})
    proc = subprocess.run(cli_command(*args), cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    found = re.search(r"AccountingError: (\d+) inputs but (\d+) records written and (\d+) rejected", last)
    assert found, last
    inputs, written, rejected = map(int, found.groups())
    assert inputs == written + rejected + 1  # the one record the writer left out
    assert not os.path.exists(os.path.join(out, output_files.SUCCESS_FILE))
    assert not os.path.exists(os.path.join(out, output_files.MANIFEST_FILE))


def test_success_is_written_after_every_other_file(phase_input):
    _, _, reference = phase_input
    success = os.stat(os.path.join(reference, output_files.SUCCESS_FILE)).st_mtime_ns
    others = [
        os.stat(os.path.join(folder, name)).st_mtime_ns
        for folder, _, names in os.walk(reference)
        for name in names
        if name != output_files.SUCCESS_FILE
    ]
    assert others and max(others) <= success


# -- a full disk ----------------------------------------------------------------------------------


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 2 MiB tmpfs mounted for the test (needs root, as CI runs)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield str(mount)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_full_disk_exits_1_with_a_clear_message_and_no_success(tmp_path, small_tmpfs):
    root = str(tmp_path / "in")
    make_images(root, classes=2, per_class=40, size=(160, 120))
    out = os.path.join(small_tmpfs, "out")
    proc = convert(root, out, "--format", "png", "--num-shards", "2", *FAST, runner=())
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("img2tfrecord: the run failed while converting and writing shards: No space left on device")
    assert "free space where the output is, then run: " in last and last.endswith(".log)"), last
    assert "--resume" in last and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) <= 3
    assert [n for n in os.listdir(out) if not n.startswith(output_files.RUN_FOLDER_PREFIX)] == []  # only the staging


def test_a_refused_resume_names_the_option_that_differs_from_the_unfinished_run(tmp_path):
    """The staging folder records what its run's fingerprint covers (``run.json``): a ``--resume`` with other
    options names the one that differs, as an ``--append`` does."""
    from img2tfrecord.pipeline.config import ConvertConfig
    from img2tfrecord.pipeline.kinds import plan_input
    from img2tfrecord.pipeline.outputs import OutputNotEmpty, prepare_output

    root = str(tmp_path / "in")
    make_images(root, classes=2, per_class=2, size=(16, 12))
    out = str(tmp_path / "out")
    started = ConvertConfig(input=root, output=out, analyze=False, seed=3)
    plan = plan_input(started)[1]
    staging = os.path.join(out, output_files.run_folder(plan.fingerprint(started)))
    os.makedirs(staging)
    with open(os.path.join(staging, output_files.RUN_STARTED_FILE), "w") as f:
        json.dump(plan.fingerprint_doc(started), f)  # as run.py records it
    again = ConvertConfig(input=root, output=out, analyze=False, seed=4)
    folder = output_files.run_folder(plan.fingerprint(again))
    with pytest.raises(OutputNotEmpty) as info:
        prepare_output(out, False, folder, run_doc=plan.fingerprint_doc(again))
    assert str(info.value) == (
        f"cannot resume: the unfinished conversion in {out} was started differently: --seed is 4 here but 3 "
        "there; rerun it as it was started, or pass --overwrite to start over"
    )
    assert os.listdir(out) == [os.path.basename(staging)]  # refused: nothing touched
