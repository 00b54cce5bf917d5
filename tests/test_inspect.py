"""``img2tfrecord inspect``: the summary, its JSON form, the contact sheet and the class chart."""

from __future__ import annotations

import json
import os
import shutil

from conftest import convert, manifest_to_edit, write_manifest_doc
from helpers.cli import run_in_process
from PIL import Image

from img2tfrecord.readers.records import read_manifest
from img2tfrecord.schemas import output_files


def test_summary_lists_splits_classes_shards_and_sizes(converted_sample):
    proc = run_in_process("inspect", converted_sample)
    assert proc.returncode == 0, proc.stderr
    doc = read_manifest(converted_sample)
    out = proc.stdout
    for split, info in doc.splits.items():
        assert f"{split}: {info.num_examples} examples in {len(info.shards)} shard(s)" in out
        for shard in info.shards:
            assert shard.file in out
        assert f"{split} ({info.num_examples} records):" in out
    for name in doc.labels:
        assert name in out
    assert "size (WxH): 64x64" in out
    assert "formats: jpeg" in out
    assert "Traceback" not in out + proc.stderr


def test_json_matches_the_manifest(converted_sample):
    proc = run_in_process("inspect", converted_sample, "--json")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    doc = read_manifest(converted_sample)
    assert summary["labels"] == list(doc.labels)
    assert summary["complete"] is True
    for split, info in doc.splits.items():
        got = summary["splits"][split]
        assert got["num_examples"] == info.num_examples
        assert got["examples_per_class"] == info.examples_per_class
        assert [s["num_records"] for s in got["shards"]] == [s.num_records for s in info.shards]
        assert all(s["present"] for s in got["shards"])
        images = got["images"]
        assert images["records_read"] == info.num_examples and images["sampled"] is False
        assert images["sizes"] == {"64x64": info.num_examples}
        assert images["formats"] == {"jpeg": info.num_examples}
        assert images["channels"] == {"3": info.num_examples}


def test_summary_shows_the_tf_transform_analysis(converted_sample):
    doc = read_manifest(converted_sample)
    stats = doc.statistics
    out = run_in_process("inspect", converted_sample).stdout
    mean = ", ".join(f"{v:.4f}" for v in stats["pixel_mean"])
    std = ", ".join(f"{v:.4f}" for v in stats["pixel_std"])
    assert "tf.Transform analysis of the train split (transform_fn/" in out
    assert f"train pixel mean [{mean}], std [{std}]" in out
    assert f"{doc.splits['train'].num_examples} images; height 64..64, width 64..64" in out
    assert f"label vocabulary 'label': {len(doc.labels)} classes" in out
    assert stats["exact"] is False  # 64x64 JPEGs re-encoded, without --exact-statistics
    assert "images re-encoded as JPEG counted with the pixels given to the encoder (exact: --exact-statistics)" in out
    summary = json.loads(run_in_process("inspect", converted_sample, "--json").stdout)
    assert summary["statistics"] == stats


def test_an_output_without_the_analysis_says_why(sample_dir, tmp_path):
    out = str(tmp_path / "out")
    proc = convert(sample_dir, out, "--image-size", "32", "--no-analyze")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "pixel mean" not in proc.stdout
    text = run_in_process("inspect", out).stdout
    assert "tf.Transform analysis: none (converted with --no-analyze)" in text
    assert json.loads(run_in_process("inspect", out, "--json").stdout)["statistics"] is None


def test_record_reads_are_capped_and_say_sampled(converted_sample):
    proc = run_in_process("inspect", converted_sample, "--json", "--max-records", "5")
    summary = json.loads(proc.stdout)
    train = summary["splits"]["train"]
    assert train["images"]["records_read"] == 5 and train["images"]["sampled"] is True
    text = run_in_process("inspect", converted_sample, "--max-records", "5").stdout
    assert f"train (sampled 5 of {train['num_examples']})" in text


def test_mixed_sizes_and_formats(converted_keep):
    summary = json.loads(run_in_process("inspect", converted_keep, "--json").stdout)
    images = summary["splits"]["train"]["images"]
    assert len(images["sizes"]) > 1
    assert set(images["formats"]) == {"jpeg", "png"}
    assert images["width"]["min"] < images["width"]["max"]


