"""The command line's fast start (pipeline/fast_start.py): Beam imported without its optional modules for
a local run (the same shards, those modules importable afterwards, a library caller's process gets Beam
whole), S3's and Azure's filesystems loaded with their first path,
numpy's OpenBLAS without threads of its own (in the conversion workers also for a library caller), and the
garbage collector paused until the job starts."""

from __future__ import annotations

import dataclasses
import gc
import os
import subprocess
import sys

import pytest
from conftest import IN_MEMORY, ROOT, cli_env, shard_digests
from crashing import EnvironmentConverter

from img2tfrecord import api
from img2tfrecord.conversion.pool import BLAS_THREADS_ENV, ConversionPool
from img2tfrecord.images.options import ImageOptions
from img2tfrecord.model import WorkItem
from img2tfrecord.pipeline import fast_start


def _python(code: str, *args: str) -> str:
    env = {k: v for k, v in cli_env().items() if k != BLAS_THREADS_ENV}  # as a user's shell would have it
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, env=env, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


def test_beam_imports_without_its_optional_modules_which_import_as_usual_afterwards():
    code = """
import sys
from img2tfrecord.pipeline.fast_start import OPTIONAL_MODULES, import_beam_lean
first, second = import_beam_lean(), import_beam_lean()
left_out = "apache_beam.typehints.pandas_type_compatibility" not in sys.modules
absent = [m for m in OPTIONAL_MODULES if m in sys.modules]
import apache_beam as beam
from apache_beam.testing.util import assert_that, equal_to
with beam.Pipeline(runner="FnApiRunner") as p:
    assert_that(p | beam.Create([1, 2, 3]) | beam.Map(lambda x: x * 2), equal_to([2, 4, 6]))
import pandas
print(first, second, left_out, absent, pandas.DataFrame({"a": [1]}).shape)
"""
    assert _python(code) == "True False True [] (1, 1)"


def test_the_commands_process_loads_s3_azure_and_gcs_filesystems_with_their_first_path():
    code = """
import sys
from img2tfrecord.beam_filesystem_fixes import defer_object_stores
from img2tfrecord.pipeline.fast_start import import_beam_lean
defer_object_stores()
import_beam_lean()  # as the command imports Beam
from apache_beam.io.filesystems import FileSystems
from img2tfrecord import storage
deferred = ("boto3", "azure.storage.blob", "apache_beam.io.aws.s3filesystem", "google.cloud.storage")
loaded = [m for m in deferred if m in sys.modules]
storage.beam_filesystems()
found = [type(FileSystems.get_filesystem(p)).__name__ for p in ("s3://b/k", "azfs://a/c/b", "gs://b/o", "/tmp/x")]
from apache_beam.io.aws.clients.s3 import boto3_client
print(loaded, found, boto3_client.Client.__init__.__name__)
"""
    found = "['S3FileSystem', 'BlobStorageFileSystem', 'GCSFileSystem', 'LocalFileSystem']"
    assert _python(code) == f"[] {found} shared_client_init"


def test_a_deferred_cloud_storage_filesystem_imports_by_name_as_dataflows_client_does():
    code = """
import sys
from img2tfrecord.beam_filesystem_fixes import defer_object_stores
defer_object_stores()
from apache_beam.io.filesystems import FileSystems
before = "apache_beam.io.gcp.gcsfilesystem" in sys.modules
from apache_beam.runners.dataflow.internal import apiclient
from img2tfrecord import storage
storage.beam_filesystems()
found = type(FileSystems.get_filesystem("gs://b/o")).__name__
import os
print(before, apiclient.GCSFileSystem.scheme(), found, os.environ.get("DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA"))
"""
    assert _python(code) == "False gs GCSFileSystem true"  # and no bucket metadata fetch at every new client


