"""The report's files: ``report.html``, ``report.json`` and the JSON-lines files beside them.

Every file is written under a temporary name and renamed into place once the
whole report is built (:meth:`ReportFiles.commit`), so a failed or interrupted
report leaves no half-written file and never replaces a finished one with part
of a new one.
"""

from __future__ import annotations

import json
import os
from typing import IO, Any, Dict, List, NamedTuple, Optional, Tuple

HTML = "report.html"
JSON = "report.json"
# The long lists of report.json, one JSON object a line, in files named after the page's stem:
CLASSES = "classes"  # a row per class: examples per split, declared examples
DUPLICATE_GROUPS = "duplicates"  # every exact and near-duplicate group, with all its records
REJECTED = "rejected"  # every rejected input of every generation's errors.jsonl
LINE_FILES = (CLASSES, DUPLICATE_GROUPS, REJECTED)


class ReportPaths(NamedTuple):
    """Where each file of one report goes; ``lines`` maps each of :data:`LINE_FILES` to its path."""

    html: str
    json: str
    lines: Dict[str, str]

    def name(self, kind: str) -> str:
        """A JSON-lines file's name, as report.json gives it (beside report.json)."""
        return os.path.basename(self.lines[kind])


def is_folder_output(output: str) -> bool:
    """``--output`` names a folder: it ends with a slash, or is an existing folder."""
    return output.endswith(("/", os.sep)) or os.path.isdir(output)


def report_paths(output: str) -> ReportPaths:
    """The files of a report written to ``--output``.

    A folder (:func:`is_folder_output`) gets ``report.html``, ``report.json`` and
    ``report-<list>.jsonl``; any other path is the page, with ``<stem>.json`` and
    ``<stem>-<list>.jsonl`` beside it (the stem drops a ``.html``/``.htm`` suffix).
    """
    if is_folder_output(output):
        folder = os.path.abspath(output)
        html_path, stem = os.path.join(folder, HTML), os.path.join(folder, os.path.splitext(HTML)[0])
    else:
        html_path = os.path.abspath(output)
        base, ext = os.path.splitext(html_path)
        stem = base if ext.lower() in (".html", ".htm") else html_path
    return ReportPaths(html_path, stem + ".json", {kind: f"{stem}-{kind}.jsonl" for kind in LINE_FILES})


def output_paths(output: str) -> Tuple[str, str]:
    """``(report.html path, report.json path)`` for ``--output``."""
    paths = report_paths(output)
    return paths.html, paths.json


class ReportFiles:
    """The report's files being written: JSON-lines files open from the start, the page and the document
    at the end; all under temporary names until :meth:`commit`, removed by :meth:`discard`."""

    def __init__(self, paths: ReportPaths) -> None:
        self.paths = paths
        self._suffix = f".tmp-{os.getpid()}"
        self._temps: List[Tuple[str, str]] = []
        self._lines: Dict[str, IO[str]] = {}
        self.counts: Dict[str, int] = {}

    def open_lines(self) -> None:
        """Open every JSON-lines file, making the report's folder when missing."""
        os.makedirs(os.path.dirname(self.paths.html), exist_ok=True)
        for kind, path in self.paths.lines.items():
            self._lines[kind] = open(self._temp(path), "w", encoding="utf-8")
            self.counts[kind] = 0

    def _temp(self, path: str) -> str:
        temp = path + self._suffix
        self._temps.append((temp, path))
        return temp

    def line(self, kind: str, row: Any) -> None:
        """Append one JSON object to a JSON-lines file."""
        self._lines[kind].write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
        self.counts[kind] += 1

    def write(self, path: str, text: str) -> None:
        with open(self._temp(path), "w", encoding="utf-8") as f:
            f.write(text)

    def _close(self) -> None:
        for f in self._lines.values():
            f.close()
        self._lines = {}

    def commit(self) -> None:
        """Every file into place, the page last (it is what the command names)."""
        self._close()
        temps = sorted(self._temps, key=lambda pair: pair[1] == self.paths.html)
        for temp, path in temps:
            os.replace(temp, path)
        self._temps = []

    def discard(self) -> None:
        """Remove every temporary file; never raises (the full disk that failed the report fails its last
        flush too)."""
        for f in self._lines.values():
            try:
                f.close()
            except OSError:
                pass
        self._lines = {}
        for temp, _ in self._temps:
            try:
                os.remove(temp)
            except OSError:
                pass
        self._temps = []

    def __enter__(self) -> ReportFiles:
        return self

    def __exit__(self, exc_type: Optional[type], *unused: Any) -> None:
        self.discard()  # after commit there is nothing left to discard
