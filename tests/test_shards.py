"""Work items grouped by shard and each shard streamed to its file (transforms/write_shards.py, conversion/pool.py)."""

from __future__ import annotations

import collections
import hashlib
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import apache_beam as beam
import images as I
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from conftest import ROOT
from crashing import CountingConverter, CrashingConverter, FlakyStorageConverter
from helpers.datasets import write_tree

from img2tfrecord.conversion.converter import ImageConverter
from img2tfrecord.conversion.pool import CRASH_MESSAGE, ConversionPool
from img2tfrecord.conversion.seeded_hashes import assign_shard, shuffle_key
from img2tfrecord.images.options import ImageOptions
from img2tfrecord.model import ERRORS, ShardResult, WorkItem
from img2tfrecord.readers import records as R
from img2tfrecord.schemas import output_files
from img2tfrecord.tfrecord_codec import framed_length
from img2tfrecord.transforms.assign_shards import AssignShardsFn
from img2tfrecord.transforms.beam_tfrecord_sink import ShardSinks
from img2tfrecord.transforms.commit_split import CommitSplitFn
from img2tfrecord.transforms.done_files import done_path, parse_done
from img2tfrecord.transforms.shard_writer import ANALYSIS, WriteShardsFn
from img2tfrecord.transforms.write_shards import WriteShards

SPLITS = (("train", 0.5), ("test", 0.5))
LABELS = ["cat", "dog"]
OPTIONS = ImageOptions(size=(16, 16), format="jpeg")
SEED = 3
NUM_SHARDS = {"train": 3, "test": 2}


def _sources(root, good_per_class=10, extra=None):
    files = {f"{c}/img_{i:02d}.jpg": I.jpeg(20 + i, 12 + i) for c in LABELS for i in range(good_per_class)}
    files["cat/broken.jpg"] = I.jpeg(20, 20)[:40]  # truncated: an error row
    files["dog/notes.txt"] = b"not an image"
    files["stray.jpg"] = I.jpeg(20, 20)  # outside any class folder: rejected before conversion
    files.update(extra or {})
    write_tree(str(root), files)
    return [WorkItem(os.path.join(str(root), *rel.split("/")), rel, len(data)) for rel, data in sorted(files.items())]


def _expected_shards(sources, converter, num_shards=NUM_SHARDS):
    """{(split, shard): [serialized record, ...] in the shard's order}, and the error rows, without Beam."""
    shards = {(split, i): [] for split, n in num_shards.items() for i in range(n)}
    errors = []
    for source in sorted(sources, key=lambda s: (shuffle_key(s.relpath, SEED), s.relpath)):
        tag, value = converter(source, LABELS)
        if tag == ERRORS:
            errors.append(value)
            continue
        shards[(value.split, assign_shard(source.relpath, SEED, num_shards[value.split]))].append(value.example)
    return shards, errors


def _write(out, sources, converter, processes, compression="none", resume=False, batch_size=3, faults=None):
    """Run WriteShards on a real in-memory pipeline; -> the run folder."""
    out = str(out)
    run = os.path.join(out, output_files.run_folder("0123456789abcdef"))
    sinks = ShardSinks(out, compression, os.path.join(run, output_files.RUN_SHARDS_DIR))
    options = PipelineOptions(["--runner=FnApiRunner", "--direct_running_mode=in_memory"])
    with beam.Pipeline(options=options) as p:
        labels = p | "Labels" >> beam.Create([LABELS])
        written = (
            p
            | "Sources" >> beam.Create(sources)
            | WriteShards(
                converter,
                sinks,
                run,
                processes,
                beam.pvalue.AsSingleton(labels),
                NUM_SHARDS,
                batch_size=batch_size,
                resume=resume,
                faults=faults,
            )
        )
        expected_shards, expected_errors = _expected_shards(sources, ImageConverter(OPTIONS, "class", SPLITS, SEED))
        listed = written["shards"] | beam.Map(lambda c: (c.split, c.file, c.num_records))
        assert_that(
            listed,
            equal_to(
                [
                    (
                        split,
                        output_files.shard_file_name(split, i, NUM_SHARDS[split])
                        + (".gz" if compression == "gzip" else ""),
                        len(rows),
                    )
                    for (split, i), rows in expected_shards.items()
                ]
            ),
            label="shards",
        )
        assert_that(
            written[ERRORS] | beam.Map(lambda row: row["relpath"]),
            equal_to([r["relpath"] for r in expected_errors]),
            label="errors",
        )
    return run


