"""``convert --file-format array_record|webdataset|parquet``: the TFRecord run's records in another container, read back
by the real readers (grain, TFDS, webdataset in a torch DataLoader, plain tarfile, the TF-free data source).

One small class-folder input is converted once per format (``conftest.built_once``); the TFRecord run is
the reference every other format is compared with. Appends and a killed run copy or write their own
outputs.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import tarfile

import pytest
from conftest import IN_MEMORY, cli_env, manifest_to_edit, shard_digests, write_manifest_doc
from gcs_emulator import gcs_fixture  # noqa: F401 - the gcs fixture
from helpers.cli import run_in_process
from helpers.datasets import clip_dataset, dataset_files, write_tree
from helpers.detection_inputs import write_voc
from helpers.processes import kill_when
from helpers.shared_outputs import converted_once

from img2tfrecord import faults, inspection, storage
from img2tfrecord.readers import records
from img2tfrecord.readers.datasource import SplitDataSource, iter_split
from img2tfrecord.readers.webdataset_split import split_urls, withdrawn_keys
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import output_files

pytestmark = pytest.mark.e2e

ARGS = ("--image-size", "24", "--splits", "train=0.7,validation=0.3", "--num-shards", "2", "--processes", "1")
# every format of the table but TFRecord: a new format runs the generic tests by being in the table
OTHER_FORMATS = tuple(f for f in output_files.FILE_FORMATS if f != output_files.DEFAULT_FILE_FORMAT)


def _write_photos(folder: str) -> str:
    root = os.path.join(folder, "in")
    write_tree(root, dataset_files())
    return root


def converted(tmp_path_factory, file_format: str):
    run = converted_once(tmp_path_factory, f"formats-{file_format}", _write_photos, *ARGS, "--file-format", file_format)
    assert run.proc.returncode == 0, run.proc.stderr[-3000:]
    return run


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """file format -> its shared conversion of the same input with the same options."""
    return {f: converted(tmp_path_factory, f) for f in ("tfrecord", *OTHER_FORMATS)}


def shard_records(out: str, split: str, sequence: bool = False):
    """The records of a split, shard by shard, as the output's file format stores them."""
    doc = records.read_manifest(out)
    return [
        [
            d
            for _, _, d in records.iter_records(
                storage.join(out, s.file), file_format=doc.file_format, sequence=sequence
            )
        ]
        for s in doc.splits[split].shards
    ]


def comparable(doc: dict) -> dict:
    """What a run with the same options and seed gives whatever its file format."""
    splits = {
        name: {k: v for k, v in info.items() if k in ("num_examples", "examples_per_class")}
        for name, info in doc["splits"].items()
    }
    options = {k: v for k, v in doc["options"].items() if k != "file_format"}
    return {"splits": splits, "options": options, "accounting": doc["accounting"], "labels": doc["labels"]}


def _typed_json(out: str) -> dict:
    """An output's manifest, read as typed and given back as its JSON fields (their spelling is tested here)."""
    return records.read_manifest(out).to_json()


def test_array_record_shards_hold_the_tfrecord_runs_records_byte_for_byte(outputs):
    reference, out = outputs["tfrecord"].output, outputs["array_record"].output
    doc = _typed_json(out)
    assert doc["file_format"] == "array_record" and doc["format_version"] == output_files.FILE_FORMATS_FORMAT_VERSION
    assert comparable(doc) == comparable(_typed_json(reference))
    for split in ("train", "validation"):
        assert [s["file"] for s in doc["splits"][split]["shards"]] == [
            output_files.shard_file_name(split, i, 2, file_format="array_record") for i in range(2)
        ]
        assert shard_records(out, split) == shard_records(reference, split)
    assert not os.path.exists(os.path.join(out, output_files.INDEX_DIR)), "ArrayRecord indexes its own records"
    with open(os.path.join(out, output_files.TFDS_DATASET_INFO_FILE)) as f:
        info = json.load(f)
    assert info["fileFormat"] == "array_record"
    assert {s["filepathTemplate"] for s in info["splits"]} == {"{SPLIT}-{SHARD_X_OF_Y}.array_record"}


