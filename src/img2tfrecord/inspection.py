"""``img2tfrecord inspect DIR``: what a converted output directory holds.

Prints the splits, examples per split and class (their spread past 20 classes, every class with
``--all-classes``), every shard with its size
and record count, the stored image sizes, formats and channels (read from
the records themselves, at most :data:`MAX_RECORDS_PER_SPLIT` per split),
the tf.Transform analysis of the train split (from ``dataset.json``) and
the rejected inputs by reason. ``--json`` prints the same as one JSON
document; ``--grid`` draws a contact sheet of sample images and
``--class-chart`` a bar chart of examples per class and split (both PNG,
drawn with Pillow).

Exit codes: 0 success, 1 when a shard could not be read (the summary is
still printed; ``verify`` tells what is wrong), 2 for a missing directory
or manifest, or an unknown ``--split``.
"""

from __future__ import annotations

import collections
import io
import json
from typing import AbstractSet, Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from img2tfrecord import storage, tfrecord_codec
from img2tfrecord.class_counts import is_many, spread_lines
from img2tfrecord.readers import records
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas.dataset_json import DatasetManifest, SplitInfo

MAX_RECORDS_PER_SPLIT = 10_000
ERROR_EXAMPLES_PER_REASON = 3
TOP_SIZES = 10

STAT_KEYS = (keys.IMAGE_FORMAT, keys.IMAGE_HEIGHT, keys.IMAGE_WIDTH, keys.IMAGE_CHANNELS, keys.IMAGE_ENCODED)


# ---------------------------------------------------------------------------
# Reading.


class ShardUnreadable(Exception):
    """A shard that is missing or whose framing breaks; the message starts with its file name."""


def spec_subset(doc: DatasetManifest, wanted: Sequence[str]) -> Dict[str, Any]:
    # Scalar features only: of a SequenceExample that is its context (image/encoded is a feature list).
    spec = keys.split_spec_json(doc.spec)[0]
    return {k: spec[k] for k in wanted if k in spec}


def sample_records(directory: str, doc: DatasetManifest, split: str, limit: int) -> Iterator[Tuple[str, int, bytes]]:
    """Up to ``limit`` ``(shard file, index, data)`` of a split, spread evenly over its non-empty shards;
    withdrawn records (``--accept-changes``) are not among them.

    Raises :class:`ShardUnreadable` when a shard cannot be read.
    """
    withdrawn = doc.withdrawn_by_file()
    shards = [  # (file, its live records, the withdrawn ones)
        (s.file, s.num_records - len(withdrawn.get(s.file, ())), withdrawn.get(s.file, frozenset()))
        for s in doc.splits[split].shards
    ]
    shards = [shard for shard in shards if shard[1] > 0]
    if not shards or limit <= 0:
        return
    # Round robin over the shards, so a small shard's share goes to the others.
    quotas = [0] * len(shards)
    for _ in range(min(limit, sum(n for _, n, _ in shards))):
        i = min((i for i, (_, n, _) in enumerate(shards) if quotas[i] < n), key=lambda i: quotas[i])
        quotas[i] += 1
    compression = doc.compression.value
    for (name, _, skipped), quota in zip(shards, quotas):
        if not quota:
            continue
        taken = 0
        try:
            for index, _, data in records.iter_records(
                storage.join(directory, name), compression, file_format=doc.file_format, sequence=doc.is_sequence
            ):
                if taken >= quota:
                    break
                if index in skipped:
                    continue
                taken += 1
                yield name, index, data
        except tfrecord_codec.RecordError as e:
            raise ShardUnreadable(f"{name}: {e}") from None
        except FileNotFoundError:
            raise ShardUnreadable(f"{name}: shard file missing") from None


