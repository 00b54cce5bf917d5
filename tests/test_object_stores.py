"""The CLI, the lock and the readers against S3 (``moto`` in server mode) and Azure Blob Storage (Azurite).

Both servers run on 127.0.0.1 for the session (tests/object_stores.py) and are reached through the
standard environment, except the one run that names its S3 endpoint with Beam's ``--s3_endpoint_url``
alone. Each store gets a class folder (with bad files) and a zip, converted once per store and compared
with the same input converted from local files; then ``verify``, ``inspect``, the TF-free reader, an
``--append``, and two runs on one output (the second refused by the lock; the first killed and resumed).
Commands run in this process except the run that is paused and killed from outside.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from typing import Dict

import images as I
import pytest
from conftest import ROOT, cli_command, cli_env, shard_digests
from helpers.cli import run_in_process
from helpers.datasets import dataset_files, make_images, write_tree, write_zip
from object_stores import Store

from img2tfrecord import storage
from img2tfrecord.pipeline import lock_stores
from img2tfrecord.pipeline.lock import OutputLock, OutputLocked
from img2tfrecord.readers import datasource, records
from img2tfrecord.schemas import output_files

ARGS = ("--splits", "train=0.6,test=0.4", "--seed", "5", "--image-size", "24", "--no-analyze")
ONE = ("--processes", "1", "--runner=FnApiRunner", "--direct_running_mode=in_memory")
BAD = {"cat/broken.jpg": I.truncated_jpeg(), "dog/notes.jpg": I.text_as_jpg()}


@pytest.fixture(scope="module")
def local_inputs(tmp_path_factory) -> Dict[str, str]:
    base = tmp_path_factory.mktemp("store_inputs")
    files = {**dataset_files(), **BAD}
    write_tree(str(base / "folder"), files)
    write_zip(str(base / "flowers.zip"), files, top="flowers")
    return {"folder": str(base / "folder"), "zip": str(base / "flowers.zip")}


@pytest.fixture(scope="module")
def local_outputs(local_inputs, tmp_path_factory) -> Dict[str, str]:
    """kind -> the local conversion every store's output must equal, byte for byte."""
    built = {}
    for kind, path in local_inputs.items():
        out = str(tmp_path_factory.mktemp(f"local_{kind}") / "out")
        done = run_in_process("convert", "--input", path, "--output", out, *ARGS, *ONE)
        assert done.returncode == 0, done.stderr[-3000:]
        built[kind] = out
    return built


def error_rows(output: str) -> list:
    text = storage.read_text(storage.join(output, output_files.ERRORS_FILE))
    return sorted((row["relpath"], row["reason"]) for row in map(json.loads, text.splitlines()))


def upload(local: str, destination: str) -> str:
    """A folder (its files) or one file copied under ``destination``; the remote input path."""
    if os.path.isdir(local):
        storage.copy_tree(local, destination)
        return destination
    target = storage.join(destination, os.path.basename(local))
    with open(local, "rb") as f:
        storage.write_bytes(target, f.read())
    return target


@pytest.mark.parametrize("kind", ["folder", "zip"])
def test_a_store_to_store_run_gives_the_records_of_a_local_run(store: Store, kind, local_inputs, local_outputs):
    source = upload(local_inputs[kind], store.url("in", kind))
    out = store.url("out", kind)
    extra: tuple = ONE
    saved = None
    if store.name == "s3" and kind == "folder":
        # Beam's own flag alone names the endpoint, at launch, in the lock and in two conversion processes.
        saved = os.environ.pop("AWS_ENDPOINT_URL")
        extra = ("--processes", "2", f"--s3_endpoint_url={store.endpoint}")
    try:
        done = run_in_process("convert", "--input", source, "--output", out, *ARGS, *extra)
    finally:
        if saved is not None:
            os.environ["AWS_ENDPOINT_URL"] = saved
            storage.use_pipeline_options(())
    assert done.returncode == 0, done.stderr[-3000:]
    assert shard_digests(out) == shard_digests(local_outputs[kind]) and shard_digests(out)
    assert error_rows(out) == error_rows(local_outputs[kind]) and set(BAD) <= {r for r, _ in error_rows(out)}
    assert not storage.exists(storage.join(out, output_files.LOCK_FILE))
    checked = run_in_process("verify", out)
    assert checked.returncode == 0 and checked.stdout.startswith("OK"), checked.stdout + checked.stderr[-2000:]
    if kind == "folder":
        shown = run_in_process("inspect", out)
        assert shown.returncode == 0 and "examples per class and split" in shown.stdout, shown.stderr[-2000:]
        remote = datasource.SplitDataSource(out, "train", decode=False)
        local = datasource.SplitDataSource(local_outputs[kind], "train", decode=False)
        assert len(remote) == len(local) > 0
        assert [repr(remote[i]) for i in range(len(remote))] == [repr(local[i]) for i in range(len(local))]


