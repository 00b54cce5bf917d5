"""Checks of a whole output directory: files, counts, accounting, tf.Transform analysis; :func:`verify` runs all."""

from __future__ import annotations

import collections
import contextlib
import io
import json
from typing import Dict, Iterator, Mapping, Optional

from img2tfrecord import storage
from img2tfrecord.readers import records
from img2tfrecord.schemas import labels as label_map
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas.dataset_json import DatasetManifest
from img2tfrecord.verification.findings import DATASET_SCOPE, MAX_PROBLEMS_PER_SCOPE, Report
from img2tfrecord.verification.record_checks import _Context, _context, check_shard

_SAVED_MODEL_FILE = "saved_model.pb"


def _check_files(directory: str, doc: DatasetManifest, report: Report) -> set:
    """Presence checks; returns the base names of listed shards that exist."""
    try:
        on_disk = set(storage.listdir(directory))
    except Exception as e:
        report.add(DATASET_SCOPE, f"cannot list {directory}: {type(e).__name__}: {e}")
        return set()
    if output_files.SUCCESS_FILE not in on_disk:
        report.add(DATASET_SCOPE, f"no {output_files.SUCCESS_FILE} file: the conversion is incomplete")
    listed = {shard.file: split for split, shard in doc.shards()}
    for name in sorted(listed):
        if name not in on_disk:
            report.add(name, "shard listed in dataset.json is missing on disk")
    last = doc.last_generation.number if doc.last_generation is not None else 0
    for name in sorted(on_disk):
        parsed = output_files.parse_shard_file_name(name)
        if parsed is not None and name not in listed and parsed["generation"] > last:
            report.notes.append(f"{name} belongs to an append that has not finished (convert --append --resume)")
        elif parsed is not None and name not in listed:
            report.add(name, "shard file on disk is not listed in dataset.json")
        elif any(name.startswith(p) for p in output_files.TEMP_PREFIXES):
            report.notes.append(f"leftover temporary file or folder: {name}")
    labels_file = doc.files["labels"]
    if labels_file not in on_disk:
        report.add(labels_file, "missing")
    else:
        try:
            names = label_map.parse_labels_text(storage.read_text(storage.join(directory, labels_file)))
        except Exception as e:
            names = None
            report.add(labels_file, f"unreadable: {type(e).__name__}: {e}")
        if names is not None and names != list(doc.labels):
            report.add(
                labels_file,
                f"holds {len(names)} class name(s) that differ from dataset.json's {doc.num_classes} labels",
            )
    return {name for name in listed if name in on_disk}


def _read_label_map(directory: str, doc: DatasetManifest, report: Report) -> Dict[int, str]:
    """Id -> class name of a detection output's ``label_map.pbtxt``, checked against dataset.json's labels."""
    name = doc.files["label_map"]
    path = storage.join(directory, name)
    if not storage.exists(path):
        report.add(name, "missing: the label map of a detection output")
        return {}
    try:
        ids = label_map.parse_label_map_pbtxt(storage.read_text(path))
    except (OSError, ValueError) as e:
        report.add(name, f"unreadable: {type(e).__name__}: {e}")
        return {}
    expected = {i: n for n, i in label_map.detection_ids(list(doc.labels)).items()}
    if ids != expected:
        report.add(name, f"holds {len(ids)} item(s) that differ from dataset.json's labels numbered from 1")
    return ids


def _nonzero_counts(counts: Mapping[str, int]) -> Dict[str, int]:
    """``{name: count}`` without the zero counts (dataset.json lists classes without examples)."""
    return {k: int(v) for k, v in counts.items() if int(v)}


def _check_split_counts(
    split: str, doc: DatasetManifest, found: collections.Counter, report: Report, complete: bool, detection: bool
) -> None:
    """Listed counts against each other, and (when every record was read) against the classes found."""
    info = doc.splits[split]
    live = doc.live_records(split)
    if info.num_examples != live:
        withdrawn = info.listed_records - live
        report.add(
            DATASET_SCOPE,
            f"split {split}: num_examples is {info.num_examples}, its shards list {info.listed_records} records"
            + (f" of which {withdrawn} withdrawn" if withdrawn else ""),
        )
    if not complete:
        return
    counted, noun = (info.boxes_per_class or {}, "boxes") if detection else (info.examples_per_class, "examples")
    declared = _nonzero_counts(counted)
    actual = _nonzero_counts(found)
    if declared != actual:
        diffs = [
            f"{c}: {actual.get(c, 0)} found, {declared.get(c, 0)} listed"
            for c in sorted(set(declared) | set(actual))
            if declared.get(c, 0) != actual.get(c, 0)
        ]
        report.add(DATASET_SCOPE, f"split {split}: {noun} per class differ from dataset.json ({'; '.join(diffs[:10])})")


