"""The shard step: convert one shard's items in the seeded order and stream each record into the shard's file.

A finished shard leaves its ``ShardResult`` (counts, size, sha256, temp
paths of the shard and its index) as a done file in the run folder; a
``--resume``d run replays it instead of converting the shard again.
"""

from __future__ import annotations

import collections
import hashlib
import logging
from typing import Any, Deque, Dict, Iterator, List, Optional, Protocol, Tuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.utils.windowed_value import WindowedValue

from img2tfrecord import tfrecord_codec
from img2tfrecord.conversion.converter import Converter
from img2tfrecord.conversion.placement import writing_order
from img2tfrecord.conversion.pool import ConversionPool, take_started
from img2tfrecord.model import ERRORS, DetectionRecord, Record, ShardItem, ShardResult
from img2tfrecord.schemas import output_files
from img2tfrecord.transforms import done_files
from img2tfrecord.transforms.beam_tfrecord_sink import ShardSink, ShardSinks
from img2tfrecord.transforms.counters import NAMESPACE, SHARDS_RESUMED, OutputCounter

ANALYSIS = "analysis"  # the tag of the analysed split's small rows (transforms/analyze.py)


class WriteFaults(Protocol):
    """Faults injected into the shard step as it writes and commits (a test's ``faults.FaultPlan``)."""

    def drops(self, record: Any) -> bool:
        """True to leave ``record`` out, as a lost write would."""
        ...

    def record_written(self) -> None:
        """After each record reaches its shard file."""
        ...

    def shard_finished(self) -> None:
        """After a shard's file is closed and its done file written."""
        ...

    def split_committed(self) -> None:
        """After a split's shards have their final names."""
        ...


class _NoFaults:
    """A run's own plan: nothing dropped, nothing delayed."""

    def drops(self, record: Any) -> bool:
        return False

    def record_written(self) -> None:
        pass

    def shard_finished(self) -> None:
        pass

    def split_committed(self) -> None:
        pass


NO_FAULTS: WriteFaults = _NoFaults()


class _ShardJob:
    """One shard being written: outputs arrive in the shard's order and go straight to the file."""

    def __init__(
        self,
        sink: ShardSink,
        run_dir: str,
        shard: int,
        items: List[ShardItem],
        window,
        timestamp,
        count: OutputCounter,
        faults: WriteFaults,
    ):
        self.sink = sink
        self.run_dir = run_dir
        self.shard = shard
        self.remaining = len(items)
        self.window = window
        self.timestamp = timestamp
        self._file = sink.open_shard(shard)
        self._count = count
        self._faults = faults
        self._bytes_counted = 0
        self._offsets: List[tfrecord_codec.IndexEntry] = []  # the index file's lines (formats that get one)
        self._classes: Dict[Optional[str], int] = collections.Counter()
        self._boxes: Dict[Optional[str], int] = collections.Counter()
        self._dropped: Dict[str, int] = collections.Counter()
        self.errors: List[Dict[str, str]] = []
        self.analysis: List[bytes] = []

    def add(self, tag: Optional[str], value) -> None:
        self.remaining -= 1
        if tag == ERRORS:
            self.errors.append(value)
            return
        record: Record = value  # or a DetectionRecord: the same fields, plus its box counts
        if record.split != self.sink.split:
            raise RuntimeError(f"a record of split {record.split!r} reached a shard of {self.sink.split!r}")
        if self._faults.drops(record):
            return
        entry = self._file.write(record.example)
        self._count_bytes()
        self._faults.record_written()
        if entry is not None:
            self._offsets.append(entry)
        self._classes[record.class_name] += 1
        if isinstance(value, DetectionRecord):
            for class_name, n in value.boxes:
                self._boxes[class_name] += n
            for reason, n in value.dropped_boxes:
                self._dropped[reason] += n
        if record.analysis is not None:
            self.analysis.append(record.analysis)

    def _count_bytes(self) -> None:
        """The bytes that reached the file since the last call (gzip: compressed, as they come)."""
        written = self._file.bytes_written
        self._count.wrote_bytes(written - self._bytes_counted)
        self._bytes_counted = written

    def finish(self) -> ShardResult:
        written = self._file.close()
        self._count_bytes()
        index_path, index_sha256 = None, ""
        if self.sink.indexed:
            index_path = done_files.index_temp_path(self.run_dir, self.sink.split, self.shard)
            index = tfrecord_codec.index_text(self._offsets).encode("ascii")
            done_files.write_whole(index_path, index)
            index_sha256 = hashlib.sha256(index).hexdigest()
        result = ShardResult(
            split=self.sink.split,
            shard=self.shard,
            temp_path=written.temp_path,
            num_records=sum(self._classes.values()),
            num_bytes=written.num_bytes,
            sha256=written.sha256,
            class_counts=tuple(sorted(self._classes.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))),
            index_path=index_path,
            box_counts=tuple(sorted(self._boxes.items(), key=lambda kv: kv[0] or "")),
            dropped_boxes=tuple(sorted(self._dropped.items())),
            index_sha256=index_sha256,
        )
        done = done_files.done_path(self.run_dir, self.sink.split, self.shard)
        done_files.write_whole(done, done_files.done_json(result, self.errors, self.analysis))
        self._faults.shard_finished()
        return result


