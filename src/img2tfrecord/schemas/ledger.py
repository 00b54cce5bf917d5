"""The input ledger: which inputs each generation of an output converted, as ``convert --append`` compares them.

``ledger/generation-<N>.jsonl.gz`` (``manifest.ledger_file``) holds one JSON object per input the
generation took, ``{"relpath", "size", "mtime"}``, sorted by relpath, gzip-compressed (level 6) without a
timestamp (the same inputs give the same bytes). ``mtime`` is the filesystem's change marker: a
file's modification time, an object's update time on gs://; with ``size`` it tells a replaced input
from the one converted. A manifest row's entry adds ``"row": [label, split]`` (null where the
manifest has no such column): a row whose label or split changed is a changed input too. A row
naming no image is keyed by where it is (``manifest:line``), with size -1.

An archive is one entry; what it held is ``ledger/members-<N>.jsonl.gz`` (``manifest.members_file``),
written by the run: one line per archive, ``{"archive": relpath, "items": [[relpath, split], ...]}``
sorted, each item a record's relpath and split (null: it has no place) as the run placed it, so
``--accept-changes`` can locate the records of an archive that changed or is gone. Nothing here does I/O.
"""

from __future__ import annotations

import gzip
import json
from typing import Dict, Iterable, List, NamedTuple, Optional, Tuple


class LedgerEntry(NamedTuple):
    """One input as a generation listed it."""

    relpath: str
    size: int
    mtime: float
    row: str = ""  # a manifest row's placement, the JSON text of [label, split] (see row_text); "" for a file

    def changed(self, other: LedgerEntry) -> bool:
        """True when ``other`` (the same relpath, listed later) is not the input this entry recorded."""
        return self.size != other.size or self.mtime != other.mtime or self.row != other.row

    def placement(self) -> Tuple[Optional[str], Optional[str]]:
        """``(label, split)`` of a manifest row's entry (both None for a file's)."""
        if not self.row:
            return None, None
        label, split = json.loads(self.row)
        return label, split


def row_text(label: Optional[str], split: Optional[str]) -> str:
    """The ``row`` of a manifest row's entry: what the ledger file holds for it, as compact JSON text."""
    return json.dumps([label, split])


def ledger_bytes(entries: Iterable[LedgerEntry]) -> bytes:
    """The ledger file's bytes: the entries sorted by relpath, one JSON line each, gzip with mtime 0."""
    # What json.dumps gives for {"relpath", "size", "mtime"} (ensure_ascii, its default separators), formatted
    # directly: one call per entry is most of a large listing's ledger time.
    lines = (
        f'{{"relpath": {json.dumps(e.relpath)}, "size": {int(e.size)}, "mtime": {float(e.mtime)!r}'
        + (f', "row": {e.row}' if e.row else "")
        + "}\n"
        for e in sorted(entries)
    )
    return _gzipped(lines)


def parse_ledger(data: bytes, where: str) -> List[LedgerEntry]:
    """The entries of a ledger file's bytes; ValueError naming ``where`` and the line when one is not an entry."""
    lines = _text(data, where).splitlines()
    try:  # one JSON document for the whole file: one parse instead of one per line
        docs = json.loads("[" + ",".join(lines) + "]")
    except ValueError:
        docs = None  # a line that is not JSON: found and named below
    entries = []
    for number, line in enumerate(lines, 1):
        try:
            doc = docs[number - 1] if docs is not None else json.loads(line)
            row = doc.get("row")
            if row is not None:
                label, split = row
                row = row_text(label, split)
            entries.append(LedgerEntry(str(doc["relpath"]), int(doc["size"]), float(doc["mtime"]), row or ""))
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ValueError(f"{where}: line {number} is not a ledger entry") from None
    return entries


ArchiveItem = Tuple[str, str, Optional[str]]  # (archive relpath, item relpath, its split or None)


def members_bytes(items: Iterable[ArchiveItem]) -> bytes:
    """The members file's bytes: one JSON line per archive, archives and their items sorted, gzip with mtime 0."""
    by_archive: Dict[str, List[Tuple[str, Optional[str]]]] = {}
    for archive, relpath, split in items:
        by_archive.setdefault(archive, []).append((relpath, split))
    lines = (
        json.dumps({"archive": archive, "items": sorted(found, key=lambda i: (i[0], i[1] or ""))}) + "\n"
        for archive, found in sorted(by_archive.items())
    )
    return _gzipped(lines)


def parse_members(data: bytes, where: str) -> Dict[str, List[Tuple[str, Optional[str]]]]:
    """archive relpath -> its items' ``(relpath, split)``, from a members file's bytes; ValueError naming
    ``where`` and the line when one is not an archive's."""
    found: Dict[str, List[Tuple[str, Optional[str]]]] = {}
    for number, line in enumerate(_text(data, where).splitlines(), 1):
        try:
            doc = json.loads(line)
            found[str(doc["archive"])] = [(str(r), None if s is None else str(s)) for r, s in doc["items"]]
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"{where}: line {number} is not an archive's items") from None
    return found


def _gzipped(lines: Iterable[str]) -> bytes:
    """A ledger file's bytes: ``lines`` as ASCII (names are escaped, so any name, even one that is not UTF-8,
    is carried), gzip at zlib's default level (written before the job starts; level 9 takes several times
    as long) without a timestamp, so the same lines give the same bytes."""
    return gzip.compress("".join(lines).encode("ascii"), compresslevel=6, mtime=0)


def _text(data: bytes, where: str) -> str:
    """A ledger file's text; ValueError naming ``where`` when it is not one."""
    try:
        return gzip.decompress(data).decode("ascii")
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise ValueError(f"{where}: not a gzip file ({e})") from None
