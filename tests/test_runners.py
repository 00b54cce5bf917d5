"""The same job on other runners: Beam's portable job service + SDK worker pool, and Dataflow translation."""

from __future__ import annotations

import contextlib
import glob
import os
import socket
import subprocess
import sys
import time

import pytest
from conftest import DATAFLOW_DRY_RUN, IN_MEMORY, ROOT, SRC, convert, shard_digests
from helpers.outputs import read_records

from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.kinds import plan_input
from img2tfrecord.pipeline.runner import pipeline_options
from img2tfrecord.schemas import output_files

pytest.importorskip("tensorflow")  # read_records reads the shards with TensorFlow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


@contextlib.contextmanager
def _service(args, port, log_path):
    # The worker pool starts SDK workers as `python ...`: this interpreter's bin must come first.
    env = dict(
        os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""), PYTHONPATH=SRC
    )
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", *args], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        try:
            _wait_for_port(port, proc)
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def portable_endpoints(tmp_path_factory):
    logs = tmp_path_factory.mktemp("services")
    job_port, pool_port = _free_port(), _free_port()
    with (
        _service(
            ["apache_beam.runners.portability.local_job_service_main", "--port", str(job_port)],
            job_port,
            logs / "job.log",
        ),
        _service(
            ["apache_beam.runners.worker.worker_pool_main", "--service_port", str(pool_port)],
            pool_port,
            logs / "pool.log",
        ),
    ):
        yield job_port, pool_port


