"""``img2tfrecord verify DIR``: check every byte of a converted output directory.

Checks, reading every record of every shard listed in ``dataset.json``:

* the directory: ``_SUCCESS`` present, ``labels.txt`` equal to the manifest's
  labels, every listed shard on disk and every shard on disk listed;
* each shard: TFRecord framing and both masked CRC32C checksums of every
  record, the record count and file size against ``dataset.json``;
* each record: a ``tf.train.Example`` with every feature of the declared
  spec, holding one value each; its image decodes (Pillow) to the declared
  height, width and channels, in the declared format; the label id is in
  range and names ``image/class/text`` in ``dataset.json``'s labels;
  ``image/key/sha256`` is the SHA-256 of ``image/encoded``;
* each detection record: every per-object list of one length, every box
  within [0, 1] with min < max, every class id in ``label_map.pbtxt`` naming
  the box's class text; ``label_map.pbtxt`` equal to ``labels.txt``'s ids + 1;
* the accounting: per-split and per-class counts (boxes per class for
  detection) found in the records against ``dataset.json``, and the rejected inputs against ``errors.jsonl``;
* the tf.Transform analysis, when ``dataset.json`` has its statistics: the
  exported transform (``transform_fn/saved_model.pb``) and
  ``transformed_metadata/`` present; ``schema.pbtxt`` and
  ``metadata/schema.pbtxt`` parse as tensorflow_metadata Schemas naming
  exactly the manifest's features; the ``label`` vocabulary asset equal to
  ``labels.txt``; the statistics' example counts equal to their split's, one
  mean and one standard deviation per channel, within [0, 1].

Exit codes: 0 all checks hold (one OK line), 1 some do not (a report naming
shard, record and problem, at most :data:`MAX_PROBLEMS_PER_SCOPE` per shard
plus a count of the rest), 2 no such directory or no ``dataset.json``.
Corrupt data never produces a traceback.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import io
import json
import warnings
from typing import Any, Dict, List, Mapping, Optional, Tuple

from img2tfrecord.readers import records
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import labels as label_map
from img2tfrecord.schemas import manifest

MAX_PROBLEMS_PER_SCOPE = 20
DATASET_SCOPE = "dataset"
_SAVED_MODEL_FILE = "saved_model.pb"

_PIL_FORMATS = {keys.FORMAT_JPEG: "JPEG", keys.FORMAT_PNG: "PNG"}
_MODE_CHANNELS = {
    "1": 1,
    "L": 1,
    "I": 1,
    "I;16": 1,
    "F": 1,
    "LA": 2,
    "P": 3,
    "RGB": 3,
    "YCbCr": 3,
    "RGBA": 4,
    "CMYK": 4,
}
# options.format -> the image/format values its records may hold
_ALLOWED_FORMATS = {
    "keep": (keys.FORMAT_JPEG, keys.FORMAT_PNG),
    keys.FORMAT_JPEG: (keys.FORMAT_JPEG,),
    keys.FORMAT_PNG: (keys.FORMAT_PNG,),
    keys.FORMAT_RAW: (keys.FORMAT_RAW,),
}


@dataclasses.dataclass(frozen=True)
class Problem:
    scope: str  # a shard file name, a manifest file name, or "dataset"
    message: str
    record: Optional[int] = None
    offset: Optional[int] = None

    def __str__(self) -> str:
        where = self.scope
        if self.record is not None:
            where += f": record {self.record}" + (f" (byte {self.offset})" if self.offset is not None else "")
        return f"{where}: {self.message}"


@dataclasses.dataclass
class Report:
    """What verify found. ``ok`` when there is no problem; notes never fail a check."""

    path: str
    max_per_scope: int = MAX_PROBLEMS_PER_SCOPE
    problems: List[Problem] = dataclasses.field(default_factory=list)
    omitted: Dict[str, int] = dataclasses.field(default_factory=lambda: collections.defaultdict(int))
    notes: List[str] = dataclasses.field(default_factory=list)
    records_checked: int = 0
    shards_checked: int = 0
    analysis_checked: bool = False  # dataset.json has tf.Transform statistics and their files were checked
    _per_scope: Dict[str, int] = dataclasses.field(default_factory=lambda: collections.defaultdict(int))

    def add(self, scope: str, message: str, record: Optional[int] = None, offset: Optional[int] = None) -> None:
        self._per_scope[scope] += 1
        if self._per_scope[scope] <= self.max_per_scope:
            self.problems.append(Problem(scope, message, record, offset))
        else:
            self.omitted[scope] += 1

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def num_problems(self) -> int:
        return len(self.problems) + sum(self.omitted.values())

    def to_json(self) -> Dict[str, Any]:
        return {
            "path": self.path,
            "ok": self.ok,
            "records_checked": self.records_checked,
            "shards_checked": self.shards_checked,
            "analysis_checked": self.analysis_checked,
            "num_problems": self.num_problems,
            "problems": [dataclasses.asdict(p) for p in self.problems],
            "omitted_problems": dict(self.omitted),
            "notes": list(self.notes),
        }

    def text(self) -> str:
        if self.ok:
            lines = [
                f"OK: {self.path}: {self.records_checked} records in {self.shards_checked} shards verified "
                f"(framing, checksums, counts, schema, images, labels, sha256 keys"
                + (", tf.Transform output)" if self.analysis_checked else ")")
            ]
            return "\n".join(lines + [f"note: {n}" for n in self.notes])
        lines = [f"FAILED: {self.path}: {self.num_problems} problem(s)"]
        scopes = list(dict.fromkeys(p.scope for p in self.problems))
        for scope in scopes:
            lines += [f"  {p}" for p in self.problems if p.scope == scope]
            if self.omitted.get(scope):
                lines.append(f"  {scope}: ... and {self.omitted[scope]} more problem(s)")
        lines += [f"note: {n}" for n in self.notes]
        lines.append(f"{self.records_checked} records in {self.shards_checked} shards checked")
        return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class _Context:
    """What a record is checked against, taken from the manifest once."""

    spec: Mapping[str, Mapping[str, Any]]
    labels: Tuple[str, ...]
    channels: Optional[int]
    size: Optional[Tuple[int, int]]  # (width, height) every image has, when the writer resized
    formats: Optional[Tuple[str, ...]]  # image/format values the options allow
    compression: str
    sequence: bool = False  # tf.train.SequenceExample records (convert --sequence)
    detection: bool = False  # TF Object Detection API records, checked against ``label_map``
    label_map: Mapping[int, str] = dataclasses.field(default_factory=dict)  # detection: id -> class name


def _context(doc: Mapping[str, Any], label_ids: Optional[Mapping[int, str]] = None) -> _Context:
    options = doc.get("options") or {}
    size = options.get("image_size")
    return _Context(
        spec=doc.get("feature_spec") or {},
        labels=tuple(doc.get("labels", [])),
        channels=options.get("channels"),
        size=(int(size[0]), int(size[1])) if size else None,
        formats=_ALLOWED_FORMATS.get(options.get("format", "")),
        compression=doc.get("compression", "none"),
        sequence=doc.get("record_type") == manifest.SEQUENCE_RECORD_TYPE,
        detection=doc.get(manifest.TASK) == manifest.TASK_DETECTION,
        label_map=dict(label_ids or {}),
    )


# ---------------------------------------------------------------------------
# One record.


def check_image(encoded: bytes, fmt: str, width: int, height: int, channels: int) -> Optional[str]:
    """None when the image decodes to the declared format, size and channels, else the problem."""
    if fmt == keys.FORMAT_RAW:
        expected = width * height * channels
        if len(encoded) != expected:
            return f"raw image holds {len(encoded)} bytes, {width}x{height}x{channels} needs {expected}"
        return None
    if fmt not in _PIL_FORMATS:
        return f"unknown image/format {fmt!r}"
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(encoded))
            if img.format != _PIL_FORMATS[fmt]:
                return f"image/format says {fmt} but the image is {img.format or 'not a known format'}"
            if img.size != (width, height):
                return f"image is {img.size[0]}x{img.size[1]}, record declares {width}x{height} (WxH)"
            actual = _MODE_CHANNELS.get(img.mode)
            if actual != channels:
                return f"image has mode {img.mode} ({actual or '?'} channels), record declares {channels}"
            if img.format == "JPEG":  # the whole entropy-coded stream is still read at 1/8 scale
                img.draft(img.mode, (max(1, width // 8), max(1, height // 8)))
            img.load()
    except Exception as e:  # any decoder failure is a finding about the data
        return f"image does not decode: {type(e).__name__}: {e}"
    return None


def _declared_image(values: Mapping[str, Any], ctx: _Context, noun: str):
    """(format, width, height, channels, class name, problems) declared by a record's features.

    The problems compare the declared image with what the conversion options promise;
    ``noun`` names the image in the messages ("image is", "frames are").
    """
    fmt = records.decode_text(values.get(keys.IMAGE_FORMAT, b""))
    width, height = int(values.get(keys.IMAGE_WIDTH, 0)), int(values.get(keys.IMAGE_HEIGHT, 0))
    channels = int(values.get(keys.IMAGE_CHANNELS, 0))
    class_name = records.decode_text(values[keys.CLASS_TEXT]) if keys.CLASS_TEXT in values else None
    problems = []
    if ctx.formats is not None and fmt not in ctx.formats:
        problems.append(f"image/format {fmt!r}, but the conversion options allow only {', '.join(ctx.formats)}")
    if ctx.channels is not None and channels != ctx.channels:
        problems.append(f"image/channels is {channels}, the conversion used {ctx.channels}")
    if ctx.size is not None and (width, height) != ctx.size:
        problems.append(f"{noun} {width}x{height}, the conversion resized to {ctx.size[0]}x{ctx.size[1]} (WxH)")
    return fmt, width, height, channels, class_name, problems


def _label_problems(values: Mapping[str, Any], ctx: _Context, class_name: Optional[str]) -> List[str]:
    """The label id must be in range and name the record's class text in dataset.json's labels."""
    if keys.CLASS_LABEL not in values:
        return []
    label = int(values[keys.CLASS_LABEL])
    if not 0 <= label < len(ctx.labels):
        return [f"label {label} out of range 0..{len(ctx.labels) - 1}"]
    if class_name is not None and ctx.labels[label] != class_name:
        return [f"label {label} is {ctx.labels[label]!r} in dataset.json, record says {class_name!r}"]
    return []


def object_problems(values: Mapping[str, Any], ctx: _Context) -> Tuple[List[str], collections.Counter]:
    """(problems, boxes per class text) of a parsed detection record's object lists."""
    lengths = {key: len(values[key]) for key in keys.OBJECT_FEATURES if key in values}
    problems = []
    if len(set(lengths.values())) > 1:
        problems.append("object lists differ in length: " + ", ".join(f"{k} {n}" for k, n in lengths.items()))
    texts = [records.decode_text(t) for t in values.get(keys.OBJECT_CLASS_TEXT, [])]
    boxes = zip(*(values.get(k, []) for k in (keys.BBOX_XMIN, keys.BBOX_YMIN, keys.BBOX_XMAX, keys.BBOX_YMAX)))
    for i, (xmin, ymin, xmax, ymax) in enumerate(boxes):
        edges = {"xmin": xmin, "ymin": ymin, "xmax": xmax, "ymax": ymax}
        outside = [f"{name} {v!r}" for name, v in edges.items() if not 0.0 <= v <= 1.0]
        if outside:
            problems.append(f"box {i}: outside [0, 1]: {', '.join(outside)}")
        if not xmin < xmax:
            problems.append(f"box {i}: xmin {xmin!r} >= xmax {xmax!r}")
        if not ymin < ymax:
            problems.append(f"box {i}: ymin {ymin!r} >= ymax {ymax!r}")
    for i, (label, text) in enumerate(zip(values.get(keys.OBJECT_CLASS_LABEL, []), texts)):
        name = ctx.label_map.get(int(label))
        if name is None:
            problems.append(f"box {i}: class id {label} is not in {label_map.LABEL_MAP_FILE}")
        elif name != text:
            where = f"in {label_map.LABEL_MAP_FILE}"
            problems.append(f"box {i}: class id {label} is {name!r} {where}, record says {text!r}")
    return problems, collections.Counter(texts)


