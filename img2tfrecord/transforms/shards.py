"""Group work items by shard, stream each shard's records into its file, commit the files.

    work items -> AssignShards: ((split, shard), ShardItem)     seeded hashes of the relpath
               -> GroupByKey                                     the shuffle: small tuples only
               -> WriteShards: one shard file per group          convert in the seeded order, write as converted
               -> CommitSplit: Beam's finalize_write per split   temp files renamed to their final names

Every shard is written through Beam's TFRecord sink (the ``FileBasedSink``
under ``WriteToTFRecord``): ``open_writer`` with a uid that starts with the
zero-padded shard index, ``write``, ``close``, then ``finalize_write`` over
all of a split's writer results, which numbers the final files in the order
of the sorted temp names. A shard that no item hashes to is still written
(empty), so the count of writer results is the split's shard count.

The sink's temp folder is named after the run's fingerprint
(``manifest.run_folder``), and each finished shard leaves a small done
file there (its counts, digest, error rows and analysis rows), so a
``--resume``d run replays finished shards instead of converting them
again. Encoded images never cross a shuffle: they go from the converter
straight into the file (tar.gz members, which cannot be seeked to, carry
their bytes in the work item).
"""

from __future__ import annotations

import base64
import collections
import hashlib
import json
import uuid
from typing import Any, Deque, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam import coders
from apache_beam.io import tfrecordio
from apache_beam.io.filesystem import CompressedFile, CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.utils.windowed_value import WindowedValue

from img2tfrecord import faults, progress
from img2tfrecord.conversion.converter import Converter
from img2tfrecord.conversion.pool import ConversionPool
from img2tfrecord.conversion.sharding import assign_shard, shuffle_key
from img2tfrecord.model import ERRORS, CommittedShard, DetectionRecord, Record, ShardItem, ShardResult, error_row
from img2tfrecord.schemas import manifest
from img2tfrecord.sources.layout import PlacementError

NAMESPACE = "img2tfrecord"  # Beam metrics namespace of the run's counters
IMAGES_WRITTEN = "images_written"  # its counters: records written (clips with --sequence),
IMAGES_REJECTED = "images_rejected"  # inputs rejected (error rows),
BYTES_WRITTEN = "bytes_written"  # and bytes written to shard files
ANALYSIS = "analysis"  # the tag of the analysed split's small rows (transforms/analyze.py)
RECORD_FRAMING_BYTES = 16  # TFRecord: length (8) + its CRC (4) + data CRC (4)
_DROPPED: List[Record] = []  # faults.drops_records(): the one record left out in this process
_FINISHED: List[int] = []  # shards this process finished (faults.pause_at("converting") waits for one)


class OutputCounter:
    """The one place that counts outputs: records as ``images_written``, error rows as ``images_rejected``
    and ``rejected_<reason>``, shard file bytes as ``bytes_written``.

    Each count goes to the Beam counter and to ``progress.TALLY``, which a
    launcher running the steps in its own process reads while ``p.run()``
    blocks (Beam's local runners give their metrics only at the end).
    """

    def __init__(self):
        self._written = beam.metrics.Metrics.counter(NAMESPACE, IMAGES_WRITTEN)
        self._rejected = beam.metrics.Metrics.counter(NAMESPACE, IMAGES_REJECTED)
        self._bytes = beam.metrics.Metrics.counter(NAMESPACE, BYTES_WRITTEN)

    def __call__(self, tag: Optional[str], value) -> None:
        if tag == ERRORS:
            self._rejected.inc()
            beam.metrics.Metrics.counter(NAMESPACE, f"rejected_{value['reason']}").inc()
            progress.TALLY.add(rejected=1)
        else:
            self._written.inc()
            progress.TALLY.add(written=1)

    def records(self, n: int) -> None:
        """``n`` records at once (a resumed run's finished shard)."""
        if n:
            self._written.inc(n)
            progress.TALLY.add(written=n)

    def wrote_bytes(self, n: int) -> None:
        if n:
            self._bytes.inc(n)
            progress.TALLY.add(bytes_written=n)


class CountRejectedFn(beam.DoFn):
    """Counts the error rows of inputs rejected before the shard step (discovery, ``--dedupe``); outputs nothing."""

    def __init__(self):
        self._count = OutputCounter()

    def process(self, row):
        self._count(ERRORS, row)
        return ()


