"""The error report, the run's accounting, and the finishing writes of an output directory.

``FinalizeOutput`` runs once, after every shard and the error report are
final (it takes them as side inputs), checks that every input is accounted
for, and writes ``dataset.json``, ``labels.txt`` and finally ``_SUCCESS`` (none
when no record was written: that run fails, past any error budget).
With the tf.Transform analysis on, its ``statistics`` side input is emitted
only once ``transform_fn/`` is written (transforms/analyze.py), and is
copied into ``dataset.json``.
"""

from __future__ import annotations

import datetime
import json
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from img2tfrecord import faults
from img2tfrecord.conversion import appends
from img2tfrecord.errors import ErrorBudgetExceeded
from img2tfrecord.model import CommittedShard
from img2tfrecord.schemas import dataset_manifest, manifest, shard_patterns, tfds_layout
from img2tfrecord.schemas import labels as label_map
from img2tfrecord.schemas.dataset_manifest import Accounting, DatasetManifest, ShardInfo, SplitInfo
from img2tfrecord.schemas.generations import Generation, Withdrawal


def error_json(row: Mapping[str, str]) -> str:
    # ensure_ascii escapes every control character and non-ASCII byte of a file name.
    return json.dumps(dict(row), ensure_ascii=True, sort_keys=True)


class WriteErrorReport(beam.PTransform):
    """Error rows -> ``errors.jsonl`` (an append's: ``errors-g<N>.jsonl``), always written, empty when
    nothing was rejected."""

    def __init__(self, output_dir: str, generation: int = 0):
        super().__init__()
        self._path = FileSystems.join(output_dir, manifest.errors_file(generation))

    def expand(self, errors):
        return (
            errors
            | "ToJson" >> beam.Map(error_json)
            | "WriteErrors" >> beam.io.WriteToText(self._path, shard_name_template="", num_shards=1)
        )


def no_records_written(inputs: int, rejected: int) -> str:
    """The message of a run that wrote no record: past any error budget, and not a dataset."""
    found = f"{rejected} of {inputs} inputs rejected" if inputs else "no inputs"
    return f"error budget exceeded: no records written, {found}; no {manifest.SUCCESS_FILE} was written"


def error_budget_exceeded(inputs: int, rejected: int, max_error_rate: Optional[float]) -> Optional[str]:
    """The message when ``rejected / inputs`` is over ``max_error_rate``, else None."""
    if max_error_rate is None or not inputs or rejected / inputs <= max_error_rate:
        return None
    return (
        f"error budget exceeded: {rejected} of {inputs} inputs rejected "
        f"({rejected / inputs:.1%} > {max_error_rate:.1%}, --max-error-rate)"
    )


class AccountingError(RuntimeError):
    """Raised when records written + rejected does not equal the inputs."""