def _check_accounting(directory: str, doc: DatasetManifest, report: Report) -> None:
    """The accounting's sums against the splits, and ``errors.jsonl``'s rows by reason against it."""
    acc = doc.accounting
    written = doc.num_examples
    by_reason = dict(acc.rejected_by_reason) if acc is not None else {}
    if acc is not None:
        if acc.written - acc.withdrawn != written:
            withdrawn = f" less {acc.withdrawn} withdrawn" if acc.withdrawn else ""
            report.add(DATASET_SCOPE, f"accounting: written is {acc.written}{withdrawn}, the splits hold {written}")
        if acc.rejected != sum(by_reason.values()):
            report.add(
                DATASET_SCOPE,
                f"accounting: rejected is {acc.rejected}, rejected_by_reason sums to {sum(by_reason.values())}",
            )
        if acc.inputs != acc.written + acc.rejected:
            report.add(
                DATASET_SCOPE, f"accounting: {acc.inputs} inputs but {acc.written} written + {acc.rejected} rejected"
            )
    found: collections.Counter = collections.Counter()
    for errors_file in doc.error_files:
        path = storage.join(directory, errors_file)
        if not storage.exists(path):
            report.add(errors_file, "missing")
            return
        try:
            with storage.open_binary(path) as f:
                for number, line in enumerate(io.TextIOWrapper(f, encoding="utf-8"), 1):
                    if not line.strip():
                        continue
                    try:
                        found[str(json.loads(line).get("reason"))] += 1
                    except (json.JSONDecodeError, AttributeError):
                        report.add(errors_file, f"line {number} is not a JSON object")
        except (OSError, UnicodeDecodeError) as e:
            report.add(errors_file, f"unreadable: {type(e).__name__}: {e}")
            return
    # An append's generation that converted earlier rejections again took them out of the accounting;
    # their rows stay in the earlier error reports.
    expected = collections.Counter({k: v for k, v in by_reason.items() if v})
    for generation in doc.generations:
        expected.update(generation.retried)
    if found != expected:
        retried = " and the generations' retried rejections" if expected != collections.Counter(by_reason) else ""
        report.add(
            " + ".join(doc.error_files),
            f"rows by reason {dict(sorted(found.items()))} differ from dataset.json's rejected_by_reason "
            f"{by_reason}{retried}",
        )


def _check_analysis(directory: str, doc: DatasetManifest, report: Report) -> None:
    """The tf.Transform outputs that ``dataset.json``'s statistics promise (``transforms/analyze.py``)."""
    stats = doc.statistics
    if not stats:
        return
    report.analysis_checked = True
    files = stats.get("files") or {}
    transform_fn = files.get("transform_fn", output_files.TRANSFORM_FN_DIR)
    transformed_metadata = files.get("transformed_metadata", output_files.TRANSFORMED_METADATA_DIR)
    for folder, inside in ((transform_fn, _SAVED_MODEL_FILE), (transformed_metadata, output_files.SCHEMA_FILE)):
        if not storage.exists(storage.join(storage.join(directory, folder), inside)):
            report.add(folder, f"no {inside}: the exported tf.Transform output is incomplete")
    raw_metadata = files.get("raw_metadata", output_files.RAW_METADATA_DIR)
    schema_file = files.get("schema", output_files.SCHEMA_FILE)
    for name in (schema_file, f"{raw_metadata}/{schema_file}"):
        problem = _schema_problem(storage.join(directory, name), set(doc.spec))
        if problem:
            report.add(name, problem)
    vocabulary = stats.get("label_vocabulary")
    if vocabulary:
        name = f"{transform_fn}/assets/{vocabulary}"
        path = storage.join(directory, name)
        if not storage.exists(path):
            report.add(name, "missing: the label vocabulary of the exported transform")
        else:
            try:
                names = label_map.parse_labels_text(storage.read_text(path))
            except (OSError, ValueError) as e:
                names = None
                report.add(name, f"unreadable: {type(e).__name__}: {e}")
            if names is not None and names != list(doc.labels):
                report.add(
                    name,
                    f"differs from {output_files.LABELS_FILE}: the transform's label ids would not be the records'",
                )
    split = stats.get("split")
    info = doc.splits.get(split) if isinstance(split, str) else None
    scope = f"{output_files.MANIFEST_FILE} {output_files.STATISTICS}"
    if info is None:
        report.add(scope, f"describe split {split!r}, which the output does not have")
    elif all(g.analyzed for g in doc.generations):  # else they describe only the generations analysed
        if int(stats.get("num_examples", -1)) != info.num_examples:
            report.add(scope, f"count {stats.get('num_examples')} examples, split {split} holds {info.num_examples}")
        per_class = _nonzero_counts(stats.get("examples_per_class") or {})
        if "examples_per_class" in stats and per_class != _nonzero_counts(info.examples_per_class):
            report.add(scope, f"examples per class differ from split {split}'s")
    exact = stats.get("exact", True)  # absent means exact (statistics of every decoded image)
    if not isinstance(exact, bool) or (doc.exact_statistics and exact is not True):
        report.add(
            scope,
            f"exact is {exact!r}, not what the options "
            f"({'' if doc.exact_statistics else 'no '}--exact-statistics) give",
        )
    channels = doc.channels
    for key in ("pixel_mean", "pixel_std"):
        values = stats.get(key)
        if (
            not isinstance(values, list)
            or (channels and len(values) != channels)
            or not all(isinstance(v, (int, float)) and 0 <= v <= 1 for v in values)
        ):
            report.add(scope, f"{key} is {values!r}, not one value in [0, 1] per channel ({channels})")