def test_a_users_own_setting_of_the_bucket_metadata_fetch_is_kept(monkeypatch):
    from img2tfrecord import beam_filesystem_fixes

    monkeypatch.setenv(beam_filesystem_fixes.GCS_BUCKET_METADATA_OFF, "false")
    beam_filesystem_fixes._fix_gcs()
    assert os.environ[beam_filesystem_fixes.GCS_BUCKET_METADATA_OFF] == "false"
    monkeypatch.delenv(beam_filesystem_fixes.GCS_BUCKET_METADATA_OFF)
    beam_filesystem_fixes._fix_gcs()
    assert os.environ[beam_filesystem_fixes.GCS_BUCKET_METADATA_OFF] == "true"


def test_a_cli_run_on_the_local_runner_writes_the_same_shards_without_beams_optional_modules(sample_dir, tmp_path):
    """Also when Beam's own flags are given: checking them imports Beam, and lean too."""
    code = """
import os, sys
from img2tfrecord.cli import main
code = main(sys.argv[1:])
print(code, "apache_beam" in sys.modules, "pandas" in sys.modules, os.environ.get("OPENBLAS_NUM_THREADS"))
"""
    lean, whole = str(tmp_path / "lean"), str(tmp_path / "whole")
    args = ("--image-size", "32", "--num-shards", "2", "--seed", "5", "--no-analyze", "--quiet", *IN_MEMORY)
    assert _python(code, "convert", "--input", sample_dir, "--output", lean, *args) == "0 True False 1"
    api.convert(sample_dir, whole, image_size=32, num_shards=2, seed=5, analyze=False)
    assert shard_digests(lean) == shard_digests(whole)


def test_only_a_caller_that_owns_its_process_imports_beam_lean(sample_dir, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(fast_start, "import_beam_lean", lambda optional: calls.append(optional) or False)
    config = api.config_of(sample_dir, str(tmp_path / "a"), {"image_size": 16, "analyze": False})
    api.run_config(config)
    assert calls == []
    api.run_config(dataclasses.replace(config, output=str(tmp_path / "b")), own_process=True)
    assert calls == [fast_start.OPTIONAL_MODULES]


@pytest.mark.parametrize("callers", [None, "3"])
def test_conversion_workers_start_numpy_blas_with_one_thread_unless_the_caller_chose(callers, tmp_path, monkeypatch):
    if callers is None:
        monkeypatch.delenv(BLAS_THREADS_ENV, raising=False)
    else:
        monkeypatch.setenv(BLAS_THREADS_ENV, callers)
    converter = EnvironmentConverter(ImageOptions(), "class", (("train", 1.0),), 1, name=BLAS_THREADS_ENV)
    items = [WorkItem(str(tmp_path / f"{i}.jpg"), f"a/{i}.jpg", 1) for i in range(6)]
    with ConversionPool(converter, 2, batch_size=1) as pool:
        pool.put(items, ["a"])
        seen = {value for _, (_, value) in pool.outputs(drain=True)}
    assert seen == {callers or "1"}
    assert os.environ.get(BLAS_THREADS_ENV) == callers  # the caller's environment as it was


def test_the_cli_pauses_the_garbage_collector_until_its_job_starts(sample_dir, tmp_path, monkeypatch):
    from helpers.cli import run_in_process

    seen = []
    resume = fast_start.resume_collection
    monkeypatch.setattr(fast_start, "resume_collection", lambda: (seen.append(gc.isenabled()), resume()))
    proc = run_in_process(
        "convert", "--input", sample_dir, "--output", str(tmp_path / "out"), "--no-analyze", *IN_MEMORY
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert seen[0] is False and gc.isenabled()  # paused while it started, collecting again when it ended
    failed = run_in_process("convert", "--input", str(tmp_path / "missing"), "--output", str(tmp_path / "o2"))
    assert failed.returncode == 2 and gc.isenabled()  # no job: resumed all the same


def test_collection_resumes_once_with_the_start_up_frozen_and_never_against_the_callers_choice():
    try:
        fast_start.pause_collection()
        assert not gc.isenabled()
        fast_start.resume_collection()
        assert gc.isenabled() and gc.get_freeze_count() > 0
        gc.unfreeze()
        fast_start.resume_collection()  # once
        assert gc.get_freeze_count() == 0
        gc.disable()  # the caller's own choice
        fast_start.pause_collection()
        fast_start.resume_collection()
        assert not gc.isenabled() and gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()
        gc.enable()
