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
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from img2tfrecord import faults
from img2tfrecord.model import CommittedShard
from img2tfrecord.schemas import labels as label_map
from img2tfrecord.schemas import manifest, tfds_layout


def error_json(row: Mapping[str, str]) -> str:
    # ensure_ascii escapes every control character and non-ASCII byte of a file name.
    return json.dumps(dict(row), ensure_ascii=True, sort_keys=True)


class WriteErrorReport(beam.PTransform):
    """Error rows -> ``errors.jsonl`` (always written, empty when nothing was rejected)."""

    def __init__(self, output_dir: str):
        super().__init__()
        self._path = FileSystems.join(output_dir, manifest.ERRORS_FILE)

    def expand(self, errors):
        return (
            errors
            | "ToJson" >> beam.Map(error_json)
            | "WriteErrors" >> beam.io.WriteToText(self._path, shard_name_template="", num_shards=1)
        )


class ErrorBudgetExceeded(RuntimeError):
    """More inputs were rejected than ``--max-error-rate`` allows (the output is still written), or no
    record was written at all (then without ``_SUCCESS``)."""


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
) -> Dict[str, Dict[str, Any]]:
    """``dataset.json``'s ``splits``: per split the examples, bytes, examples per class and shards.

    ``detection``: also the boxes written per class and the boxes dropped per reason.
    """
    splits: Dict[str, Dict[str, Any]] = {
        name: {"num_examples": 0, "num_bytes": 0, "examples_per_class": {}, "shards": []} for name in split_names
    }
    if detection:
        for info in splits.values():
            info[manifest.BOXES_PER_CLASS] = {}
            info[manifest.DROPPED_BOXES] = {}
    for shard in sorted(shards, key=lambda s: s.file):
        info = splits[shard.split]
        info["shards"].append(shard.manifest_entry())
        info["num_examples"] += shard.num_records
        info["num_bytes"] += shard.num_bytes
        per_class = info["examples_per_class"]
        for class_name, n in shard.class_counts:
            if class_name is not None:  # None: records of an unlabeled manifest
                per_class[class_name] = per_class.get(class_name, 0) + n
        if detection:
            for key, counts in (
                (manifest.BOXES_PER_CLASS, shard.box_counts),
                (manifest.DROPPED_BOXES, shard.dropped_boxes),
            ):
                totals = info[key]
                for name, n in counts:
                    totals[name] = totals.get(name, 0) + n
    for info in splits.values():
        for key in ("examples_per_class", manifest.BOXES_PER_CLASS, manifest.DROPPED_BOXES):
            if key in info:
                info[key] = dict(sorted(info[key].items()))
    return splits


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
        manifest_fields: Dict[str, Any],
        split_names: List[str],
        run_dir: str,
        max_error_rate: Optional[float] = None,
    ):
        self._output_dir = output_dir
        self._fields = manifest_fields
        self._split_names = split_names
        self._run_dir = run_dir
        self._max_error_rate = max_error_rate

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
    ):
        detection = self._fields.get("task") == manifest.TASK_DETECTION
        splits = summarise_splits(self._split_names, shards, detection)
        written = sum(info["num_examples"] for info in splits.values())
        by_reason = dict(sorted(rejected_counts))
        rejected = sum(by_reason.values())
        if num_inputs != written + rejected:
            raise AccountingError(f"{num_inputs} inputs but {written} records written and {rejected} rejected")
        doc = manifest.build_manifest(
            created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            label_names=label_names,
            splits=splits,
            accounting={
                "inputs": num_inputs,
                "written": written,
                "rejected": rejected,
                "skipped": num_skipped,
                "rejected_by_reason": by_reason,
            },
            statistics=statistics,
            **self._fields,
        )
        # The folder is also a TFDS dataset (tfds.builder_from_directory), or says why not.
        doc[tfds_layout.MANIFEST_KEY] = tfds_layout.manifest_entry(doc)
        join = FileSystems.join
        write_atomically(join(self._output_dir, manifest.LABELS_FILE), label_map.labels_text(label_names))
        if detection:
            write_atomically(join(self._output_dir, manifest.LABEL_MAP_FILE), label_map.label_map_pbtxt(label_names))
        for name, text in tfds_layout.metadata_files(doc).items():
            write_atomically(join(self._output_dir, name), text)
        write_atomically(join(self._output_dir, manifest.MANIFEST_FILE), manifest.dumps(doc))
        faults.pause_at("finalizing")
        remove_tree(self._run_dir)  # the staging folder goes before _SUCCESS: a complete output has none
        if not written:  # nothing to train on is a failed run, whatever the budget
            raise ErrorBudgetExceeded(no_records_written(num_inputs, rejected))
        with FileSystems.create(join(self._output_dir, manifest.SUCCESS_FILE)) as f:
            f.write(b"")
        budget_message = error_budget_exceeded(num_inputs, rejected, self._max_error_rate)
        if budget_message:
            # The output is complete and consistent; the job still fails so a scheduler alerts.
            raise ErrorBudgetExceeded(budget_message)
        yield doc
