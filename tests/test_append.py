"""``convert --append``: generations of new inputs added to a finished output, and everything reading them.

Real conversions of real image files, in this process (``api.convert``) except where only a
process shows the behaviour (a SIGKILL at a phase, the command's exit code and one line).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys

import images as I
import pytest
from conftest import DATAFLOW_DRY_RUN, cli_env, convert, manifest_to_edit, run_cli, shard_digests, write_manifest_doc
from gcs_emulator import gcs_fixture, upload_tree  # noqa: F401 - the gcs fixture
from helpers.datasets import make_images
from helpers.outputs import records_by_relpath
from helpers.processes import kill_when, paused_run

from img2tfrecord import api, faults
from img2tfrecord.conversion import appends
from img2tfrecord.errors import UsageError
from img2tfrecord.readers import datasource
from img2tfrecord.readers.records import read_manifest
from img2tfrecord.schemas import dataset_json, output_files
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas.generations import Generation
from img2tfrecord.schemas.ledger import LedgerEntry, ledger_bytes, parse_ledger
from img2tfrecord.verification.output_checks import verify

OPTIONS = dict(
    splits={"train": 0.7, "validation": 0.3}, seed=5, image_size=32, analyze=False, processes=1, num_shards=2
)
BEAM = ["--runner=FnApiRunner", "--direct_running_mode=in_memory"]
CLI_OPTIONS = ("--splits", "train=0.7,validation=0.3", "--seed", "5", "--image-size", "32", "--num-shards", "2")


def _convert(src: str, out: str, **extra):
    return api.convert(src, out, pipeline_options=BEAM, **{**OPTIONS, **extra})


def _bytes_and_times(out: str) -> dict:
    found = {}
    for folder, _, names in os.walk(out):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, out)] = (hashlib.sha256(f.read()).hexdigest(), os.stat(path).st_mtime_ns)
    return found


def _move(src_root: str, dst_root: str, relpaths) -> None:
    for relpath in relpaths:
        dst = os.path.join(dst_root, relpath)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.move(os.path.join(src_root, relpath), dst)


@pytest.fixture(scope="module")
def batches(tmp_path_factory):
    """Three batches of a growing class-folder input: a 3-class start (with a truncated file), then two more."""
    root = str(tmp_path_factory.mktemp("append-batches"))
    pool = os.path.join(root, "pool")
    files = make_images(pool, classes=3, per_class=14, size=(48, 40), bad=1)
    relpaths = sorted(files)
    later = [r for i, r in enumerate(relpaths) if i % 3 and "broken" not in r]
    return pool, relpaths, later[: len(later) // 2], later[len(later) // 2 :]


@pytest.fixture(scope="module")
def three_generations(batches, tmp_path_factory):
    """An output made by one run and two appends, and a full run over the final input."""
    pool, relpaths, second, third = batches
    src = str(tmp_path_factory.mktemp("append-src") / "in")
    shutil.copytree(pool, src)
    held = str(tmp_path_factory.mktemp("append-held"))
    _move(src, held, second + third)
    out = str(tmp_path_factory.mktemp("append-out") / "out")
    docs = [_convert(src, out)]
    _move(held, src, second)
    docs.append(_convert(src, out, append=True))
    _move(held, src, third)
    docs.append(_convert(src, out, append=True))
    full = str(tmp_path_factory.mktemp("append-full") / "out")
    _convert(src, full)
    return src, out, full, docs, len(relpaths)


@pytest.mark.e2e
def test_three_generations_hold_the_records_of_one_run_over_the_final_input(three_generations):
    src, out, full, docs, num_inputs = three_generations
    first, second, third = docs
    assert [g.number for g in third.generations] == [0, 1, 2]
    assert [len(d.generations) for d in docs] == [1, 2, 3]
    # Input for input and split for split, the appended output holds what one run over the final input writes.
    assert records_by_relpath(out) == records_by_relpath(full)
    full_doc = read_manifest(full)
    assert third.labels == full_doc.labels
    for name, info in third.splits.items():
        assert info.num_examples == full_doc.splits[name].num_examples
        assert info.examples_per_class == full_doc.splits[name].examples_per_class
    # Counts add up, per generation and in total: every input is written or rejected exactly once.
    acc = third.accounting
    assert acc.inputs == num_inputs == acc.written + acc.rejected
    assert acc.rejected_by_reason == {"truncated": 3}
    assert sum(g.inputs for g in third.generations) == num_inputs
    for g in third.generations:
        assert g.inputs == g.written + g.rejected
        assert not g.analyzed
    # Earlier shards are kept as they were; each generation adds its own, named after it.
    for before, after in zip(docs, docs[1:]):
        for name, info in before.splits.items():
            assert after.splits[name].shards[: len(info.shards)] == info.shards
    names = [shard.file for _, shard in third.shards()]
    assert "train-g00002-00000-of-00001.tfrecord" in names or "train-g00002-00000-of-00002.tfrecord" in names
    for _, shard in third.shards():
        assert os.path.exists(os.path.join(out, shard.index))  # DALI's index of every shard
    assert third.tfds is not None and not third.tfds.readable and "--append" in third.tfds.reason
    report = verify(out)
    assert report.ok, report.text()
    assert report.records_checked == acc.written


@pytest.mark.e2e
def test_every_reader_sees_every_generation(three_generations):
    _, out, _, docs, _ = three_generations
    third = docs[-1]
    for name, info in third.splits.items():
        assert len(datasource.SplitDataSource(out, name, decode=False)) == info.num_examples
    import img2tfrecord

    train = img2tfrecord.load(out, "train", batch_size=None, shuffle=False)
    assert sum(1 for _ in train) == third.splits["train"].num_examples
    shown = api_inspect(out)
    last = third.generations[-1]
    assert f"generations: 3 (convert --append); the last, 2, on {last.created}: {last.inputs} inputs" in shown
    # TFDS: builder_from_directory names the reader that merges one template per generation.
    tfds = pytest.importorskip("tensorflow_datasets")
    from img2tfrecord.readers.tfds_builder import tfds_builder
    from img2tfrecord.schemas.tfds_layout import NotATfdsDatasetError

    with pytest.raises(NotATfdsDatasetError, match=r"tfds_builder\(path\)"):
        tfds.builder_from_directory(out)
    builder = tfds_builder(out)
    expected = records_by_relpath(out)
    for name in third.splits:
        found = {
            example["image"]["filename"].numpy().decode(): int(example["image"]["class"]["label"])
            for example in builder.as_dataset(split=name)
        }
        assert found == {relpath: label for relpath, (label, _) in expected[name].items()}
    assert builder.info.splits["train"].num_examples == third.splits["train"].num_examples
    assert len(list(builder.as_dataset(split="train[:2]"))) == 2


def api_inspect(out: str) -> str:
    proc = convert_cli("inspect", out)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def convert_cli(*args):
    from helpers.cli import run_in_process

    return run_in_process(*args)


@pytest.mark.e2e
def test_nothing_new_exits_0_and_changes_no_byte(three_generations):
    src, out, _, docs, _ = three_generations
    before = _bytes_and_times(out)
    # A process of its own: what it loaded is the point (a nightly check of nothing new loads no Beam).
    loaded = "import sys; from img2tfrecord.cli import main; code = main(sys.argv[1:]); "
    loaded += "print('loaded', [m for m in ('apache_beam', 'tensorflow') if m in sys.modules]); sys.exit(code)"
    args = ("convert", "--input", src, "--output", out, *CLI_OPTIONS, "--append", "--no-analyze")
    proc = subprocess.run([sys.executable, "-c", loaded, *args], capture_output=True, text=True, env=cli_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "nothing new since generation 2" in proc.stderr
    assert "loaded []" in proc.stdout, proc.stdout
    assert _bytes_and_times(out) == before
    plan = api.plan(src, out, append=True, pipeline_options=BEAM, **OPTIONS)
    assert (plan.append.generation, plan.append.new, plan.append.retried, plan.inputs) == (3, 0, 0, 0)
    assert plan.append.unchanged == docs[-1].accounting.inputs and plan.append.refused is None
    # The plan says the run would write nothing, and times it as the run goes: its launch, no Beam graph.
    assert plan.append.nothing_new and "would change nothing" in plan.output.note
    assert plan.time.startup_parts["graph"] == 0 and plan.time.startup_parts["listing"] >= 0


@pytest.mark.e2e
def test_changed_removed_new_classes_and_other_options_are_refused_with_one_line(batches, tmp_path):
    pool, _, _, _ = batches
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    shutil.copytree(pool, src)
    _convert(src, out)
    before = _bytes_and_times(out)

    def refused(*extra: str) -> str:
        proc = convert(src, out, *CLI_OPTIONS, "--append", *extra)
        assert proc.returncode == 2, proc.stderr[-2000:]
        lines = [line for line in proc.stderr.splitlines() if line.startswith("img2tfrecord: error:")]
        assert len(lines) == 1, proc.stderr[-2000:]
        assert _bytes_and_times(out) == before
        return lines[0]

    assert "--seed is 6 here but 5 in the output" in refused("--seed", "6")
    assert "--image-size" in refused("--image-size", "40")

    with open(os.path.join(src, "class0", "img_0000.jpg"), "wb") as f:
        f.write(I.jpeg(30, 30))
    os.remove(os.path.join(src, "class1", "img_0001.jpg"))
    line = refused()
    assert "1 input(s) changed since they were converted (e.g. class0/img_0000.jpg)" in line
    assert "1 converted input(s) removed (e.g. class1/img_0001.jpg)" in line
    listed = line.rsplit("the list is in ", 1)[1].rstrip(")")
    with open(listed) as f:
        rows = [json.loads(x) for x in f]
    assert sorted((r["change"], r["relpath"]) for r in rows) == [
        ("changed", "class0/img_0000.jpg"),
        ("removed", "class1/img_0001.jpg"),
    ]
    assert rows[0]["now"]["size"] == os.path.getsize(os.path.join(src, "class0", "img_0000.jpg"))
    os.remove(listed)
    # --plan lists the same, and says what the run would do, writing nothing.
    plan = api.plan(src, out, append=True, pipeline_options=BEAM, **OPTIONS)
    assert plan.append is not None and plan.append.generation == 1
    assert (plan.append.changed.examples, plan.append.removed.examples) == (
        ["class0/img_0000.jpg"],
        ["class1/img_0001.jpg"],
    )
    assert plan.append.refused is not None and plan.append.refused.endswith("rebuild with --overwrite")
    assert plan.inputs == 0 and "--append" in plan.output.note and not plan.append.nothing_new
    assert _bytes_and_times(out) == before


@pytest.mark.e2e
def test_an_append_started_from_another_folder_names_the_same_input(batches, tmp_path, monkeypatch):
    pool, _, second, _ = batches
    data, held, out = tmp_path / "data", str(tmp_path / "held"), str(tmp_path / "out")
    src = str(data / "in")
    shutil.copytree(pool, src)
    _move(src, held, second)
    monkeypatch.chdir(data)
    assert _convert("in", out).input == src  # recorded absolute: the same files from any folder
    _move(held, src, second)
    monkeypatch.chdir(tmp_path)  # a scheduled job's own working folder
    doc = _convert("data/in", out, append=True)
    assert [g.inputs for g in doc.generations][1:] == [len(second)]
    # An output that recorded its input as given names the folder to run from.
    recorded = manifest_to_edit(out)
    recorded["input"] = "in"
    write_manifest_doc(out, recorded)
    with pytest.raises(UsageError, match="from in, relative to the folder that run started in, not data/in"):
        _convert("data/in", out, append=True)
    monkeypatch.chdir(data)
    assert len(_convert("in", out, append=True).generations) == 2  # nothing new from there


def test_a_run_named_from_another_folder_is_the_same_run(batches, tmp_path, monkeypatch):
    """Its fingerprint names the staging folder ``--resume`` finishes: a relative --input from elsewhere finds it."""
    from img2tfrecord.pipeline.kinds import plan_input

    pool = batches[0]
    out = str(tmp_path / "out")

    def fingerprint(folder: str, given: str) -> str:
        monkeypatch.chdir(folder)
        options = {k: v for k, v in OPTIONS.items() if k != "splits"}
        config = api.config_of(given, out, options)
        return plan_input(config)[1].fingerprint(config)

    parent = os.path.dirname(pool)
    assert fingerprint(parent, "pool") == fingerprint(
        os.path.dirname(parent), os.path.join(os.path.basename(parent), "pool")
    )
    assert fingerprint(parent, "pool") == fingerprint(str(tmp_path), pool)


@pytest.mark.e2e
def test_new_classes_are_refused_then_added_with_the_next_ids(batches, tmp_path):
    pool, _, _, _ = batches
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    shutil.copytree(pool, src)
    first = _convert(src, out)
    for name in ("aardvark", "zebra"):  # sorts before and after the existing classes
        os.makedirs(os.path.join(src, name))
        for i in range(3):
            with open(os.path.join(src, name, f"{i}.jpg"), "wb") as f:
                f.write(I.jpeg(40, 30))
    with pytest.raises(UsageError, match=r"2 new class folder\(s\) \('aardvark', 'zebra'\).*--allow-new-classes"):
        _convert(src, out, append=True)
    doc = _convert(src, out, append=True, allow_new_classes=True)
    assert doc.labels == first.labels + ("aardvark", "zebra")
    with open(os.path.join(out, output_files.LABELS_FILE)) as f:
        assert f.read().split() == list(doc.labels)
    for rows in records_by_relpath(out).values():
        for relpath, (label, name) in rows.items():
            assert doc.labels[label] == name == relpath.split("/")[0]
    assert verify(out).ok


@pytest.mark.e2e
def test_rejections_are_tried_again_when_transient_changed_or_asked_for(batches, tmp_path):
    pool, _, _, _ = batches
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    shutil.copytree(pool, src)
    first = _convert(src, out)
    assert first.accounting.rejected == 3
    # A permanent rejection is not tried again by itself.
    proc = convert(src, out, *CLI_OPTIONS, "--append")
    assert proc.returncode == 0 and "nothing new since generation 0" in proc.stderr, proc.stderr[-2000:]
    # A rejected file replaced by a good one is converted again.
    with open(os.path.join(src, "class0", "broken_0.jpg"), "wb") as f:
        f.write(I.jpeg(44, 36))
    second = _convert(src, out, append=True)
    assert second.generations[-1].inputs == 1 and second.generations[-1].written == 1
    assert "class0/broken_0.jpg" in {r for rows in records_by_relpath(out).values() for r in rows}
    # --retry-rejected tries every earlier rejection again: still truncated, rejected again.
    third = _convert(src, out, append=True, retry_rejected=True)
    assert third.generations[-1].inputs == 2 and third.generations[-1].rejected == 2
    with open(os.path.join(out, output_files.errors_file(2))) as f:
        assert sorted(json.loads(x)["relpath"] for x in f) == ["class1/broken_0.jpg", "class2/broken_0.jpg"]
    assert third.accounting.inputs == third.accounting.written + third.accounting.rejected
    report = verify(out)
    assert report.ok, report.text()


@pytest.mark.e2e
def test_an_append_into_an_empty_output_converts_everything_and_its_flags_need_append(batches, tmp_path):
    pool, _, _, _ = batches
    first = _convert(pool, str(tmp_path / "first"), append=True)  # a nightly job's first night
    plain = _convert(pool, str(tmp_path / "plain"))
    assert first.splits == plain.splits and [g.number for g in first.generations] == [0]
    with pytest.raises(UsageError, match="--allow-new-classes applies to --append"):
        _convert(pool, str(tmp_path / "x"), allow_new_classes=True)
    with pytest.raises(UsageError, match="--append adds to a finished output, --overwrite replaces it"):
        _convert(pool, str(tmp_path / "x"), append=True, overwrite=True)


@pytest.mark.e2e
# The phases where an append differs from a first run (its generation committed, then merged); every phase of a
# run: test_fault_matrix.
@pytest.mark.parametrize("phase", ["committing", "finalizing"])
def test_a_killed_append_leaves_the_output_readable_and_resume_finishes_it(batches, tmp_path, phase):
    pool, _, second, _ = batches
    src, held = str(tmp_path / "in"), str(tmp_path / "held")
    shutil.copytree(pool, src)
    _move(src, held, second)
    out, reference = str(tmp_path / "out"), str(tmp_path / "reference")
    _convert(src, out, image_size=48, num_shards=4)
    shutil.copytree(out, reference)
    _move(held, src, second)
    args = ("--splits", "train=0.7,validation=0.3", "--seed", "5", "--image-size", "48", "--num-shards", "4")
    args += ("--no-analyze", "--processes", "1")
    marker = str(tmp_path / "paused")
    env = cli_env({faults.ENV: f"pause:{phase}", faults.MARKER_ENV: marker})
    command = ("convert", "--input", src, "--output", out, *args, "--append")
    assert kill_when(command, lambda: os.path.exists(marker), f"paused at {phase}", env=env) == -signal.SIGKILL
    report = verify(out)  # the last published generation reads and verifies, whatever the kill left
    assert report.ok, report.text()
    assert os.path.exists(os.path.join(out, output_files.SUCCESS_FILE))
    resumed = convert(src, out, *args, "--append", "--resume", runner=())
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    _convert(src, reference, image_size=48, num_shards=4, append=True)
    assert records_by_relpath(out) == records_by_relpath(reference)
    assert not [n for n in os.listdir(out) if n.startswith(output_files.TEMP_PREFIXES)]
    assert verify(out).ok


# -- the parts, without a pipeline ---------------------------------------------------------


def _entry(relpath: str, size: int = 10, mtime: float = 1.0) -> LedgerEntry:
    return LedgerEntry(relpath, size, mtime)


def test_compare_sorts_a_listing_against_every_generation():
    recorded = appends.outcomes(
        [
            appends.GenerationInputs(
                0,
                (_entry("a"), _entry("b"), _entry("c"), _entry("gone"), _entry("bad"), _entry("flaky")),
                {"bad": "corrupt", "flaky": "not_found"},
            ),
            appends.GenerationInputs(1, (_entry("flaky"),), {}),  # tried again and written by the next generation
            appends.GenerationInputs(2, (_entry("slow"),), {"slow": "decode_timeout"}),
        ]
    )
    listed = [_entry("a"), _entry("b", size=11), _entry("c", mtime=2.0), _entry("bad"), _entry("flaky")]
    listed += [_entry("slow"), _entry("new")]
    changes = appends.compare(listed, recorded)
    assert [e.relpath for e in changes.new] == ["new"]
    assert [e.relpath for e in changes.retried] == ["slow"]
    assert [(a.relpath, b.size, b.mtime) for a, b in changes.changed] == [("b", 11, 1.0), ("c", 10, 2.0)]
    assert [e.relpath for e in changes.removed] == ["gone"]
    assert changes.unchanged == 3  # a, bad (a permanent rejection), flaky (written in generation 1)
    assert [e.relpath for e in changes.to_convert] == ["new", "slow"]
    again = appends.compare(listed, recorded, retry_rejected=True)
    assert [e.relpath for e in again.retried] == ["bad", "slow"]


def test_the_rejections_an_append_tries_again_or_resolves_are_counted_per_reason():
    """What the next generation's outcomes replace in the output's accounting (``Generation.retried``): the
    transient rejections it tries again, and folders that could not be listed and now are."""
    recorded = appends.outcomes(
        [
            appends.GenerationInputs(
                0,
                (_entry("a"), _entry("locked/"), _entry("shut/"), _entry("gone"), _entry("bad")),
                {"locked/": "unlistable", "shut/": "unlistable", "gone": "not_found", "bad": "corrupt"},
            ),
        ]
    )
    listed = [_entry("a"), _entry("shut/"), _entry("gone"), _entry("bad"), _entry("locked/1.jpg")]
    changes = appends.compare(listed, recorded)
    assert [e.relpath for e in changes.retried] == ["gone", "shut/"]  # still missing, still unlistable: again
    assert [e.relpath for e in changes.resolved] == ["locked/"]  # listed now: its files are new
    assert [e.relpath for e in changes.new] == ["locked/1.jpg"] and not changes.removed
    assert changes.retried_reasons == {"not_found": 1, "unlistable": 2}


def test_a_ledger_is_the_same_bytes_for_the_same_inputs_and_reads_back():
    entries = [_entry("b/\udcff.jpg", 3, 1.5), _entry("a/1.jpg", 2, 1795762503.1327336)]
    data = ledger_bytes(entries)
    assert data == ledger_bytes(list(reversed(entries)))
    assert parse_ledger(data, "x") == sorted(entries)
    with pytest.raises(ValueError, match="x: line 1 is not a ledger entry"):
        import gzip

        parse_ledger(gzip.compress(b'{"relpath": 1}\n'), "x")


@pytest.mark.e2e
def test_generation_shard_names_parse_and_a_manifest_with_generations_reads_back(three_generations):
    assert output_files.parse_shard_file_name("train-g00002-00001-of-00003.tfrecord") == {
        "split": "train",
        "generation": 2,
        "index": 1,
        "count": 3,
    }
    assert output_files.parse_shard_file_name("train-00001-of-00003.tfrecord")["generation"] == 0
    assert output_files.is_output_file("errors-g00002.jsonl") and output_files.is_output_file("ledger")
    _, out, _, _, _ = three_generations
    with open(os.path.join(out, output_files.MANIFEST_FILE)) as f:
        text = f.read()
    doc = dataset_json.loads(text)
    assert dataset_json.dumps(doc) == text
    assert doc.error_files == ["errors.jsonl", "errors-g00001.jsonl", "errors-g00002.jsonl"]
    assert isinstance(doc.generations[1], Generation) and doc.generations[1].ledger == output_files.ledger_file(1)
    assert json.loads(text)["generations"][2]["generation"] == 2


@pytest.mark.e2e
def test_an_append_on_cloud_storage_writes_the_bytes_of_a_local_append(gcs, batches, tmp_path):
    from apache_beam.io.filesystems import FileSystems

    from img2tfrecord.readers import records

    def stamps(output: str) -> dict:
        found = FileSystems.match([output + "/**"])[0].metadata_list
        return {m.path: (m.size_in_bytes, m.last_updated_in_seconds) for m in found}

    pool, _, second, _ = batches
    first_batch, second_batch = str(tmp_path / "first"), str(tmp_path / "second")
    shutil.copytree(pool, first_batch)
    _move(first_batch, second_batch, second)
    local_in, local_out = str(tmp_path / "in"), str(tmp_path / "out")
    shutil.copytree(first_batch, local_in)
    remote_in, remote_out = gcs.url("append", "in"), gcs.url("append", "out")
    upload_tree(first_batch, remote_in)
    _convert(local_in, local_out)
    _convert(remote_in, remote_out)
    shutil.copytree(second_batch, local_in, dirs_exist_ok=True)
    upload_tree(second_batch, remote_in)
    local_doc = _convert(local_in, local_out, append=True)
    remote_doc = _convert(remote_in, remote_out, append=True)
    assert [g.inputs for g in remote_doc.generations] == [g.inputs for g in local_doc.generations]
    assert shard_digests(remote_out) == shard_digests(local_out) and len(shard_digests(local_out)) > 4
    assert records.read_manifest(remote_out).splits == local_doc.splits
    before = stamps(remote_out)
    again = _convert(remote_in, remote_out, append=True)  # nothing new: no object written
    assert again.generations == remote_doc.generations
    assert stamps(remote_out) == before
    # A converted input removed on both: --accept-changes finds and withdraws the same record.
    gone = "class0/img_0000.jpg"
    os.remove(os.path.join(local_in, gone))
    FileSystems.delete([f"{remote_in}/{gone}"])
    local_doc = _convert(local_in, local_out, append=True, accept_changes=True)
    remote_doc = _convert(remote_in, remote_out, append=True, accept_changes=True)
    assert [w.relpath for w in local_doc.generations[-1].withdrawn] == [gone]
    assert remote_doc.generations[-1].withdrawn == local_doc.generations[-1].withdrawn
    assert records.read_manifest(remote_out).splits == local_doc.splits
    assert [e[keys.FILENAME] for e in datasource.iter_split(remote_out, "train", decode=False)] == [
        e[keys.FILENAME] for e in datasource.iter_split(local_out, "train", decode=False)
    ]


def _finished_and_one_new_file(pool: str, tmp_path) -> tuple:
    """``(input, output, the output's files)``: a finished output of a copy of ``pool``, then one new input."""
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    shutil.copytree(pool, src)
    _convert(src, out)
    shutil.copy(os.path.join(src, "class0", "img_0000.jpg"), os.path.join(src, "class0", "new.jpg"))
    return src, out, _bytes_and_times(out)


@pytest.mark.e2e
def test_an_append_into_an_output_another_run_holds_is_refused_and_changes_nothing(batches, tmp_path):
    from img2tfrecord.pipeline.lock import lock_output
    from img2tfrecord.pipeline.runner import pipeline_options

    src, out, before = _finished_and_one_new_file(batches[0], tmp_path)
    lock = lock_output(out, pipeline_options(BEAM))
    lock.acquire(take_over_stale=False)  # another run writing the output
    try:
        with pytest.raises(UsageError, match="another run"):
            _convert(src, out, append=True)
        after = _bytes_and_times(out)
    finally:
        lock.release()
    assert {k: v for k, v in after.items() if k != output_files.LOCK_FILE} == before


@pytest.mark.e2e
def test_an_append_builds_and_translates_as_a_dataflow_job_without_touching_the_output(batches, tmp_path):
    src, out, before = _finished_and_one_new_file(batches[0], tmp_path)
    assert api.convert(src, out, append=True, pipeline_options=list(DATAFLOW_DRY_RUN), **OPTIONS) is None
    assert _bytes_and_times(out) == before


@pytest.mark.e2e
def test_an_input_gone_while_the_run_converted_is_tried_again_by_the_next_append(batches, tmp_path):
    pool, _, _, _ = batches
    src, out, kept = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "kept.jpg")
    shutil.copytree(pool, src)
    gone = os.path.join(src, "class2", "img_0003.jpg")
    marker = str(tmp_path / "paused")
    args = ("convert", "--input", src, "--output", out, *CLI_OPTIONS, "--no-analyze", "--processes", "1")
    with paused_run(args, marker, "listing") as proc:  # listed, not converted yet
        shutil.move(gone, kept)
        os.remove(marker)  # the run goes on
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
    with open(os.path.join(out, output_files.ERRORS_FILE)) as f:
        rows = [json.loads(line) for line in f]
    assert ("class2/img_0003.jpg", "not_found") in {(r["relpath"], r["reason"]) for r in rows}
    shutil.move(kept, gone)  # back, as a listing race leaves it
    doc = _convert(src, out, append=True)
    last = doc.generations[-1]
    assert (last.number, last.inputs, last.written) == (1, 1, 1)
    assert "class2/img_0003.jpg" in {r for rows in records_by_relpath(out).values() for r in rows}
    assert verify(out).ok


