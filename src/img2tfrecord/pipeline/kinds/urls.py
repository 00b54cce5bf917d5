"""URL lists (``.parquet``, ``.csv``, ``.tsv``, ``.jsonl``, ``.txt`` of image URLs): their plan, source, ledger
(one entry per URL) and converter (downloads in the workers: ``conversion/url_converter.py``)."""

from __future__ import annotations

import hashlib
from typing import Any, List, Optional, Sequence, Set, Tuple

from img2tfrecord.conversion.appends import TRANSIENT_REASONS
from img2tfrecord.conversion.converter import Converter
from img2tfrecord.conversion.record_sizes import estimated_record_bytes
from img2tfrecord.model import Item, RowPlacement, WorkItem
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.kinds.base import InputKind, run_splits
from img2tfrecord.pipeline.kinds.common import option_splits, rows_split_bytes
from img2tfrecord.pipeline.kinds.ledger import ReadAtLaunch
from img2tfrecord.pipeline.listing import file_pattern, list_input
from img2tfrecord.pipeline.plan_model import InputPlan, Plan, PlanError
from img2tfrecord.pipeline.sizing import sized
from img2tfrecord.schemas.ledger import LedgerEntry, row_text
from img2tfrecord.sources import downloads, url_lists
from img2tfrecord.sources import layout as layouts
from img2tfrecord.sources.input_paths import GLOB_CHARS
from img2tfrecord.sources.inputs import InputSource
from img2tfrecord.sources.inputs.urls import UrlSource

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
    source = UrlSource(pattern, cols)
    split_names = option_splits(config)
    image = config.image
    mean = ASSUMED_IMAGE_BYTES if image.size is None else min(ASSUMED_IMAGE_BYTES, image.size[0] * image.size[1] // 4)
    record_bytes = estimated_record_bytes(mean, 1.0)
    h = hashlib.sha256()
    count = 0

    def keyed():
        nonlocal count
        for row in source.rows(found):
            count += 1
            if row.ok:
                item = row.found
                h.update(f"{item.path}\t{row.label}\t{item.metadata}\n".encode("utf-8", "surrogateescape"))
                yield None, item.relpath

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

    def ledger(self, config: ConvertConfig, plan: Plan) -> Optional[ReadAtLaunch]:
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

    def class_noun(self, plan: Plan) -> str:
        return "label(s)"


class UrlLedger(ReadAtLaunch):
    """One entry per distinct URL, keyed by the URL (its label, when the list has labels, part of the entry);
    a repeated URL's row is keyed by where it is (``list:line``). With ``--retry-failed`` an append downloads
    again the URLs whose last attempt failed for a transient reason."""

    noun = "URL(s)"

    def __init__(self, config: ConvertConfig, plan: Plan):
        super().__init__(config, plan)
        if config.urls.retry_failed:  # without it an append converts only URLs not seen before
            self.transient_reasons = TRANSIENT_REASONS + downloads.TRANSIENT
        labeled = plan.input.labeled
        source = url_source(config, plan)
        _, _, found = list_files(config)
        for row in source.rows(found):
            item = row.found
            placement = row_text(row.label, None) if labeled and row.ok else ""
            self._add(LedgerEntry(self.key_of(item), 0 if row.ok else -1, 0.0, placement), item)
        self.entries.sort()

    def placed_item(self, entry: LedgerEntry) -> Optional[Item]:
        label, _ = entry.placement()
        return WorkItem(entry.relpath, entry.relpath, 0, row=RowPlacement(None, label))