# ---------------------------------------------------------------------------
# The sink.


class _DigestingFile:
    """A binary file being written, with the count and sha256 of the bytes that reach it."""

    mode = "wb"

    def __init__(self, raw):
        self._raw = raw
        self._hash = hashlib.sha256()
        self.bytes_written = 0

    def write(self, data: bytes) -> None:
        self._hash.update(data)
        self.bytes_written += len(data)
        self._raw.write(data)

    def tell(self) -> int:
        return self.bytes_written

    def flush(self) -> None:
        self._raw.flush()

    def close(self) -> None:
        self._raw.close()

    @property
    def closed(self) -> bool:
        return self._raw.closed

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


class _ShardHandle(NamedTuple):
    file: _DigestingFile  # the bytes of the file as stored
    stream: Any  # what records are written to: the file, or a gzip stream over it


class ShardSink(tfrecordio._TFRecordSink):  # pylint: disable=protected-access
    """Beam's TFRecord sink for one split, with a fixed temp folder and the digest of every file.

    The temp folder is ``temp_dir`` (the run's, so a resumed run finds the
    shards it wrote) instead of a new ``beam-temp-*`` per run.
    """

    def __init__(self, output_dir: str, split: str, num_shards: int, compression: str, temp_dir: str):
        super().__init__(
            file_path_prefix=FileSystems.join(output_dir, split),
            coder=coders.BytesCoder(),
            file_name_suffix=manifest.shard_suffix(compression),
            num_shards=num_shards,
            shard_name_template=manifest.SHARD_NAME_TEMPLATE,
            compression_type=CompressionTypes.GZIP if compression == "gzip" else CompressionTypes.UNCOMPRESSED,
        )
        self.output_dir = output_dir
        self.split = split
        self.shard_count = num_shards
        self.compression = compression
        self.temp_dir = temp_dir

    def initialize_write(self) -> str:
        if not FileSystems.exists(self.temp_dir):
            try:
                FileSystems.mkdirs(self.temp_dir)
            except OSError:  # made meanwhile by another worker
                pass
        return self.temp_dir

    def open(self, temp_path):
        raw = FileSystems.create(temp_path, self.mime_type, CompressionTypes.UNCOMPRESSED)
        digesting = _DigestingFile(raw)
        if self.compression_type == CompressionTypes.GZIP:
            return _ShardHandle(digesting, CompressedFile(digesting, compression_type=CompressionTypes.GZIP))
        return _ShardHandle(digesting, digesting)

    def write_encoded_record(self, file_handle, value):
        super().write_encoded_record(file_handle.stream, value)

    def close(self, file_handle):
        file_handle.stream.close()

    @property
    def indexed(self) -> bool:
        return self.compression_type != CompressionTypes.GZIP

    def final_name(self, shard: int) -> str:
        return manifest.shard_file_name(self.split, shard, self.shard_count, self.compression)


# ---------------------------------------------------------------------------
# Done files: what a finished shard step leaves for a resumed run.


def done_path(run_dir: str, split: str, shard: int) -> str:
    return FileSystems.join(run_dir, manifest.RUN_DONE_DIR, f"{split}-{shard:05d}.json")


def index_temp_path(run_dir: str, split: str, shard: int) -> str:
    return FileSystems.join(run_dir, manifest.INDEX_DIR, f"{split}-{shard:05d}.idx")


def _write_file(path: str, data: bytes) -> None:
    """Write ``path`` through a temporary name, so it is never seen half written."""
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with FileSystems.create(tmp) as f:
        f.write(data)
    FileSystems.rename([tmp], [path])


def _read_file(path: str) -> bytes:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return f.read()


def done_json(result: ShardResult, errors: Sequence[Dict[str, str]], analysis: Sequence[bytes]) -> bytes:
    doc = {
        "result": {
            **result._asdict(),
            "class_counts": [list(c) for c in result.class_counts],
            "box_counts": [list(c) for c in result.box_counts],
            "dropped_boxes": [list(c) for c in result.dropped_boxes],
        },
        "errors": list(errors),
        "analysis": [base64.b64encode(row).decode("ascii") for row in analysis],
    }
    return json.dumps(doc, sort_keys=True).encode("utf-8")