class WriteShardsFn(beam.DoFn):
    """``((split, shard), items)`` -> ShardResult; error rows on ``errors``; analysis rows on ``analysis``.

    Side inputs: ``label_names`` (the sorted class list) and ``num_shards`` (each split's shard count).

    Items are converted in the seeded order and each record is written as it
    comes out of the converter. With ``processes`` > 1 the conversion runs in
    a local pool (``conversion/pool.py``) that keeps converting the next
    shards' items while earlier shards finish; with 1, in this worker. With
    ``resume``, a shard whose done file exists is replayed, not converted.
    ``faults`` is a test's fault plan; a run has none.
    """

    def __init__(
        self,
        converter: Converter[Any],
        sinks: ShardSinks,
        run_dir: str,
        processes: int = 1,
        batch_size: int = 32,
        resume: bool = False,
        faults: Optional[WriteFaults] = None,
    ):
        if processes < 1:
            raise ValueError(f"processes must be at least 1, got {processes}")
        self._converter = converter
        self._sinks = sinks
        self._run_dir = run_dir
        self._processes = processes
        self._batch_size = batch_size
        self._resume = resume
        self._faults = faults or NO_FAULTS
        self._count = OutputCounter()
        self._pool: Optional[ConversionPool] = None
        self._jobs: Deque[_ShardJob] = collections.deque()
        self._split_sinks: Dict[Tuple[str, int], ShardSink] = {}

    def setup(self):
        if self._processes > 1:  # first: its processes start while the staging folder is made
            self._pool = take_started(self._converter, self._processes, self._batch_size) or ConversionPool(
                self._converter, self._processes, self._batch_size
            )
        try:
            self._sinks.initialize()
        except BaseException:
            self.teardown()  # a DoFn whose setup raised may never be torn down by the runner
            raise

    def _sink(self, split: str, num_shards: int, label_names: List[str]) -> ShardSink:
        key = (split, num_shards)
        if key not in self._split_sinks:
            self._split_sinks[key] = self._sinks.sink(split, num_shards, label_names)
        return self._split_sinks[key]

    def teardown(self):
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def start_bundle(self):
        self._jobs = collections.deque()

    def process(self, element, window=beam.DoFn.WindowParam, timestamp=beam.DoFn.TimestampParam, **side_inputs):
        label_names: List[str] = side_inputs["label_names"]
        (split, shard), grouped = element
        sink = self._sink(split, side_inputs["num_shards"][split], label_names)
        items = writing_order(i for i in grouped if i is not None)
        if self._resume:
            replayed = self._replay(sink, shard)
            if replayed is not None:
                yield from self._emit(*replayed, window=window, timestamp=timestamp)
                return
        job = _ShardJob(sink, self._run_dir, shard, items, window, timestamp, self._count, self._faults)
        if self._pool is None:
            for start in range(0, len(items), self._batch_size):
                chunk = [i.item for i in items[start : start + self._batch_size]]
                for tag, value in self._converter.convert_all(chunk, label_names):
                    self._count(tag, value)
                    job.add(tag, value)
            yield from self._emit(job.finish(), job.errors, job.analysis, window=window, timestamp=timestamp)
            return
        self._jobs.append(job)
        self._pool.put([i.item for i in items], label_names)
        yield from self._collect(self._pool, drain=False)

    def finish_bundle(self):
        if self._pool is not None:
            yield from self._collect(self._pool, drain=True)

    def _collect(self, pool: ConversionPool, drain: bool) -> Iterator[Any]:
        yield from self._finish_ready_jobs()
        for _, (tag, value) in pool.outputs(drain):
            job = self._jobs[0]
            self._count(tag, value)
            job.add(tag, value)
            yield from self._finish_ready_jobs()
        if drain and self._jobs:
            raise RuntimeError(f"{len(self._jobs)} shard(s) still open after every output was read")

    def _finish_ready_jobs(self) -> Iterator[Any]:
        while self._jobs and self._jobs[0].remaining == 0:
            job = self._jobs.popleft()
            yield from self._emit(job.finish(), job.errors, job.analysis, window=job.window, timestamp=job.timestamp)

    def _replay(self, sink: ShardSink, shard: int):
        """The done file's ``(result, errors, analysis)`` when the shard it records is intact; None (what is
        left of the shard removed) when it must be converted again: a kept shard is never trusted unchecked."""
        path = done_files.done_path(self._run_dir, sink.split, shard)
        if not FileSystems.exists(path):
            return None
        final = FileSystems.join(sink.output_dir, sink.final_name(shard))
        try:
            result, errors, analysis = done_files.parse_done(done_files.read_whole(path))
        except (ValueError, KeyError, TypeError) as e:
            return self._convert_again(path, [], f"its done file cannot be read ({type(e).__name__}: {e})")
        kept = [p for p in (result.temp_path, final) if FileSystems.exists(p)]
        if not kept:
            return None  # the done file outlived its shard: write the shard again
        damage = done_files.kept_shard_damage(kept[0], result)
        if damage is None and result.index_path:
            final_index = FileSystems.join(sink.output_dir, output_files.index_file(sink.final_name(shard)))
            index = [p for p in (result.index_path, final_index) if FileSystems.exists(p)]
            damage = done_files.index_damage(index[0], result) if index else "its index file is missing"
            kept += index
        if damage is not None:
            return self._convert_again(path, kept, f"{kept[0]}: {damage}")
        beam.metrics.Metrics.counter(NAMESPACE, SHARDS_RESUMED).inc()
        self._count.records(result.num_records)  # done, as far as the run's progress is concerned
        self._count.wrote_bytes(result.num_bytes)
        for row in errors:
            self._count(ERRORS, row)
        return result, errors, analysis

    @staticmethod
    def _convert_again(done: str, kept: List[str], why: str) -> None:
        """Forget a finished shard that failed its check (its done file and files removed): it is converted
        again from its work items, so that ``--resume`` converges whatever happened inside staging."""
        logging.warning("a finished shard kept for --resume failed its check, converting it again: %s", why)
        FileSystems.delete([done, *kept])
        return None

    def _emit(self, result: ShardResult, errors, analysis, window, timestamp) -> Iterator[Any]:
        def windowed(value):
            return WindowedValue(value, timestamp, (window,))

        for row in errors:
            yield beam.pvalue.TaggedOutput(ERRORS, windowed(row))
        for row in analysis:
            yield beam.pvalue.TaggedOutput(ANALYSIS, windowed(row))
        yield windowed(result)