def _schema_problem(path: str, features: set) -> Optional[str]:
    """What is wrong with a tensorflow_metadata Schema file that should name exactly ``features``."""
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    if not storage.exists(path):
        return "missing"
    try:
        schema = text_format.Parse(storage.read_text(path), schema_pb2.Schema())
    except (text_format.ParseError, OSError, ValueError) as e:
        return f"not a tensorflow_metadata Schema: {e}"
    names = {feature.name for feature in schema.feature}
    problems = []
    if names - features:
        problems.append(f"names features not in dataset.json's feature_spec: {sorted(names - features)[:5]}")
    if features - names:
        problems.append(f"lacks features of dataset.json's feature_spec: {sorted(features - names)[:5]}")
    return "; ".join(problems) or None


def verify(directory: str, max_problems_per_scope: int = MAX_PROBLEMS_PER_SCOPE) -> Report:
    """Check an output directory; the :class:`Report` says what holds.

    Raises FileNotFoundError when the directory or its ``dataset.json`` does
    not exist. A manifest this version does not read is the report's one
    problem, the ``DatasetJsonError`` naming the field.
    """
    report = Report(directory, max_problems_per_scope)
    try:
        doc = records.read_manifest(directory)
    except ValueError as e:  # the scope names the file: "dataset.json: splits.train.num_examples is ..."
        report.add(output_files.MANIFEST_FILE, str(e).removeprefix(f"{output_files.MANIFEST_FILE}: "))
        return report
    try:
        ctx = _context(doc)
        with _pixel_limit(doc.max_pixels):
            _verify(directory, doc, ctx, report)
    except (KeyError, TypeError, AttributeError, ValueError) as e:  # options or statistics of the wrong shape
        report.add(output_files.MANIFEST_FILE, f"malformed: {type(e).__name__}: {e}")
    return report


@contextlib.contextmanager
def _pixel_limit(max_pixels: Optional[int]) -> Iterator[None]:
    """Let Pillow open images up to the conversion's ``--max-pixels`` (its own limit may be lower)."""
    from PIL import Image

    old = Image.MAX_IMAGE_PIXELS
    if max_pixels is not None and old is not None and max_pixels > old:
        Image.MAX_IMAGE_PIXELS = max_pixels
    try:
        yield
    finally:
        Image.MAX_IMAGE_PIXELS = old


def _verify(directory: str, doc: DatasetManifest, ctx: _Context, report: Report) -> None:
    """Every check of a loaded manifest's output, records checked against ``ctx``."""
    present = _check_files(directory, doc, report)
    if ctx.detection:
        ctx = _context(doc, _read_label_map(directory, doc, report))
    withdrawn: Dict[str, Dict[int, str]] = {}
    listed = {shard.file: (split, shard.num_records) for split, shard in doc.shards()}
    for w in doc.withdrawals:
        withdrawn.setdefault(w.file, {})[w.index] = w.relpath
        if listed.get(w.file, (None, 0))[0] != w.split or w.index >= listed[w.file][1]:
            report.add(
                DATASET_SCOPE,
                f"withdrawn record {w.index} of {w.file} ({w.relpath}) is not a record of split {w.split}",
            )
    for split, info in doc.splits.items():
        found: collections.Counter = collections.Counter()
        complete = True
        for shard in info.shards:
            if shard.file not in present:
                complete = False
                continue
            classes, shard_complete = check_shard(directory, shard, ctx, report, withdrawn.get(shard.file))
            found += classes
            complete = complete and shard_complete
        _check_split_counts(split, doc, found, report, complete, ctx.detection)
    _check_accounting(directory, doc, report)
    _check_analysis(directory, doc, report)
