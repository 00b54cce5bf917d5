"""The ``report.json`` document: per split class counts and balance, image sizes, shards, rejects, duplicates.

Everything here is computed from the shard scans' counts (what the records
hold), ``dataset.json`` (what the writer declared), ``errors.jsonl`` and the
duplicate search's totals; no I/O but reading ``errors.jsonl``. The long lists
(a row per class, every duplicate group, every reject) are not in the
document: they are handed, row by row, to a ``line`` callback that writes them
to JSON-lines files beside it, which the document names. Thumbnails are not in
the document either (they go to the HTML page only); it names the sampled records.
"""

from __future__ import annotations

import collections
import heapq
import io
import json
import statistics
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from img2tfrecord import storage
from img2tfrecord.readers import records
from img2tfrecord.report import duplicates as dup
from img2tfrecord.report import outputs
from img2tfrecord.report.shard_scan import UNLABELED, ShardScan, Thumbnail
from img2tfrecord.schemas.dataset_json import DatasetManifest

REPORT_FORMAT_VERSION = 2
TOP_SIZES = 12
HISTOGRAM_BINS = 10
EXTREMES = 5  # the smallest and largest classes named per split
MAX_NAMED = 20  # class names listed where a list could hold every class (the rest are counted)
MAX_REJECTS_PER_REASON_KEPT = 200  # rejects per reason kept for the page (all of them go to the lines file)
MAX_SAMPLE_THUMBNAILS = 400  # samples on the page: per class where classes x per-class fit, else a grid
# Aspect ratio (width / height) bins: [low, high); the middle one counts as square.
ASPECT_EDGES = (0.0, 1 / 3, 1 / 2, 3 / 4, 0.95, 1.05, 4 / 3, 2.0, 3.0, float("inf"))

Line = Callable[[str, Any], None]  # (lines file kind, row): append a row to one of the JSON-lines files


def _error_rows(directory: str, doc: DatasetManifest, problems: List[str]) -> Iterable[Dict[str, str]]:
    """Rows of every generation's error report (``path``, ``relpath``, ``reason``, ``error``); problems met
    reading them are appended to ``problems``."""
    for name in doc.error_files:
        path = storage.join(directory, name)
        try:
            if not storage.exists(path):
                problems.append(f"{name} missing")
                continue
            with storage.open_binary(path) as f:
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
                    yield {k: str(row.get(k, "")) for k in ("path", "relpath", "reason", "error")}
        except Exception as e:  # an unreadable file is a finding, not a crash
            problems.append(f"{name}: unreadable: {type(e).__name__}: {e}")


def rejected_section(directory: str, doc: DatasetManifest, line: Line) -> Tuple[Dict[str, Any], List[str]]:
    """Rejected inputs counted by reason (largest first), each one a line of the rejected-inputs file; per reason,
    the first :data:`MAX_REJECTS_PER_REASON_KEPT` by path kept for the page. Also the problems met reading them."""
    problems: List[str] = []
    counts: Dict[str, int] = collections.Counter()
    kept: Dict[str, List[Tuple[_Descending, str, str]]] = collections.defaultdict(list)  # max-heaps by path
    for row in _error_rows(directory, doc, problems):
        reason = row["reason"] or "?"
        entry = {"reason": reason, "path": row["relpath"] or row["path"], "source": row["path"], "error": row["error"]}
        line(outputs.REJECTED, entry)
        counts[reason] += 1
        heap = kept[reason]
        item = (_Descending(entry["path"]), entry["source"], entry["error"])
        if len(heap) < MAX_REJECTS_PER_REASON_KEPT:
            heapq.heappush(heap, item)
        elif heap[0] < item:
            heapq.heapreplace(heap, item)
    acc = doc.accounting
    declared = dict(acc.rejected_by_reason) if acc is not None else {}
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return {
        "total": sum(counts.values()),
        "declared": acc.rejected if acc is not None else sum(declared.values()),
        "declared_by_reason": declared,
        "by_reason": dict(ordered),
        "shown": {
            reason: [
                {"path": p.text, "source": source, "error": error}
                for p, source, error in sorted(kept[reason], key=lambda item: item[0].text)
            ]
            for reason, _ in ordered
        },
    }, problems