def test_rejected_inputs_by_reason(converted_sample, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(converted_sample, out)
    doc = manifest_to_edit(out)
    row = {
        "path": "/in/circle/broken.jpg",
        "relpath": "circle/broken.jpg",
        "reason": "truncated",
        "error": "image file is truncated",
    }
    with open(out / output_files.ERRORS_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
    acc = doc["accounting"]
    acc["inputs"] += 1
    acc["rejected"] += 1
    acc["rejected_by_reason"]["truncated"] = acc["rejected_by_reason"].get("truncated", 0) + 1
    write_manifest_doc(out, doc)
    proc = run_in_process("inspect", str(out))
    assert proc.returncode == 0, proc.stderr
    assert f"truncated: {acc['rejected_by_reason']['truncated']}" in proc.stdout
    assert "e.g. circle/broken.jpg: image file is truncated" in proc.stdout
    summary = json.loads(run_in_process("inspect", str(out), "--json").stdout)
    assert summary["rejected"]["rejected_by_reason"] == acc["rejected_by_reason"]


def test_grid_and_class_chart(converted_sample, tmp_path):
    grid, chart = tmp_path / "grid.png", tmp_path / "chart.png"
    proc = run_in_process(
        "inspect",
        converted_sample,
        "--grid",
        str(grid),
        "--n",
        "10",
        "--split",
        "validation",
        "--class-chart",
        str(chart),
    )
    assert proc.returncode == 0, proc.stderr
    assert read_manifest(converted_sample).splits["validation"].num_examples >= 10
    with Image.open(grid) as img:
        assert img.format == "PNG"
        # 10 images: 4 columns x 3 rows of 128 px cells with captions
        assert img.width >= 4 * 128 and img.height >= 3 * 128
        assert img.width < 1000 and img.height < 1000
        colors = img.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colors is not None and len(colors) > 100  # real pictures, not a blank sheet
    with Image.open(chart) as img:
        assert img.format == "PNG"
        assert 300 <= img.width <= 2000 and 100 <= img.height <= 2000
        assert len(img.convert("RGB").getcolors(maxcolors=1 << 20)) > 3  # bars in several colours
    assert f"wrote grid: {grid}" in proc.stdout and f"wrote class chart: {chart}" in proc.stdout
    again = run_in_process(
        "inspect", converted_sample, "--grid", str(grid), "--n", "10", "--split", "validation", "--json"
    )
    assert json.loads(again.stdout)["outputs"]["grid"]["images"] == 10  # every one asked for, from uneven shards


def test_grid_of_mixed_images(converted_keep, tmp_path):
    grid = tmp_path / "grid.png"
    proc = run_in_process("inspect", converted_keep, "--grid", str(grid), "--n", "16", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outputs"]["grid"]["images"] == 16
    with Image.open(grid) as img:
        assert img.format == "PNG" and img.size == (4 * 132 + 4, 4 * (128 + 18 + 4) + 4)


def test_usage_errors(converted_sample, tmp_path):
    for args in (
        [str(tmp_path / "missing")],
        [str(tmp_path)],  # exists, no dataset.json
        [converted_sample, "--grid", str(tmp_path / "g.png"), "--split", "nope"],
    ):
        proc = run_in_process("inspect", *args)
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "Traceback" not in proc.stderr
    assert "missing" in run_in_process("inspect", str(tmp_path / "missing")).stderr
    assert "available splits: test, train, validation" in proc.stderr


def test_unreadable_shard_is_reported_not_raised(converted_sample, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(converted_sample, out)
    shard = read_manifest(str(out)).splits["train"].shards[0].file
    path = out / shard
    path.write_bytes(path.read_bytes()[:100])
    os.remove(out / output_files.SUCCESS_FILE)
    proc = run_in_process("inspect", str(out))
    assert proc.returncode == 1
    assert f"cannot read: {shard}: record 0" in proc.stdout
    assert "conversion is incomplete" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
