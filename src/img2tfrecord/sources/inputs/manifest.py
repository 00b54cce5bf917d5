"""CSV/JSONL manifests: each row naming an image (path[, label][, split]) is one input."""

from __future__ import annotations

from typing import Iterable, Iterator, NamedTuple, Optional, Sequence, Tuple, Union

from img2tfrecord.model import ERRORS, ErrorRow, WorkItem
from img2tfrecord.sources import manifests
from img2tfrecord.sources.inputs import FILES, Finding, InputSource


class Row(NamedTuple):
    """One manifest row: its work item or error row, and the label and split it names as written
    (the split folded as ``canonical_split``; None where the manifest has no such column)."""

    found: Union[WorkItem, ErrorRow]
    label: Optional[str]
    split: Optional[str]

    @property
    def ok(self) -> bool:
        return isinstance(self.found, WorkItem)


class ManifestSource(InputSource):
    """The manifests ``pattern`` matches; ``labeled``/``has_split``: the columns the plan found."""

    def __init__(self, pattern: str, labeled: bool, has_split: bool, split_names: Sequence[str]):
        super().__init__((pattern,))
        self.labeled = labeled
        self.has_split = has_split
        self.split_names = tuple(split_names)

    def is_unit(self, path: str) -> bool:
        return manifests.manifest_format(path) is not None

    def rows(self, path: str, parsed: Optional[Iterable[Tuple[int, dict]]] = None) -> Iterator[Row]:
        """Every row of the manifest at ``path``, in order (``parsed``: its ``manifest_rows``, read already)."""
        for number, row in manifests.manifest_rows(path) if parsed is None else parsed:
            _, out = manifests.row_to_source(path, number, row, self.labeled, self.has_split, self.split_names)
            good = "error" not in row
            label = str(row.get("label", "")) if self.labeled and good else None
            split = manifests.canonical_split(str(row.get("split", ""))) if self.has_split and good else None
            yield Row(out, label, split)

    def read(self, path: str, size: int) -> Iterator[Finding]:
        for row in self.rows(path):
            yield (FILES, row.found) if row.ok else (ERRORS, row.found)
