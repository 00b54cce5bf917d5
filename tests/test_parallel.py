"""Conversion spread over local worker processes (transforms/parallel.py), on real files."""
from __future__ import annotations

import collections
import hashlib
import os
import signal
import subprocess
import sys
import time

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

import images as I
from conftest import ROOT
from crashing import CountingConverter, CrashingConverter, FlakyStorageConverter
from img2tfrecord.transforms.converter import ERRORS, ImageConverter
from img2tfrecord.transforms.image import ImageOptions
from img2tfrecord.transforms import parallel as parallel_module
from img2tfrecord.transforms.parallel import ConvertInParallel

SPLITS = (("train", 0.5), ("test", 0.5))
LABELS = ["cat", "dog"]
OPTIONS = ImageOptions(size=(16, 16), format="jpeg")


def _sources(root, good_per_class=10, extra=None):
    files = {f"{c}/img_{i:02d}.jpg": I.jpeg(20 + i, 12 + i) for c in LABELS for i in range(good_per_class)}
    files["cat/broken.jpg"] = I.jpeg(20, 20)[:40]  # truncated: an error row
    files["dog/notes.txt"] = b"not an image"
    files.update(extra or {})
    sources = []
    for rel, data in sorted(files.items()):
        path = os.path.join(str(root), *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        sources.append((path, rel, len(data)))
    return sources


def _expected(sources, converter):
    """(records, error rows) of the converter called directly, item by item, without Beam."""
    outputs = [converter(source, LABELS) for source in sources]
    return [_summary(v) for tag, v in outputs if tag is None], [v for tag, v in outputs if tag == ERRORS]


def _summary(record):
    """A record with the sha256 of its serialized bytes in place of the bytes."""
    split, class_name, serialized, sums = record
    return split, class_name, hashlib.sha256(serialized).hexdigest(), sums


def _check(sources, converter, processes, records, errors, batch_size=3, ahead=None, labels=LABELS):
    """ConvertInParallel on a real in-memory pipeline gives exactly ``records`` and ``errors``."""
    options = PipelineOptions(["--runner=FnApiRunner", "--direct_running_mode=in_memory"])
    with beam.Pipeline(options=options) as p:
        label_names = p | "Labels" >> beam.Create([labels])
        out = (
            p
            | "Sources" >> beam.Create(sources)
            | "Convert"
            >> ConvertInParallel(
                converter, processes, batch_size=batch_size, ahead=ahead, label_names=beam.pvalue.AsSingleton(label_names)
            )
        )
        assert_that(out.records | "Summary" >> beam.Map(_summary), equal_to(records), label="records")
        assert_that(out[ERRORS], equal_to(errors), label="errors")


def test_processes_give_exactly_the_records_and_errors_of_one_process(tmp_path):
    sources = _sources(tmp_path)
    converter = ImageConverter(OPTIONS, "class", SPLITS, seed=3)
    records, errors = _expected(sources, converter)
    assert len(records) == 20 and sorted(row["relpath"] for row in errors) == ["cat/broken.jpg", "dog/notes.txt"]
    _check(sources, converter, 1, records, errors)
    _check(sources, converter, 2, records, errors)  # split, shuffle key, class and the serialized bytes


def test_a_worker_crash_rejects_that_item_and_the_run_goes_on(tmp_path):
    crashing = {"cat/crash_me.jpg", "dog/crash_too.jpg"}
    sources = _sources(tmp_path, extra={name: I.jpeg(20, 20) for name in crashing})
    converter = CrashingConverter(OPTIONS, "class", SPLITS, seed=3)
    records, errors = _expected([s for s in sources if s[1] not in crashing], converter)
    errors += [converter.crashed(s, parallel_module._CRASH_MESSAGE)[1] for s in sources if s[1] in crashing]
    assert len(records) + len(errors) == len(sources) and len(errors) == 4
    # Every other item is converted once; the two that kill their worker are error rows.
    _check(sources, converter, 2, records, errors, batch_size=4)


def test_a_transient_read_failure_in_a_worker_fails_the_bundle_instead_of_rejecting(tmp_path):
    sources = _sources(tmp_path, good_per_class=2, extra={"cat/flaky.jpg": I.jpeg(20, 20)})
    converter = FlakyStorageConverter(OPTIONS, "class", SPLITS, seed=3)
    with pytest.raises(Exception, match="connection reset by peer"):
        _check(sources, converter, 2, [], [])


def _wait_until_converted(ahead, count):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not ahead._thread.is_alive():  # every batch submitted: the feeder no longer writes _results
            futures = [future for future, _ in ahead._results.values()]
            if len(futures) >= count and all(f.done() for f in futures):
                return
        time.sleep(0.05)
    raise AssertionError("the items were not converted ahead within a minute")


def _conversions(log_path):
    with open(log_path, encoding="utf-8") as f:
        return collections.Counter(f.read().split())


def test_items_converted_ahead_are_taken_not_converted_again(tmp_path):
    """The DoFn adopts the pool of a ConvertAhead and takes its results: every item is converted once."""
    sources = _sources(tmp_path / "in")
    log = str(tmp_path / "conversions.log")
    converter = CountingConverter(OPTIONS, "class", SPLITS, seed=3, log_path=log)
    first = sources[:7]
    ahead = parallel_module.ConvertAhead(converter, 2, first, LABELS, batch_size=3)
    _wait_until_converted(ahead, len(first))
    records, errors = _expected(sources, ImageConverter(OPTIONS, "class", SPLITS, seed=3))
    _check(sources, converter, 2, records, errors, ahead=ahead.token)
    assert ahead.token not in parallel_module._AHEAD  # adopted
    assert _conversions(log) == {rel: 1 for _, rel, _ in sources}
    ahead.close()  # nothing left to do


def test_results_converted_ahead_for_another_label_list_are_not_used(tmp_path):
    sources = _sources(tmp_path / "in", good_per_class=3)
    log = str(tmp_path / "conversions.log")
    converter = CountingConverter(OPTIONS, "class", SPLITS, seed=3, log_path=log)
    ahead = parallel_module.ConvertAhead(converter, 2, sources, ["cat", "dog", "emu"])
    _wait_until_converted(ahead, len(sources))
    records, errors = _expected(sources, ImageConverter(OPTIONS, "class", SPLITS, seed=3))
    _check(sources, converter, 2, records, errors, ahead=ahead.token)
    assert _conversions(log) == {rel: 2 for _, rel, _ in sources}  # ahead, then again for the right labels


def test_a_pool_converting_otherwise_is_not_adopted(tmp_path):
    sources = _sources(tmp_path, good_per_class=2)
    png = ImageConverter(ImageOptions(size=(16, 16), format="png"), "class", SPLITS, seed=3)
    jpeg = ImageConverter(OPTIONS, "class", SPLITS, seed=3)
    ahead = parallel_module.ConvertAhead(png, 2, sources, LABELS)
    try:
        records, errors = _expected(sources, jpeg)
        _check(sources, jpeg, 2, records, errors, ahead=ahead.token)
        assert ahead.token in parallel_module._AHEAD  # left for run.py to close
    finally:
        ahead.close()


def test_a_crash_while_converting_ahead_rejects_that_item_only(tmp_path):
    crashing = {"cat/crash_me.jpg"}
    sources = _sources(tmp_path, extra={name: I.jpeg(20, 20) for name in crashing})
    converter = CrashingConverter(OPTIONS, "class", SPLITS, seed=3)
    records, errors = _expected([s for s in sources if s[1] not in crashing], converter)
    errors += [converter.crashed(s, parallel_module._CRASH_MESSAGE)[1] for s in sources if s[1] in crashing]
    ahead = parallel_module.ConvertAhead(converter, 2, sources, LABELS, batch_size=4)
    _check(sources, converter, 2, records, errors, batch_size=4, ahead=ahead.token)


def test_converting_ahead_that_no_pipeline_adopts_is_shut_down(tmp_path):
    sources = _sources(tmp_path, good_per_class=2)
    ahead = parallel_module.ConvertAhead(ImageConverter(OPTIONS, "class", SPLITS, seed=3), 2, sources, LABELS)
    pids = []
    deadline = time.monotonic() + 60
    while not pids and time.monotonic() < deadline:
        pids = list(ahead._pool._processes or ())
        time.sleep(0.05)
    assert pids
    ahead.close()
    assert ahead.token not in parallel_module._AHEAD and ahead._pool is None
    assert not any(_alive(pid) for pid in pids)


def test_processes_must_be_positive():
    with pytest.raises(ValueError, match="processes must be at least 1"):
        ConvertInParallel(ImageConverter(OPTIONS, "class", SPLITS, seed=3), 0)


_KILLED_PARENT = """
import os, signal
from img2tfrecord.transforms.converter import ImageConverter
from img2tfrecord.transforms.image import ImageOptions
from img2tfrecord.transforms.parallel import _ConvertInProcesses
fn = _ConvertInProcesses(ImageConverter(ImageOptions(), "class", (("train", 1.0),), 0), 2)
fn.setup()
for future in [fn._pool.submit(os.getpid) for _ in range(4)]:
    future.result()  # both workers are up
print(" ".join(str(pid) for pid in fn._pool._processes), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in f)
    except FileNotFoundError:
        return False


def test_workers_exit_when_the_process_that_started_them_is_killed():
    proc = subprocess.run([sys.executable, "-c", _KILLED_PARENT], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    pids = [int(p) for p in proc.stdout.split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 15
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in pids if _alive(pid)], "conversion processes outlived the killed runner"