def parse_done(data: bytes) -> Tuple[ShardResult, List[Dict[str, str]], List[bytes]]:
    doc = json.loads(data.decode("utf-8"))
    fields = dict(doc["result"])
    for counts in ("class_counts", "box_counts", "dropped_boxes"):
        fields[counts] = tuple((name, n) for name, n in fields.get(counts, ()))
    return (
        ShardResult(**fields),
        list(doc["errors"]),
        [base64.b64decode(row) for row in doc["analysis"]],
    )


# ---------------------------------------------------------------------------
# Assigning shards.


class AssignShardsFn(beam.DoFn):
    """Work item -> ``((split, shard), ShardItem)``; an item without a place -> its error row."""

    def __init__(self, converter: Converter[Any], num_shards: Dict[str, int], seed: int):
        self._converter = converter
        self._num_shards = dict(num_shards)
        self._seed = seed
        self._count = OutputCounter()

    def process(self, item):
        relpath = self._converter.relpath_of(item)
        try:
            split = self._converter.split_of(item)
        except PlacementError:
            tag, row = self._converter(item, [])  # the converter's own rejection of it, read nothing
            self._count(tag, row)
            yield beam.pvalue.TaggedOutput(ERRORS, row)
            return
        if split not in self._num_shards:
            row = error_row(
                self._converter.path_of(item),
                relpath,
                "unknown_split",
                f"split {split!r} was not seen when the run was planned (splits: {', '.join(self._num_shards)})",
            )
            self._count(ERRORS, row)
            yield beam.pvalue.TaggedOutput(ERRORS, row)
            return
        shard = assign_shard(relpath, self._seed, self._num_shards[split])
        yield (split, shard), ShardItem(shuffle_key(relpath, self._seed), relpath, item)


def every_shard(num_shards: Dict[str, int]) -> List[Tuple[Tuple[str, int], None]]:
    """One placeholder per shard, so that a shard no item hashes to is written too (empty)."""
    return [((split, shard), None) for split, n in sorted(num_shards.items()) for shard in range(n)]


# ---------------------------------------------------------------------------
# Writing shards.


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
    ):
        self.sink = sink
        self.run_dir = run_dir
        self.shard = shard
        self.remaining = len(items)
        self.window = window
        self.timestamp = timestamp
        self._writer = sink.open_writer(sink.initialize_write(), f"{shard:05d}-{uuid.uuid4().hex}")
        self._count = count
        self._bytes_counted = 0
        self._offsets: List[str] = []
        self._offset = 0
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
        if faults.drops_records() and not _DROPPED:
            _DROPPED.append(record)  # test-only: a lost write, which the accounting must catch
            return
        self._writer.write(record.example)
        self._count_bytes()
        faults.slow_down()
        if _FINISHED:  # a shard is finished and another one half written
            faults.pause_at("converting")
        length = RECORD_FRAMING_BYTES + len(record.example)
        self._offsets.append(f"{self._offset} {length}\n")
        self._offset += length
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
        written = self._writer.temp_handle.file.bytes_written
        self._count.wrote_bytes(written - self._bytes_counted)
        self._bytes_counted = written

    def finish(self) -> ShardResult:
        handle: _ShardHandle = self._writer.temp_handle
        temp_path = self._writer.close()
        self._count_bytes()
        index_path = None
        if self.sink.indexed:
            index_path = index_temp_path(self.run_dir, self.sink.split, self.shard)
            _write_file(index_path, "".join(self._offsets).encode("ascii"))
        result = ShardResult(
            split=self.sink.split,
            shard=self.shard,
            temp_path=temp_path,
            num_records=sum(self._classes.values()),
            num_bytes=handle.file.bytes_written,
            sha256=handle.file.hexdigest(),
            class_counts=tuple(sorted(self._classes.items(), key=lambda kv: (kv[0] is None, kv[0] or ""))),
            index_path=index_path,
            box_counts=tuple(sorted(self._boxes.items(), key=lambda kv: kv[0] or "")),
            dropped_boxes=tuple(sorted(self._dropped.items())),
        )
        _write_file(done_path(self.run_dir, self.sink.split, self.shard), done_json(result, self.errors, self.analysis))
        _FINISHED.append(self.shard)
        return result