def test_array_record_shards_are_written_through_a_local_file(store: Store, tmp_path):
    root = str(tmp_path / "in")
    make_images(root, classes=2, per_class=5, size=(40, 30))
    source = upload(root, store.url("in", "arrayrecord"))
    out = store.url("out", "arrayrecord")
    args = ("--file-format", "array_record", *ARGS, *ONE)
    assert run_in_process("convert", "--input", source, "--output", out, *args).returncode == 0
    local = str(tmp_path / "local")
    assert run_in_process("convert", "--input", root, "--output", local, *args).returncode == 0
    assert shard_digests(out) == shard_digests(local) and shard_digests(out)
    read = sum(1 for _ in datasource.iter_split(out, "train", decode=False))
    assert read == sum(1 for _ in datasource.iter_split(local, "train", decode=False)) > 0


def test_an_append_adds_a_generation(store: Store, tmp_path):
    root = str(tmp_path / "in")
    make_images(root, classes=2, per_class=4, size=(40, 30))
    source = upload(root, store.url("in", "append"))
    out = store.url("out", "append")
    assert run_in_process("convert", "--input", source, "--output", out, *ARGS, *ONE).returncode == 0
    first = records.read_manifest(out).accounting
    more = str(tmp_path / "more")
    make_images(more, classes=2, per_class=2, size=(40, 30))
    for relative, _ in storage.walk_files(more):
        name = relative.replace(".jpg", "-new.jpg")
        with open(os.path.join(more, relative), "rb") as f:
            storage.write_bytes(storage.join(source, name), f.read())
    added = run_in_process("convert", "--input", source, "--output", out, "--append", *ARGS, *ONE)
    assert added.returncode == 0, added.stderr[-3000:]
    after = records.read_manifest(out)
    assert first is not None and after.accounting is not None
    assert after.accounting.inputs == first.inputs + 4 and len(after.generations) == 2
    assert run_in_process("verify", out).returncode == 0


# -- the lock -------------------------------------------------------------------------------------


def test_the_lock_is_created_once_and_changed_only_as_it_was_read(store: Store):
    out = store.url("locks", "one")
    first, second = (lock_stores.store_for(out) for _ in range(2))
    version = first.create(b'{"a": 1}')
    assert version is not None and second.create(b'{"b": 2}') is None
    found = second.read()
    assert found is not None and found.data == b'{"a": 1}' and found.version == version
    newer = first.refresh(version, b'{"a": 2}')
    assert newer is not None and newer != version
    assert second.take_over(version, b'{"b": 3}') is None, "a stale version took the lock over"
    second.delete(version)
    assert first.read() is not None and first.read().data == b'{"a": 2}'  # type: ignore[union-attr]
    first.delete(newer)
    assert first.read() is None


def test_a_second_run_is_refused_while_the_first_holds_the_lock(store: Store):
    out = store.url("locks", "two")
    held = OutputLock(out, lock_stores.store_for(out), heartbeat_s=0.2)
    held.acquire(take_over_stale=False)
    try:
        time.sleep(0.5)  # a few heartbeats: conditional rewrites of its own version
        assert held.held
        with pytest.raises(OutputLocked, match="being written by another run"):
            OutputLock(out, lock_stores.store_for(out)).acquire(take_over_stale=True)
    finally:
        held.release()
    assert lock_stores.store_for(out).read() is None