def _check_files(out, sources, compression="none"):
    expected, _ = _expected_shards(sources, ImageConverter(OPTIONS, "class", SPLITS, SEED))
    for (split, i), rows in expected.items():
        name = output_files.shard_file_name(split, i, NUM_SHARDS[split], compression)
        got = [r.data for r in R.scan_records(os.path.join(str(out), name), compression)]
        assert got == rows, f"{name}: records differ from the converter's, in the seeded order"
        if compression == "none":
            with open(os.path.join(str(out), output_files.index_file(name))) as f:
                lines = [tuple(map(int, line.split())) for line in f]
            offsets = [(r.offset, framed_length(len(r.data))) for r in R.scan_records(os.path.join(str(out), name))]
            assert lines == offsets
    leftovers = [n for n in os.listdir(str(out)) if n.startswith("beam-temp-")]
    assert not leftovers


def _digests(out):
    found = {}
    for root, _, files in os.walk(str(out)):
        for name in files:
            if output_files.parse_shard_file_name(name) or name.endswith(output_files.INDEX_SUFFIX):
                with open(os.path.join(root, name), "rb") as f:
                    found[os.path.relpath(os.path.join(root, name), str(out))] = hashlib.sha256(f.read()).hexdigest()
    return found


@pytest.mark.e2e
@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_each_shard_holds_its_items_in_the_seeded_order_on_one_or_two_processes(tmp_path, compression):
    sources = _sources(tmp_path / "in")
    converter = ImageConverter(OPTIONS, "class", SPLITS, SEED)
    _write(tmp_path / "one", sources, converter, 1, compression)
    _write(tmp_path / "two", sources, converter, 2, compression)
    _check_files(tmp_path / "one", sources, compression)
    _check_files(tmp_path / "two", sources, compression)
    assert _digests(tmp_path / "one") == _digests(tmp_path / "two")


@pytest.mark.e2e
def test_a_shard_no_item_hashes_to_is_written_empty(tmp_path):
    sources = _sources(tmp_path / "in", good_per_class=1)  # 2 good images for 5 shards
    _write(tmp_path / "out", sources, ImageConverter(OPTIONS, "class", SPLITS, SEED), 2)
    names = sorted(n for n in os.listdir(tmp_path / "out") if output_files.parse_shard_file_name(n))
    assert len(names) == sum(NUM_SHARDS.values())
    assert any(os.path.getsize(tmp_path / "out" / n) == 0 for n in names)
    _check_files(tmp_path / "out", sources)


@pytest.mark.e2e
def test_every_item_is_converted_once_and_a_finished_shard_leaves_a_done_file(tmp_path):
    sources = _sources(tmp_path / "in")
    log = str(tmp_path / "conversions.log")
    run = _write(tmp_path / "out", sources, CountingConverter(OPTIONS, "class", SPLITS, SEED, log_path=log), 2)
    with open(log) as f:
        counts = collections.Counter(f.read().split())
    assert counts == {s.relpath: 1 for s in sources}  # stray.jpg: rejected by the shard assignment, once
    result, errors, analysis = parse_done(open(done_path(run, "train", 0), "rb").read())
    assert result.split == "train" and result.shard == 0 and analysis == []
    assert result.num_bytes == sum(
        os.path.getsize(tmp_path / "out" / n) for n in [output_files.shard_file_name("train", 0, 3)]
    )


