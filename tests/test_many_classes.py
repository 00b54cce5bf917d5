"""Counts per class at 1,000 classes (class_counts.py): ``inspect``, ``convert --plan`` and a run's summary
print the counts' spread instead of a row per class, every class with ``--all-classes``, and the JSON forms
hold every count; few classes keep one row each."""

from __future__ import annotations

import json

import images as I
import pytest
from helpers.datasets import write_tree

from img2tfrecord import api, inspection
from img2tfrecord.class_counts import MANY_CLASSES, spread_lines
from img2tfrecord.commands.convert import format_summary
from img2tfrecord.pipeline.preview_report import format_plan
from img2tfrecord.readers.records import read_manifest

CLASSES = [f"n{i:04d}" for i in range(1000)]
OPTIONS = dict(format="keep", analyze=False, splits="train=0.5,test=0.5", seed=1, num_shards=1)


@pytest.fixture(scope="module")
def thousand(tmp_path_factory):
    """1,000 class folders of one tiny image each, converted: ``(input, output)``. With one image per class,
    every class is missing from one of the two splits."""
    root = tmp_path_factory.mktemp("thousand")
    src, out = str(root / "in"), str(root / "out")
    image = I.jpeg(8, 8)
    write_tree(src, {f"{c}/{c}.jpg": image for c in CLASSES})
    api.convert(src, out, **OPTIONS)
    return src, out


def _class_rows(text: str) -> int:
    """How many lines name one of the classes."""
    return sum(any(c in line for c in (CLASSES[0], CLASSES[500], CLASSES[999])) for line in text.splitlines())


def _check_spread(text: str, per_split) -> None:
    lines = text.splitlines()
    assert len(lines) < 60, text
    header = next(i for i, line in enumerate(lines) if line.split()[:5] == ["per", "class", "min", "median", "max"])
    rows = {line.split()[0]: line.split()[1:] for line in lines[header + 1 : header + 3]}
    for split, counts in per_split.items():  # one image per class: each split has 0 or 1 of every class
        assert rows[split] == ["0", "0" if counts < 500 else "1", "1", str(counts)], text
    assert any(line.strip().startswith("all splits") and line.split()[2:6] == ["1", "1", "1", "1000"] for line in lines)
    missing = {line.split()[2].rstrip(":"): int(line.split()[3]) for line in lines if "missing from" in line}
    assert missing == {split: 1000 - n for split, n in per_split.items()}, text
    assert any(line.strip().startswith("smallest classes: n0000 (1)") for line in lines), text
    assert any(line.strip().startswith("largest classes: n0995 (1)") for line in lines), text


def test_a_runs_summary_of_1000_classes_gives_their_spread_and_every_class_on_request(thousand):
    doc = read_manifest(thousand[1])
    per_split = {name: info.num_examples for name, info in doc.splits.items()}
    assert sum(per_split.values()) == 1000 and all(0 < n < 1000 for n in per_split.values())
    text = format_summary(doc)
    _check_spread(text, per_split)
    assert _class_rows(text) <= 3  # named among the smallest / largest / missing, never a row each
    assert _class_rows(format_summary(doc, all_classes=True)) == 3
    assert len(format_summary(doc, all_classes=True).splitlines()) > 1000


def test_inspect_of_1000_classes_gives_their_spread_and_the_json_every_count(thousand):
    summary = inspection.summarise(thousand[1], limit=10)
    per_split = {name: info["num_examples"] for name, info in summary["splits"].items()}
    text = inspection.format_summary(summary)
    _check_spread(text, per_split)
    full = inspection.format_summary(summary, all_classes=True)
    assert len(full.splitlines()) > 1000 and _class_rows(full) == 3
    counted = json.loads(json.dumps(summary))["splits"]
    assert sum(len(info["examples_per_class"]) for info in counted.values()) == 1000


def test_the_plan_of_1000_classes_gives_their_spread_and_the_json_every_count(thousand, tmp_path):
    found = api.plan(thousand[0], str(tmp_path / "out"), **OPTIONS)
    per_split = {name: split.examples for name, split in found.splits.items()}
    text = format_plan(found)
    _check_spread(text, per_split)
    assert len(format_plan(found, all_classes=True).splitlines()) > 1000
    doc = json.loads(found.to_json())
    assert sum(len(split["examples_per_class"]) for split in doc["splits"].values()) == 1000
    assert per_split == {name: info.num_examples for name, info in read_manifest(thousand[1]).splits.items()}


def test_the_spread_is_min_median_max_with_the_extremes_and_what_a_split_lacks():
    counts = {"train": {"a": 1, "b": 4, "c": 9, "d": 2}, "test": {"a": 1, "b": 1}}
    lines = [line.split() for line in spread_lines(["a", "b", "c", "d"], counts, indent="")]
    assert lines[0] == ["per", "class", "min", "median", "max", "total"]
    assert lines[1] == ["train", "1", "3", "9", "16"]
    assert lines[2] == ["test", "0", "0.5", "1", "2"]
    assert lines[3] == ["all", "splits", "2", "3.5", "9", "18"]
    assert lines[4] == ["smallest", "classes:", "a", "(2),", "d", "(2)"]
    assert lines[5] == ["largest", "classes:", "c", "(9),", "b", "(5)"]
    assert lines[6] == ["missing", "from", "test:", "2", "class(es)", "(c,", "d)"]


def test_few_classes_keep_a_row_each(tmp_path):
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    classes = [f"c{i:02d}" for i in range(MANY_CLASSES)]
    write_tree(src, {f"{c}/{i}.jpg": I.jpeg(8, 8) for c in classes for i in range(2)})
    found = api.plan(src, out, **OPTIONS)
    assert all(any(line.strip().startswith(f"{c}:") for line in format_plan(found).splitlines()) for c in classes)
    assert "per class" not in format_plan(found)
