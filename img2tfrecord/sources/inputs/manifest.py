"""CSV/JSONL manifests: each row naming an image (path[, label][, split]) is one input."""

from __future__ import annotations

from typing import Iterator, Sequence

from img2tfrecord.model import ERRORS
from img2tfrecord.sources import manifests
from img2tfrecord.sources.inputs import FILES, Finding, InputSource
from img2tfrecord.sources.kinds import INPUT_MANIFEST


class ManifestSource(InputSource):
    """The manifests ``pattern`` matches; ``labeled``/``has_split``: the columns the plan found."""

    kind = INPUT_MANIFEST

    def __init__(self, pattern: str, labeled: bool, has_split: bool, split_names: Sequence[str]):
        super().__init__((pattern,))
        self.labeled = labeled
        self.has_split = has_split
        self.split_names = tuple(split_names)

    def read(self, path: str, size: int) -> Iterator[Finding]:
        for number, row in manifests.manifest_rows(path):
            ok, out = manifests.row_to_source(path, number, row, self.labeled, self.has_split, self.split_names)
            yield (FILES, out) if ok else (ERRORS, out)
