"""CSV and JSONL manifests as inputs, without Beam: rows, columns, paths and splits."""

from __future__ import annotations

import csv
import io
import itertools
import json
import os
import posixpath
from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

from img2tfrecord.model import RowPlacement, WorkItem, error_row
from img2tfrecord.schemas.output_files import SPLIT_NAME_RE
from img2tfrecord.sources.archives import suffix_format
from img2tfrecord.sources.files import open_raw
from img2tfrecord.sources.split_folders import split_of_folder

MANIFEST_SUFFIXES = ((".csv", "csv"), (".tsv", "csv"), (".jsonl", "jsonl"))  # a .tsv is read as CSV


def manifest_format(path: str) -> Optional[str]:
    """``csv``, ``jsonl`` or None, by the file name."""
    return suffix_format(path, MANIFEST_SUFFIXES)


class ManifestError(ValueError):
    """A manifest that cannot be used at all (a usage error at launch)."""


MANIFEST_COLUMNS = ("path", "label", "split")


def _text_lines(path: str) -> Iterator[str]:
    with open_raw(path) as f:
        yield from io.TextIOWrapper(f, encoding="utf-8-sig", newline="")


def jsonl_objects(lines: Iterable[str]) -> Iterator[Tuple[int, Union[Dict[str, Any], str]]]:
    """``(line number, object)`` of each non-blank JSONL line; a line that is not a JSON object: ``(number, why)``."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            yield number, f"line is not JSON: {e}"
            continue
        if not isinstance(obj, dict):
            yield number, "line is not a JSON object"
            continue
        yield number, obj


def csv_rows(lines: Iterable[str], delimiter: str = ",") -> Iterator[Tuple[int, List[str]]]:
    """``(row number, cells)`` of each CSV row that has a non-blank cell (the header included)."""
    for number, cells in enumerate(csv.reader(lines, delimiter=delimiter), 1):
        if cells and any(c.strip() for c in cells):
            yield number, cells


# The delimiters a CSV manifest may use: what spreadsheets write (Excel writes ';' in many locales) and TSV.
DELIMITERS = {",": "comma", ";": "semicolon", "\t": "tab"}


class CsvHead(NamedTuple):
    """How a CSV manifest is laid out, from its first row: its delimiter and its columns."""

    delimiter: str
    columns: List[str]  # the header's cells, lower-cased; without a header, the columns its first row fills
    header: bool

    def describe(self) -> str:
        """``columns path, label (semicolon-delimited, header row)``, for ``--plan``."""
        names = ", ".join(c or "(unnamed)" for c in self.columns)
        row = "header row" if self.header else "no header row"
        return f"columns {names} ({DELIMITERS[self.delimiter]}-delimited, {row})"


def _cells(line: str, delimiter: str) -> List[str]:
    return next(csv.reader([line], delimiter=delimiter), [])


def csv_head(first_line: str, where: str, key: str = "path") -> CsvHead:
    """The layout of a CSV manifest whose first non-blank line is ``first_line``: the delimiter under which a
    header cell is ``key``; without such a header, the one delimiter the line splits on (a comma when it
    splits on none: one column). ManifestError, naming what it saw, when the line splits on several."""
    headers = {}
    for delimiter in DELIMITERS:
        cells = [c.strip().lower() for c in _cells(first_line, delimiter)]
        if key in cells:
            headers[delimiter] = cells
    if headers:
        delimiter = max(headers, key=lambda d: (len(headers[d]), d == ","))  # "path" alone: any, so a comma
        return CsvHead(delimiter, headers[delimiter], True)
    splits = [d for d in DELIMITERS if len(_cells(first_line, d)) > 1]
    if len(splits) > 1:
        names = " and ".join(f"{DELIMITERS[d]}s" for d in splits)
        raise ManifestError(
            f"{where}: cannot tell the delimiter: the first line {first_line.strip()[:80]!r} names no {key!r} column "
            f"and holds {names}; give the manifest a header row ({key},label[,split]) with one delimiter"
        )
    delimiter = splits[0] if splits else ","
    return CsvHead(delimiter, list(MANIFEST_COLUMNS[: len(_cells(first_line, delimiter))]), False)


def first_line(lines: Iterator[str]) -> Tuple[str, Iterator[str]]:
    """The first non-blank line of ``lines``, and every line again (that one included)."""
    seen: List[str] = []
    for line in lines:
        seen.append(line)
        if line.strip():
            return line, itertools.chain(seen, lines)
    return "", iter(seen)


def manifest_head(path: str) -> Optional[CsvHead]:
    """The layout of the CSV manifest at ``path`` (None for JSONL); ManifestError when it cannot be told."""
    if manifest_format(path) == "jsonl":
        return None
    line, _ = first_line(_text_lines(path))
    return csv_head(line, path)


def manifest_rows(path: str) -> Iterator[Tuple[int, Dict[str, Any]]]:
    """``(line number, {"path", ["label"], ["split"]} or {"error": message})`` of every row.

    CSV: a header row naming the columns (``path``, ``label``, ``split``, in
    any order, other columns ignored) or, without one, the columns
    ``path,label,split`` in that order (fewer columns: no label / no split);
    comma-, semicolon- or tab-delimited, as the first row shows (``csv_head``).
    JSONL: one object per line with ``path`` and optional ``label``/``split``.
    A label or split column present means every row must have a value.
    """
    fmt = manifest_format(path)
    lines = _text_lines(path)
    if fmt == "jsonl":
        for number, obj in jsonl_objects(lines):
            if isinstance(obj, str):
                yield number, {"error": obj}
                continue
            # A number label (JSONL "label": 3) is the class "3"; the ids still follow sorted names.
            yield (
                number,
                {
                    k: obj[k] if isinstance(obj[k], str) else json.dumps(obj[k])
                    for k in MANIFEST_COLUMNS
                    if k in obj and obj[k] is not None
                },
            )
        return
    line, lines = first_line(lines)
    head = csv_head(line, path)
    columns: Optional[Dict[str, int]] = None
    for number, cells in csv_rows(lines, head.delimiter):
        if columns is None:
            if head.header:
                columns = {name: head.columns.index(name) for name in MANIFEST_COLUMNS if name in head.columns}
                continue
            columns = {name: i for i, name in enumerate(MANIFEST_COLUMNS[: len(cells)])}
        yield number, {name: cells[i].strip() if i < len(cells) else "" for name, i in columns.items()}


def manifest_columns(path: str, rows: Sequence[Tuple[int, Dict[str, Any]]]) -> Tuple[bool, bool]:
    """``(has a label column, has a split column)`` of a manifest, from its parsed rows."""
    good = [r for _, r in rows if "error" not in r]
    return any("label" in r for r in good), any("split" in r for r in good)


def canonical_split(value: str) -> str:
    """A split value of a manifest: ``val`` -> ``validation`` (as split folders); others as written."""
    return split_of_folder(value.strip().lower()) or value.strip()


def _join(directory: str, relative: str) -> str:
    if "://" in directory:
        scheme, rest = directory.split("://", 1)
        return f"{scheme}://{posixpath.normpath(posixpath.join(rest, relative))}"
    return os.path.normpath(os.path.join(directory, relative))


def manifest_dir(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else "."


def relpath_below(directory: str, path: str) -> str:
    """``path`` relative to ``directory`` when it lies below it, else the whole path."""
    base = directory.rstrip("/") + "/"
    return path[len(base) :] if path.startswith(base) else path


def label_problem(label: str) -> Optional[Tuple[str, str]]:
    """``(reason, message)`` when a row's label cannot name a class, else None."""
    if not label:
        return "missing_label", "row has no label"
    if "\n" in label or "\r" in label:
        return "bad_label", "label contains a line break"
    return None


