"""Checks of one shard's records: framing and checksums, each Example or SequenceExample, its image and boxes.

Every check compares a record with a :class:`_Context` taken once from ``dataset.json``;
problems go to the :class:`~img2tfrecord.verification.findings.Report` keyed by shard and record.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import io
import warnings
from typing import Any, List, Mapping, Optional, Tuple

from img2tfrecord import shard_formats, storage, tfrecord_codec
from img2tfrecord.readers import records
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import labels as label_map
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas.dataset_json import DatasetManifest, ShardInfo
from img2tfrecord.verification.findings import Report

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
class _Context:
    """What a record is checked against, taken from the manifest once."""

    spec: Mapping[str, Mapping[str, Any]]
    labels: Tuple[str, ...]
    channels: Optional[int]
    size: Optional[Tuple[int, int]]  # (width, height) every image has, when the writer resized
    formats: Optional[Tuple[str, ...]]  # image/format values the options allow
    compression: str
    sequence: bool = False  # tf.train.SequenceExample records (convert --sequence)
    file_format: str = output_files.DEFAULT_FILE_FORMAT  # the shards' container (--file-format)
    detection: bool = False  # TF Object Detection API records, checked against ``label_map``
    label_map: Mapping[int, str] = dataclasses.field(default_factory=dict)  # detection: id -> class name


def _context(doc: DatasetManifest, label_ids: Optional[Mapping[int, str]] = None) -> _Context:
    """The record checks' view of ``doc``; ValueError or TypeError when its options are of the wrong shape."""
    return _Context(
        spec=doc.spec,
        labels=doc.labels,
        channels=doc.channels,
        size=doc.image_size,
        formats=_ALLOWED_FORMATS.get(doc.image_format or ""),
        compression=doc.compression.value,
        sequence=doc.is_sequence,
        file_format=doc.file_format,
        detection=doc.is_detection,
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


def _check_withdrawn(data: bytes, relpath: str, ctx: _Context, name: str, record: Any, report: Report) -> None:
    try:
        found, _, _ = records.record_source(data, ctx.spec, ctx.sequence)
    except ValueError:
        return  # the record's own problems are reported already
    if found != relpath:
        report.add(name, f"withdrawn record holds {found!r}, dataset.json withdrew {relpath!r}", record.index)


def check_shard(
    directory: str, shard: ShardInfo, ctx: _Context, report: Report, withdrawn: Optional[Mapping[int, str]] = None
) -> Tuple[collections.Counter, bool]:
    """Check every record of one listed shard.

    Returns its records per class name (boxes per class name for detection),
    and whether that count is complete (every record was read and counted).
    ``withdrawn``: index -> relpath of the records ``--accept-changes`` withdrew: checked like the others
    and against that relpath, not counted.
    """
    withdrawn = withdrawn or {}
    name = shard.file
    path = storage.join(directory, name)
    classes: collections.Counter = collections.Counter()
    count = 0
    unclassified = 0
    framing_broken = False
    try:
        for record in records.scan_records(path, ctx.compression, file_format=ctx.file_format, sequence=ctx.sequence):
            count += 1
            offset = shard_formats.adapter(ctx.file_format).verify_offset(record.offset)  # no byte offsets
            if not record.data_crc_ok:
                report.add(name, "data checksum mismatch (corrupt record data)", record.index, offset)
                unclassified += 1
                continue
            problems, class_name, boxes = _check_example(record.data, ctx)
            for problem in problems:
                report.add(name, problem, record.index, offset)
            if record.index in withdrawn:
                report.withdrawn_checked += 1
                _check_withdrawn(record.data, withdrawn[record.index], ctx, name, record, report)
            elif boxes is not None:
                classes += boxes
            elif class_name is None:
                unclassified += 1
            else:
                classes[class_name] += 1
    except tfrecord_codec.RecordError as e:
        framing_broken = True
        report.add(
            name, f"{e.message}; the rest of the shard cannot be read", e.index, e.offset if e.offset >= 0 else None
        )
    except Exception as e:  # unreadable file (permissions, network): report, never a traceback
        framing_broken = True
        report.add(name, f"cannot read shard: {type(e).__name__}: {e}")
    report.records_checked += count
    report.shards_checked += 1
    expected = shard.num_records
    if framing_broken:
        report.add(
            name, f"record count unknown: {count} readable record(s) before the break, dataset.json lists {expected}"
        )
    elif count != expected:
        report.add(name, f"record count mismatch: shard holds {count} record(s), dataset.json lists {expected}")
    declared_bytes = shard.num_bytes
    try:
        size = storage.file_size(path)
    except Exception:
        size = None
    if size is not None and size != declared_bytes:
        report.add(name, f"file size mismatch: {size} bytes on disk, dataset.json lists {declared_bytes}")
    return classes, not framing_broken and not unclassified