def check_record(data: bytes, ctx: _Context) -> Tuple[List[str], Optional[str]]:
    """(problems, class name) of one serialized record."""
    problems, class_name, _ = _check_example(data, ctx)
    return problems, class_name


def _check_example(data: bytes, ctx: _Context) -> Tuple[List[str], Optional[str], Optional[collections.Counter]]:
    """(problems, class name, boxes per class text of a detection record) of one serialized record."""
    if ctx.sequence:
        return (*check_sequence_record(data, ctx), None)
    try:
        values = records.parse_example(data, ctx.spec)
    except records.ExampleError as e:
        return [str(e)], None, None
    encoded = values.get(keys.IMAGE_ENCODED, b"")
    fmt, width, height, channels, class_name, problems = _declared_image(values, ctx, "image is")
    if width <= 0 or height <= 0:
        problems.append(f"invalid declared size {width}x{height}")
    else:
        image_problem = check_image(encoded, fmt, width, height, channels)
        if image_problem:
            problems.append(image_problem)
    problems += _label_problems(values, ctx, class_name)
    if keys.KEY_SHA256 in values:
        digest = hashlib.sha256(encoded).hexdigest()
        if records.decode_text(values[keys.KEY_SHA256]) != digest:
            problems.append(f"image/key/sha256 does not match the image bytes (sha256 is {digest[:16]}...)")
    if not ctx.detection:
        return problems, class_name, None
    found, boxes = object_problems(values, ctx)
    return problems + found, class_name, boxes