class _Descending:
    """A path that sorts backwards, so a heap of them keeps the smallest paths."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __lt__(self, other: _Descending) -> bool:
        return self.text > other.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Descending) and self.text == other.text


def imbalance(counts: Mapping[str, int]) -> Dict[str, Any]:
    """max / min class count; ``ratio`` None when a class has no example (or there are no classes).
    ``empty_classes`` names at most :data:`MAX_NAMED` of them; ``empty_class_count`` counts them all."""
    if not counts:
        return {"ratio": None, "largest": None, "smallest": None, "empty_classes": [], "empty_class_count": 0}
    largest = max(counts, key=lambda c: (counts[c], c))
    smallest = min(counts, key=lambda c: (counts[c], c))
    empty = sorted(c for c, n in counts.items() if n == 0)
    ratio = round(counts[largest] / counts[smallest], 3) if counts[smallest] else None
    return {
        "ratio": ratio,
        "largest": largest,
        "smallest": smallest,
        "empty_classes": empty[:MAX_NAMED],
        "empty_class_count": len(empty),
    }


def class_spread(counts: Mapping[str, int]) -> Dict[str, Any]:
    """How the examples of one split spread over its classes: min / median / max per class, the
    :data:`EXTREMES` smallest and largest classes, and a histogram of the counts (classes per bin)."""
    if not counts:
        return {"classes": 0, "min": None, "median": None, "max": None, "smallest": [], "largest": [], "histogram": []}
    ranked = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]))
    return {
        "classes": len(counts),
        "min": ranked[0][1],
        "median": statistics.median(counts.values()),
        "max": ranked[-1][1],
        "smallest": [{"class": c, "count": n} for c, n in ranked[:EXTREMES]],
        "largest": [{"class": c, "count": n} for c, n in reversed(ranked[-EXTREMES:])],
        "histogram": histogram(collections.Counter(counts.values())),
    }


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


class SampleMerger:
    """The sample candidates of every shard merged as they come: per class, the ``per_class`` with the smallest
    sample keys (ties by split, file name)."""

    def __init__(self, per_class: int) -> None:
        self.per_class = per_class
        self._kept: Dict[str, List[Thumbnail]] = {}

    def add(self, thumbnails: Iterable[Thumbnail]) -> None:
        for thumb in thumbnails:
            kept = self._kept.setdefault(thumb.class_name, [])
            kept.append(thumb)
            if len(kept) >= 2 * self.per_class + 8:  # trimmed now and then: at most about 2x per class held
                self._kept[thumb.class_name] = self._first(kept)

    def _first(self, thumbnails: List[Thumbnail]) -> List[Thumbnail]:
        return sorted(thumbnails, key=lambda t: (t.sample_key, t.split, t.filename))[: self.per_class]

    def by_class(self) -> Dict[str, List[Thumbnail]]:
        """Per class (by name), its kept thumbnails in sample order."""
        return {c: self._first(kept) for c, kept in sorted(self._kept.items())}


def select_samples(by_class: Mapping[str, Sequence[Thumbnail]], per_class: int) -> Dict[str, Any]:
    """The page's sample: ``per_class`` of every class when they fit in :data:`MAX_SAMPLE_THUMBNAILS`, else a
    grid of that many classes' first thumbnails, the classes picked by the seeded sample keys."""
    if per_class > 0 and len(by_class) * per_class <= MAX_SAMPLE_THUMBNAILS:
        items = [t for c in by_class for t in by_class[c][:per_class]]
        return {"mode": "per_class", "per_class": per_class, "items": items}
    firsts = sorted((items[0] for items in by_class.values() if items), key=lambda t: (t.sample_key, t.class_name))
    grid = sorted(firsts[:MAX_SAMPLE_THUMBNAILS] if per_class > 0 else [], key=lambda t: t.class_name)
    return {"mode": "grid", "per_class": 1, "items": grid}


def duplicates_section(found: dup.Duplicates, top: Sequence[Mapping[str, Any]] = ()) -> Dict[str, Any]:
    """The totals of every group and pair; ``top`` are the groups the page shows (:func:`.group_lines.group_json`)."""

    def totals(counted: dup.MatchTotals, pairs: Mapping[str, int]) -> Dict[str, Any]:
        return {
            "groups": counted.groups,
            "groups_crossing_splits": counted.groups_crossing_splits,
            "records": counted.records,
            "pairs": dict(pairs),
            "cross_split_pairs": sum(n for k, n in pairs.items() if dup.is_cross_split(k)),
        }

    return {
        "hash": "64-bit difference hash (dHash) of each stored image: grayscale, 9x8 box-averaged, "
        "bit = right pixel brighter than left",
        "near_duplicate_distance": found.max_distance,
        "exact": totals(found.exact, found.exact_pairs),
        "near": totals(found.near, found.near_pairs),
        "records_not_hashed": found.unhashed,
        "top_groups": list(top),
    }