def test_webdataset_shards_hold_the_same_images_and_labels_read_with_plain_tarfile(outputs):
    reference, out = outputs["tfrecord"].output, outputs["webdataset"].output
    doc = _typed_json(out)
    assert comparable(doc) == comparable(_typed_json(reference))
    spec = records.read_manifest(reference).spec
    for split in ("train", "validation"):
        shards = doc["splits"][split]["shards"]
        assert [s["file"] for s in shards] == [f"{split}-00000{i}.tar" for i in range(2)]
        assert doc["splits"][split]["pattern"] == f"{split}-{{000000..000001}}.tar"
        expected = [records.parse_example(d, spec) for shard in shard_records(reference, split) for d in shard]
        found = []
        for shard in shards:
            with tarfile.open(os.path.join(out, shard["file"])) as tar:
                names = tar.getnames()
                members = {name: tar.extractfile(name).read() for name in names}
            keys_in_order = list(dict.fromkeys(name.split(".", 1)[0] for name in names))
            stem = shard["file"][: -len(".tar")]
            assert keys_in_order == [f"{stem}-{i:06d}" for i in range(shard["num_records"])]
            for key in keys_in_order:
                meta = json.loads(members[f"{key}.json"])
                found.append((members[f"{key}.jpg"], int(members[f"{key}.cls"]), meta[keys.FILENAME]))
        assert found == [(e[keys.IMAGE_ENCODED], e[keys.CLASS_LABEL], e[keys.FILENAME].decode()) for e in expected]
        assert shard_records(out, split) == shard_records(reference, split)  # rebuilt byte for byte


def test_grain_and_tfds_read_the_array_record_output_at_random(outputs):
    grain = pytest.importorskip("grain.python")
    tfds = pytest.importorskip("tensorflow_datasets")
    out = outputs["array_record"].output
    doc = records.read_manifest(out)
    expected = [d for shard in shard_records(outputs["tfrecord"].output, "train") for d in shard]
    source = grain.ArrayRecordDataSource([storage.join(out, s.file) for s in doc.splits["train"].shards])
    assert len(source) == len(expected) and [source[i] for i in reversed(range(len(source)))] == expected[::-1]
    builder = tfds.builder_from_directory(out)
    assert builder.info.file_format.value == "array_record"
    data = builder.as_data_source(split="train")
    labels = [records.parse_example(d, doc.spec)[keys.CLASS_LABEL] for d in expected]
    assert len(data) == len(expected) and [int(data[i]["image"]["class"]["label"]) for i in range(len(data))] == labels


def _examples(source) -> list:
    return [(e[keys.FILENAME], e[keys.CLASS_LABEL], e[keys.DECODED_IMAGE].tobytes()) for e in source]


def test_the_tf_free_readers_read_every_format_alike(outputs):
    expected = _examples(SplitDataSource(outputs["tfrecord"].output, "train"))
    for file_format in OTHER_FORMATS:
        out = outputs[file_format].output
        source = SplitDataSource(out, "train")
        assert _examples(source[i] for i in range(len(source))) == expected, file_format
        assert _examples(iter_split(out, "validation")) == _examples(
            iter_split(outputs["tfrecord"].output, "validation")
        )


def test_webdataset_reads_the_shards_in_a_torch_dataloader_with_two_workers(outputs):
    wds = pytest.importorskip("webdataset")
    torch = pytest.importorskip("torch")
    out = outputs["webdataset"].output
    pattern = os.path.join(out, records.read_manifest(out).splits["train"].pattern)
    dataset = (
        wds.WebDataset(pattern, shardshuffle=False, empty_check=False).decode("rgb").to_tuple("jpg", "cls", "json")
    )
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=2)
    got = sorted((meta[keys.FILENAME], int(label), image.shape) for image, label, meta in loader)
    expected = sorted(
        (name.decode(), label, (24, 24, 3)) for name, label, _ in _examples(SplitDataSource(out, "train"))
    )
    assert got == expected
    assert split_urls(out, "train") == [os.path.join(out, f"train-00000{i}.tar") for i in range(2)]


def test_verify_inspect_and_report_read_every_format(outputs, tmp_path):
    for file_format in OTHER_FORMATS:
        out = outputs[file_format].output
        checked = run_in_process("verify", out)
        assert checked.returncode == 0 and checked.stdout.startswith("OK:"), checked.stdout + checked.stderr
        summary = inspection.summarise(out)
        assert summary["file_format"] == file_format
        assert (
            summary["splits"]["train"]["images"]
            == inspection.summarise(outputs["tfrecord"].output)["splits"]["train"]["images"]
        )
        html = str(tmp_path / f"{file_format}.html")
        reported = run_in_process("report", out, "--output", html)
        assert reported.returncode == 0, reported.stderr[-2000:]
        with open(html, encoding="utf-8") as f:
            assert f.read().count("data:image/") >= 15, f"{file_format}: samples drawn from its shards"