def check_sequence_record(data: bytes, ctx: _Context) -> Tuple[List[str], Optional[str]]:
    """(problems, class name) of one serialized SequenceExample: context, frame count, every frame."""
    from img2tfrecord.schemas import example_proto

    context_spec, list_spec = keys.split_spec_json(dict(ctx.spec))
    try:
        seq = example_proto.SequenceExample.FromString(data)
        # A SequenceExample's context is field 1, as an Example's features: parse it as one.
        values = records.parse_example(data, context_spec)
    except records.ExampleError as e:
        return [str(e)], None
    except Exception as e:
        return [f"not a tf.train.SequenceExample: {e}"], None
    fmt, width, height, channels, class_name, problems = _declared_image(values, ctx, "frames are")
    for key in list_spec:
        lists = seq.feature_lists.feature_list
        if key not in lists:
            problems.append(f"feature list {key} missing")
            continue
        steps = lists[key].feature
        if keys.CLIP_NUM_FRAMES in values and len(steps) != int(values[keys.CLIP_NUM_FRAMES]):
            problems.append(f"{key} has {len(steps)} steps, clip/num_frames says {int(values[keys.CLIP_NUM_FRAMES])}")
        if key != keys.IMAGE_ENCODED:
            continue
        for i, step in enumerate(steps):
            if step.WhichOneof("kind") != "bytes_list" or len(step.bytes_list.value) != 1:
                problems.append(f"frame {i}: expected one bytes value")
                break
            problem = (
                check_image(step.bytes_list.value[0], fmt, width, height, channels)
                if width > 0 and height > 0
                else (f"invalid declared size {width}x{height}")
            )
            if problem:
                problems.append(f"frame {i}: {problem}")
                break
    problems += _label_problems(values, ctx, class_name)
    return problems, class_name