class WriteShardsFn(beam.DoFn):
    """``((split, shard), items)`` -> ShardResult; error rows on ``errors``; analysis rows on ``analysis``.

    Items are converted in the seeded order and each record is written as it
    comes out of the converter. With ``processes`` > 1 the conversion runs in
    a local pool (``conversion/pool.py``) that keeps converting the next
    shards' items while earlier shards finish; with 1, in this worker. With
    ``resume``, a shard whose done file exists is replayed, not converted.
    """

    def __init__(
        self,
        converter: Converter[Any],
        sinks: Dict[str, ShardSink],
        run_dir: str,
        processes: int = 1,
        batch_size: int = 32,
        resume: bool = False,
    ):
        if processes < 1:
            raise ValueError(f"processes must be at least 1, got {processes}")
        self._converter = converter
        self._sinks = dict(sinks)
        self._run_dir = run_dir
        self._processes = processes
        self._batch_size = batch_size
        self._resume = resume
        self._count = OutputCounter()
        self._pool: Optional[ConversionPool] = None
        self._jobs: Deque[_ShardJob] = collections.deque()

    def setup(self):
        if self._processes > 1:  # first: its processes start while the sinks are prepared
            self._pool = ConversionPool(self._converter, self._processes, self._batch_size)
        try:
            for sink in self._sinks.values():
                sink.initialize_write()
        except BaseException:
            self.teardown()  # a DoFn whose setup raised may never be torn down by the runner
            raise

    def teardown(self):
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def start_bundle(self):
        self._jobs = collections.deque()

    def process(self, element, window=beam.DoFn.WindowParam, timestamp=beam.DoFn.TimestampParam, **side_inputs):
        label_names: List[str] = side_inputs["label_names"]
        (split, shard), grouped = element
        items = sorted((i for i in grouped if i is not None), key=lambda i: (i.position, i.relpath))
        if self._resume:
            replayed = self._replay(split, shard)
            if replayed is not None:
                yield from self._emit(*replayed, window=window, timestamp=timestamp)
                return
        job = _ShardJob(self._sinks[split], self._run_dir, shard, items, window, timestamp, self._count)
        if self._pool is None:
            for i in items:
                tag, value = self._converter(i.item, label_names)
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

    def _replay(self, split: str, shard: int):
        path = done_path(self._run_dir, split, shard)
        if not FileSystems.exists(path):
            return None
        result, errors, analysis = parse_done(_read_file(path))
        final = FileSystems.join(self._sinks[split].output_dir, self._sinks[split].final_name(shard))
        if not FileSystems.exists(result.temp_path) and not FileSystems.exists(final):
            return None  # the done file outlived its shard: write the shard again
        beam.metrics.Metrics.counter(NAMESPACE, "shards_resumed").inc()
        self._count.records(result.num_records)  # done, as far as the run's progress is concerned
        self._count.wrote_bytes(result.num_bytes)
        for row in errors:
            self._count(ERRORS, row)
        return result, errors, analysis

    def _emit(self, result: ShardResult, errors, analysis, window, timestamp) -> Iterator[Any]:
        def windowed(value):
            return WindowedValue(value, timestamp, (window,))

        for row in errors:
            yield beam.pvalue.TaggedOutput(ERRORS, windowed(row))
        for row in analysis:
            yield beam.pvalue.TaggedOutput(ANALYSIS, windowed(row))
        yield windowed(result)


# ---------------------------------------------------------------------------
# Committing a split.


def _split_key(result: ShardResult):
    return result.split, result