@pytest.mark.e2e
def test_two_appends_at_once_write_one_generation_and_the_second_is_refused_in_one_line(batches, tmp_path):
    src, out, _ = _finished_and_one_new_file(batches[0], tmp_path)
    args = ("convert", "--input", src, "--output", out, *CLI_OPTIONS, "--no-analyze", "--processes", "1", "--append")
    marker = str(tmp_path / "paused")
    with paused_run(args, marker, "committing") as first:  # holds the output, its first split committed
        second = run_cli(*args)
        assert second.returncode == 2, second.stderr[-3000:]
        said = [line for line in second.stderr.splitlines() if line.startswith("img2tfrecord:")]
        assert len(said) == 1 and "being written by another run" in said[0] and "Traceback" not in second.stderr
        os.remove(marker)
        _, err = first.communicate(timeout=120)
        assert first.returncode == 0, err[-3000:]
    doc = read_manifest(out)
    assert [(g.number, g.inputs, g.written) for g in doc.generations][1:] == [(1, 1, 1)]
    assert sum("class0/new.jpg" in rows for rows in records_by_relpath(out).values()) == 1
    assert verify(out).ok
    again = run_cli(*args)  # the second run, once the first is done: nothing is left to convert
    assert again.returncode == 0 and "nothing new since generation 1" in again.stderr, again.stderr[-2000:]


@pytest.mark.e2e
def test_an_output_without_generations_is_refused_with_the_rebuild_it_needs(three_generations, tmp_path):
    src, out, _, _, _ = three_generations
    old = str(tmp_path / "old")
    shutil.copytree(out, old)
    doc = manifest_to_edit(old)
    doc.pop("generations")
    write_manifest_doc(old, doc)
    with pytest.raises(UsageError, match="has no input ledger .* convert it again with --overwrite once, then append"):
        _convert(src, old, append=True)