def test_a_corrupt_shard_is_named_by_verify_in_each_format(outputs, tmp_path):
    for file_format in OTHER_FORMATS:
        out = str(tmp_path / file_format)
        shutil.copytree(outputs[file_format].output, out)
        name = records.read_manifest(out).splits["train"].shards[1].file
        path = os.path.join(out, name)
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
        checked = run_in_process("verify", out)
        assert checked.returncode != 0 and name in checked.stdout + checked.stderr, file_format


def test_load_names_the_reader_of_each_other_format(outputs):
    import img2tfrecord

    with pytest.raises(ValueError, match="grain"):
        img2tfrecord.load(outputs["array_record"].output)
    with pytest.raises(ValueError, match="webdataset.WebDataset"):
        img2tfrecord.load(outputs["webdataset"].output)
    with pytest.raises(ValueError, match="datasets.load_dataset"):
        img2tfrecord.load(outputs["parquet"].output)


@pytest.mark.parametrize("file_format", OTHER_FORMATS)
def test_an_append_adds_a_generation_in_the_outputs_format_and_refuses_another(outputs, file_format, tmp_path):
    run = outputs[file_format]
    source, out = str(tmp_path / "in"), str(tmp_path / "out")
    shutil.copytree(run.input, source)
    shutil.copytree(run.output, out)
    write_manifest_doc(out, {**manifest_to_edit(out), "input": source})  # the copy is the output of the copied input
    write_tree(source, {f"cat/new_{i}.jpg": data for i, data in enumerate(list(dataset_files().values())[:3])})
    append = ("convert", "--input", source, "--output", out, *ARGS, "--no-analyze", "--append")
    refused = run_in_process(*append)  # --file-format left at tfrecord
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1].endswith(
        f"(give --file-format {file_format}, or rebuild with --overwrite)"
    ), refused.stderr[-2000:]
    done = run_in_process(*append, "--file-format", file_format)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = records.read_manifest(out)
    added = [s.file for _, s in doc.shards() if output_files.parse_shard_file_name(s.file)["generation"] == 1]
    assert added and all(output_files.file_format_of(name) == file_format for name in added)
    assert sum(len(SplitDataSource(out, split)) for split in doc.splits) == doc.num_examples == 16 + 3
    assert run_in_process("verify", out).returncode == 0
    if file_format == "webdataset":
        assert "::" in doc.splits["train"].pattern and not withdrawn_keys(out)