def image_stats(directory: str, doc: DatasetManifest, split: str, limit: int = MAX_RECORDS_PER_SPLIT) -> Dict[str, Any]:
    """Size, format and channel distribution of a split, from at most ``limit`` records."""
    spec = spec_subset(doc, STAT_KEYS)
    sizes: collections.Counter = collections.Counter()
    formats: collections.Counter = collections.Counter()
    channels: collections.Counter = collections.Counter()
    widths: List[int] = []
    heights: List[int] = []
    encoded_bytes = 0
    read = 0
    problems: List[str] = []
    try:
        for name, index, data in sample_records(directory, doc, split, limit):
            try:
                values = records.parse_example(data, spec)
            except records.ExampleError as e:
                problems.append(f"{name}: record {index}: {e}")
                continue
            w, h = int(values.get(keys.IMAGE_WIDTH, 0)), int(values.get(keys.IMAGE_HEIGHT, 0))
            sizes[f"{w}x{h}"] += 1
            formats[records.decode_text(values.get(keys.IMAGE_FORMAT, b"?"))] += 1
            channels[str(values.get(keys.IMAGE_CHANNELS, "?"))] += 1
            widths.append(w)
            heights.append(h)
            encoded_bytes += len(values.get(keys.IMAGE_ENCODED, b""))
            read += 1
    except ShardUnreadable as e:
        problems.append(str(e))
    total = doc.splits[split].num_examples
    return {
        "records_read": read,
        "sampled": read < total and not problems,
        "sizes": dict(sizes.most_common()),
        "formats": dict(formats.most_common()),
        "channels": dict(channels.most_common()),
        "width": _range(widths),
        "height": _range(heights),
        "mean_encoded_bytes": round(encoded_bytes / read) if read else None,
        "problems": problems,
    }


def _range(values: List[int]) -> Optional[Dict[str, float]]:
    if not values:
        return None
    return {"min": min(values), "max": max(values), "mean": round(sum(values) / len(values), 1)}


def error_report(directory: str, doc: DatasetManifest) -> Dict[str, Any]:
    """Rejected inputs by reason (from the manifest's accounting) with a few examples from the error reports."""
    by_reason = dict(doc.accounting.rejected_by_reason) if doc.accounting is not None else {}
    examples: Dict[str, List[Dict[str, str]]] = collections.defaultdict(list)
    rows = 0
    for name in doc.error_files:
        path = storage.join(directory, name)
        if not storage.exists(path):
            continue
        with storage.open_binary(path) as f:
            for line in io.TextIOWrapper(f, encoding="utf-8", errors="replace"):
                if not line.strip():
                    continue
                rows += 1
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue
                reason = str(row.get("reason", "?"))
                if len(examples[reason]) < ERROR_EXAMPLES_PER_REASON:
                    examples[reason].append(
                        {"path": str(row.get("relpath") or row.get("path", "?")), "error": str(row.get("error", ""))}
                    )
    return {"rejected_by_reason": by_reason, "errors_file_rows": rows, "examples": dict(examples)}


def _shard_entries(directory: str, info: SplitInfo, withdrawn: Mapping[str, AbstractSet[int]]) -> List[Dict[str, Any]]:
    out = []
    for shard in info.shards:
        path = storage.join(directory, shard.file)
        present = storage.exists(path)
        out.append(
            {
                "file": shard.file,
                "num_records": shard.num_records,
                "num_bytes": shard.num_bytes,
                "present": present,
                **({"withdrawn": len(withdrawn[shard.file])} if shard.file in withdrawn else {}),
            }
        )
    return out


def summarise(directory: str, limit: int = MAX_RECORDS_PER_SPLIT) -> Dict[str, Any]:
    """The JSON-able summary that ``inspect`` prints. Raises FileNotFoundError / ValueError like ``read_manifest``."""
    doc = records.read_manifest(directory)
    splits = {}
    for name, info in doc.splits.items():
        splits[name] = {
            "num_examples": info.num_examples,
            "num_bytes": info.num_bytes,
            "examples_per_class": dict(info.examples_per_class),
            "shards": _shard_entries(directory, info, doc.withdrawn_by_file()),
            "images": image_stats(directory, doc, name, limit),
        }
    return {
        "path": directory,
        "complete": records.is_complete(directory),
        "tool_version": doc.tool_version,
        "format_version": doc.format_version,
        "created": doc.created,
        "input": doc.input,
        "options": dict(doc.options),
        "compression": doc.compression.value,
        "file_format": doc.file_format,
        "labels": list(doc.labels),
        "accounting": doc.accounting.to_json() if doc.accounting is not None else {},
        "splits": splits,
        "rejected": error_report(directory, doc),
        "statistics": doc.statistics,  # the tf.Transform analysis; None without one
        "generations": [g.to_json() for g in doc.generations],  # each run that wrote here (--append)
    }