def test_portable_runner_with_external_worker_pool_writes_the_local_records(
    sample_dir, converted_sample, tmp_path, portable_endpoints
):
    job_port, pool_port = portable_endpoints
    # converted_sample's options, with the analysis (the statistics are compared): that is the local run.
    common = ("--image-size", "64", "--splits", "train=0.7,validation=0.15,test=0.15", "--seed", "7")
    common += ("--num-shards", "2")
    local, portable = converted_sample, str(tmp_path / "portable")
    proc = convert(
        sample_dir,
        portable,
        *common,
        analyze=True,
        runner=(
            "--runner=PortableRunner",
            f"--job_endpoint=localhost:{job_port}",
            "--environment_type=EXTERNAL",
            f"--environment_config=localhost:{pool_port}",
            "--experiments=disable_logging_submission_environment",  # as conftest.DATAFLOW_DRY_RUN
        ),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc_local, rec_local = read_records(local)
    doc_port, rec_port = read_records(portable)
    assert doc_port.accounting == doc_local.accounting
    assert doc_port.statistics == doc_local.statistics and doc_local.statistics["num_examples"] > 0
    assert set(doc_port.splits) == set(doc_local.splits) == {"train", "validation", "test"}
    for split in doc_local.splits:
        assert sorted(r["image/key/sha256"] for r in rec_port[split]) == sorted(
            r["image/key/sha256"] for r in rec_local[split]
        )
        assert doc_port.splits[split].examples_per_class == doc_local.splits[split].examples_per_class
    assert os.path.exists(os.path.join(portable, output_files.SUCCESS_FILE))
    assert not glob.glob(os.path.join(portable, "beam-temp-*"))
    # The same shard files, byte for byte, and dataset.json lists the same sha256 for each.
    assert shard_digests(portable) == shard_digests(local) and shard_digests(local)
    for split in doc_local.splits:
        assert doc_port.splits[split].shards == doc_local.splits[split].shards


def test_dataflow_dry_run_translates_the_whole_job(sample_dir, tmp_path):
    import apache_beam as beam

    from img2tfrecord.images.options import ImageOptions
    from img2tfrecord.pipeline.build import build_pipeline
    from img2tfrecord.pipeline.launch import launch_plan

    config = ConvertConfig(
        input=sample_dir,
        output=str(tmp_path / "out"),
        image=ImageOptions(size=(64, 64), format="jpeg"),
        splits=(("train", 0.8), ("validation", 0.2)),
    )
    options = pipeline_options(list(DATAFLOW_DRY_RUN))
    p = beam.Pipeline(options=options)
    build_pipeline(p, launch_plan(plan_input(config)[1], config))
    result = p.run()
    result.wait_until_finish()
    assert result.state == "DONE"
    job = p.runner.job
    top_level = {t.unique_name for t in job.proto_pipeline.components.transforms.values() if "/" not in t.unique_name}
    for step in (
        "DiscoverImages",
        "DiscoverClasses",
        "WriteShards",
        "FinishOutput",
    ):
        assert step in top_level, sorted(top_level)
    every = {t.unique_name for t in job.proto_pipeline.components.transforms.values()}
    for step in (
        "WriteShards/AssignShards",
        "WriteShards/GroupByShard",
        "WriteShards/WriteShard",
        "WriteShards/CommitSplit",
        "FinishOutput/AnalyzeTrainSplit/Analyze",
        "FinishOutput/FinalizeOutput",
    ):
        assert step in every, sorted(every)
    assert job.options.view_as(beam.options.pipeline_options.SetupOptions).setup_file.endswith("setup.py")
    assert not os.path.exists(tmp_path / "out")  # a dry run writes nothing


def test_dataflow_dry_run_through_the_cli(sample_dir, tmp_path):
    proc = convert(
        sample_dir,
        str(tmp_path / "out"),
        "--image-size",
        "32",
        runner=(
            "--runner=DataflowRunner",
            "--project=test-project",
            "--region=us-central1",
            "--temp_location=gs://test-bucket/tmp",
            "--dry_run=True",
            "--experiments=disable_logging_submission_environment",  # as conftest.DATAFLOW_DRY_RUN
        ),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "dry run" in proc.stdout


def _examples_pipeline(refs, out: str, runner_flags) -> None:
    """ImagesToExamples and ImagesToTFRecords in one pipeline: the records of the one as ``out.tfrecord``,
    the output folder of the other as ``out``."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from img2tfrecord.beam import ImagesToExamples, ImagesToTFRecords

    options = {"image_size": 24, "splits": "train=0.5,test=0.5", "seed": 3}
    with beam.Pipeline(options=PipelineOptions(list(runner_flags))) as p:
        refs = p | beam.Create(refs)
        converted = refs | ImagesToExamples(**options)
        _ = (
            converted["examples"]
            | beam.Map(lambda e: e.split.encode() + b"\0" + e.example)
            | beam.io.WriteToTFRecord(out + ".tfrecord", shard_name_template="")
        )
        _ = refs | ImagesToTFRecords(out, **options, shard_size_mb=0.005, analyze=False)


def test_the_beam_transforms_on_the_portable_runner_give_the_local_output(sample_dir, tmp_path, portable_endpoints):
    job_port, pool_port = portable_endpoints
    refs = [
        {"uri": os.path.join(sample_dir, c, name), "label": c}
        for c in sorted(os.listdir(sample_dir))
        for name in sorted(os.listdir(os.path.join(sample_dir, c)))
    ]
    local, portable = str(tmp_path / "local"), str(tmp_path / "portable")
    _examples_pipeline(refs, local, IN_MEMORY)
    _examples_pipeline(
        refs,
        portable,
        (
            "--runner=PortableRunner",
            f"--job_endpoint=localhost:{job_port}",
            "--environment_type=EXTERNAL",
            f"--environment_config=localhost:{pool_port}",
            "--experiments=disable_logging_submission_environment",  # as conftest.DATAFLOW_DRY_RUN
        ),
    )
    from img2tfrecord.readers import records

    written = {
        path: sorted(data for _, _, data in records.iter_records(path + ".tfrecord")) for path in (local, portable)
    }
    assert len(written[local]) == len(refs)
    assert written[portable] == written[local]
    shards = {path: records.read_manifest(path).splits for path in (local, portable)}
    assert sum(len(split.shards) for split in shards[local].values()) > 2  # counted in the graph
    assert shards[portable] == shards[local]  # the same files, counts and sha256s
