"""A folder or glob of image files: each listed file is one input (``layout.folder_entry``)."""

from __future__ import annotations

from typing import Iterator, Sequence

from img2tfrecord.model import ERRORS, SkippedEntry, WorkItem
from img2tfrecord.sources.inputs import FILES, SKIPPED, Finding, InputSource
from img2tfrecord.sources.layout import folder_entry


class FolderSource(InputSource):
    """The files under ``base`` that ``pattern`` matches; files inside the ``outputs`` folders (earlier
    outputs, relative to ``base``) are not inputs, and junk is skipped."""

    def __init__(self, pattern: str, base: str, outputs: Sequence[str] = ()):
        super().__init__((pattern,))
        self.base = base
        self.outputs = tuple(outputs)

    def is_unit(self, path: str) -> bool:
        return path.startswith(self.base)

    def read(self, path: str, size: int) -> Iterator[Finding]:
        entry = folder_entry(self.base, path, size, self.outputs)
        if entry is None:
            return
        if isinstance(entry, SkippedEntry):
            yield SKIPPED, entry.name
        elif isinstance(entry, WorkItem):
            yield FILES, entry
        else:
            yield ERRORS, entry
