"""Conversion spread over local worker processes (transforms/parallel.py), on real files."""
from __future__ import annotations

import hashlib
import os

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

import images as I
from crashing import CrashingConverter, FlakyStorageConverter
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
    split, key, class_name, serialized = record
    return split, key, class_name, hashlib.sha256(serialized).hexdigest()


def _check(sources, converter, processes, records, errors, batch_size=3):
    """ConvertInParallel on a real in-memory pipeline gives exactly ``records`` and ``errors``."""
    options = PipelineOptions(["--runner=FnApiRunner", "--direct_running_mode=in_memory"])
    with beam.Pipeline(options=options) as p:
        labels = p | "Labels" >> beam.Create([LABELS])
        out = (
            p
            | "Sources" >> beam.Create(sources)
            | "Convert"
            >> ConvertInParallel(converter, processes, batch_size=batch_size, label_names=beam.pvalue.AsSingleton(labels))
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


def test_processes_must_be_positive():
    with pytest.raises(ValueError, match="processes must be at least 1"):
        ConvertInParallel(ImageConverter(OPTIONS, "class", SPLITS, seed=3), 0)
