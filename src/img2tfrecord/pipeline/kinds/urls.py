"""URL lists (``.parquet``, ``.csv``, ``.tsv``, ``.jsonl``, ``.txt`` of image URLs): their plan, source, ledger
(one entry per URL) and converter (downloads in the workers: ``conversion/url_converter.py``)."""

from __future__ import annotations

import bisect
import hashlib
import heapq
from array import array
from typing import Any, Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

from img2tfrecord.conversion.appends import TRANSIENT_REASONS
from img2tfrecord.conversion.converter import Converter
from img2tfrecord.conversion.record_sizes import estimated_record_bytes
from img2tfrecord.model import DUPLICATE, ErrorRow, Item, RowPlacement, WorkItem, error_row
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.kinds.base import InputKind, run_splits
from img2tfrecord.pipeline.kinds.common import option_splits, rows_split_bytes
from img2tfrecord.pipeline.kinds.ledger import InputLedger, ListedItems
from img2tfrecord.pipeline.listing import file_pattern, list_input
from img2tfrecord.pipeline.plan_model import InputPlan, Plan, PlanError
from img2tfrecord.pipeline.sizing import sized
from img2tfrecord.schemas import features
from img2tfrecord.schemas.ledger import LedgerEntry, row_text
from img2tfrecord.sources import downloads, url_lists
from img2tfrecord.sources import layout as layouts
from img2tfrecord.sources.input_paths import GLOB_CHARS
from img2tfrecord.sources.inputs import InputSource
from img2tfrecord.sources.inputs.urls import UrlSource, work_item

# What the plan assumes one downloaded image weighs (the list does not say): a web image of about 500x400.
ASSUMED_IMAGE_BYTES = 60_000


def list_files(config: ConvertConfig) -> Tuple[str, str, List[str]]:
    """``(base, pattern, the URL lists it matches)``."""
    base, pattern = file_pattern(config.input)
    return base, pattern, sorted(p for p, _ in list_input(pattern) if url_lists.list_kind(p))


def list_columns(config: ConvertConfig, paths: Sequence[str]) -> url_lists.Columns:
    """The columns every list is read with; PlanError when a list lacks one or the lists differ."""
    urls = config.urls
    found: Set[url_lists.Columns] = set()
    for path in paths:
        try:
            names = url_lists.header(path)
        except (OSError, UnicodeDecodeError) as e:
            raise PlanError(f"cannot read URL list {path}: {type(e).__name__}: {e}") from e
        except Exception as e:  # pylint: disable=broad-except  # a Parquet file pyarrow cannot read
            raise PlanError(f"cannot read URL list {path}: {type(e).__name__}: {e}") from e
        try:
            found.add(url_lists.columns(names, urls.url_column, urls.caption_column, urls.label_column, path))
        except url_lists.UrlListError as e:
            raise PlanError(str(e)) from None
    if len(found) > 1:
        raise PlanError("the URL lists differ in their caption or label columns: give lists with the same columns")
    return found.pop()


