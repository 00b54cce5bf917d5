"""Batch-job contract: Flex Template entry point and metadata, error budget inside the job."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import ROOT, SRC, convert

from img2tfrecord.readers.records import read_manifest

sys.path.insert(0, os.path.join(ROOT, "flex_template"))
import main as flex_main  # noqa: E402


def test_flex_template_parameters_map_to_convert_options():
    argv = flex_main.translate(
        [
            "--input=gs://b/in",
            "--output=gs://b/out",
            "--image_size=224",
            "--splits=train=0.9,test=0.1",
            "--overwrite=false",
            "--max_error_rate=0.01",
            "--runner=DataflowRunner",
            "--project=p",
        ]
    )
    assert argv == [
        "convert",
        "--input=gs://b/in",
        "--output=gs://b/out",
        "--image-size=224",
        "--splits=train=0.9,test=0.1",
        "--max-error-rate=0.01",
        "--runner=DataflowRunner",
        "--project=p",
        "--no-wait",
    ]
    assert "--overwrite" in flex_main.translate(["--overwrite=true"])
    assert "--exact-statistics" in flex_main.translate(["--exact_statistics=true"])
    assert "--exact-statistics" not in flex_main.translate(["--exact_statistics=false"])


def test_flex_template_metadata_names_every_parameter_the_entry_point_knows():
    meta = json.load(open(os.path.join(ROOT, "flex_template", "metadata.json")))
    names = {p["name"] for p in meta["parameters"]}
    assert names == set(flex_main.PARAMETERS)
    assert {p["name"] for p in meta["parameters"] if not p.get("isOptional")} == {"input", "output"}


def test_flex_template_entry_point_builds_the_dataflow_job(sample_dir, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "flex_template", "main.py"),
            f"--input={sample_dir}",
            f"--output={tmp_path / 'out'}",
            "--image_size=32",
            "--runner=DataflowRunner",
            "--project=test-project",
            "--region=us-central1",
            "--temp_location=gs://test-bucket/tmp",
            "--dry_run=True",
            "--experiments=disable_logging_submission_environment",  # as conftest.DATAFLOW_DRY_RUN
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=SRC),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "dry run" in proc.stdout


def test_job_fails_after_writing_everything_past_the_error_budget(tmp_path):
    root = tmp_path / "in"
    (root / "a").mkdir(parents=True)
    from PIL import Image

    Image.new("RGB", (8, 8)).save(root / "a" / "good.png")
    (root / "a" / "bad.jpg").write_bytes(b"not an image")
    out = tmp_path / "out"
    proc = convert(str(root), str(out), "--max-error-rate", "0.2")
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert (
        proc.stderr.strip().splitlines()[-1].startswith("img2tfrecord: error budget exceeded: 1 of 2 inputs rejected")
    )
    doc = read_manifest(str(out))
    assert doc.accounting.written == 1 and doc.accounting.rejected == 1
    assert (out / "_SUCCESS").exists() and (out / "errors.jsonl").read_text().count("\n") == 1
    assert convert(str(root), str(tmp_path / "out2"), "--max-error-rate", "0.5").returncode == 0