class LoggedFaults:
    """A fault plan that drops the record of one relpath and logs every hook call to ``log_path``, from any process."""

    def __init__(self, drop: str, log_path: str):
        self.drop = drop.encode("utf-8")
        self.log_path = log_path

    def _log(self, event: str) -> None:
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(event + "\n")

    def drops(self, record) -> bool:
        dropped = self.drop in record.example  # the record's filename feature
        if dropped:
            self._log("dropped")
        return dropped

    def record_written(self) -> None:
        self._log("written")

    def shard_finished(self) -> None:
        self._log("finished")

    def split_committed(self) -> None:
        self._log("committed")


@pytest.mark.e2e
@pytest.mark.parametrize("processes", [1, 2])
def test_faults_reach_the_step_only_as_the_plan_it_is_given(tmp_path, processes):
    sources = _sources(tmp_path / "in")
    converter = ImageConverter(OPTIONS, "class", SPLITS, SEED)
    log = str(tmp_path / "faults.log")
    dropped = "dog/img_03.jpg"
    out = tmp_path / "out"
    with pytest.raises(Exception, match="shards"):  # the one shard that lost its record differs from the expected
        _write(out, sources, converter, processes, faults=LoggedFaults(dropped, log))
    with open(log) as f:
        events = collections.Counter(f.read().split())
    expected, _ = _expected_shards(sources, converter)
    assert events == {
        "dropped": 1,
        "written": sum(len(rows) for rows in expected.values()) - 1,
        "finished": sum(NUM_SHARDS.values()),
        "committed": len(NUM_SHARDS),
    }
    kept = [
        r.data
        for name in os.listdir(out)
        if output_files.parse_shard_file_name(name)
        for r in R.scan_records(os.path.join(str(out), name))
    ]
    assert len(kept) == events["written"] and not any(dropped.encode() in data for data in kept)


def test_a_worker_crash_rejects_that_item_and_the_run_goes_on(tmp_path):
    crashing = {"cat/crash_me.jpg", "dog/crash_too.jpg"}
    sources = _sources(tmp_path / "in", extra={name: I.jpeg(20, 20) for name in crashing})
    converter = CrashingConverter(OPTIONS, "class", SPLITS, SEED)
    with ConversionPool(converter, 2, batch_size=4) as pool:
        pool.put(sources, LABELS)
        outputs = list(pool.outputs(drain=True))
    assert [item for item, _ in outputs] == sources  # queue order, whoever finished first
    for source, (tag, value) in outputs:
        if source.relpath in crashing:
            assert (tag, value) == converter.crashed(source, CRASH_MESSAGE)
        else:
            assert (tag, value) == ImageConverter(OPTIONS, "class", SPLITS, SEED)(source, LABELS)


def test_a_pool_a_worker_broke_while_outputs_were_read_is_restarted_for_the_next_batch(tmp_path):
    sources = _sources(tmp_path / "in", extra={"cat/img_05_crash.jpg": I.jpeg(20, 20)})  # the second batch
    converter = CrashingConverter(OPTIONS, "class", SPLITS, SEED)
    with ConversionPool(converter, 2, batch_size=4) as pool:
        pool.put(sources, LABELS)
        outputs = pool.outputs(drain=True)
        got = [next(outputs)]  # the first batch's; the pool breaks before the next batch is submitted
        deadline = time.monotonic() + 60
        while not all(b.future.done() for b in pool._in_flight) and time.monotonic() < deadline:
            time.sleep(0.02)
        got.extend(outputs)
    assert [item for item, _ in got] == sources
    plain = ImageConverter(OPTIONS, "class", SPLITS, SEED)
    crashed = [s for s in sources if "crash" in s.relpath]
    assert [out for _, out in got] == [
        converter.crashed(s, CRASH_MESSAGE) if s in crashed else plain(s, LABELS) for s in sources
    ]


def test_pool_outputs_keep_queue_order_across_several_puts(tmp_path):
    sources = _sources(tmp_path / "in", good_per_class=20)
    converter = ImageConverter(OPTIONS, "class", SPLITS, SEED)
    got = []
    with ConversionPool(converter, 2, batch_size=5) as pool:
        for start in range(0, len(sources), 7):  # like shard groups arriving one by one
            pool.put(sources[start : start + 7], LABELS)
            got.extend(pool.outputs(drain=False))
            assert pool.pending < 5 + 2 * 2 * 5  # bounded: one partial batch queued plus the batches in flight
        got.extend(pool.outputs(drain=True))
    assert [item for item, _ in got] == sources
    assert [out for _, out in got] == [converter(s, LABELS) for s in sources]