class _IgnoresConditions:
    """An S3 client of a store that accepts If-None-Match / If-Match and ignores them (older S3-compatible
    servers): the real client with the conditions dropped."""

    def __init__(self, client):
        self._client = client

    def __getattr__(self, name):
        method = getattr(self._client, name)

        def call(**kwargs):
            kwargs.pop("IfNoneMatch", None)
            kwargs.pop("IfMatch", None)
            return method(**kwargs)

        return call


def test_a_store_that_ignores_conditions_is_refused_unless_allowed(s3_store: Store):
    import boto3

    path = s3_store.url("locks", "ignoring", output_files.LOCK_FILE)
    client = _IgnoresConditions(boto3.client("s3"))
    with pytest.raises(lock_stores.LockNotAtomic, match=lock_stores.UNGUARDED_FLAG):
        lock_stores.S3Store(path, client).create(b"{}")
    unguarded = lock_stores.S3Store(path, client, unguarded=True)
    version = unguarded.create(b"{}")
    assert version is not None and unguarded.create(b"{}") is None
    unguarded.delete(version)
    assert unguarded.read() is None
    assert not list(storage.walk_files(s3_store.url("locks", "ignoring"))), "the probe left an object"


RESUME_ARGS = ("--image-size", "32", "--num-shards", "3", "--splits", "train=0.5,test=0.5", "--no-analyze", *ONE)


def test_a_second_run_is_refused_and_a_killed_run_resumes_to_the_same_bytes(store: Store, tmp_path):
    from img2tfrecord import faults

    root = str(tmp_path / "in")
    make_images(root, classes=3, per_class=6, size=(64, 48), bad=1)
    source = upload(root, store.url("in", "resume"))
    reference = str(tmp_path / "reference")
    assert run_in_process("convert", "--input", root, "--output", reference, *RESUME_ARGS).returncode == 0

    out = store.url("out", "resume")
    args = ("convert", "--input", source, "--output", out, *RESUME_ARGS)
    marker = str(tmp_path / "paused")
    env = cli_env({**store.env, faults.ENV: "pause:converting", faults.MARKER_ENV: marker})
    proc = subprocess.Popen(cli_command(*args), cwd=ROOT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(marker):
            assert proc.poll() is None, "the run ended before it paused"
            assert time.monotonic() < deadline, "the run never paused"
            time.sleep(0.05)
        second = run_in_process(*args)
        assert second.returncode == 2 and "being written by another run" in second.stderr, second.stderr[-2000:]
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    assert not storage.exists(storage.join(out, output_files.SUCCESS_FILE)), "a killed run left _SUCCESS"
    resumed = run_in_process(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "finished shard(s) kept" in resumed.stderr, resumed.stderr[-2000:]
    assert shard_digests(out) == shard_digests(reference)
    assert storage.exists(storage.join(out, output_files.SUCCESS_FILE))


def test_an_s3_input_without_credentials_is_one_line_and_exit_2_at_once(tmp_path, monkeypatch):
    """No credentials anywhere: boto3 fails before any request; the run says so in one line at once (Beam
    would retry that error for minutes, as it retries a server's)."""
    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    started = time.monotonic()
    done = run_in_process("convert", "--input", "s3://a-bucket/images", "--output", str(tmp_path / "out"))
    assert time.monotonic() - started < 60
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert "Unable to locate credentials" in lines[0], lines


def test_an_azfs_input_without_an_account_says_what_to_give(tmp_path, monkeypatch):
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    done = run_in_process("convert", "--input", "azfs://account/container/images", "--output", str(tmp_path / "out"))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert "no Azure Blob Storage account given: set AZURE_STORAGE_CONNECTION_STRING" in lines[0], lines