# ---------------------------------------------------------------------------
# One shard.


def check_shard(
    directory: str, shard: Mapping[str, Any], ctx: _Context, report: Report
) -> Tuple[collections.Counter, bool]:
    """Check every record of one listed shard.

    Returns its records per class name (boxes per class name for detection),
    and whether that count is complete (every record was read and counted).
    """
    name = shard["file"]
    path = records.join(directory, name)
    classes: collections.Counter = collections.Counter()
    count = 0
    unclassified = 0
    framing_broken = False
    try:
        for record in records.scan_records(path, ctx.compression):
            count += 1
            if not record.data_crc_ok:
                report.add(name, "data checksum mismatch (corrupt record data)", record.index, record.offset)
                unclassified += 1
                continue
            problems, class_name, boxes = _check_example(record.data, ctx)
            for problem in problems:
                report.add(name, problem, record.index, record.offset)
            if boxes is not None:
                classes += boxes
            elif class_name is None:
                unclassified += 1
            else:
                classes[class_name] += 1
    except records.RecordError as e:
        framing_broken = True
        report.add(name, f"{e.message}; the rest of the shard cannot be read", e.index, e.offset)
    except Exception as e:  # unreadable file (permissions, network): report, never a traceback
        framing_broken = True
        report.add(name, f"cannot read shard: {type(e).__name__}: {e}")
    report.records_checked += count
    report.shards_checked += 1
    expected = shard.get("num_records")
    if framing_broken:
        report.add(
            name, f"record count unknown: {count} readable record(s) before the break, dataset.json lists {expected}"
        )
    elif expected is not None and count != int(expected):
        report.add(name, f"record count mismatch: shard holds {count} record(s), dataset.json lists {expected}")
    declared_bytes = shard.get("num_bytes")
    try:
        size = records.file_size(path)
    except Exception:
        size = None
    if declared_bytes is not None and size is not None and size != int(declared_bytes):
        report.add(name, f"file size mismatch: {size} bytes on disk, dataset.json lists {declared_bytes}")
    return classes, not framing_broken and not unclassified


