"""img2tfrecord.convert() and plan(): the command line's options, checks and bytes, typed results and errors."""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys

import images as I
import pytest
from conftest import IN_MEMORY, cli_env, shard_digests
from helpers.cli import run_in_process

import img2tfrecord
from img2tfrecord import api, cli, faults
from img2tfrecord.errors import ConversionFailed, ErrorBudgetExceeded, UsageError
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas.dataset_json import DatasetManifest

FAST = {"analyze": False, "pipeline_options": list(IN_MEMORY)}
ONE = {"processes": 1, **FAST}  # where the worker pool is not the point


def cli_error(capsys, *args: str) -> str:
    """The one line ``img2tfrecord convert ARGS`` prints for a usage error, run in this process."""
    with pytest.raises(SystemExit) as info:
        code = cli.main(["convert", *args])
        raise SystemExit(code)
    assert info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    return lines[-1]


@pytest.fixture()
def photos_with_bad_files(sample_dir, tmp_path) -> str:
    src = str(tmp_path / "photos")
    shutil.copytree(sample_dir, src)
    with open(os.path.join(src, "circle", "truncated.jpg"), "wb") as f:
        f.write(I.truncated_jpeg())
    with open(os.path.join(src, "square", "notes.jpg"), "wb") as f:
        f.write(I.text_as_jpg())
    return src


def test_convert_returns_the_manifest_and_writes_the_command_lines_bytes(sample_dir, converted_sample, tmp_path):
    out = str(tmp_path / "out")
    result = img2tfrecord.convert(
        sample_dir,
        out,
        image_size=64,
        splits={"train": 0.7, "validation": 0.15, "test": 0.15},
        seed=7,
        num_shards=2,
        **ONE,
    )
    assert isinstance(result, DatasetManifest)
    assert result == img2tfrecord.read_manifest(out)
    assert result.accounting is not None and result.accounting.inputs == result.accounting.written == 80
    assert sorted(result.splits) == ["test", "train", "validation"]
    assert all(len(info.shards) == 2 for info in result.splits.values())
    assert os.path.exists(os.path.join(out, output_files.SUCCESS_FILE))
    # converted_sample is `img2tfrecord convert` with the same options, analysed, with a process per core.
    assert shard_digests(out) == shard_digests(converted_sample)


