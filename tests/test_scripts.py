"""The README's scripts, run as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess

from conftest import ROOT

from img2tfrecord.schemas import manifest


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("PROJECT", "GOOGLE_CLOUD_PROJECT")}
    env.update(extra)
    return env


def test_run_local_converts_the_sample_dataset():
    proc = subprocess.run(["./run_local.sh"], cwd=ROOT, capture_output=True, text=True, timeout=900, env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = os.path.join(ROOT, "output")
    assert os.path.exists(os.path.join(out, manifest.SUCCESS_FILE))
    doc = json.load(open(os.path.join(out, manifest.MANIFEST_FILE)))
    assert doc["labels"] == ["circle", "square", "stripes", "triangle"]
    acc = doc["accounting"]
    assert acc["inputs"] == 300 and acc["written"] == 300 and acc["rejected"] == 0
    assert set(doc["splits"]) == {"train", "validation", "test"}
    assert "300 inputs: 300 records written, 0 rejected" in proc.stdout


def test_run_local_passes_arguments_to_convert(tmp_path):
    proc = subprocess.run(
        ["./run_local.sh", "--input", str(tmp_path / "nothing"), "--output", str(tmp_path / "out")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(),
    )
    assert proc.returncode == 2 and "no input files match" in proc.stderr


def test_run_dataflow_needs_a_project():
    proc = subprocess.run(
        ["./run_dataflow.sh", "--input", "gs://b/in", "--output", "gs://b/out"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "run_dataflow.sh: set PROJECT (or GOOGLE_CLOUD_PROJECT) to your Google Cloud project id"
    ]


def test_the_sample_dataset_is_the_same_on_every_run(tmp_path):
    """`img2tfrecord sample` writes byte-identical files for a seed (tests and examples rely on it)."""
    import hashlib

    from img2tfrecord import sample

    def digest(directory):
        files = sorted(
            os.path.relpath(os.path.join(root, name), directory)
            for root, _, names in os.walk(directory)
            for name in names
        )
        return {name: hashlib.sha256(open(os.path.join(directory, name), "rb").read()).hexdigest() for name in files}

    first, second, other = (str(tmp_path / name) for name in ("a", "b", "c"))
    sample.generate(first, images_per_class=12, seed=5)
    sample.generate(second, images_per_class=12, seed=5)
    sample.generate(other, images_per_class=12, seed=6)
    assert len(digest(first)) == 48
    assert digest(first) == digest(second)
    assert digest(first) != digest(other)