# ---------------------------------------------------------------------------
# Text.


def human_bytes(n: Optional[float]) -> str:
    if n is None:
        return "?"
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} TB"


def _counts(counter: Mapping[str, int], top: int = TOP_SIZES) -> str:
    items = list(counter.items())
    text = ", ".join(f"{k} ({v})" for k, v in items[:top])
    if len(items) > top:
        text += f", ... {len(items) - top} more"
    return text or "-"


def _channels(values: Sequence[float]) -> str:
    return "[" + ", ".join(f"{v:.4f}" for v in values) + "]"


def statistics_line(stats: Mapping[str, Any]) -> str:
    """``train pixel mean [...], std [...]``: the analysis' per-channel statistics, in [0, 1] units."""
    return f"{stats['split']} pixel mean {_channels(stats['pixel_mean'])}, std {_channels(stats['pixel_std'])}"


def _analysis_lines(summary: Mapping[str, Any]) -> List[str]:
    """The tf.Transform analysis of ``dataset.json``, or why there is none."""
    stats = summary.get("statistics")
    opts = summary["options"] or {}
    if not stats:
        if opts.get("analyze") is False:
            why = " (converted with --no-analyze)"
        elif opts.get("sequence"):
            why = " (--sequence records are not analysed)"
        elif opts.get("analyze"):
            why = " (no train split)"
        else:
            why = ""
        return [f"tf.Transform analysis: none{why}"]
    transform_fn = stats.get("files", {}).get("transform_fn", output_files.TRANSFORM_FN_DIR)
    lines = [
        f"tf.Transform analysis of the {stats['split']} split ({transform_fn}/, applied by load(..., transform=True)):",
        f"  {statistics_line(stats)} (per channel, pixels scaled to [0, 1])",
    ]
    if stats.get("exact") is True:
        lines.append("  of the stored pixels, as load() decodes them")
    elif stats.get("exact") is False:
        lines.append(
            "  images re-encoded as JPEG counted with the pixels given to the encoder (exact: --exact-statistics)"
        )
    height, width = stats["image_height"], stats["image_width"]
    sizes = (
        f"; height {height['min']}..{height['max']}, width {width['min']}..{width['max']}"
        if stats["num_examples"]
        else ""
    )
    lines.append(f"  {stats['num_examples']} images{sizes}")
    if stats.get("label_vocabulary"):
        classes = len(stats.get("examples_per_class", {}))
        lines.append(
            f"  label vocabulary {stats['label_vocabulary']!r}: {classes} classes, "
            f"in the order of {output_files.LABELS_FILE}"
        )
    return lines


def _class_table(summary: Mapping[str, Any]) -> List[str]:
    """Rows ``id  class  <count per split>  total``, classes in label order, then a totals row."""
    split_names = list(summary["splits"])
    classes = list(summary["labels"])
    for info in summary["splits"].values():
        classes += [c for c in info["examples_per_class"] if c not in classes]
    name_w = max([len("class")] + [len(c) for c in classes])
    col_w = [max(len(s), 6) for s in split_names]

    def row(label_id: str, name: str, cells: Sequence[Any], total: Any) -> str:
        counts = "  ".join(f"{c:>{w}}" for c, w in zip(cells, col_w))
        return f"  {label_id:>4}  {name:<{name_w}}  {counts}  {total:>7}"

    lines = [row("id", "class", split_names, "total")]
    totals = [0] * len(split_names)
    for i, cls in enumerate(classes):
        counts = [int(summary["splits"][s]["examples_per_class"].get(cls, 0)) for s in split_names]
        totals = [t + c for t, c in zip(totals, counts)]
        lines.append(row(str(i) if i < len(summary["labels"]) else "?", cls, counts, sum(counts)))
    lines.append(row("", "total", totals, sum(totals)))
    return lines


