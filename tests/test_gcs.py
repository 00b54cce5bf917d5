"""The CLI against Cloud Storage: a ``gcp-storage-emulator`` on 127.0.0.1 (tests/gcs_emulator.py).

A class folder is converted by the default command (tf.Transform analysis on, one conversion process
per core) from ``gs://`` to ``gs://``; the archive and manifest kinds, whose listing is what differs,
without the analysis in one process (the archives as one input: a zip and a tar, each listed by its own
reader). Each is compared with the same input converted from local files.
Commands run in this process, except the runs that are killed or paused from outside, which run as
processes. Each input is uploaded, and converted to ``gs://`` with the same options, once per module.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time
from typing import Dict, List, Tuple

import images as I
import pytest
from conftest import IN_MEMORY, ROOT, cli_command, cli_env, shard_digests, without_analysis
from gcs_emulator import Emulator, gcs_fixture, upload_file, upload_tree  # noqa: F401 - the gcs fixture
from helpers.cli import run_in_process
from helpers.datasets import dataset_files, make_images, write_tar, write_tree, write_zip

from img2tfrecord import storage
from img2tfrecord.readers import records
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas.dataset_json import DatasetManifest

SPLITS = ("--splits", "train=0.6,validation=0.2,test=0.2", "--seed", "3", "--image-size", "24")
ONE = ("--processes", "1")  # where the number of conversion processes is not the point
BAD = {"cat/broken.jpg": I.truncated_jpeg(), "dog/notes.jpg": I.text_as_jpg()}


def cli(emulator: Emulator, *args: str, analyze: bool = True) -> subprocess.CompletedProcess:
    """``img2tfrecord ARGS`` in this process, where the session's ``gcs`` fixture points Beam at ``emulator``."""
    assert os.environ.get("STORAGE_EMULATOR_HOST") == emulator.env["STORAGE_EMULATOR_HOST"]
    return run_in_process(*(args if analyze else without_analysis(args)))


def convert(emulator: Emulator, source: str, output: str, *extra: str, analyze: bool = True):
    """``convert`` from ``source`` to ``output`` with the emulator; the default command unless not ``analyze``."""
    return cli(emulator, "convert", "--input", source, "--output", output, *SPLITS, *extra, *IN_MEMORY, analyze=analyze)


def listing(directory: str) -> Dict[str, Tuple[int, float]]:
    """relative path -> (size, last updated) of every object under ``directory`` (Beam's FileSystems)."""
    from apache_beam.io.filesystems import FileSystems

    prefix = directory.rstrip("/") + "/"
    found = FileSystems.match([prefix + "**"])[0].metadata_list
    return {m.path[len(prefix) :]: (m.size_in_bytes, m.last_updated_in_seconds) for m in found}


def error_rows(output: str) -> List[Tuple[str, str]]:
    text = storage.read_text(storage.join(output, output_files.ERRORS_FILE))
    return sorted((row["relpath"], row["reason"]) for row in map(json.loads, text.splitlines()))


def comparable(doc: DatasetManifest) -> dict:
    """The manifest's facts two runs of the same conversion agree on."""
    document = doc.to_json()
    return {key: document[key] for key in ("splits", "accounting", "classes", "statistics") if key in document}


