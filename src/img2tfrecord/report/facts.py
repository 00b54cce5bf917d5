"""The ``report.json`` document: per split class counts and balance, image sizes, shards, rejects, duplicates.

Everything here is computed from the shard scans (what the records hold),
``dataset.json`` (what the writer declared) and ``errors.jsonl``; no I/O
but reading ``errors.jsonl``. Thumbnails are not in the document (they go
to the HTML page only); the document names the sampled records.
"""

from __future__ import annotations

import collections
import io
import json
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from img2tfrecord.readers import records
from img2tfrecord.report import duplicates as dup
from img2tfrecord.report.shard_scan import UNLABELED, ShardScan, Thumbnail
from img2tfrecord.schemas.dataset_manifest import DatasetManifest

REPORT_FORMAT_VERSION = 1
TOP_SIZES = 12
HISTOGRAM_BINS = 10
# Aspect ratio (width / height) bins: [low, high); the middle one counts as square.
ASPECT_EDGES = (0.0, 1 / 3, 1 / 2, 3 / 4, 0.95, 1.05, 4 / 3, 2.0, 3.0, float("inf"))


def read_errors(directory: str, doc: DatasetManifest) -> Tuple[List[Dict[str, str]], List[str]]:
    """Rows of every generation's error report (``path``, ``relpath``, ``reason``, ``error``) and the problems
    met reading them."""
    rows: List[Dict[str, str]] = []
    problems: List[str] = []
    for name in doc.error_files:
        path = records.join(directory, name)
        try:
            if not records.exists(path):
                problems.append(f"{name} missing")
                continue
            with records.open_binary(path) as f:
                for number, line in enumerate(io.TextIOWrapper(f, encoding="utf-8", errors="replace"), 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError:
                        problems.append(f"{name}: line {number} is not JSON")
                        continue
                    if not isinstance(row, dict):
                        problems.append(f"{name}: line {number} is not a JSON object")
                        continue
                    rows.append({k: str(row.get(k, "")) for k in ("path", "relpath", "reason", "error")})
        except Exception as e:  # an unreadable file is a finding, not a crash
            problems.append(f"{name}: unreadable: {type(e).__name__}: {e}")
    return rows, problems


def rejected_section(rows: Sequence[Mapping[str, str]], doc: DatasetManifest) -> Dict[str, Any]:
    """Rejected inputs grouped by reason (largest group first), with the manifest's counts beside them."""
    by_reason: Dict[str, List[Dict[str, str]]] = collections.defaultdict(list)
    for row in rows:
        by_reason[row["reason"] or "?"].append(
            {"path": row["relpath"] or row["path"], "source": row["path"], "error": row["error"]}
        )
    ordered = sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    acc = doc.accounting
    declared = dict(acc.rejected_by_reason) if acc is not None else {}
    return {
        "total": len(rows),
        "declared": acc.rejected if acc is not None else sum(declared.values()),
        "declared_by_reason": declared,
        "by_reason": {reason: sorted(items, key=lambda r: r["path"]) for reason, items in ordered},
    }


def imbalance(counts: Mapping[str, int]) -> Dict[str, Any]:
    """max / min class count; ``ratio`` None when a class has no example (or there are no classes)."""
    if not counts:
        return {"ratio": None, "largest": None, "smallest": None, "empty_classes": []}
    largest = max(counts, key=lambda c: (counts[c], c))
    smallest = min(counts, key=lambda c: (counts[c], c))
    empty = sorted(c for c, n in counts.items() if n == 0)
    ratio = round(counts[largest] / counts[smallest], 3) if counts[smallest] else None
    return {"ratio": ratio, "largest": largest, "smallest": smallest, "empty_classes": empty}


def _value_at(ordered: Sequence[Tuple[float, int]], rank: int) -> float:
    """The value of 0-based ``rank`` among values given in order with their counts (``rank`` < their total)."""
    seen = 0
    for value, n in ordered:
        seen += n
        if seen > rank:
            return value
    raise ValueError(f"rank {rank} is past the last of {seen} values")


def _summary(counter: Mapping[float, int]) -> Optional[Dict[str, float]]:
    """min, max, mean and median of values given with their counts."""
    total = sum(counter.values())
    if not total:
        return None
    ordered = sorted(counter.items())
    median_low = _value_at(ordered, (total - 1) // 2)
    median_high = _value_at(ordered, total // 2)
    return {
        "min": ordered[0][0],
        "max": ordered[-1][0],
        "mean": round(sum(v * n for v, n in ordered) / total, 3),
        "median": (median_low + median_high) / 2 if median_low != median_high else median_low,
    }


def histogram(counter: Mapping[float, int], bins: int = HISTOGRAM_BINS) -> List[Dict[str, Any]]:
    """``bins`` equal-width bins ``[low, high)`` (the last one closed) over weighted values."""
    if not counter:
        return []
    low, high = min(counter), max(counter)
    if low == high:
        return [{"low": low, "high": high, "count": sum(counter.values())}]
    width = (high - low) / bins
    counts = [0] * bins
    for value, n in counter.items():
        counts[min(bins - 1, int((value - low) / width))] += n
    return [
        {"low": round(low + i * width, 3), "high": round(low + (i + 1) * width, 3), "count": c}
        for i, c in enumerate(counts)
    ]


def aspect_histogram(sizes: Mapping[Tuple[int, int], int]) -> List[Dict[str, Any]]:
    """Counts of width / height in :data:`ASPECT_EDGES` bins."""
    counts = [0] * (len(ASPECT_EDGES) - 1)
    for (w, h), n in sizes.items():
        ratio = w / h if h else float("inf")
        for i in range(len(counts)):
            if ASPECT_EDGES[i] <= ratio < ASPECT_EDGES[i + 1] or (i == len(counts) - 1 and ratio == float("inf")):
                counts[i] += n
                break
    return [
        {
            "low": round(ASPECT_EDGES[i], 3),
            "high": None if ASPECT_EDGES[i + 1] == float("inf") else round(ASPECT_EDGES[i + 1], 3),
            "count": c,
        }
        for i, c in enumerate(counts)
    ]


def image_sizes(sizes: Mapping[Tuple[int, int], int]) -> Dict[str, Any]:
    """Width, height and aspect ratio distributions of the stored images of one split."""
    widths: collections.Counter = collections.Counter()
    heights: collections.Counter = collections.Counter()
    aspects: collections.Counter = collections.Counter()
    for (w, h), n in sizes.items():
        widths[w] += n
        heights[h] += n
        if h:
            aspects[round(w / h, 4)] += n
    top = sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_SIZES]
    return {
        "distinct_sizes": len(sizes),
        "most_common": [{"width": w, "height": h, "count": n} for (w, h), n in top],
        "width": _summary(widths),
        "height": _summary(heights),
        "aspect_ratio": _summary(aspects),
        "width_histogram": histogram(widths),
        "height_histogram": histogram(heights),
        "aspect_ratio_histogram": aspect_histogram(sizes),
    }


def select_samples(thumbnails: Iterable[Thumbnail], per_class: int) -> Dict[str, List[Thumbnail]]:
    """Per class, the ``per_class`` thumbnails with the smallest sample keys (ties by split, file name)."""
    by_class: Dict[str, List[Thumbnail]] = collections.defaultdict(list)
    for thumb in thumbnails:
        by_class[thumb.class_name].append(thumb)
    return {
        c: sorted(items, key=lambda t: (t.sample_key, t.split, t.filename))[:per_class]
        for c, items in sorted(by_class.items())
    }


def _record_json(r: dup.Located) -> Dict[str, Any]:
    return {"split": r.split, "class": r.class_name, "filename": r.filename, "shard": r.shard, "index": r.index}


def duplicates_section(found: dup.Duplicates) -> Dict[str, Any]:
    def totals(kind: str, pairs: Mapping[str, int]) -> Dict[str, Any]:
        groups = [g for g in found.groups if g.kind == kind]
        return {
            "groups": len(groups),
            "groups_crossing_splits": sum(g.crosses_splits for g in groups),
            "records": sum(len(g.records) for g in groups),
            "pairs": dict(pairs),
            "cross_split_pairs": sum(n for k, n in pairs.items() if dup.is_cross_split(k)),
        }

    return {
        "hash": "64-bit difference hash (dHash) of each stored image: grayscale, 9x8 box-averaged, "
        "bit = right pixel brighter than left",
        "near_duplicate_distance": found.max_distance,
        "exact": totals(dup.EXACT, found.exact_pairs),
        "near": totals(dup.NEAR, found.near_pairs),
        "records_not_hashed": found.unhashed,
        "groups": [
            {
                "kind": g.kind,
                "crosses_splits": g.crosses_splits,
                "splits": g.splits,
                "classes": g.classes,
                "size": len(g.records),
                "pairs": g.pairs,
                "largest_distance": g.largest_distance,
                "contents": [
                    {
                        "sha256": c.sha256,
                        "dhash": None if c.dhash is None else f"{c.dhash:016x}",
                        "distance": c.distance,
                        "records": [_record_json(r) for r in c.records],
                    }
                    for c in g.contents
                ],
            }
            for g in found.groups
        ],
    }


def build_document(
    *,
    directory: str,
    doc: DatasetManifest,
    scans: Sequence[ShardScan],
    found: dup.Duplicates,
    samples: Mapping[str, Sequence[Thumbnail]],
    error_rows: Sequence[Mapping[str, str]],
    problems: Sequence[str],
    options: Mapping[str, Any],
    timing: Mapping[str, Any],
) -> Dict[str, Any]:
    """The whole ``report.json`` document. ``problems`` are those met outside the shards (manifest, errors.jsonl)."""
    labels = list(doc.labels)
    splits: Dict[str, Any] = {}
    for split in dup.split_order(doc.splits):
        info = doc.splits[split]
        split_scans = [s for s in scans if s.split == split]
        classes = collections.Counter(r.class_name for s in split_scans for r in s.records)
        per_class = {c: int(classes.get(c, 0)) for c in labels}
        per_class.update({c: n for c, n in sorted(classes.items()) if c not in per_class})
        sizes = collections.Counter((r.width, r.height) for s in split_scans for r in s.records)
        splits[split] = {
            "num_examples": sum(classes.values()),
            "declared_examples": info.num_examples,
            "examples_per_class": per_class,
            "declared_examples_per_class": dict(info.examples_per_class),
            "imbalance": imbalance({c: n for c, n in per_class.items() if c != UNLABELED}),
            "images": image_sizes(sizes),
        }
    shard_rows = []
    declared = {shard.file: shard for _, shard in doc.shards()}
    withdrawn = doc.withdrawn_by_file()
    for scan in scans:
        entry = declared.get(scan.file)
        shard_rows.append(
            {
                "split": scan.split,
                "file": scan.file,
                "records": len(scan.records),  # live ones: withdrawn records are read, not counted
                "withdrawn": len(withdrawn.get(scan.file, ())),
                "declared_records": None if entry is None else entry.num_records,
                "bytes": scan.file_bytes,
                "declared_bytes": None if entry is None else entry.num_bytes,
                "read_to_end": scan.read_to_end,
                "problems": list(scan.problems),
            }
        )
    unreadable = [f"{s.file}: {p}" for s in scans for p in s.problems] + list(problems)
    records_read = sum(len(s.records) for s in scans)
    return {
        "report_format_version": REPORT_FORMAT_VERSION,
        "dataset": {
            "path": directory,
            "complete": records.is_complete(directory),
            "created": doc.created,
            "tool_version": doc.tool_version,
            "input": doc.input,
            "record_type": doc.record_type.value,
            "labeled": doc.labeled,
            "labels": labels,
            "options": dict(doc.options),
            "accounting": {} if doc.accounting is None else doc.accounting.to_json(),
        },
        "options": dict(options),
        "read": {
            "records": records_read,
            "shards": len(scans),
            "complete": not unreadable,
            "problems": unreadable,
            **dict(timing),
        },
        "splits": splits,
        "shards": shard_rows,
        "samples": {c: [{"split": t.split, "filename": t.filename} for t in items] for c, items in samples.items()},
        "rejected": rejected_section(error_rows, doc),
        "duplicates": duplicates_section(found),
    }