# ---------------------------------------------------------------------------
# The directory.


def _check_files(directory: str, doc: Mapping[str, Any], report: Report) -> set:
    """Presence checks; returns the base names of listed shards that exist."""
    try:
        on_disk = set(records.listdir(directory))
    except Exception as e:
        report.add(DATASET_SCOPE, f"cannot list {directory}: {type(e).__name__}: {e}")
        return set()
    if manifest.SUCCESS_FILE not in on_disk:
        report.add(DATASET_SCOPE, f"no {manifest.SUCCESS_FILE} file: the conversion is incomplete")
    listed = {s["file"]: split for split, info in doc.get("splits", {}).items() for s in info.get("shards", [])}
    for name in sorted(listed):
        if name not in on_disk:
            report.add(name, "shard listed in dataset.json is missing on disk")
    for name in sorted(on_disk):
        if manifest.parse_shard_file_name(name) is not None and name not in listed:
            report.add(name, "shard file on disk is not listed in dataset.json")
        elif any(name.startswith(p) for p in manifest.TEMP_PREFIXES):
            report.notes.append(f"leftover temporary file or folder: {name}")
    labels_file = doc.get("files", {}).get("labels", manifest.LABELS_FILE)
    if labels_file not in on_disk:
        report.add(labels_file, "missing")
    else:
        try:
            names = label_map.parse_labels_text(records.read_text(records.join(directory, labels_file)))
        except Exception as e:
            names = None
            report.add(labels_file, f"unreadable: {type(e).__name__}: {e}")
        if names is not None and names != list(doc.get("labels", [])):
            report.add(
                labels_file,
                f"holds {len(names)} class name(s) that differ from dataset.json's {len(doc.get('labels', []))} labels",
            )
    return {name for name in listed if name in on_disk}


def _read_label_map(directory: str, doc: Mapping[str, Any], report: Report) -> Dict[int, str]:
    """Id -> class name of a detection output's ``label_map.pbtxt``, checked against dataset.json's labels."""
    name = doc.get("files", {}).get("label_map", label_map.LABEL_MAP_FILE)
    path = records.join(directory, name)
    if not records.exists(path):
        report.add(name, "missing: the label map of a detection output")
        return {}
    try:
        ids = label_map.parse_label_map_pbtxt(records.read_text(path))
    except (OSError, ValueError) as e:
        report.add(name, f"unreadable: {type(e).__name__}: {e}")
        return {}
    expected = {i: n for n, i in label_map.detection_ids(list(doc.get("labels", []))).items()}
    if ids != expected:
        report.add(name, f"holds {len(ids)} item(s) that differ from dataset.json's labels numbered from 1")
    return ids