def test_pool_starts_its_processes_before_the_first_items():
    """They start up while the caller prepares its first shard, not when that shard's first batch comes."""
    before = set(multiprocessing.active_children())
    with ConversionPool(ImageConverter(OPTIONS, "class", SPLITS, SEED), 2) as pool:
        started = set(multiprocessing.active_children()) - before
        assert len(started) == 2 and pool.pending == 0
    assert not started & set(multiprocessing.active_children())  # closing stops them


def test_a_shard_step_whose_setup_fails_stops_the_processes_it_started(tmp_path):
    """A DoFn whose setup raised may never be torn down by the runner: the step stops its own pool."""

    (tmp_path / "a-file").write_bytes(b"")  # no folder can be made below a file
    sinks = ShardSinks(str(tmp_path / "out"), "none", str(tmp_path / "a-file" / "shards"))
    fn = WriteShardsFn(ImageConverter(OPTIONS, "class", SPLITS, SEED), sinks, str(tmp_path / "run"), processes=2)
    before = set(multiprocessing.active_children())
    with pytest.raises(OSError):
        fn.setup()
    assert not set(multiprocessing.active_children()) - before


@pytest.mark.e2e
def test_a_transient_read_failure_in_a_worker_fails_the_bundle_instead_of_rejecting(tmp_path):
    sources = _sources(tmp_path / "in", good_per_class=2, extra={"cat/flaky.jpg": I.jpeg(20, 20)})
    with pytest.raises(Exception, match="connection reset by peer"):
        _write(tmp_path / "out", sources, FlakyStorageConverter(OPTIONS, "class", SPLITS, SEED), 2)


@pytest.mark.e2e
def test_train_records_carry_small_analysis_rows(tmp_path):
    sources = _sources(tmp_path / "in")
    converter = ImageConverter(OPTIONS, "class", SPLITS, SEED, sums_split="train")
    out = str(tmp_path / "out")
    run = os.path.join(out, output_files.run_folder("feedfacefeedface"))
    sinks = ShardSinks(out, "none", os.path.join(run, "shards"))
    options = PipelineOptions(["--runner=FnApiRunner", "--direct_running_mode=in_memory"])
    with beam.Pipeline(options=options) as p:
        labels = p | "Labels" >> beam.Create([LABELS])
        labels_side = beam.pvalue.AsSingleton(labels)
        written = p | beam.Create(sources) | WriteShards(converter, sinks, run, 2, labels_side, NUM_SHARDS)
        expected = [
            value.analysis
            for tag, value in (converter(s, LABELS) for s in sources)
            if tag is None and value.split == "train"
        ]
        assert all(len(row) < 400 for row in expected)  # no image bytes in them
        assert_that(written[ANALYSIS], equal_to(expected))


def test_a_retried_shard_step_commits_one_copy(tmp_path):
    """The shard step run twice for the same group (a runner retrying a bundle): one file per shard."""
    sources = _sources(tmp_path / "in", good_per_class=4)
    out = str(tmp_path / "out")
    run = os.path.join(out, output_files.run_folder("retryretryretry0"))
    sinks = ShardSinks(out, "none", os.path.join(run, "shards"))
    converter = ImageConverter(OPTIONS, "class", SPLITS, SEED)
    groups = collections.defaultdict(list)
    for s in sources:
        for out_value in AssignShardsFn(converter).process(s, NUM_SHARDS):
            if isinstance(out_value, tuple):
                groups[out_value[0]].append(out_value[1])
    fn = WriteShardsFn(converter, sinks, run, processes=1)
    fn.setup()
    results = collections.defaultdict(list)
    for _attempt in range(2):
        for split, n in NUM_SHARDS.items():
            for shard in range(n):
                for value in fn.process(
                    ((split, shard), groups.get((split, shard), [])),
                    window=GlobalWindow(),
                    timestamp=MIN_TIMESTAMP,
                    label_names=LABELS,
                    num_shards=NUM_SHARDS,
                ):
                    if isinstance(value.value, ShardResult):
                        results[split].append(value.value)
    temp_files = [f for _, _, files in os.walk(os.path.join(run, "shards")) for f in files]
    assert len(temp_files) == 2 * sum(NUM_SHARDS.values())  # both attempts wrote their own temp files
    for split in NUM_SHARDS:
        committed = list(CommitSplitFn(sinks).process((split, results[split]), NUM_SHARDS))
        assert [c.file for c in committed] == [
            output_files.shard_file_name(split, i, NUM_SHARDS[split]) for i in range(NUM_SHARDS[split])
        ]
    names = sorted(n for n in os.listdir(out) if output_files.parse_shard_file_name(n))
    assert len(names) == sum(NUM_SHARDS.values())
    _check_files(out, sources)