def class_rows(
    labels: Sequence[str], per_split: Mapping[str, Mapping[str, int]], doc: DatasetManifest
) -> Iterable[Dict[str, Any]]:
    """A row per class (labels first, in their order, then any other class met): examples per split, total,
    and what ``dataset.json`` declares per split."""
    names = list(labels) + sorted({c for counts in per_split.values() for c in counts} - set(labels))
    for class_name in names:
        examples = {split: int(counts.get(class_name, 0)) for split, counts in per_split.items()}
        declared = {split: info.examples_per_class.get(class_name) for split, info in doc.splits.items()}
        yield {
            "class": class_name,
            "examples": examples,
            "total": sum(examples.values()),
            "declared": {s: n for s, n in declared.items() if n is not None},
        }


def split_section(
    split: str, doc: DatasetManifest, classes: Mapping[str, int], sizes: Mapping[Tuple[int, int], int]
) -> Dict[str, Any]:
    """The figures of one split: its counts, their spread over the classes, balance and image sizes."""
    per_class = {c: int(classes.get(c, 0)) for c in doc.labels}
    per_class.update({c: n for c, n in sorted(classes.items()) if c not in per_class})
    labeled = {c: n for c, n in per_class.items() if c != UNLABELED}
    return {
        "num_examples": sum(classes.values()),
        "declared_examples": doc.splits[split].num_examples,
        "classes": class_spread(labeled),
        "imbalance": imbalance(labeled),
        "images": image_sizes(sizes),
    }


def shard_rows(scans: Sequence[ShardScan], doc: DatasetManifest) -> List[Dict[str, Any]]:
    declared = {shard.file: shard for _, shard in doc.shards()}
    withdrawn = doc.withdrawn_by_file()
    rows = []
    for scan in scans:
        entry = declared.get(scan.file)
        rows.append(
            {
                "split": scan.split,
                "file": scan.file,
                "records": scan.records,  # live ones: withdrawn records are read, not counted
                "withdrawn": len(withdrawn.get(scan.file, ())),
                "declared_records": None if entry is None else entry.num_records,
                "bytes": scan.file_bytes,
                "declared_bytes": None if entry is None else entry.num_bytes,
                "read_to_end": scan.read_to_end,
                "problems": list(scan.problems),
                "problem_count": scan.problem_count,
            }
        )
    return rows


def dataset_section(directory: str, doc: DatasetManifest) -> Dict[str, Any]:
    return {
        "path": directory,
        "complete": records.is_complete(directory),
        "created": doc.created,
        "tool_version": doc.tool_version,
        "input": doc.input,
        "record_type": doc.record_type.value,
        "labeled": doc.labeled,
        "labels": list(doc.labels),
        "options": dict(doc.options),
        "accounting": {} if doc.accounting is None else doc.accounting.to_json(),
    }


def read_section(scans: Sequence[ShardScan], problems: Sequence[str], timing: Mapping[str, Any]) -> Dict[str, Any]:
    """What was read, and what could not be: at most ``MAX_PROBLEMS_PER_SHARD`` problems listed per shard,
    ``problem_count`` counting them all."""
    listed = [f"{s.file}: {p}" for s in scans for p in s.problems] + list(problems)
    return {
        "records": sum(s.records for s in scans),
        "shards": len(scans),
        "complete": not listed,
        "problems": listed,
        "problem_count": sum(s.problem_count for s in scans) + len(problems),
        **dict(timing),
    }


def samples_section(samples: Mapping[str, Any]) -> Dict[str, Any]:
    return {
        "mode": samples["mode"],
        "per_class": samples["per_class"],
        "items": [{"class": t.class_name, "split": t.split, "filename": t.filename} for t in samples["items"]],
    }


def files_section(paths: outputs.ReportPaths, counts: Mapping[str, int]) -> Dict[str, Any]:
    """The JSON-lines files beside report.json, by what they list, with their line counts."""
    return {
        "note": "long lists are JSON lines (one JSON object a line) in these files, beside this one",
        outputs.CLASSES: {"file": paths.name(outputs.CLASSES), "lines": counts.get(outputs.CLASSES, 0)},
        outputs.DUPLICATE_GROUPS: {
            "file": paths.name(outputs.DUPLICATE_GROUPS),
            "lines": counts.get(outputs.DUPLICATE_GROUPS, 0),
        },
        outputs.REJECTED: {"file": paths.name(outputs.REJECTED), "lines": counts.get(outputs.REJECTED, 0)},
    }