def resolve_row_path(manifest_path: str, value: str) -> Tuple[str, str]:
    """``(path to read, relpath)`` of a manifest row's path.

    A relative path is relative to the manifest's folder and is its own
    relpath (``./`` and ``a/../`` folded), so a manifest in a dataset's root
    gives the relpaths of the folder. An absolute or ``gs://`` path is read
    as given; its relpath is the part under the manifest's folder, or the
    whole path.
    """
    directory = manifest_dir(manifest_path)
    value = value.strip()
    if "://" in value or value.startswith("/"):
        return value, relpath_below(directory, value)
    relpath = posixpath.normpath(value.replace("\\", "/"))
    return _join(directory, relpath), relpath


def row_to_source(
    manifest_path: str, number: int, row: Dict[str, Any], labeled: bool, has_split: bool, split_names: Sequence[str]
):
    """A work item for one manifest row, or an error row (as ``(False, row)``)."""
    where = f"{manifest_path}:{number}"
    if "error" in row:
        return False, error_row(where, "", "bad_manifest_row", row["error"])
    value = row.get("path", "")
    if not value:
        return False, error_row(where, "", "bad_manifest_row", "row has no path")
    path, relpath = resolve_row_path(manifest_path, value)
    label = row.get("label") if labeled else None
    problem = label_problem(label or "") if labeled else None
    if problem:
        return False, error_row(path, relpath, problem[0], f"{where}: {problem[1]}")
    split = None
    if has_split:
        raw = row.get("split", "")
        if not raw:
            return False, error_row(path, relpath, "missing_split", f"{where}: row has no split")
        split = canonical_split(raw)
        if split not in split_names:
            return False, error_row(
                path, relpath, "unknown_split", f"{where}: split {raw!r} is not one of {', '.join(split_names)}"
            )
    return True, WorkItem(path, relpath, 0, row=RowPlacement(split, label))


def check_split_name(value: str) -> Optional[str]:
    """None when a manifest split value is usable, else why not."""
    split = canonical_split(value)
    if not SPLIT_NAME_RE.match(split):
        return f"split name {value!r} may only use letters, digits and '_'"
    return None