def write_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary name, so readers never see half a file."""
    directory, name = path.rsplit("/", 1)
    tmp = f"{directory}/{manifest.TEMP_PREFIXES[1]}{name}"
    with FileSystems.create(tmp) as f:
        f.write(text.encode("utf-8"))
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([tmp], [path])


def summarise_splits(
    split_names: Iterable[str], shards: Iterable[CommittedShard], detection: bool = False
) -> Dict[str, SplitInfo]:
    """``dataset.json``'s ``splits``, in the order of ``split_names``: per split the examples, bytes,
    examples per class (sorted by name) and shards (sorted by file name).

    ``detection``: also the boxes written per class and the boxes dropped per reason.
    """
    by_split: Dict[str, List[CommittedShard]] = {name: [] for name in split_names}
    for shard in sorted(shards, key=lambda s: s.file):
        by_split[shard.split].append(shard)

    def total(counts: Iterable[Tuple[Optional[str], int]]) -> Dict[str, int]:
        totals: Dict[str, int] = {}
        for name, n in counts:
            if name is not None:  # None: records of an unlabeled manifest
                totals[name] = totals.get(name, 0) + n
        return dict(sorted(totals.items()))

    return {
        name: SplitInfo(
            num_examples=sum(s.num_records for s in written),
            num_bytes=sum(s.num_bytes for s in written),
            examples_per_class=total(c for s in written for c in s.class_counts),
            shards=tuple(
                ShardInfo(s.file, s.num_records, s.num_bytes, s.sha256, s.index_file or None) for s in written
            ),
            boxes_per_class=total(c for s in written for c in s.box_counts) if detection else None,
            dropped_boxes=total(c for s in written for c in s.dropped_boxes) if detection else None,
        )
        for name, written in by_split.items()
    }


def _move_ledger(staged: str, final: str) -> None:
    """Move a ledger file of the run from its staging folder to ``ledger/`` (already there: a retried finalise)."""
    if not FileSystems.exists(staged):
        if not FileSystems.exists(final):
            raise FileNotFoundError(f"the run's ledger file is missing: {staged}")
        return
    if FileSystems.exists(final):
        FileSystems.delete([final])
    folder = final.rsplit("/", 1)[0]
    if "://" not in folder and not FileSystems.exists(folder):
        FileSystems.mkdirs(folder)
    FileSystems.rename([staged], [final])


def remove_tree(path: str) -> None:
    """Delete a folder and everything under it, on any filesystem; a missing folder is fine."""
    if FileSystems.exists(path):
        FileSystems.delete([path])
    if "://" in path:  # object stores: a "folder" is its objects
        found = FileSystems.match([FileSystems.join(path, "**")])[0].metadata_list
        if found:
            FileSystems.delete([m.path for m in found])


class FinalizeOutput(beam.DoFn):
    """Check the accounting and write ``dataset.json``, ``labels.txt`` (detection: ``label_map.pbtxt``), then
    ``_SUCCESS``."""

    def __init__(
        self,
        output_dir: str,
        template: DatasetManifest,
        split_names: List[str],
        run_dir: str,
        max_error_rate: Optional[float] = None,
        ledger: Optional[str] = None,
        previous: Optional[DatasetManifest] = None,
        generation: int = 0,
        withdrawn: Tuple[Withdrawal, ...] = (),
        after_success: Optional[Callable[[], None]] = None,
        members: Optional[str] = None,
    ):
        """``template``: the manifest's fields known before the run (tool, input, options, task, record type);
        the rest is filled in here. ``ledger``: the run's input ledger (None: the run keeps none);
        ``previous``: the manifest an append adds generation ``generation`` to, which withdraws the
        earlier records ``withdrawn`` (``--accept-changes``); ``after_success`` runs once ``_SUCCESS`` is
        written (a job its launcher did not wait for removes the output's lock); ``members``: where an archive
        run's members file goes (side input ``unused_members`` orders this step after it is written)."""
        self._output_dir = output_dir
        self._template = template
        self._split_names = split_names
        self._run_dir = run_dir
        self._max_error_rate = max_error_rate
        self._ledger = ledger
        self._previous = previous
        self._generation = generation
        self._withdrawn = withdrawn
        self._after_success = after_success
        self._members = members

    def process(
        self,
        unused_start,
        label_names: List[str],
        shards: List[CommittedShard],
        rejected_counts: List[Tuple[str, int]],
        num_inputs: int,
        num_skipped: int,
        unused_error_files: List[str],
        statistics: Optional[Dict[str, Any]] = None,
        unused_members: Optional[List[str]] = None,
    ):
        detection = self._template.is_detection
        splits = summarise_splits(sorted(self._split_names), shards, detection)
        written = sum(info.num_examples for info in splits.values())
        by_reason = dict(sorted(rejected_counts))
        rejected = sum(by_reason.values())
        if num_inputs != written + rejected:
            raise AccountingError(f"{num_inputs} inputs but {written} records written and {rejected} rejected")
        created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        doc = self._template.replace(
            created=created,
            labels=tuple(label_names),
            splits=splits,
            accounting=Accounting(num_inputs, written, rejected, num_skipped, by_reason),
            statistics=statistics,
        )
        if self._ledger is not None:
            generation = Generation(
                number=self._generation,
                created=created,
                ledger=self._ledger,
                errors=manifest.errors_file(self._generation),
                inputs=num_inputs,
                written=written,
                rejected=rejected,
                shards={name: len(info.shards) for name, info in splits.items() if info.shards},
                analyzed=statistics is not None,
                withdrawn=self._withdrawn,
            )
            if self._previous is not None:
                doc = appends.merge(self._previous, doc, generation)
            else:
                doc = doc.replace(generations=(generation,))
        doc = shard_patterns.with_patterns(doc)  # webdataset: each split's brace pattern
        # The folder is also a TFDS dataset (tfds.builder_from_directory), or says why not.
        doc = doc.replace(tfds=tfds_layout.status(doc))
        join = FileSystems.join
        if self._ledger is not None:
            _move_ledger(join(self._run_dir, manifest.RUN_LEDGER_FILE), join(self._output_dir, self._ledger))
        if self._members is not None:
            _move_ledger(join(self._run_dir, manifest.RUN_MEMBERS_FILE), join(self._output_dir, self._members))
        write_atomically(join(self._output_dir, manifest.LABELS_FILE), label_map.labels_text(label_names))
        if detection:
            write_atomically(join(self._output_dir, manifest.LABEL_MAP_FILE), label_map.label_map_pbtxt(label_names))
        for name, text in tfds_layout.metadata_files(doc).items():
            write_atomically(join(self._output_dir, name), text)
        write_atomically(join(self._output_dir, manifest.MANIFEST_FILE), dataset_manifest.dumps(doc))
        faults.pause_at("finalizing")
        remove_tree(self._run_dir)  # the staging folder goes before _SUCCESS: a complete output has none
        if not written and self._previous is None:  # nothing to train on is a failed run, whatever the budget
            raise ErrorBudgetExceeded(no_records_written(num_inputs, rejected))
        with FileSystems.create(join(self._output_dir, manifest.SUCCESS_FILE)) as f:
            f.write(b"")
        if self._after_success is not None:
            self._after_success()
        budget_message = error_budget_exceeded(num_inputs, rejected, self._max_error_rate)
        if budget_message:
            # The output is complete and consistent; the job still fails so a scheduler alerts.
            raise ErrorBudgetExceeded(budget_message)
        yield doc
