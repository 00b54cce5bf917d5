"""Reading S3 (moto) and Azure Blob Storage (Azurite): ``load()``, glob and manifest inputs, ``--plan``, ``report``.

The servers are the session's (tests/object_stores.py, registered in conftest). ``load()`` reads a copy of the
session's converted sample uploaded to each store, and must give the records ``load()`` gives locally (TensorFlow
opens neither scheme: the records come through the storage layer). Inputs are a small class folder uploaded once
per store, converted from a glob and from manifests, and compared with the same input converted locally.
Everything runs in this process.
"""

from __future__ import annotations

import json
import os
from typing import Dict

import pytest
from conftest import shard_digests
from helpers.cli import run_in_process
from helpers.datasets import dataset_files, write_tree
from object_stores import Store

from img2tfrecord import storage
from img2tfrecord.readers import tfdata_storage

ARGS = ("--splits", "train=0.6,test=0.4", "--seed", "5", "--image-size", "24", "--no-analyze")
ONE = ("--processes", "1", "--runner=FnApiRunner", "--direct_running_mode=in_memory")
_uploaded: Dict[str, str] = {}  # a store's name -> its copy of something uploaded once per session


def once(store: Store, name: str, local: str) -> str:
    """``local`` (a folder) copied to ``<store>/<name>`` the first time it is asked for; the remote path."""
    key = f"{store.name}:{name}"
    if key not in _uploaded:
        storage.copy_tree(local, store.url(name))
        _uploaded[key] = store.url(name)
    return _uploaded[key]


def loaded(path: str, split: str) -> list:
    """Every element ``load()`` yields for ``split`` in the writer's order, as comparable values."""
    import img2tfrecord

    ds = img2tfrecord.load(path, split=split, batch_size=None, as_dict=True, shuffle=False, deterministic=True)
    return [{key: _plain(value.numpy()) for key, value in element.items()} for element in ds]


def _plain(value):
    return value if isinstance(value, bytes) else value.tolist()


# -- load() ---------------------------------------------------------------------------------------


def test_load_gives_the_records_of_the_local_output(store: Store, converted_sample):
    remote = once(store, "sample-records", converted_sample)
    assert not tfdata_storage.tensorflow_opens(remote) and tfdata_storage.tensorflow_opens(converted_sample)
    local = loaded(converted_sample, "test")
    assert loaded(remote, "test") == local and local
    import img2tfrecord

    batches = list(img2tfrecord.load(remote, split="test", batch_size=4, seed=3, image_size=16))  # shuffled, parallel
    assert sum(int(images.shape[0]) for images, _ in batches) == len(local)
    assert tuple(batches[0][0].shape[1:]) == (16, 16, 3)


def test_load_names_a_corrupt_remote_shard(s3_store: Store, converted_sample):
    import tensorflow as tf

    import img2tfrecord
    from img2tfrecord.readers import records

    remote = s3_store.url("corrupt-records")
    storage.copy_tree(converted_sample, remote)
    shard = records.shard_paths(remote, records.read_manifest(remote), "test")[0][0]
    data = bytearray(storage.read_bytes(shard))
    data[40] ^= 0xFF  # inside the first record's data
    storage.write_bytes(shard, bytes(data))
    with pytest.raises(tf.errors.OpError, match="checksum"):
        list(img2tfrecord.load(remote, split="test", batch_size=None, shuffle=False))


# -- inputs ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> str:
    """A small class folder with a CSV manifest of its files (relative paths) at its root."""
    root = str(tmp_path_factory.mktemp("store_photos") / "photos")
    files = dataset_files()
    write_tree(root, files)
    with open(os.path.join(root, "labels.csv"), "w", encoding="utf-8") as f:
        f.write("path,label\n" + "".join(f"{rel},{rel.split('/')[0]}\n" for rel in sorted(files)))
    return root


@pytest.fixture(scope="module")
def local_runs(photos, tmp_path_factory) -> Dict[str, str]:
    """The glob and the manifest input converted from local files: what the stores' runs must equal."""
    built = {}
    for kind, source in (("glob", os.path.join(photos, "*", "*.jpg")), ("csv", os.path.join(photos, "labels.csv"))):
        out = str(tmp_path_factory.mktemp(f"local_{kind}") / "out")
        done = run_in_process("convert", "--input", source, "--output", out, *ARGS, *ONE)
        assert done.returncode == 0, done.stderr[-3000:]
        built[kind] = out
    return built


def test_a_glob_input_gives_the_records_of_the_local_glob(s3_store: Store, photos, local_runs):
    """``s3://bkt/photos/*/*.jpg``; Azure's listing of the same glob is the --plan test's."""
    store = s3_store
    source = once(store, "photos", photos)
    out = store.url("out", "glob")
    done = run_in_process("convert", "--input", f"{source}/*/*.jpg", "--output", out, *ARGS, *ONE)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "9 inputs" in done.stdout, done.stdout
    assert shard_digests(out) == shard_digests(local_runs["glob"]) and shard_digests(out)


@pytest.mark.parametrize("form, store_name", [("csv", "azure"), ("jsonl", "s3")])
def test_a_manifest_in_the_store_gives_the_records_of_the_local_manifest(request, form, store_name, photos, local_runs):
    """A CSV of relative paths (on Azure), or a JSONL of the objects' full URLs beside them (on S3): the same rows,
    the same records."""
    store = request.getfixturevalue(f"{store_name}_store")
    source = once(store, "photos", photos)
    manifest = storage.join(source, "labels.csv")
    if form == "jsonl":
        manifest = storage.join(source, "labels.jsonl")
        rows = [line.split(",") for line in storage.read_text(storage.join(source, "labels.csv")).splitlines()[1:]]
        text = "".join(json.dumps({"path": storage.join(source, path), "label": label}) + "\n" for path, label in rows)
        storage.write_bytes(manifest, text.encode())
    out = store.url("out", form)
    done = run_in_process("convert", "--input", manifest, "--output", out, *ARGS, *ONE)
    assert done.returncode == 0, done.stderr[-3000:]
    assert shard_digests(out) == shard_digests(local_runs["csv"]) and shard_digests(out)


def test_plan_of_a_store_input_lists_it_and_writes_nothing(store: Store, photos):
    source = once(store, "photos", photos)
    out = store.url("out", "planned")
    done = run_in_process("convert", "--plan", "--input", f"{source}/*/*.jpg", "--output", out, *ARGS)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "train: 5 inputs" in done.stdout and "absent or empty: a run writes there" in done.stdout, done.stdout
    assert not list(storage.walk_files(out))


def test_report_reads_an_s3_output(s3_store: Store, converted_sample, tmp_path):
    remote = once(s3_store, "sample-records", converted_sample)
    target = tmp_path / "report"
    done = run_in_process("report", remote, "--output", f"{target}/", "--processes", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads((target / "report.json").read_text())
    local = tmp_path / "local"
    assert run_in_process("report", converted_sample, "--output", f"{local}/", "--processes", "1").returncode == 0
    assert facts["splits"] == json.loads((local / "report.json").read_text())["splits"]


def test_report_refuses_an_output_in_a_store(s3_store: Store, converted_sample):
    remote = once(s3_store, "sample-records", converted_sample)
    done = run_in_process("report", remote, "--output", s3_store.url("reports") + "/")
    assert done.returncode == 2 and "--output" in done.stderr and "local" in done.stderr, done.stderr