def _nonzero_counts(counts: Mapping[str, Any]) -> Dict[str, int]:
    """``{name: count}`` without the zero counts (dataset.json lists classes without examples)."""
    return {k: int(v) for k, v in counts.items() if int(v)}


def _check_split_counts(
    split: str, info: Mapping[str, Any], found: collections.Counter, report: Report, complete: bool, detection: bool
) -> None:
    """Listed counts against each other, and (when every record was read) against the classes found."""
    listed_total = sum(int(s.get("num_records", 0)) for s in info.get("shards", []))
    if int(info.get("num_examples", -1)) != listed_total:
        report.add(
            DATASET_SCOPE,
            f"split {split}: num_examples is {info.get('num_examples')}, its shards list {listed_total} records",
        )
    if not complete:
        return
    counted, noun = (manifest.BOXES_PER_CLASS, "boxes") if detection else ("examples_per_class", "examples")
    declared = _nonzero_counts(info.get(counted, {}))
    actual = _nonzero_counts(found)
    if declared != actual:
        diffs = [
            f"{c}: {actual.get(c, 0)} found, {declared.get(c, 0)} listed"
            for c in sorted(set(declared) | set(actual))
            if declared.get(c, 0) != actual.get(c, 0)
        ]
        report.add(DATASET_SCOPE, f"split {split}: {noun} per class differ from dataset.json ({'; '.join(diffs[:10])})")


def _check_accounting(directory: str, doc: Mapping[str, Any], report: Report) -> None:
    acc = doc.get("accounting") or {}
    written = sum(int(info.get("num_examples", 0)) for info in doc.get("splits", {}).values())
    if acc.get("written") is not None and int(acc["written"]) != written:
        report.add(DATASET_SCOPE, f"accounting: written is {acc['written']}, the splits hold {written}")
    by_reason = {k: int(v) for k, v in (acc.get("rejected_by_reason") or {}).items()}
    if acc.get("rejected") is not None and int(acc["rejected"]) != sum(by_reason.values()):
        report.add(
            DATASET_SCOPE,
            f"accounting: rejected is {acc['rejected']}, rejected_by_reason sums to {sum(by_reason.values())}",
        )
    if (
        acc.get("inputs") is not None
        and acc.get("rejected") is not None
        and int(acc["inputs"]) != written + int(acc["rejected"])
    ):
        report.add(
            DATASET_SCOPE, f"accounting: {acc['inputs']} inputs but {written} written + {acc['rejected']} rejected"
        )
    errors_file = doc.get("files", {}).get("errors", manifest.ERRORS_FILE)
    path = records.join(directory, errors_file)
    if not records.exists(path):
        report.add(errors_file, "missing")
        return
    found: collections.Counter = collections.Counter()
    try:
        with records.open_binary(path) as f:
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
    if dict(found) != {k: v for k, v in by_reason.items() if v}:
        report.add(
            errors_file,
            f"rows by reason {dict(sorted(found.items()))} differ from dataset.json's rejected_by_reason {by_reason}",
        )