def plan_urls(config: ConvertConfig, whole: bool = True) -> Plan:
    """The plan of URL lists: every row read once (streamed), their URLs hashed into the listing digest."""
    base, pattern, found = list_files(config)
    if not found:
        raise PlanError(f"no URL lists (.parquet, .csv, .tsv, .jsonl, .txt) match {pattern}")
    cols = list_columns(config, found)
    split_names = option_splits(config)
    image = config.image
    mean = ASSUMED_IMAGE_BYTES if image.size is None else min(ASSUMED_IMAGE_BYTES, image.size[0] * image.size[1] // 4)
    record_bytes = estimated_record_bytes(mean, 1.0)
    h = hashlib.sha256()
    count = 0
    labeled = cols.label is not None

    def keyed():  # every row, a repeated URL too: no set of the URLs seen is held (the ledger finds repeats)
        nonlocal count
        for path in found:
            for row in url_lists.url_rows(path, cols):
                count += 1
                h.update(f"{row.url}\t{row.label}\t{row.caption}\t{row.extra}\n".encode("utf-8", "surrogateescape"))
                yield None, work_item(row, labeled).relpath

    split_bytes = rows_split_bytes(config, split_names, keyed(), record_bytes)
    if not count:
        raise PlanError(f"{', '.join(found)}: no rows naming a URL (column {cols.url!r})")
    return Plan(
        InputPlan(
            base=base,
            pattern=pattern,
            layout=layouts.LAYOUT_MANIFEST,
            split_names=split_names,
            labeled=cols.label is not None,
            listing_digest=h.hexdigest(),
        ),
        sized(config, split_names, split_bytes, count, count * mean, 1.0),
    )


def url_source(config: ConvertConfig, plan: Plan) -> UrlSource:
    _, _, found = list_files(config)
    return UrlSource(plan.input.pattern, list_columns(config, found))


class UrlList(InputKind):
    """A list of image URLs (with captions, labels and other columns): each row one record, downloaded in
    the workers. A .txt or .parquet always; a .csv/.tsv/.jsonl with the URL column and no ``path`` column."""

    name = "urls"
    batch_size = 256  # a task's downloads overlap: more of them keep the process's requests in flight

    def claims(self, config: ConvertConfig) -> bool:
        path = config.input
        if url_lists.list_kind(path) is None:
            return False
        if not GLOB_CHARS.search(path):
            return url_lists.is_url_list(path, config.urls.url_column)
        _, _, found = list_files(config)
        return bool(found) and url_lists.is_url_list(found[0], config.urls.url_column)

    def plan(self, config: ConvertConfig, whole: bool) -> Optional[Plan]:
        return plan_urls(config, whole)

    def source(self, config: ConvertConfig, plan: Plan) -> InputSource:
        return url_source(config, plan)

    def ledger(self, config: ConvertConfig, plan: Plan) -> Optional[InputLedger]:
        return UrlLedger(config, plan)

    def converter(self, config: ConvertConfig, plan: Plan) -> Converter[Any]:
        from img2tfrecord.conversion.url_converter import UrlConverter
        from img2tfrecord.schemas import transformed

        sums_split = transformed.ANALYZED_SPLIT if config.analyze else None
        return UrlConverter(
            config.image,
            plan.input.layout,
            run_splits(config),
            config.seed,
            config.urls.download,
            sums_split,
            config.exact_statistics,
        )

    def feature_spec(self, config: ConvertConfig, plan: Plan) -> Optional[Dict[str, Dict[str, Any]]]:
        _, _, found = list_files(config)
        caption = list_columns(config, found).caption is not None
        return features.feature_spec_json(labeled=plan.input.labeled, url=True, caption=caption)

    def class_noun(self, plan: Plan) -> str:
        return "label(s)"


class UrlLedger(InputLedger):
    """One entry per distinct URL, keyed by the URL (its label, when the list has labels, part of the entry);
    a repeated URL's row is keyed by where it is (``list:line``). With ``--retry-failed`` an append downloads
    again the URLs whose last attempt failed for a transient reason.

    Held compactly (:class:`UrlTable`: one bytes value per row, sorted), and a row's entry and work item made
    as they are read: a list of a million URLs is not held as a million work items."""

    noun = "URL(s)"

    def __init__(self, config: ConvertConfig, plan: Plan):
        super().__init__(config, plan)
        if config.urls.retry_failed:  # without it an append converts only URLs not seen before
            self.transient_reasons = TRANSIENT_REASONS + downloads.TRANSIENT
        _, _, found = list_files(config)
        self.table = UrlTable(found, list_columns(config, found))
        self.entries: Sequence[LedgerEntry] = self.table

    def work_items(self, entries: Sequence[LedgerEntry]) -> ListedItems:
        if entries is self.entries:
            return ListedItems(self.table.items(), self.table.rejected())
        items: List[Item] = []
        rejected: List[ErrorRow] = []
        for entry in entries:
            found = self.table.found(entry.relpath)
            if isinstance(found, WorkItem):
                items.append(found)
            elif found is not None:
                rejected.append(found)
        return ListedItems(items, rejected)

    def placed_item(self, entry: LedgerEntry) -> Optional[Item]:
        label, _ = entry.placement()
        return WorkItem(entry.relpath, entry.relpath, 0, row=RowPlacement(None, label))


_SEP = "\0"  # between a row's fields: no URL, label or JSON text holds it (a caption may: it comes last)
_CAPTION = "c"  # before a caption that is given (none: an empty field)


class UrlTable(Sequence[LedgerEntry]):
    """The rows of URL lists as ledger entries sorted by key, held as one bytes value per row (``URL NUL order
    NUL label NUL extra NUL c+caption``); a repeated URL's rows apart (few), keyed ``list:line``. A row's entry and
    work item are made as they are read."""

    def __init__(self, paths: Sequence[str], cols: url_lists.Columns):
        self._labeled = cols.label is not None
        rows: List[bytes] = []
        lines = array("L")  # each row's line in its list, while repeats are found
        starts: List[int] = []  # the first row of each list
        for path in paths:
            starts.append(len(rows))
            for row in url_lists.url_rows(path, cols):
                caption = "" if row.caption is None else _CAPTION + row.caption
                fields = (row.url, f"{len(rows):012x}", row.label or "", row.extra, caption)
                rows.append(_SEP.join(fields).encode("utf-8", "surrogateescape"))
                lines.append(row.line)
        rows.sort()  # by URL, then by order: a URL's first row first
        kept: List[bytes] = []
        repeats: List[Tuple[str, str]] = []  # (list:line, URL)
        previous = None
        for blob in rows:
            url, order, _ = blob.split(b"\0", 2)
            if url == previous:
                number = int(order, 16)
                where = f"{paths[bisect.bisect_right(starts, number) - 1]}:{lines[number]}"
                repeats.append((where, url.decode("utf-8", "surrogateescape")))
            else:
                kept.append(blob)
            previous = url
        del rows, lines
        self._rows = kept
        self._repeats = sorted(repeats)

    def __len__(self) -> int:
        return len(self._rows) + len(self._repeats)

    def __iter__(self) -> Iterator[LedgerEntry]:
        repeated = (LedgerEntry(key, -1, 0.0, "") for key, _ in self._repeats)
        return heapq.merge((self.entry(i) for i in range(len(self._rows))), repeated)

    def __getitem__(self, index):
        if not self._repeats:
            if isinstance(index, slice):
                return [self.entry(i) for i in range(len(self._rows))[index]]
            return self.entry(range(len(self._rows))[index])
        return list(self)[index]  # repeats are rare: read in order

    def _split(self, index: int) -> Tuple[str, Tuple[Optional[str], Optional[str], str]]:
        """``(URL, (label, caption, extra))`` of the row at ``index``."""
        url, _, label, extra, caption = self._rows[index].decode("utf-8", "surrogateescape").split(_SEP, 4)
        return url, (label or None, caption[1:] if caption else None, extra)

    def entry(self, index: int) -> LedgerEntry:
        url, (label, _, _) = self._split(index)
        return LedgerEntry(url, 0, 0.0, row_text(label, None) if self._labeled else "")

    def item(self, index: int) -> WorkItem:
        url, (label, caption, extra) = self._split(index)
        return work_item(url_lists.UrlRow(0, url, caption, label, extra), self._labeled)

    def items(self) -> Sequence[WorkItem]:
        """The work items of the distinct URLs, in key order (made as they are read)."""
        return _Items(self)

    def rejected(self) -> List[ErrorRow]:
        """The error rows of the repeated URLs' rows."""
        return [error_row(key, key, DUPLICATE, f"{url} is named before") for key, url in self._repeats]

    def found(self, key: str) -> Optional[Union[WorkItem, ErrorRow]]:
        """The work item or error row of the ledger key ``key``; None when no row has it."""
        wanted = key.encode("utf-8", "surrogateescape")
        i = bisect.bisect_left(self._rows, wanted + b"\0")
        if i < len(self._rows) and self._rows[i].split(b"\0", 1)[0] == wanted:
            return self.item(i)
        for where, url in self._repeats:
            if where == key:
                return error_row(key, key, DUPLICATE, f"{url} is named before")
        return None


class _Items(Sequence[WorkItem]):
    def __init__(self, table: UrlTable):
        self._table = table

    def __len__(self) -> int:
        return len(self._table._rows)

    def __iter__(self) -> Iterator[WorkItem]:
        return (self._table.item(i) for i in range(len(self)))

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._table.item(i) for i in range(len(self))[index]]
        return self._table.item(range(len(self))[index])
