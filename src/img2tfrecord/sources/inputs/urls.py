"""URL lists: each row naming a URL (``--url-column``) is one input, keyed by its URL; a URL named again
is the same input (converted once, the repeat reported as ``duplicate``)."""

from __future__ import annotations

from typing import Iterator, NamedTuple, Optional, Sequence, Set, Union

from img2tfrecord.model import DUPLICATE, ERRORS, ErrorRow, MetadataValue, RowPlacement, WorkItem, error_row
from img2tfrecord.sources import url_lists
from img2tfrecord.sources.inputs import FILES, Finding, InputSource


class UrlFound(NamedTuple):
    """One row of a URL list: its work item (path and relpath: the URL), or the error row of a repeat."""

    found: Union[WorkItem, ErrorRow]
    label: Optional[str]

    @property
    def ok(self) -> bool:
        return isinstance(self.found, WorkItem)


def work_item(row: url_lists.UrlRow, labeled: bool) -> WorkItem:
    """The work item of a row: keyed by its URL, placed by hash (its label when the list has labels)."""
    metadata = []
    if row.caption is not None:
        metadata.append(MetadataValue(url_lists.CAPTION_FIELD, "bytes", (row.caption.encode("utf-8"),)))
    if row.extra:
        metadata.append(MetadataValue(url_lists.EXTRA_FIELD, "bytes", (row.extra.encode("utf-8"),)))
    return WorkItem(
        row.url, row.url, 0, row=RowPlacement(None, row.label if labeled else None), metadata=tuple(metadata)
    )


class UrlSource(InputSource):
    """The URL lists ``pattern`` matches, read with ``columns``."""

    def __init__(self, pattern: str, columns: url_lists.Columns):
        super().__init__((pattern,))
        self.columns = columns

    def is_unit(self, path: str) -> bool:
        return url_lists.list_kind(path) is not None

    def rows(self, paths: Sequence[str]) -> Iterator[UrlFound]:
        """Every row of the lists at ``paths``, in order; a URL seen before gives a ``duplicate`` error row."""
        seen: Set[str] = set()
        labeled = self.columns.label is not None
        for path in paths:
            for row in url_lists.url_rows(path, self.columns):
                if row.url in seen:
                    where = f"{path}:{row.line}"
                    yield UrlFound(error_row(where, where, DUPLICATE, f"{row.url} is named before"), None)
                    continue
                seen.add(row.url)
                yield UrlFound(work_item(row, labeled), row.label if labeled else None)

    def read(self, path: str, size: int) -> Iterator[Finding]:
        for row in self.rows([path]):
            yield (FILES, row.found) if row.ok else (ERRORS, row.found)
