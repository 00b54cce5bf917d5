"""The error report, the run's accounting, and the finishing writes of an output directory.

``FinalizeOutput`` runs once, after every shard is final (it takes them and
every rejected row as side inputs), writes the error report into the run's
staging folder, checks that every input is accounted for, moves the shards,
their indexes and the error report from that folder into the output (until
then a failed run leaves nothing outside that folder), and writes
``dataset.json``, ``labels.txt`` and finally ``_SUCCESS`` (none when no record
was written: that run fails, past any error budget).
With the tf.Transform analysis on, its ``statistics`` side input is emitted
only once ``transform_fn/`` is written (transforms/analyze.py), and is
copied into ``dataset.json``.
"""

from __future__ import annotations

import datetime
import json
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from img2tfrecord import faults, shard_formats
from img2tfrecord.conversion import appends
from img2tfrecord.errors import ErrorBudgetExceeded
from img2tfrecord.model import CommittedShard
from img2tfrecord.schemas import dataset_json, output_files, shard_patterns, tfds_layout
from img2tfrecord.schemas import labels as label_map
from img2tfrecord.schemas.dataset_json import Accounting, DatasetManifest, ShardInfo, SplitInfo
from img2tfrecord.schemas.generations import Generation, Withdrawal
from img2tfrecord.schemas.ledger import iter_ledger
from img2tfrecord.transforms.done_files import wrong_size
from img2tfrecord.transforms.publish import Publication, analysis_files


def error_json(row: Mapping[str, str]) -> str:
    # ensure_ascii escapes every control character and non-ASCII byte of a file name.
    return json.dumps(dict(row), ensure_ascii=True, sort_keys=True)


def write_error_report(path: str, rows: Iterable[Mapping[str, str]]) -> Dict[str, int]:
    """Write ``rows`` to ``path`` as JSON lines, streamed (empty when there is none); -> rows per reason, sorted.

    The report is one file, written by the step that finishes the output (``FinalizeOutput``) from its
    iterable side input: a sink of its own would add four stages to every run, one writer either way."""
    counts: Dict[str, int] = {}
    with FileSystems.create(path, mime_type="text/plain", compression_type=CompressionTypes.UNCOMPRESSED) as f:
        for row in rows:
            f.write(error_json(row).encode("ascii") + b"\n")
            reason = row["reason"]
            counts[reason] = counts.get(reason, 0) + 1
    return dict(sorted(counts.items()))


def _check_staged_ledger(path: str) -> None:
    """ValueError naming ``path`` when the run's ledger, written at its launch, no longer reads whole (damaged
    inside the staging folder): it is never published so; ``--resume`` writes it anew from the input."""
    if not FileSystems.exists(path):  # a retried publication moved it already
        return
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            for _ in iter_ledger(f.read(), path):
                pass
    except ValueError as e:
        raise ValueError(f"the run's ledger was damaged in its staging folder: {e}") from None


def _check_committed_sizes(committed: str, shards: List[CommittedShard]) -> None:
    """OSError naming the first committed shard whose size is not what its writer wrote (changed inside the
    staging folder since its commit): it is never published so; ``--resume`` checks it whole and converts it
    again. A shard moved already by a retried publication is not there to check."""
    wrong = wrong_size(committed, shards, missing_ok=True)
    if wrong is not None:
        shard, path, size = wrong
        raise OSError(f"{path}: {size} bytes, but its writer wrote {shard.num_bytes} (changed in the staging folder)")