def _check_analysis(directory: str, doc: Mapping[str, Any], report: Report) -> None:
    """The tf.Transform outputs that ``dataset.json``'s statistics promise (``transforms/analyze.py``)."""
    stats = doc.get(manifest.STATISTICS)
    if not stats:
        return
    report.analysis_checked = True
    files = stats.get("files") or {}
    transform_fn = files.get("transform_fn", manifest.TRANSFORM_FN_DIR)
    transformed_metadata = files.get("transformed_metadata", manifest.TRANSFORMED_METADATA_DIR)
    for folder, inside in ((transform_fn, _SAVED_MODEL_FILE), (transformed_metadata, manifest.SCHEMA_FILE)):
        if not records.exists(records.join(records.join(directory, folder), inside)):
            report.add(folder, f"no {inside}: the exported tf.Transform output is incomplete")
    raw_metadata = files.get("raw_metadata", manifest.RAW_METADATA_DIR)
    schema_file = files.get("schema", manifest.SCHEMA_FILE)
    for name in (schema_file, f"{raw_metadata}/{schema_file}"):
        problem = _schema_problem(records.join(directory, name), set(doc.get("feature_spec") or {}))
        if problem:
            report.add(name, problem)
    vocabulary = stats.get("label_vocabulary")
    if vocabulary:
        name = f"{transform_fn}/assets/{vocabulary}"
        path = records.join(directory, name)
        if not records.exists(path):
            report.add(name, "missing: the label vocabulary of the exported transform")
        else:
            try:
                names = label_map.parse_labels_text(records.read_text(path))
            except (OSError, ValueError) as e:
                names = None
                report.add(name, f"unreadable: {type(e).__name__}: {e}")
            if names is not None and names != list(doc.get("labels", [])):
                report.add(
                    name, f"differs from {manifest.LABELS_FILE}: the transform's label ids would not be the records'"
                )
    info = doc.get("splits", {}).get(stats.get("split"))
    scope = f"{manifest.MANIFEST_FILE} {manifest.STATISTICS}"
    if info is None:
        report.add(scope, f"describe split {stats.get('split')!r}, which the output does not have")
    else:
        if int(stats.get("num_examples", -1)) != int(info.get("num_examples", 0)):
            report.add(
                scope,
                f"count {stats.get('num_examples')} examples, split {stats['split']} holds {info.get('num_examples')}",
            )
        per_class = _nonzero_counts(stats.get("examples_per_class") or {})
        if "examples_per_class" in stats and per_class != _nonzero_counts(info.get("examples_per_class", {})):
            report.add(scope, f"examples per class differ from split {stats['split']}'s")
    options = doc.get("options") or {}
    exact = stats.get("exact", True)  # absent in outputs of versions that always decoded
    if not isinstance(exact, bool) or (options.get("exact_statistics") and exact is not True):
        report.add(
            scope,
            f"exact is {exact!r}, not what the options "
            f"({'' if options.get('exact_statistics') else 'no '}--exact-statistics) give",
        )
    channels = options.get("channels")
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

    if not records.exists(path):
        return "missing"
    try:
        schema = text_format.Parse(records.read_text(path), schema_pb2.Schema())
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
    not exist. An unparseable manifest is a problem in the report.
    """
    report = Report(directory, max_problems_per_scope)
    try:
        doc = records.read_manifest(directory)
    except ValueError as e:
        report.add(manifest.MANIFEST_FILE, str(e))
        return report
    with _pixel_limit((doc.get("options") or {}).get("max_pixels")):
        _verify(directory, doc, report)
    return report


@contextlib.contextmanager
def _pixel_limit(max_pixels: Any):
    """Let Pillow open images up to the conversion's ``--max-pixels`` (its own limit may be lower)."""
    from PIL import Image

    old = Image.MAX_IMAGE_PIXELS
    if isinstance(max_pixels, int) and old is not None and max_pixels > old:
        Image.MAX_IMAGE_PIXELS = max_pixels
    try:
        yield
    finally:
        Image.MAX_IMAGE_PIXELS = old


def _verify(directory: str, doc: Mapping[str, Any], report: Report) -> None:
    try:
        ctx = _context(doc)
        if ctx.compression not in manifest.COMPRESSIONS:
            report.add(manifest.MANIFEST_FILE, f"unknown compression {ctx.compression!r}")
            return
        present = _check_files(directory, doc, report)
        if ctx.detection:
            ctx = _context(doc, _read_label_map(directory, doc, report))
        for split, info in doc.get("splits", {}).items():
            found: collections.Counter = collections.Counter()
            complete = True
            for shard in info.get("shards", []):
                if shard["file"] not in present:
                    complete = False
                    continue
                classes, shard_complete = check_shard(directory, shard, ctx, report)
                found += classes
                complete = complete and shard_complete
            _check_split_counts(split, info, found, report, complete, ctx.detection)
        _check_accounting(directory, doc, report)
        _check_analysis(directory, doc, report)
    except (KeyError, TypeError, AttributeError, ValueError) as e:  # a manifest missing fields or of the wrong shape
        report.add(manifest.MANIFEST_FILE, f"malformed: {type(e).__name__}: {e}")
