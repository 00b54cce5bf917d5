"""URL lists as inputs, without Beam: which files are URL lists, their columns, their rows, streamed.

A URL list is a ``.txt`` (one URL per line; blank lines and ``#`` comments skipped), a ``.parquet``, or a
``.csv``/``.tsv``/``.jsonl`` whose columns hold the URL column (``--url-column``, default ``url``) and no
``path`` column (a file with a ``path`` column is a manifest of images: ``sources/manifests.py``).
Each row gives one :class:`UrlRow`: the URL, its caption, its label and its other columns as JSON text.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from img2tfrecord.sources.archives import suffix_format
from img2tfrecord.sources.downloads import (
    DEFAULT_CONCURRENCY,
    DEFAULT_OPT_OUT,
    DEFAULT_PER_HOST,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    DownloadOptions,
)
from img2tfrecord.sources.files import open_raw

URL_LIST_SUFFIXES = ((".txt", "txt"), (".parquet", "parquet"), (".csv", "csv"), (".tsv", "tsv"), (".jsonl", "jsonl"))
ALWAYS_URL_LISTS = ("txt", "parquet")  # no manifest of images has these suffixes
DEFAULT_URL_COLUMN = "url"
CAPTION_COLUMNS = ("caption", "text")  # the caption column when --caption-column is not given: the first present
MANIFEST_PATH_COLUMN = "path"  # what makes a CSV/JSONL a manifest of images instead
CAPTION_FIELD = "caption"  # the work item's metadata value that becomes the record's image/text
EXTRA_FIELD = "json"  # the work item's metadata value holding the row's other columns: metadata/json
DEFAULT_URL_ERROR_BUDGET = 0.5  # --max-error-rate of a URL list: a share of any web list is gone


@dataclasses.dataclass(frozen=True)
class UrlOptions:
    """A URL list's options: its columns, how URLs are fetched, and ``retry_failed`` (an append downloads
    again the URLs whose last attempt failed for a transient reason)."""

    url_column: str = DEFAULT_URL_COLUMN
    caption_column: Optional[str] = None
    label_column: Optional[str] = None
    download: DownloadOptions = DownloadOptions()
    retry_failed: bool = False

    def error_budget(self, input_path: str) -> Optional[float]:
        """The default ``--max-error-rate`` of ``--input``: DEFAULT_URL_ERROR_BUDGET for a URL list, else None."""
        return DEFAULT_URL_ERROR_BUDGET if is_url_list(input_path, self.url_column) else None

    def recorded(self) -> Dict[str, Any]:
        """What decides a URL list's records, as ``dataset.json`` records it."""
        return {
            "url_column": self.url_column,
            "caption_column": self.caption_column,
            "label_column": self.label_column,
            "opt_out": ",".join(self.download.opt_out),
        }


class UrlListError(ValueError):
    """A URL list that cannot be used at all (a usage error at launch)."""


class UrlRow(NamedTuple):
    """One row of a URL list: ``line`` its 1-based row (data rows, the header not counted), ``extra`` the
    JSON text of its other columns ("" when there are none)."""

    line: int
    url: str
    caption: Optional[str]
    label: Optional[str]
    extra: str


class Columns(NamedTuple):
    """The columns a URL list's rows are read with: the URL's, the caption's and the label's (None: none)."""

    url: str
    caption: Optional[str]
    label: Optional[str]


def list_kind(path: str) -> Optional[str]:
    """``txt``, ``parquet``, ``csv``, ``tsv``, ``jsonl`` or None, by the file name."""
    return suffix_format(path, URL_LIST_SUFFIXES)


def header(path: str) -> List[str]:
    """The column names of the list at ``path`` (a .txt has one: the URL column)."""
    kind = list_kind(path)
    if kind == "txt":
        return []
    if kind == "parquet":
        import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel

        with open_raw(path) as f:
            return list(pq.ParquetFile(f).schema_arrow.names)
    if kind in ("csv", "tsv"):
        for cells in csv.reader(_text_lines(path), delimiter=_delimiter(path)):
            if cells and any(c.strip() for c in cells):
                return [c.strip() for c in cells]
        return []
    if kind == "jsonl":
        for line in _text_lines(path):
            if line.strip():
                try:
                    obj = json.loads(line)
                except ValueError:
                    return []
                return list(obj) if isinstance(obj, dict) else []
    return []