def format_summary(summary: Mapping[str, Any], all_classes: bool = False) -> str:
    """The human-readable text of :func:`summarise`'s result: one row per class where classes are few (or
    ``all_classes``), else their spread (``class_counts.py``)."""
    out: List[str] = []
    opts = summary["options"] or {}
    out.append(f"{summary['path']}  (img2tfrecord {summary['tool_version']}, created {summary['created']})")
    if not summary["complete"]:
        out.append(f"WARNING: no {output_files.SUCCESS_FILE} file: the conversion is incomplete")
    out.append(f"input: {summary['input']}")
    size = opts.get("image_size")
    out.append(
        "options: "
        + (f"image size {size[0]}x{size[1]} (WxH, resize {opts.get('resize')})" if size else "original image sizes")
        + f", channels {opts.get('channels')}, format {opts.get('format')}, compression {summary['compression']}"
        + f", file format {summary.get('file_format', output_files.DEFAULT_FILE_FORMAT)}"
    )
    acc = summary["accounting"]
    out.append(
        f"inputs: {acc.get('inputs')} ({acc.get('written')} written, {acc.get('rejected')} rejected, "
        f"{acc.get('skipped', 0)} junk files skipped)"
        + (f"; {acc['withdrawn']} records withdrawn (changed or removed inputs)" if acc.get("withdrawn") else "")
    )
    generations = summary.get("generations") or []
    if len(generations) > 1:
        last = generations[-1]
        out.append(
            f"generations: {len(generations)} (convert --append); the last, {last['generation']}, on "
            f"{last['created']}: {last['inputs']} inputs ({last['written']} written, {last['rejected']} rejected)"
            + (f", {len(last['withdrawn'])} earlier records withdrawn" if last.get("withdrawn") else "")
        )
    out.append(f"classes: {len(summary['labels'])}")
    out.append("")
    per_split = {name: info["examples_per_class"] for name, info in summary["splits"].items()}
    if is_many(summary["labels"], all_classes) and any(per_split.values()):
        out.append("examples per class and split (every class: --all-classes or --json):")
        out.extend(spread_lines(summary["labels"], per_split))
    else:
        out.append("examples per class and split:")
        out.extend(_class_table(summary))
    out.append("")
    out.append("splits and shards:")
    for name, info in summary["splits"].items():
        out.append(
            f"  {name}: {info['num_examples']} examples in {len(info['shards'])} shard(s), "
            f"{human_bytes(info['num_bytes'])}"
        )
        for shard in info["shards"]:
            missing = "" if shard["present"] else "  MISSING"
            out.append(
                f"    {shard['file']}  {shard['num_records']:>8} records  "
                f"{human_bytes(shard['num_bytes']):>10}{missing}"
                + (f"  ({shard['withdrawn']} withdrawn)" if shard.get("withdrawn") else "")
            )
    out.append("")
    out.append("images (read from the records):")
    for name, info in summary["splits"].items():
        img = info["images"]
        scope = (
            f"sampled {img['records_read']} of {info['num_examples']}"
            if img["sampled"]
            else f"{img['records_read']} records"
        )
        out.append(f"  {name} ({scope}):")
        if img["records_read"]:
            w, h = img["width"], img["height"]
            if len(img["sizes"]) == 1:
                out.append(f"    size (WxH): {next(iter(img['sizes']))}")
            else:
                out.append(
                    f"    {len(img['sizes'])} sizes: width {w['min']}..{w['max']} (mean {w['mean']}), "
                    f"height {h['min']}..{h['max']} (mean {h['mean']})"
                )
                out.append(f"    most common (WxH): {_counts(img['sizes'], 5)}")
            out.append(f"    formats: {_counts(img['formats'])}; channels: {_counts(img['channels'])}")
            out.append(f"    mean stored image: {human_bytes(img['mean_encoded_bytes'])}")
        for problem in img["problems"]:
            out.append(f"    cannot read: {problem} (run img2tfrecord verify)")
    out.append("")
    out.extend(_analysis_lines(summary))
    rej = summary["rejected"]
    out.append("")
    if rej["rejected_by_reason"]:
        out.append(f"rejected inputs by reason ({rej['errors_file_rows']} rows in {output_files.ERRORS_FILE}):")
        for reason, n in rej["rejected_by_reason"].items():
            out.append(f"  {reason}: {n}")
            for ex in rej["examples"].get(reason, []):
                out.append(f"    e.g. {ex['path']}: {ex['error']}")
    else:
        out.append("rejected inputs: none")
    return "\n".join(out)


# ---------------------------------------------------------------------------
# Pictures.