class CommitSplitFn(beam.DoFn):
    """``(split, [ShardResult])`` -> the split's CommittedShards, under their final names.

    Index files move first, then Beam's ``finalize_write`` renames the
    shards (a resumed commit skips those already renamed), then each final
    file's size is checked against what its writer counted.
    """

    def __init__(self, sinks: Dict[str, ShardSink]):
        self._sinks = dict(sinks)

    def process(self, element):
        split, results = element
        sink = self._sinks[split]
        by_shard: Dict[int, ShardResult] = {}
        for r in results:
            by_shard.setdefault(r.shard, r)  # a retried shard step writes the same bytes
        if sorted(by_shard) != list(range(sink.shard_count)):
            missing = sorted(set(range(sink.shard_count)) - set(by_shard))
            raise RuntimeError(f"split {split}: no result for shard(s) {missing[:10]} of {sink.shard_count}")
        ordered = [by_shard[i] for i in range(sink.shard_count)]
        committed = []
        for r in ordered:
            index = None
            if r.index_path:
                index = manifest.index_file(sink.final_name(r.shard))
                final_index = FileSystems.join(sink.output_dir, index)
                if FileSystems.exists(r.index_path):
                    if FileSystems.exists(final_index):
                        FileSystems.delete([final_index])
                    _rename_into(r.index_path, final_index)
                elif not FileSystems.exists(final_index):
                    raise OSError(f"the index of {sink.final_name(r.shard)} is missing: {r.index_path}")
            committed.append(
                CommittedShard(
                    split,
                    sink.final_name(r.shard),
                    r.num_records,
                    r.num_bytes,
                    r.sha256,
                    index,
                    r.class_counts,
                    r.box_counts,
                    r.dropped_boxes,
                )
            )
        # Beam's pre_finalize is not called: it deletes existing final files, which a resumed
        # commit must keep; the launcher has already refused or cleared stale shards.
        for _ in sink.finalize_write(sink.temp_dir, [r.temp_path for r in ordered], None):
            pass
        faults.pause_at("committing")
        paths = [FileSystems.join(sink.output_dir, c.file) for c in committed]
        sizes = {m.path: m.size_in_bytes for result in FileSystems.match(paths) for m in result.metadata_list}
        for c, path in zip(committed, paths):
            if sizes.get(path) != c.num_bytes:
                raise OSError(f"{path}: {sizes.get(path)} bytes after the commit, but its writer wrote {c.num_bytes}")
        yield from committed


def _rename_into(src: str, dst: str) -> None:
    parent = dst.rsplit("/", 1)[0]
    if not FileSystems.exists(parent):
        try:
            FileSystems.mkdirs(parent)
        except OSError:
            pass
    FileSystems.rename([src], [dst])


class WriteShards(beam.PTransform):
    """Work items -> ``{"shards": CommittedShard, "errors": error rows, "analysis": analysis rows}``.

    ``sinks`` maps each split to its ``ShardSink`` (the plan's shard counts);
    ``label_names`` is the side input of the sorted class list.
    """

    def __init__(
        self,
        converter: Converter[Any],
        sinks: Dict[str, ShardSink],
        run_dir: str,
        seed: int,
        processes: int,
        label_names,
        batch_size: int = 32,
        resume: bool = False,
    ):
        super().__init__()
        self._converter = converter
        self._sinks = dict(sinks)
        self._run_dir = run_dir
        self._seed = seed
        self._processes = processes
        self._label_names = label_names
        self._batch_size = batch_size
        self._resume = resume

    def expand(self, items):
        num_shards = {split: sink.shard_count for split, sink in self._sinks.items()}
        placed = items | "AssignShards" >> beam.ParDo(
            AssignShardsFn(self._converter, num_shards, self._seed)
        ).with_output_types(Tuple[Tuple[str, int], Any]).with_outputs(ERRORS, main="placed")
        every = items.pipeline | "EveryShard" >> beam.Create(
            every_shard(num_shards), reshuffle=False
        ).with_output_types(Tuple[Tuple[str, int], Any])
        written = (
            (placed.placed, every)
            | "WithEveryShard" >> beam.Flatten()
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShard"
            >> beam.ParDo(
                WriteShardsFn(
                    self._converter, self._sinks, self._run_dir, self._processes, self._batch_size, self._resume
                ),
                label_names=self._label_names,
            ).with_outputs(ERRORS, ANALYSIS, main="results")
        )
        committed = (
            written.results
            | "KeyBySplit" >> beam.Map(_split_key)
            | "GroupBySplit" >> beam.GroupByKey()
            | "CommitSplit" >> beam.ParDo(CommitSplitFn(self._sinks))
        )
        errors = (placed[ERRORS], written[ERRORS]) | "ShardErrors" >> beam.Flatten()
        return {"shards": committed, ERRORS: errors, ANALYSIS: written[ANALYSIS]}
