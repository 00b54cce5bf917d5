"""The default command (tf.Transform analysis on) on every input kind: what users run, not ``--no-analyze``.

Hostile images (CMYK, 16-bit, animated, 1x20000 ...), zip, tar, tar.gz, a labeled and an unlabeled
manifest and ``--sequence`` clips: each run succeeds, the accounting holds, and the train statistics cover
exactly the train records (or, for sequences, the analysis is skipped with a warning). The analysis reads
the records, not the manifest: a JSONL manifest, read like a CSV one from then on, is converted in
test_sources.py and test_append_manifests.py.
The three archive kinds are one input, a glob of a zip, a tar and a tar.gz (each archive is read by its
own reader, as a single archive is): one analysed run for the three.
"""

from __future__ import annotations

import csv
import os

import conftest
import pytest
from helpers.datasets import clip_dataset, dataset_files, hostile_corpus, write_tar, write_tree, write_zip

from img2tfrecord.readers import datasource
from img2tfrecord.readers.records import read_manifest
from img2tfrecord.schemas import features as keys


def convert(*args, **kwargs):
    """``conftest.convert`` with the tf.Transform analysis: the default command: the analysis runs."""
    return conftest.convert(*args, analyze=True, **kwargs)


SPLITS = ("--splits", "train=0.6,test=0.4", "--seed", "3", "--image-size", "32")
# The hostile corpus runs the command exactly as typed (a worker process per core); the other kinds
# run in one process: their input kind is the point, not the worker pool.
ONE_PROCESS = ("--processes", "1")


def _manifest(path: str, rows, labeled: bool = True) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["path", "label"] if labeled else ["path"])
        for rel, label in rows:
            w.writerow([rel, label] if labeled else [rel])


def _input(tmp_path, kind: str) -> str:
    files = dataset_files()
    if kind == "hostile":
        root = str(tmp_path / "hostile")
        write_tree(root, {rel: data for rel, (data, _) in hostile_corpus().items()})
        return root
    if kind == "archives":  # a third of the files in each of a zip, a tar and a tar.gz
        folder = tmp_path / "archives"
        folder.mkdir()
        parts = [dict(list(sorted(files.items()))[i::3]) for i in range(3)]
        write_zip(str(folder / "data-0.zip"), parts[0])
        write_tar(str(folder / "data-1.tar"), parts[1])
        write_tar(str(folder / "data-2.tar.gz"), parts[2], mode="w:gz")
        return str(folder / "data-*")
    root = str(tmp_path / "images")
    write_tree(root, files)
    path = os.path.join(root, "m.csv")
    _manifest(path, [(rel, rel.split("/")[0]) for rel in sorted(files)], labeled=kind != "unlabeled")
    return path


@pytest.mark.parametrize("kind", ["hostile", "archives", "csv", "unlabeled"])
def test_the_default_command_analyses_every_input_kind(tmp_path, kind):
    out = str(tmp_path / "out")
    processes = () if kind == "hostile" else ONE_PROCESS
    proc = convert(_input(tmp_path, kind), out, *SPLITS, *processes, runner=())  # no --no-analyze: the analysis runs
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = read_manifest(out)
    acc = doc.accounting
    assert acc.inputs == acc.written + acc.rejected and acc.written > 0
    if kind == "archives":  # every member of the three archives
        assert acc.inputs == acc.written == len(dataset_files()), acc
    stats = doc.statistics
    train = doc.splits["train"]
    assert stats["num_examples"] == train.num_examples > 0
    assert len(stats["pixel_mean"]) == 3 and all(0.0 < m < 1.0 for m in stats["pixel_mean"])
    assert all(s > 0 for s in stats["pixel_std"])
    assert stats["exact"] is False  # re-encoded as JPEG: the encoder's input, by default
    assert stats["image_height"] == {"min": 32, "max": 32}
    if kind == "unlabeled":
        assert not doc.labeled and "examples_per_class" not in stats
    else:
        assert stats["examples_per_class"] == {c: train.examples_per_class.get(c, 0) for c in doc.labels}
    assert os.path.isdir(os.path.join(out, "transform_fn"))
    heights = {r[keys.IMAGE_HEIGHT] for r in datasource.iter_split(out, "train", decode=False)}
    assert heights == {32}


def test_the_default_command_on_sequences_skips_the_analysis_and_says_so(tmp_path):
    files, _ = clip_dataset()
    root = str(tmp_path / "clips")
    write_tree(root, files)
    out = str(tmp_path / "out")
    proc = convert(root, out, "--sequence", *SPLITS, *ONE_PROCESS, runner=())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "--sequence records are SequenceExamples: skipping the tf.Transform analysis" in proc.stderr
    doc = read_manifest(out)
    assert doc.statistics is None and not os.path.exists(os.path.join(out, "transform_fn"))
    assert doc.accounting.inputs == doc.accounting.written + doc.accounting.rejected