def test_a_small_input_converts_in_one_process_a_large_one_in_one_per_core(monkeypatch):
    from img2tfrecord.pipeline import sizing

    monkeypatch.setattr(sizing, "usable_cores", lambda: 4)
    assert sizing.processes_for(0, 0) == 1
    assert sizing.processes_for(999, 10 * 2**20) == 1  # starting a second process would cost more than it saves
    assert sizing.processes_for(1000, 0) == 2
    assert sizing.processes_for(10, 3 * sizing.INPUT_BYTES_PER_PROCESS) == 3  # few inputs, but large ones
    assert sizing.processes_for(24_000, 2.4e9) == 4  # never more than the usable cores


def test_processes_must_be_positive():
    with pytest.raises(ValueError, match="processes must be at least 1"):
        ConversionPool(ImageConverter(OPTIONS, "class", SPLITS, SEED), 0)


_KILLED_PARENT = """
import os, signal
from img2tfrecord.conversion.converter import ImageConverter
from img2tfrecord.images.options import ImageOptions
from img2tfrecord.conversion.pool import ConversionPool
pool = ConversionPool(ImageConverter(ImageOptions(), "class", (("train", 1.0),), 0), 2)
for future in [pool._pool.submit(os.getpid) for _ in range(4)]:
    future.result()  # both workers are up
print(" ".join(str(pid) for pid in pool._pool._processes), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in f)
    except FileNotFoundError:
        return False


def test_workers_exit_when_the_process_that_started_them_is_killed():
    proc = subprocess.run([sys.executable, "-c", _KILLED_PARENT], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    pids = [int(p) for p in proc.stdout.split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 15
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in pids if _alive(pid)], "conversion processes outlived the killed runner"


def test_a_local_run_converts_with_the_pool_started_before_beam_and_leaves_none_open(tmp_path, monkeypatch):
    """The command line's ``convert`` starts its conversion processes while it imports Beam; the shard writer
    takes that pool instead of starting its own, and a run that ends before its writer (here: refused, the
    output is finished already) closes the pool it started. A library caller's run starts none early."""
    from img2tfrecord import api
    from img2tfrecord.conversion import pool

    made = []
    real_init = ConversionPool.__init__

    def counted(self, *args, **kwargs):
        made.append(args[1])
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(ConversionPool, "__init__", counted)
    src = str(tmp_path / "in")
    write_tree(src, {f"c{i % 2}/{i}.jpg": I.jpeg(40, 30) for i in range(12)})
    out = str(tmp_path / "out")
    config = api.config_of(src, out, dict(processes=2, analyze=False, image_size=16))
    doc = api.run_config(config, own_process=True)
    assert doc.accounting.written == 12
    assert made == [2] and not pool._STARTED and not pool._OPEN
    from img2tfrecord.errors import UsageError

    with pytest.raises(UsageError, match="already holds a finished conversion"):  # refused under the lock
        api.run_config(config, own_process=True)
    assert made == [2, 2] and not pool._STARTED and not pool._OPEN
    with pytest.raises(UsageError, match="already holds a finished conversion"):
        api.convert(src, out, processes=2, analyze=False, image_size=16)
    assert made == [2, 2]