def test_bad_images_are_rejected_rows_and_the_run_goes_on(photos_with_bad_files, tmp_path):
    out = str(tmp_path / "out")
    result = api.convert(photos_with_bad_files, out, image_size=32, processes=2, **FAST)
    assert result is not None and result.accounting is not None
    acc = result.accounting
    assert (acc.inputs, acc.written, acc.rejected) == (82, 80, 2)
    assert acc.inputs == acc.written + acc.rejected
    with open(os.path.join(out, output_files.ERRORS_FILE), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    assert sorted(os.path.basename(row["path"]) for row in rows) == ["notes.jpg", "truncated.jpg"]
    assert sum(acc.rejected_by_reason.values()) == 2


def test_past_the_error_budget_the_finished_output_comes_with_the_exception(photos_with_bad_files, tmp_path):
    out = str(tmp_path / "out")
    with pytest.raises(ErrorBudgetExceeded) as info:
        api.convert(photos_with_bad_files, out, image_size=32, max_error_rate=0.001, **ONE)
    assert str(info.value).startswith("error budget exceeded: 2 of 82 inputs rejected")
    assert info.value.result is not None and info.value.result.accounting.rejected == 2
    assert os.path.exists(os.path.join(out, output_files.SUCCESS_FILE))  # complete and consistent, still reported


def test_no_record_written_raises_and_leaves_no_success(tmp_path):
    src = tmp_path / "photos" / "cat"
    src.mkdir(parents=True)
    for i in range(3):
        (src / f"{i}.jpg").write_bytes(I.text_as_jpg())
    out = str(tmp_path / "out")
    with pytest.raises(ErrorBudgetExceeded, match="no records written, 3 of 3 inputs rejected") as info:
        api.convert(str(tmp_path / "photos"), out, **ONE)
    assert info.value.result is None  # no dataset: only the error report is published
    assert os.listdir(out) == [output_files.ERRORS_FILE]


def test_a_pipeline_failure_is_conversion_failed_with_the_runners_exception(sample_dir, tmp_path, monkeypatch):
    monkeypatch.setenv(faults.ENV, "drop_record")  # a lost write: the accounting check must fail the run
    monkeypatch.setattr(faults, "_DROPPED", [])
    out = str(tmp_path / "out")
    with pytest.raises(ConversionFailed, match="AccountingError|inputs but") as info:
        api.convert(sample_dir, out, image_size=32, processes=1, **FAST)
    assert info.value.__cause__ is not None
    assert not os.path.exists(os.path.join(out, output_files.SUCCESS_FILE))


@pytest.mark.parametrize(
    "keywords, flags",
    [
        ({"format": "gif"}, ["--format", "gif"]),
        ({"image_size": 0}, ["--image-size", "0"]),
        ({"image_size": "20000"}, ["--image-size", "20000"]),
        ({"splits": {"train": 0.5, "validation": 0.7}}, ["--splits", "train=0.5,validation=0.7"]),
        ({"quality": 101}, ["--quality", "101"]),
        ({"max_error_rate": 2}, ["--max-error-rate", "2"]),
        ({"resume": True, "overwrite": True}, ["--resume", "--overwrite"]),
        ({"analyze": False, "exact_statistics": True}, ["--no-analyze", "--exact-statistics"]),
        ({"task": "classification", "require_boxes": True}, ["--task", "classification", "--require-boxes"]),
    ],
)
def test_an_option_error_is_the_command_lines_message(sample_dir, tmp_path, capsys, keywords, flags):
    out = str(tmp_path / "out")
    with pytest.raises(UsageError) as info:
        api.convert(sample_dir, out, **keywords)
    line = cli_error(capsys, "--input", sample_dir, "--output", out, *flags)
    assert line.split(" error: ", 1)[1] == str(info.value)
    assert not os.path.exists(out)


def test_keywords_are_the_declared_options_with_their_defaults():
    params = inspect.signature(api.convert).parameters
    assert set(api.KEYWORD_OPTIONS) < set(params)
    assert params["analyze"].default is True and params["quality"].default == 90
    assert params["image_size"].default is None and params["resize"].default == "fill"
    assert all(params[name].kind is inspect.Parameter.KEYWORD_ONLY for name in api.KEYWORD_OPTIONS)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'fromat'"):
        api.convert("in", "out", fromat="jpeg")  # type: ignore[call-arg]
    with pytest.raises(UsageError, match=r"analyze: 'no' is not True or False \(--no-analyze\)"):
        api.convert("in", "out", analyze="no")


def test_usage_errors_about_paths_come_before_any_work(sample_dir, tmp_path):
    with pytest.raises(UsageError, match="no such file or folder"):
        api.convert(str(tmp_path / "missing"), str(tmp_path / "out"), **FAST)
    with pytest.raises(UsageError, match="is inside --input"):
        api.convert(sample_dir, os.path.join(sample_dir, "records"), **FAST)
    with pytest.raises(UsageError, match="unrecognized argument --runnr"):
        api.convert(sample_dir, str(tmp_path / "out"), pipeline_options=["--runnr=DirectRunner"])
    assert not os.path.exists(tmp_path / "out")


def test_beam_options_may_be_a_pipeline_options_object(sample_dir, tmp_path):
    from apache_beam.options.pipeline_options import PipelineOptions

    options = PipelineOptions([], runner="FnApiRunner", direct_running_mode="in_memory")
    assert api.beam_arguments(options) == ["--runner=FnApiRunner"]  # in_memory is Beam's default
    result = api.convert(
        sample_dir, str(tmp_path / "out"), image_size=16, analyze=False, processes=1, pipeline_options=options
    )
    assert result is not None and result.num_examples == 80


def test_plan_is_what_convert_plan_prints(sample_dir, tmp_path, capsys):
    out = str(tmp_path / "out")
    found = api.plan(sample_dir, out, image_size=64, splits="train=0.8,test=0.2", seed=3)
    assert (
        cli.main(
            ["convert", "--input", sample_dir, "--output", out, "--image-size", "64"]
            + ["--splits", "train=0.8,test=0.2", "--seed", "3", "--plan", "--json"]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    planned = json.loads(found.to_json())
    # The time estimate times a sample of decodes: its figures differ from one call to the next.
    assert planned.pop("time").keys() == printed.pop("time").keys()
    assert planned == printed
    assert sorted(printed["splits"]) == ["test", "train"]
    assert not os.path.exists(out)


def test_a_script_without_a_main_guard_converts_with_worker_processes(sample_dir, tmp_path):
    # A process: its __main__ is the point. Spawned workers must not run the script again.
    script = tmp_path / "convert_photos.py"
    out = tmp_path / "out"
    script.write_text(
        "import img2tfrecord\n"
        f"result = img2tfrecord.convert({sample_dir!r}, {str(out)!r}, image_size=16, processes=2, analyze=False,\n"
        f"                              pipeline_options={list(IN_MEMORY)!r})\n"
        "print('written', result.accounting.written, 'rejected', result.accounting.rejected)\n"
    )
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=cli_env(), cwd=str(tmp_path)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "written 80 rejected 0"
    assert proc.stdout.count("written") == 1  # the workers did not run the script


def _nothing_to_convert(kind: str, folder) -> str:
    """An input in which no record can be made (``--input`` of it): every input kind ends the same way."""
    folder.mkdir()
    if kind == "empty_zip":
        (folder / "empty.zip").write_bytes(b"")
        return str(folder / "empty.zip")
    if kind == "bad_archives":
        (folder / "a.zip").write_bytes(b"")
        (folder / "b.tar.gz").write_text("<html>not found</html>\n")
        return str(folder / "*")
    (folder / "labels.csv").write_text("path,label\nmissing/a.jpg,cat\nmissing/b.jpg,dog\n")
    return str(folder / "labels.csv")


@pytest.mark.parametrize("kind", ["empty_zip", "bad_archives", "failing_manifest"])
def test_an_input_that_gives_no_record_is_no_records_written_with_the_analysis(tmp_path, kind):
    """With the tf.Transform analysis on, as without it: an archive run discovers its (here no) classes in
    the graph, and the analysis of nothing ends as the finalisation's "no records written", not as a crash."""
    given = _nothing_to_convert(kind, tmp_path / "in")
    out = str(tmp_path / "out")
    if kind == "empty_zip":  # the command: exit 3 and its one line, as without the analysis
        proc = run_in_process("convert", "--input", given, "--output", out, "--processes", "1", *IN_MEMORY)
        assert proc.returncode == 3, proc.stderr[-3000:]
        assert (
            proc.stderr.strip()
            .splitlines()[-1]
            .startswith("img2tfrecord: error budget exceeded: no records written, 1 of 1 inputs rejected")
        ), proc.stderr[-3000:]
    else:
        with pytest.raises(ErrorBudgetExceeded, match="no records written") as info:
            api.convert(given, out, processes=1, pipeline_options=list(IN_MEMORY))
        assert info.value.result is None
    assert os.listdir(out) == [output_files.ERRORS_FILE]  # no dataset, no analysis of nothing: why, alone
    with open(os.path.join(out, output_files.ERRORS_FILE), encoding="utf-8") as f:
        assert len(f.read().splitlines()) > 0


def test_a_failed_conversion_prints_nothing_and_its_exception_names_the_log(sample_dir, tmp_path):
    """A program that configured no logging: Beam's ERROR lines and tracebacks go to the run's log file, not
    to its stderr; the exception is one line and names that file."""
    script = f"""
import os, img2tfrecord
os.environ["IMG2TFRECORD_FAULT"] = "fail:writing:enospc"
try:
    img2tfrecord.convert({sample_dir!r}, {str(tmp_path / "out")!r}, image_size=16, analyze=False, processes=1)
except img2tfrecord.ConversionFailed as e:
    print("STAGE", e.stage)
    print("LINE", str(e))
    print("LOG", e.log_path, os.path.exists(e.log_path))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=cli_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.strip() == "", proc.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert lines["STAGE"] == "converting and writing shards"
    assert lines["LINE"].startswith("the run failed while converting and writing shards: No space left on device")
    assert "then call convert() again with resume=True" in lines["LINE"] and lines["LOG"].endswith(" True")
