"""Shared fixtures: the real CLI in a subprocess and one converted sample dataset per session."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from typing import Sequence

import pytest

# S3 (moto) and Azure Blob Storage (Azurite) servers, one each per session for every module that uses them.
from object_stores import azure_fixture, s3_fixture, store_fixture  # noqa: E402,F401

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")  # what a process started by a test imports the package from
# Fast local runner for tests that are not about the runner itself.
IN_MEMORY = ("--runner=FnApiRunner", "--direct_running_mode=in_memory")
# A Dataflow job built and translated, nothing run, nothing reached beyond this machine.
DATAFLOW_DRY_RUN = (
    "--runner=DataflowRunner",
    "--project=test-project",
    "--region=us-central1",
    "--temp_location=gs://test-bucket/tmp",
    "--dry_run=True",
    f"--setup_file={ROOT}/setup.py",
    # Beam's record of the submitting environment (`pip freeze`, staged as a debugging aid): 2 s a job here.
    "--experiments=disable_logging_submission_environment",
)


def cli_command(*args: str) -> list:
    """The argv of ``python -m img2tfrecord ARGS`` (run with ``cwd=ROOT`` and :func:`cli_env`)."""
    return [sys.executable, "-m", "img2tfrecord", *args]


def cli_env(env=None) -> dict:
    """This environment with the project importable and TensorFlow's C++ logging quieter, plus ``env``."""
    return dict(os.environ, PYTHONPATH=SRC, TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))


def without_analysis(args: Sequence[str]) -> tuple:
    """``convert ARGS`` with ``--no-analyze`` added: the tf.Transform analysis, a few seconds of CPU per
    run, is tested where it is the point (``analyze=True``, test_tft.py, test_default_command.py)."""
    args = tuple(args)
    if args[:1] == ("convert",) and "--no-analyze" not in args and "-h" not in args and "--help" not in args:
        return (*args, "--no-analyze")
    return args


def run_cli(*args: str, timeout: float = 300, env=None, analyze: bool = False) -> subprocess.CompletedProcess:
    """Run ``python -m img2tfrecord ARGS`` and return the finished process (text output).

    A ``convert`` runs without the tf.Transform analysis unless ``analyze`` (:func:`without_analysis`).
    """
    if not analyze:
        args = without_analysis(args)
    return subprocess.run(
        cli_command(*args), capture_output=True, text=True, timeout=timeout, env=cli_env(env), cwd=ROOT
    )


def manifest_to_edit(output_dir: str) -> dict:
    """The ``dataset.json`` of an output directory as plain JSON, for tests that change it and write it back
    (:func:`write_manifest_doc`). Tests that read an output use ``readers.records.read_manifest``."""
    from img2tfrecord.schemas import output_files

    with open(os.path.join(output_dir, output_files.MANIFEST_FILE), encoding="utf-8") as f:
        return json.load(f)


def write_manifest_doc(output_dir: str, doc: dict) -> None:
    """Replace the ``dataset.json`` of an output directory with ``doc`` as written (tests that corrupt it)."""
    from img2tfrecord.schemas import output_files

    with open(os.path.join(output_dir, output_files.MANIFEST_FILE), "w", encoding="utf-8") as f:
        f.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


def shard_digests(output: str) -> dict:
    """sha256 of every shard and index file of a local or gs:// output, by path relative to it."""
    import hashlib

    from img2tfrecord import storage
    from img2tfrecord.schemas import output_files

    found = {}
    for relative, _ in storage.walk_files(output):
        if output_files.parse_shard_file_name(relative) or relative.startswith(output_files.INDEX_DIR + "/"):
            with storage.open_binary(storage.join(output, relative)) as f:
                found[relative] = hashlib.sha256(f.read()).hexdigest()
    return found


def convert(
    input_dir: str,
    output_dir: str,
    *extra: str,
    runner: Sequence[str] = IN_MEMORY,
    analyze: bool = False,
    process: bool = False,
) -> subprocess.CompletedProcess:
    """``convert --input input_dir --output output_dir EXTRA RUNNER``; without the analysis unless ``analyze``.

    Runs in this process (``helpers/cli.run_in_process``: the same exit code, summary and log lines)
    unless ``process``, for what only a process shows.
    """
    args = ("convert", "--input", input_dir, "--output", output_dir, *extra, *runner)
    if process:
        return run_cli(*args, analyze=analyze)
    from helpers.cli import run_in_process

    return run_in_process(*(args if analyze else without_analysis(args)))