def is_url_list(path: str, url_column: str = DEFAULT_URL_COLUMN) -> bool:
    """Whether the file at ``path`` is a URL list: a .txt or .parquet, or a CSV/TSV/JSONL whose first row names
    ``url_column`` and no ``path`` column. Unreadable: False (the manifest kind reports it)."""
    kind = list_kind(path)
    if kind is None:
        return False
    if kind in ALWAYS_URL_LISTS:
        return True
    try:
        names = header(path)
    except (OSError, UnicodeDecodeError):
        return False
    return url_column in names and MANIFEST_PATH_COLUMN not in names


def columns(names: Sequence[str], url: str, caption: Optional[str], label: Optional[str], where: str) -> Columns:
    """The columns to read, checked against a list's column ``names`` (empty: a .txt); UrlListError when one
    given is missing."""
    if not names:
        if caption or label:
            raise UrlListError(f"{where}: a .txt list holds only URLs; --caption-column/--label-column need columns")
        return Columns(url, None, None)
    for flag, name in (("--url-column", url), ("--caption-column", caption), ("--label-column", label)):
        if name and name not in names:
            raise UrlListError(f"{where}: no column {name!r} ({flag}); its columns: {', '.join(names)}")
    if caption is None:
        caption = next((c for c in CAPTION_COLUMNS if c in names), None)
    return Columns(url, caption, label)


def url_rows(path: str, cols: Columns) -> Iterator[UrlRow]:
    """Every row of the list at ``path``, in order, streamed; a row with no URL is skipped (a blank line)."""
    kind = list_kind(path)
    if kind == "txt":
        number = 0
        for line in _text_lines(path):
            text = line.strip()
            if text and not text.startswith("#"):
                number += 1
                yield UrlRow(number, text, None, None, "")
        return
    for number, values in enumerate(_records(path, kind), 1):
        url = _text(values.get(cols.url))
        if not url:
            continue
        caption = _text(values.get(cols.caption)) if cols.caption else None
        label = _text(values.get(cols.label)) if cols.label else None
        used = {cols.url, cols.caption, cols.label}
        extra = {k: _plain(v) for k, v in values.items() if k not in used}
        yield UrlRow(number, url, caption, label or None, json.dumps(extra, sort_keys=True) if extra else "")


def _records(path: str, kind: Optional[str]) -> Iterator[Dict[str, Any]]:
    if kind == "parquet":
        import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel

        with open_raw(path) as f:
            for batch in pq.ParquetFile(f).iter_batches(batch_size=8192):
                yield from batch.to_pylist()
    elif kind in ("csv", "tsv"):
        reader = csv.reader(_text_lines(path), delimiter=_delimiter(path))
        names: Optional[List[str]] = None
        for cells in reader:
            if not cells or not any(c.strip() for c in cells):
                continue
            if names is None:
                names = [c.strip() for c in cells]
                continue
            yield dict(zip(names, cells))
    elif kind == "jsonl":
        for line in _text_lines(path):
            if line.strip():
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    yield obj


def _delimiter(path: str) -> str:
    return "\t" if list_kind(path) == "tsv" else ","


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


def _plain(value: Any) -> Any:
    """A column's value as JSON can hold it (bytes and dates as text)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def _text_lines(path: str) -> Iterator[str]:
    with open_raw(path) as f:
        yield from io.TextIOWrapper(f, encoding="utf-8-sig", newline="")


def url_options(
    *,
    url_column: Optional[str] = None,
    caption_column: Optional[str] = None,
    label_column: Optional[str] = None,
    download_concurrency: Optional[int] = None,
    download_per_host: Optional[int] = None,
    download_timeout: Optional[float] = None,
    download_retries: Optional[int] = None,
    opt_out: Optional[str] = None,
    retry_failed: bool = False,
) -> UrlOptions:
    """The URL-list options of ``convert``'s options (None: the default)."""
    download = DownloadOptions(
        concurrency=download_concurrency or DEFAULT_CONCURRENCY,
        per_host=download_per_host or DEFAULT_PER_HOST,
        timeout_s=float(download_timeout or DEFAULT_TIMEOUT_S),
        retries=DEFAULT_RETRIES if download_retries is None else download_retries,
        opt_out=DEFAULT_OPT_OUT if opt_out is None else parse_opt_out(opt_out),
    )
    return UrlOptions(
        url_column=url_column or DEFAULT_URL_COLUMN,
        caption_column=caption_column or None,
        label_column=label_column or None,
        download=download,
        retry_failed=retry_failed,
    )


def parse_opt_out(text: str) -> Tuple[str, ...]:
    """``--opt-out``: comma-separated X-Robots-Tag directives, or ``none``."""
    if text.strip().lower() == "none":
        return ()
    return tuple(sorted({part.strip().lower() for part in text.split(",") if part.strip()}))