def assert_same_output(remote: str, local: str, analysed: bool = True) -> None:
    """The gs:// output holds the local one's records, errors, manifest facts and labels (and the
    tf.Transform output when ``analysed``), and _SUCCESS last."""
    assert shard_digests(remote) == shard_digests(local) and shard_digests(local)
    assert error_rows(remote) == error_rows(local)
    assert comparable(records.read_manifest(remote)) == comparable(records.read_manifest(local))
    name = output_files.LABELS_FILE
    assert storage.read_text(storage.join(remote, name)) == storage.read_text(storage.join(local, name))
    objects = listing(remote)
    for folder in (output_files.TRANSFORM_FN_DIR, output_files.TRANSFORMED_METADATA_DIR) if analysed else ():
        assert any(path.startswith(folder + "/") for path in objects), f"no {folder}/ in {remote}"
    assert not [p for p in objects if p.startswith(output_files.TEMP_PREFIXES)], "temporary objects left behind"
    stamps = {path: updated for path, (_, updated) in objects.items()}
    assert max(stamps, key=lambda p: (stamps[p], p == output_files.SUCCESS_FILE)) == output_files.SUCCESS_FILE


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Dict[str, str]:
    """Local inputs of every kind: a class folder with bad files; a zip of them; ``archives/*``, half of them in
    a zip (under a wrapping folder) and the other half in a tar; a CSV manifest."""
    base = tmp_path_factory.mktemp("gcs_inputs")
    files = {**dataset_files(), **BAD}
    folder = str(base / "folder")
    write_tree(folder, files)
    write_zip(str(base / "flowers.zip"), files, top="flowers")
    halves = [dict(list(sorted(files.items()))[i::2]) for i in range(2)]
    assert all(set(BAD) & set(half) for half in halves), "a bad file in each archive"
    os.makedirs(base / "archives")
    write_zip(str(base / "archives" / "flowers-0.zip"), halves[0], top="flowers")
    write_tar(str(base / "archives" / "flowers-1.tar"), halves[1])
    manifest_dir = str(base / "manifest")
    write_tree(manifest_dir, files)
    with open(os.path.join(manifest_dir, "labels.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "label"])
        for rel in sorted(files) + ["emu/missing.jpg"]:  # a row naming an object that does not exist
            w.writerow([rel, rel.split("/")[0]])
    return {
        "folder": folder,
        "zip": str(base / "flowers.zip"),
        "archives": str(base / "archives" / "*"),
        "csv": os.path.join(manifest_dir, "labels.csv"),
    }


def upload(emulator: Emulator, local: str, name: str) -> str:
    """``local`` (a folder, archive, manifest with its folder, or ``FOLDER/*``) uploaded under ``inputs/<name>``;
    its gs:// path."""
    if local.endswith("/*"):
        upload_tree(os.path.dirname(local), emulator.url("inputs", name))
        return emulator.url("inputs", name, "*")
    if os.path.isdir(local):
        upload_tree(local, emulator.url("inputs", name))
        return emulator.url("inputs", name)
    if local.endswith(".csv"):
        upload_tree(os.path.dirname(local), emulator.url("inputs", name))
        return emulator.url("inputs", name, os.path.basename(local))
    upload_file(local, emulator.url("inputs", name, os.path.basename(local)))
    return emulator.url("inputs", name, os.path.basename(local))


@pytest.fixture(scope="module")
def uploaded(gcs, inputs) -> Dict[str, str]:
    """kind -> the gs:// path of ``inputs[kind]``, uploaded once; the tests only read them."""
    return {kind: upload(gcs, local, kind) for kind, local in inputs.items()}


@pytest.fixture(scope="module")
def gs_outputs(gcs, uploaded):
    """kind -> ``gs://.../out/<kind>``, ``uploaded[kind]`` converted there once, when first asked: by the default
    command for the class folder; in one process without the analysis for the other kinds, whose listing differs."""
    built: Dict[str, str] = {}

    def output(kind: str) -> str:
        if kind not in built:
            analyse = kind == "folder"
            remote = gcs.url("out", kind)
            done = convert(gcs, uploaded[kind], remote, *(() if analyse else ONE), analyze=analyse)
            assert done.returncode == 0, done.stderr[-3000:]
            built[kind] = remote
        return built[kind]

    return output


@pytest.mark.parametrize("kind", ["folder", "archives", "csv"])
def test_gs_to_gs_gives_the_records_of_a_local_run(gcs, inputs, gs_outputs, kind, tmp_path):
    remote = gs_outputs(kind)
    analyse = kind == "folder"
    local = str(tmp_path / "local")
    assert convert(gcs, inputs[kind], local, *ONE, analyze=analyse).returncode == 0
    assert_same_output(remote, local, analysed=analyse)
    reasons = dict(error_rows(remote))
    assert set(BAD) <= set(reasons)
    if kind == "csv":
        assert reasons["emu/missing.jpg"] == "not_found"

    if kind == "folder":
        # inspect and verify read the gs:// output through Beam's FileSystems, whatever the input kind was: the
        # analysed output, which has the most to read (transform_fn/, statistics).
        shown = cli(gcs, "inspect", remote)
        assert shown.returncode == 0 and "examples per class and split" in shown.stdout, shown.stderr[-2000:]
        checked = cli(gcs, "verify", remote)
        assert checked.returncode == 0 and checked.stdout.startswith("OK"), checked.stdout + checked.stderr[-2000:]


def test_a_non_empty_output_is_refused_and_overwrite_removes_only_its_own_objects(gcs, uploaded, gs_outputs):
    from apache_beam.io.filesystems import FileSystems

    source, finished = uploaded["archives"], gs_outputs("archives")  # converted with ONE, without the analysis
    out = gcs.url("overwrite", "out")
    FileSystems.copy([finished + "/"], [out + "/"])  # a finished conversion of ``source``
    first = listing(out)
    sibling = gcs.url("overwrite", "out-notes.txt")  # shares the output's name as a prefix
    storage.write_bytes(sibling, b"not ours")
    storage.write_bytes(gcs.url("overwrite", "out", "notes.txt"), b"not ours either")
    refused = convert(gcs, source, out, *ONE, analyze=False)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr[-2000:]
    assert "--overwrite" in refused.stderr
    refused = convert(gcs, source, out, "--overwrite", *ONE, analyze=False)
    assert refused.returncode == 2 and "did not write" in refused.stderr, refused.stderr[-2000:]
    assert set(listing(out)) == set(first) | {"notes.txt"}

    storage_delete(gcs.url("overwrite", "out", "notes.txt"))
    storage.write_bytes(gcs.url("overwrite", "out", "beam-temp-leftover", "x"), b"a temp file of ours")
    again = convert(gcs, source, out, "--overwrite", *ONE, analyze=False)
    assert again.returncode == 0, again.stderr[-3000:]
    assert set(listing(out)) == set(first)
    assert shard_digests(out) == shard_digests(finished)
    assert storage.read_text(sibling) == "not ours"


def storage_delete(path: str) -> None:
    from apache_beam.io.filesystems import FileSystems

    FileSystems.delete([path])


def _done_objects(out: str) -> List[str]:
    return [
        p
        for p in listing(out)
        if p.startswith(output_files.RUN_FOLDER_PREFIX) and f"/{output_files.RUN_DONE_DIR}/" in p
    ]


RESUME_ARGS = ("--image-size", "48", "--num-shards", "3", "--splits", "train=0.5,test=0.5", "--no-analyze", *ONE)


def test_a_killed_run_leaves_no_success_and_resume_finishes_it_with_the_same_bytes(gcs, tmp_path):

    from img2tfrecord import faults

    root = str(tmp_path / "in")
    make_images(root, classes=3, per_class=12, size=(96, 72), bad=1)
    source = gcs.url("inputs", "resume")
    upload_tree(root, source)
    # The uninterrupted run, from the same files on disk: test_gs_to_gs_... shows gs:// writes a local run's bytes.
    reference = str(tmp_path / "reference")
    done = cli(gcs, "convert", "--input", root, "--output", reference, *RESUME_ARGS)
    assert done.returncode == 0, done.stderr[-3000:]

    out = gcs.url("resume", "out")
    args = ("convert", "--input", source, "--output", out, *RESUME_ARGS)
    marker = str(tmp_path / "paused")
    # Paused with a shard done and the next half written.
    env = cli_env({**gcs.env, faults.ENV: "pause:converting", faults.MARKER_ENV: marker})
    proc = subprocess.Popen(cli_command(*args), cwd=ROOT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not os.path.exists(marker):
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "the run never paused"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    finished = _done_objects(out)
    assert finished, "no finished shard to keep"
    assert output_files.SUCCESS_FILE not in listing(out), "a killed run left _SUCCESS"
    assert not [p for p in listing(out) if output_files.parse_shard_file_name(p)], "a shard got its final name"

    resumed = cli(gcs, *args, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"{len(finished)} finished shard(s) kept" in resumed.stderr, resumed.stderr[-2000:]
    assert shard_digests(out) == shard_digests(reference)
    assert comparable(records.read_manifest(out)) == comparable(records.read_manifest(reference))
    assert output_files.SUCCESS_FILE in listing(out)


def test_objects_deleted_while_the_run_converts_are_not_found_rows(gcs, tmp_path):
    from apache_beam.io.filesystems import FileSystems

    from img2tfrecord import faults

    root = str(tmp_path / "in")
    make_images(root, classes=3, per_class=12, size=(96, 72), bad=0)
    source = gcs.url("inputs", "vanishing")
    inputs = upload_tree(root, source)
    out = gcs.url("vanishing", "out")
    marker = str(tmp_path / "paused")
    # Paused once the pipeline has listed the input and a shard is done.
    env = cli_env({**gcs.env, faults.ENV: "pause:converting", faults.MARKER_ENV: marker})
    args = ("convert", "--input", source, "--output", out, *RESUME_ARGS, *IN_MEMORY)
    proc = subprocess.Popen(cli_command(*args), cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not os.path.exists(marker):
            assert proc.poll() is None, "the run ended before it paused"
            assert time.monotonic() < deadline, "the run never paused"
            time.sleep(0.05)
        FileSystems.delete([source + "/" + relative for relative in listing(source)])
        os.remove(marker)  # the run goes on, its remaining objects gone
        stdout, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stdout
    accounting = records.read_manifest(out).accounting
    assert accounting is not None
    assert accounting.inputs == inputs == accounting.written + accounting.rejected
    missing = [relpath for relpath, reason in error_rows(out) if reason == "not_found"]
    assert missing and accounting.rejected == len(missing), error_rows(out)
    assert accounting.written > 0 and output_files.SUCCESS_FILE in listing(out)
    checked = cli(gcs, "verify", out)
    assert checked.returncode == 0, checked.stdout + checked.stderr[-2000:]


@pytest.mark.parametrize("kind", ["folder", "zip"])
def test_the_plan_of_a_gs_input_is_the_local_one_and_writes_nothing(gcs, inputs, uploaded, kind, tmp_path):
    source = uploaded[kind]
    remote = gcs.url("out", f"plan-{kind}")

    def plan(input_path: str, output: str) -> dict:
        # Without the analysis, which would only add TensorFlow's imports to the start-up the plan times.
        proc = cli(
            gcs, "convert", "--input", input_path, "--output", output, *SPLITS, "--plan", "--json", analyze=False
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout)

    found, local = plan(source, remote), plan(inputs[kind], str(tmp_path / "out"))
    assert found["inputs"] == local["inputs"] == len(dataset_files()) + len(BAD)
    for key in ("classes", "layout", "input_kind", "skipped"):
        if key != "skipped" or kind == "folder":  # an archive's junk is named by its path
            assert found[key] == local[key], key
    assert {s: (v["examples_per_class"], v["num_shards"]) for s, v in found["splits"].items()} == {
        s: (v["examples_per_class"], v["num_shards"]) for s, v in local["splits"].items()
    }
    assert found["time"]["sample_size"] == 16 and found["output"]["exists"] is False
    assert listing(remote) == {}


# -- bad input ----------------------------------------------------------------------------------


def test_a_missing_bucket_or_object_is_one_line_and_exit_2(gcs):
    for missing in ("gs://no-such-bucket-for-img2tfrecord/images", gcs.url("no", "such", "folder")):
        proc = convert(gcs, missing, gcs.url("never-written"))
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-2000:]
    assert listing(gcs.url("never-written")) == {}