def built_once(tmp_path_factory, name: str, build) -> str:
    """``build(path)`` run once per test session, shared by the pytest-xdist workers (under a lock):
    the reference outputs many modules read. Tests that change one work on a copy."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's folder, above each worker's
    shared = root / "built-once"
    shared.mkdir(exist_ok=True)
    path, done = shared / name, shared / f"{name}.done"
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            build(str(path))
            done.touch()
    return str(path)


@pytest.fixture(scope="session", autouse=True)
def _temp_files_in_the_session_folder(tmp_path_factory):
    """Temporary files of the session (Beam's staging folders, TFDS metadata copies, list files), of this
    process and the CLI runs it starts, go into pytest's own temporary folder, which pytest rotates: the
    session ends without finalizers (``pytest_unconfigure``), so what it left in /tmp would stay."""
    import tempfile

    folder = str(tmp_path_factory.mktemp("tmp"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", folder)
        patch.setattr(tempfile, "tempdir", folder)
        yield


@pytest.fixture(scope="session")
def sample_dir(tmp_path_factory) -> str:
    """The built-in sample dataset, 20 images per class."""
    from img2tfrecord import sample

    return built_once(tmp_path_factory, "sample", lambda path: sample.generate(path, images_per_class=20, seed=1))


@pytest.fixture(scope="session")
def converted_sample(sample_dir, tmp_path_factory) -> str:
    """``sample_dir`` converted at 64x64 JPEG into train/validation/test, 2 shards per split, analysed."""

    def build(out: str) -> None:
        proc = convert(
            sample_dir,
            out,
            "--image-size",
            "64",
            "--splits",
            "train=0.7,validation=0.15,test=0.15",
            "--seed",
            "7",
            "--num-shards",
            "2",
            analyze=True,  # its tf.Transform output is read by test_verify, test_inspect and test_reader
        )
        assert proc.returncode == 0, proc.stderr[-3000:]

    return built_once(tmp_path_factory, "records", build)


@pytest.fixture(scope="session")
def converted_keep(sample_dir, tmp_path_factory) -> str:
    """``sample_dir`` converted with the original bytes kept (mixed sizes, jpeg and png), one split."""

    def build(out: str) -> None:
        proc = convert(sample_dir, out)
        assert proc.returncode == 0, proc.stderr[-3000:]

    return built_once(tmp_path_factory, "records_keep", build)


# TensorFlow, tf.Transform and Beam's gRPC threads, all loaded in this process by
# the in-process tests, can crash the interpreter while it tears itself down after
# the last test (seen as SIGSEGV, exit 139, with every test passed). The session's
# result is final by then, so leave with pytest's own exit status instead of
# running that teardown.
_SESSION = {}


def pytest_sessionfinish(session, exitstatus):
    _SESSION["exitstatus"] = int(exitstatus)


def pytest_unconfigure(config):
    if "exitstatus" in _SESSION:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_SESSION["exitstatus"])


# Files whose tests run the CLI, a whole pipeline or a runner: ``./run_tests.sh --quick`` leaves them out.
_END_TO_END = {
    "test_convert_cli.py",
    "test_dedupe.py",
    "test_detection.py",
    "test_detection_archives.py",
    "test_detection_reading.py",
    "test_faults.py",
    "test_first_hour_commands.py",
    "test_first_hour_inputs.py",
    "test_first_hour_runs.py",
    "test_gcs.py",
    "test_object_stores.py",
    "test_object_store_reads.py",
    "test_hostile.py",
    "test_inspect.py",
    "test_lock.py",
    "test_progress_cli.py",
    "test_plan_command.py",
    "test_python_api.py",
    "test_beam_api.py",
    "test_reader.py",
    "test_archive_safety.py",
    "test_default_command.py",
    "test_readers_tf_free.py",
    "test_readers_tfds.py",
    "test_record_kinds.py",
    "test_report.py",
    "test_runners.py",
    "test_scheduling.py",
    "test_scripts.py",
    "test_sources.py",
    "test_tft.py",
    "test_verify.py",
    "test_fast_start.py",
    "test_fault_soak.py",
    "test_packaging.py",
}


# pytest-xdist hands out whole files (``--dist loadfile``, pytest.ini): a file's module-scoped fixtures
# (conversions, uploads, the gs:// emulator, the portable runner's services) run once, on its worker, not on
# every worker one of its tests reaches. Files in this order, longest first (their time in a whole run, end-to-end
# or not), so that none of the long ones starts last; then the other end-to-end files, then the unit tests, which
# fill the gaps.
_LONGEST_FIRST = (
    "test_fault_matrix.py",
    "test_object_stores.py",
    "test_append.py",
    "test_gcs.py",
    "test_file_formats.py",
    "test_object_store_reads.py",
    "test_runners.py",
    "test_append_archives.py",
    "test_beam_api.py",
    "test_tft.py",
    "test_progress_cli.py",
    "test_readers_tf_free.py",
    "test_python_api.py",
    "test_append_statistics.py",
    "test_fault_soak.py",
    "test_faults.py",
    "test_report.py",
    "test_shards.py",
    "test_convert_cli.py",
    "test_fault_defects.py",
    "test_fast_start.py",
    "test_plan_command.py",
    "test_reader.py",
    "test_detection_archives.py",
    "test_default_command.py",
    "test_append_manifests.py",
    "test_urls.py",
    "test_append_detection.py",
    "test_append_clips.py",
    "test_hostile.py",
    "test_scripts.py",
    "test_append_changes.py",
    "test_sources.py",
    "test_first_hour_runs.py",
    "test_scheduling.py",
    "test_launch_memory.py",
    "test_first_hour_commands.py",
    "test_input_sources.py",
    "test_lock.py",
    "test_record_kinds.py",
    "test_prefetch.py",
    "test_dedupe.py",
    "test_transforms.py",
    "test_archive_safety.py",
    "test_packaging.py",
    "test_detection_reading.py",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if os.path.basename(str(item.fspath)) in _END_TO_END:
            item.add_marker(pytest.mark.e2e)

    def order(item) -> tuple:
        name = os.path.basename(str(item.fspath))
        first = _LONGEST_FIRST.index(name) if name in _LONGEST_FIRST else len(_LONGEST_FIRST)
        return (first, name not in _END_TO_END)

    items.sort(key=order)  # stable: each file's tests keep their order
