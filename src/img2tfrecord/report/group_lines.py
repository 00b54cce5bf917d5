"""Duplicate groups as JSON: every group, whole, for the groups lines file; the top ones, cut short, for the page."""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from img2tfrecord.report import duplicates as dup


def _record_json(r: dup.Located) -> Dict[str, Any]:
    return {"split": r.split, "class": r.class_name, "filename": r.filename, "shard": r.shard, "index": r.index}


def group_json(g: dup.Group, max_contents: Optional[int] = None, max_records: Optional[int] = None) -> Dict[str, Any]:
    """One duplicate group: every content and record, or the first ``max_contents`` contents with their first
    ``max_records`` records (``content_count`` and each ``record_count`` count them all)."""
    return {
        "kind": g.match,
        "crosses_splits": g.crosses_splits,
        "splits": g.splits,
        "classes": g.classes,
        "size": g.size,
        "pairs": g.pairs,
        "largest_distance": g.largest_distance,
        "content_count": len(g.contents),
        "contents": [
            {
                "sha256": c.sha256,
                "dhash": None if c.dhash is None else f"{c.dhash:016x}",
                "distance": c.distance,
                "record_count": len(c.records),
                "records": [_record_json(r) for r in c.records[:max_records]],
            }
            for c in g.contents[:max_contents]
        ],
    }


class PictureRef(NamedTuple):
    """The record to draw a content of a shown group from."""

    sha256: str
    shard: str
    record_index: int
    offset: int


class TopGroups:
    """The ``count`` first groups in :func:`duplicates.rank_key` order among those offered (ties: first offered
    first), kept cut short to what the page shows, with the records their pictures are drawn from."""

    def __init__(self, count: int, max_contents: int, max_records: int) -> None:
        self.count, self.max_contents, self.max_records = count, max_contents, max_records
        self._kept: List[Tuple[Tuple, int, Dict[str, Any], List[PictureRef]]] = []
        self._offered = 0

    def offer(self, group: dup.Group) -> None:
        refs = [
            PictureRef(c.sha256, c.records[0].shard, c.records[0].index, c.records[0].offset)
            for c in group.contents[: self.max_contents]
        ]
        self._kept.append(
            (dup.rank_key(group), self._offered, group_json(group, self.max_contents, self.max_records), refs)
        )
        self._offered += 1
        if len(self._kept) >= 2 * self.count + 16:  # trimmed now and then: at most about 2x count held
            self._trim()

    def _trim(self) -> None:
        self._kept = sorted(self._kept, key=lambda entry: entry[:2])[: self.count]

    def groups(self) -> List[Dict[str, Any]]:
        self._trim()
        return [entry[2] for entry in self._kept]

    def pictures(self) -> List[PictureRef]:
        self._trim()
        return [ref for entry in self._kept for ref in entry[3]]