@pytest.mark.parametrize("file_format", OTHER_FORMATS)
def test_a_killed_run_resumes_in_its_format_with_the_same_bytes(outputs, file_format, tmp_path):
    run = outputs[file_format]
    out = str(tmp_path / "out")
    marker = str(tmp_path / "paused")
    args = ("convert", "--input", run.input, "--output", out, *ARGS, "--file-format", file_format, "--no-analyze")
    env = cli_env({faults.ENV: "pause:converting", faults.MARKER_ENV: marker})
    assert kill_when(args, lambda: os.path.exists(marker), "paused", env=env) == -signal.SIGKILL
    other = "webdataset" if file_format == "array_record" else "array_record"
    wrong = run_in_process(*args, "--resume", "--file-format", other)
    assert wrong.returncode == 2, wrong.stderr[-2000:]
    assert f'--file-format is "{other}" here but "{file_format}" there' in wrong.stderr, wrong.stderr[-2000:]
    resumed = run_in_process(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "1 finished shard(s) kept" in resumed.stderr, resumed.stderr[-2000:]
    assert shard_digests(out) == shard_digests(run.output)


def _write_voc(folder: str) -> str:
    root = os.path.join(folder, "voc")
    write_voc(root, {f"img_{i}": 1 for i in range(4)})
    return root


def _write_clips(folder: str) -> str:
    root = os.path.join(folder, "clips")
    write_tree(root, clip_dataset()[0])
    return root


@pytest.mark.parametrize(
    "kind, write, args",
    [
        ("detection", _write_voc, ("--task", "detection", "--image-size", "32", "--format", "png")),
        ("sequence", _write_clips, ("--sequence",)),
    ],
)
def test_detection_and_sequence_records_reach_a_webdataset_sample_whole(tmp_path_factory, kind, write, args):
    runs = {
        f: converted_once(tmp_path_factory, f"formats-{kind}-{f}", write, *args, "--processes", "1", "--file-format", f)
        for f in ("tfrecord", "webdataset")
    }
    for f, r in runs.items():
        assert r.proc.returncode == 0, (f, r.proc.stderr[-3000:])
    sequence = kind == "sequence"
    assert shard_records(runs["webdataset"].output, "train", sequence) == shard_records(
        runs["tfrecord"].output, "train", sequence
    )
    with tarfile.open(os.path.join(runs["webdataset"].output, "train-000000.tar")) as tar:
        first = json.loads(tar.extractfile(next(n for n in tar.getnames() if n.endswith(".json"))).read())
        extensions = {name.split(".", 1)[1] for name in tar.getnames()}
    if sequence:
        assert keys.CLIP_NAME in first and "00000.png" in extensions
    else:
        assert first[keys.OBJECT_CLASS_TEXT] == ["cat", "dog"] and len(first[keys.BBOX_XMIN]) == 2
    assert run_in_process("verify", runs["webdataset"].output).returncode == 0


@pytest.mark.parametrize("file_format", OTHER_FORMATS)
def test_a_gs_output_holds_the_local_runs_shards_and_reads_back(gcs, outputs, file_format):
    run = outputs[file_format]
    remote = gcs.url("formats", file_format)
    done = run_in_process(
        "convert", "--input", run.input, "--output", remote, *ARGS, "--file-format", file_format, "--no-analyze"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert shard_digests(remote) == shard_digests(run.output) and shard_digests(remote)
    checked = run_in_process("verify", remote)
    assert checked.returncode == 0 and checked.stdout.startswith("OK:"), checked.stdout + checked.stderr
    assert _examples(iter_split(remote, "train")) == _examples(iter_split(run.output, "train"))


def test_the_beam_transforms_write_the_file_format_they_are_given(outputs, tmp_path):
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from img2tfrecord.beam import ExamplesToTFRecords, ImageRef, ImagesToExamples, ImagesToTFRecords

    root = outputs["tfrecord"].input
    refs = [ImageRef(os.path.join(root, *rel.split("/")), rel.split("/")[0]) for rel in sorted(dataset_files())]
    folder, shards = str(tmp_path / "folder"), str(tmp_path / "shards")
    with beam.Pipeline(options=PipelineOptions(list(IN_MEMORY))) as p:
        created = p | beam.Create(refs)
        _ = created | ImagesToTFRecords(folder, image_size=24, num_shards=2, analyze=False, file_format="array_record")
        examples = created | "Examples" >> ImagesToExamples(image_size=24)
        _ = examples["examples"] | ExamplesToTFRecords(shards, num_shards=2, file_format="webdataset")
    doc = records.read_manifest(folder)
    assert doc.file_format == "array_record" and doc.num_examples == len(refs)
    assert run_in_process("verify", folder).returncode == 0
    written = sorted(name for name in os.listdir(shards) if output_files.parse_shard_file_name(name))
    assert written == ["train-000000.tar", "train-000001.tar"]
    found = [
        d for name in written for _, _, d in records.iter_records(os.path.join(shards, name), file_format="webdataset")
    ]
    assert sorted(records.parse_example(d, doc.spec)[keys.FILENAME] for d in found) == sorted(
        records.parse_example(d, doc.spec)[keys.FILENAME]
        for _, s in doc.shards()
        for _, _, d in records.iter_records(storage.join(folder, s.file), file_format="array_record")
    )


def test_parquet_rows_are_the_tfrecord_runs_records_read_by_datasets_pyarrow_duckdb_and_polars(outputs):
    import datasets
    import duckdb
    import polars
    import pyarrow.parquet as pq

    ref, out = outputs["tfrecord"].output, outputs["parquet"].output
    doc = records.read_manifest(out)
    assert [s.file for _, s in doc.shards()] == [
        s.file.replace(".tfrecord", ".parquet") for _, s in records.read_manifest(ref).shards()
    ]
    for split in doc.splits:  # byte for byte: the same records in the same shards
        assert shard_records(out, split) == shard_records(ref, split)
    train = [os.path.join(out, s.file) for s in doc.splits["train"].shards]
    table = pq.read_table(train)
    assert table.column_names[:4] == ["image", "label", "label_name", "path"]
    expected = [records.parse_example(d, doc.spec) for shard in shard_records(ref, "train") for d in shard]
    assert [r["image"]["bytes"] for r in table.to_pylist()] == [e[keys.IMAGE_ENCODED] for e in expected]
    assert table.column("sha256").to_pylist() == [e[keys.KEY_SHA256].decode() for e in expected]

    loaded = datasets.load_dataset("parquet", data_files={"train": train}, split="train")
    assert isinstance(loaded.features["image"], datasets.Image)
    assert loaded.features["label"].names == list(doc.labels)
    assert loaded[0]["image"].size == (24, 24) and loaded[0]["label"] == expected[0][keys.CLASS_LABEL]
    whole = datasets.load_dataset(out)  # the dataset card's configs name every split's files
    assert {name: len(part) for name, part in whole.items()} == {
        name: info.num_examples for name, info in doc.splits.items()
    }
    assert whole["validation"].features["label"].names == list(doc.labels)

    pattern = os.path.join(out, "train-*.parquet")
    counts = duckdb.sql(f"SELECT label_name, count(*) FROM '{pattern}' GROUP BY 1 ORDER BY 1").fetchall()
    assert dict(counts) == doc.splits["train"].examples_per_class
    frame = polars.read_parquet(pattern)
    assert frame.height == doc.splits["train"].num_examples and frame["label"].to_list() == [
        e[keys.CLASS_LABEL] for e in expected
    ]


def test_parquet_refuses_what_it_does_not_store_before_any_work(tmp_path):
    for extra in (("--task", "detection"), ("--sequence",)):
        refused = run_in_process(
            "convert", "--input", str(tmp_path), "--output", str(tmp_path / "o"), *extra, "--file-format", "parquet"
        )
        assert refused.returncode == 2, refused.stderr[-2000:]
        assert "not supported in Parquet" in refused.stderr.strip().splitlines()[-1]


def _rewrite_webdataset_member(path: str, suffix: str, change) -> None:
    """Rewrite the first member ending in ``suffix`` of the tar at ``path`` with ``change(data)``."""
    with tarfile.open(path) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    done = False
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for member, data in members:
            if not done and member.name.endswith(suffix):
                data, done = change(data), True
                member.size = len(data)
            tar.addfile(member, io.BytesIO(data))


def _rewrite_parquet_cell(path: str, column: str, change) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    rows = table.to_pylist()
    rows[0][column] = change(rows[0][column])
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path, row_group_size=100)


def _flip(data: bytes) -> bytes:
    return data[:-8] + bytes(b ^ 0xFF for b in data[-8:])


def _next_label(label):
    return str(int(label) + 1).encode() if isinstance(label, bytes) else int(label) + 1


CORRUPTIONS = {  # each member kind of one record, in each format
    "webdataset": {
        "cls": lambda p: _rewrite_webdataset_member(p, ".cls", _next_label),
        "image": lambda p: _rewrite_webdataset_member(p, ".jpg", _flip),
        "json": lambda p: _rewrite_webdataset_member(
            p, ".json", lambda d: d.replace(b'"image/height":24', b'"image/height":25')
        ),
    },
    "parquet": {
        "label": lambda p: _rewrite_parquet_cell(p, "label", _next_label),
        "image": lambda p: _rewrite_parquet_cell(p, "image", lambda i: {**i, "bytes": _flip(i["bytes"])}),
        "sha256": lambda p: _rewrite_parquet_cell(p, "sha256", lambda s: "0" * 64),
        "label_name": lambda p: _rewrite_parquet_cell(p, "label_name", lambda s: s + "x"),
    },
}


@pytest.mark.parametrize("file_format,member", [(f, m) for f, kinds in CORRUPTIONS.items() for m in kinds])
def test_verify_fails_when_any_member_of_one_record_changes(outputs, tmp_path, file_format, member):
    out = str(tmp_path / "out")
    shutil.copytree(outputs[file_format].output, out)
    name = records.read_manifest(out).splits["train"].shards[0].file
    CORRUPTIONS[file_format][member](os.path.join(out, name))
    checked = run_in_process("verify", out)
    assert checked.returncode != 0, f"{file_format} {member}: " + checked.stdout[-1500:]
