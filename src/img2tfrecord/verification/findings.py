"""What ``verify`` found: problems per scope, capped per scope, and the report as text or JSON."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Dict, List, Optional

MAX_PROBLEMS_PER_SCOPE = 20
DATASET_SCOPE = "dataset"


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
    records_checked: int = 0  # every record read, withdrawn ones included
    withdrawn_checked: int = 0  # of those, the records --accept-changes withdrew (readers skip them)
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
            "withdrawn_checked": self.withdrawn_checked,
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
                f"OK: {self.path}: {self._records()} in {self.shards_checked} shards verified "
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
        lines.append(f"{self._records()} in {self.shards_checked} shards checked")
        return "\n".join(lines)

    def _records(self) -> str:
        """``25 records (3 of them withdrawn, which readers skip)``: every record read is checked."""
        withdrawn = (
            f" ({self.withdrawn_checked} of them withdrawn, which readers skip)" if self.withdrawn_checked else ""
        )
        return f"{self.records_checked} records{withdrawn}"