def no_records_written(inputs: int, rejected: int) -> str:
    """The message of a run that wrote no record: past any error budget, and not a dataset."""
    found = f"{rejected} of {inputs} inputs rejected" if inputs else "no inputs"
    return f"error budget exceeded: no records written, {found}; no {output_files.SUCCESS_FILE} was written"


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
        retried: Optional[Dict[str, int]] = None,
        resolved: Tuple[str, ...] = (),
    ):
        """``template``: the manifest's fields known before the run (tool, input, options, task, record type);
        the rest is filled in here. ``ledger``: the run's input ledger (None: the run keeps none);
        ``previous``: the manifest an append adds generation ``generation`` to, which withdraws the
        earlier records ``withdrawn`` (``--accept-changes``); ``after_success`` runs once ``_SUCCESS`` is
        written (a job its launcher did not wait for removes the output's lock); ``members``: where an archive
        run's members file goes (side input ``unused_members`` orders this step after it is written);
        ``retried``: an append's earlier rejections of the inputs it tried again, per reason
        (``Generation.retried``), ``resolved`` the folders it could list that an earlier one could not."""
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
        self._retried = dict(retried or {})
        self._resolved = tuple(resolved)

    def process(
        self,
        unused_start,
        label_names: List[str],
        shards: List[CommittedShard],
        error_rows: Iterable[Mapping[str, str]],
        num_inputs: int,
        num_skipped: int,
        statistics: Optional[Dict[str, Any]] = None,
        unused_members: Optional[List[str]] = None,
    ):
        detection = self._template.is_detection
        splits = summarise_splits(sorted(self._split_names), shards, detection)
        written = sum(info.num_examples for info in splits.values())
        by_reason = write_error_report(
            FileSystems.join(self._run_dir, output_files.errors_file(self._generation)), error_rows
        )
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
                errors=output_files.errors_file(self._generation),
                inputs=num_inputs,
                written=written,
                rejected=rejected,
                shards={name: len(info.shards) for name, info in splits.items() if info.shards},
                analyzed=statistics is not None,
                withdrawn=self._withdrawn,
                retried=self._retried,
                resolved=self._resolved,
            )
            if self._previous is not None:
                doc = appends.merge(self._previous, doc, generation)
            else:
                doc = doc.replace(generations=(generation,))
        doc = shard_patterns.with_patterns(doc)  # webdataset: each split's brace pattern
        # The folder is also a TFDS dataset (tfds.builder_from_directory), or says why not.
        doc = doc.replace(tfds=tfds_layout.status(doc))
        publication = Publication(self._run_dir, self._output_dir)
        if not written and self._previous is None:  # nothing to train on is a failed run, whatever the budget
            self._publish_failure(publication)
            raise ErrorBudgetExceeded(no_records_written(num_inputs, rejected))
        try:
            self._publish(publication, doc, shards, statistics is not None)
        except BaseException:  # a failure or a stop while publishing: the output is left as it was
            publication.undo(self._previous_files())
            raise
        remove_tree(self._run_dir)  # the staging folder goes before _SUCCESS: a complete output has none
        with FileSystems.create(FileSystems.join(self._output_dir, output_files.SUCCESS_FILE)) as f:
            f.write(b"")
        if self._after_success is not None:
            self._after_success()
        budget_message = error_budget_exceeded(num_inputs, rejected, self._max_error_rate)
        if budget_message:
            # The output is complete and consistent; the job still fails so a scheduler alerts.
            raise ErrorBudgetExceeded(budget_message)
        yield doc

    def _publish_failure(self, publication: Publication) -> None:
        """A run that wrote no record publishes its error report alone (what says why) and leaves no staging:
        no dataset, so nothing for ``--resume`` to finish, and the next run may use the output."""
        errors = output_files.errors_file(self._generation)
        try:
            publication.move(FileSystems.join(self._run_dir, errors), errors)
        except BaseException:
            publication.undo({})
            raise
        remove_tree(self._run_dir)

    def _publish(self, publication: Publication, doc: DatasetManifest, shards: List[CommittedShard], analysed: bool):
        """Move the run's shards, indexes, error report, analysis and ledger from its staging folder into the
        output, then write ``labels.txt``, the TFDS metadata and ``dataset.json``."""
        join = FileSystems.join
        committed = join(self._run_dir, output_files.RUN_COMMITTED_DIR)
        _check_committed_sizes(committed, shards)
        for name in [c.file for c in shards] + [c.index_file for c in shards if c.index_file]:
            publication.move(join(committed, name), name)
        errors = output_files.errors_file(self._generation)
        publication.move(join(self._run_dir, errors), errors)
        if analysed:
            for name, folder in analysis_files().items():
                if folder:
                    publication.move_tree(join(committed, name), name)
                else:
                    publication.move(join(committed, name), name)
        if self._ledger is not None:
            staged = join(self._run_dir, output_files.RUN_LEDGER_FILE)
            _check_staged_ledger(staged)
            publication.move(staged, self._ledger)
        if self._members is not None:
            publication.move(join(self._run_dir, output_files.RUN_MEMBERS_FILE), self._members)
        for name, text in self._metadata_files(doc).items():
            publication.write(name, text)
        faults.fail_at("finalizing", join(self._output_dir, output_files.MANIFEST_FILE))
        publication.write(output_files.MANIFEST_FILE, dataset_json.dumps(doc))
        faults.pause_at("finalizing")

    @staticmethod
    def _metadata_files(doc: DatasetManifest) -> Dict[str, str]:
        """name -> text of what the output holds about its records besides ``dataset.json``: the label
        files and the TFDS metadata."""
        files = {output_files.LABELS_FILE: label_map.labels_text(list(doc.labels))}
        if doc.is_detection:
            files[output_files.LABEL_MAP_FILE] = label_map.label_map_pbtxt(list(doc.labels))
        files.update(tfds_layout.metadata_files(doc))
        card = shard_formats.adapter(doc.file_format).dataset_card(doc)  # what the format's own readers look for
        if card is not None:
            files[card[0]] = card[1]
        return files

    def _previous_files(self) -> Dict[str, str]:
        """What an append's output held before it (the texts it rewrites); {} for a new output."""
        if self._previous is None:
            return {}
        return {**self._metadata_files(self._previous), output_files.MANIFEST_FILE: dataset_json.dumps(self._previous)}
