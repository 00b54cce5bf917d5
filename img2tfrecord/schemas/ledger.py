"""The input ledger: which inputs each generation of an output converted, as ``convert --append`` compares them.

``ledger/generation-<N>.jsonl.gz`` (``manifest.ledger_file``) holds one JSON object per input the
generation took, ``{"relpath", "size", "mtime"}``, sorted by relpath, gzip-compressed without a
timestamp (the same inputs give the same bytes). ``mtime`` is the filesystem's change marker: a
file's modification time, an object's update time on gs://; with ``size`` it tells a replaced input
from the one converted. Nothing here does I/O.
"""

from __future__ import annotations

import gzip
import json
from typing import Iterable, List, NamedTuple


class LedgerEntry(NamedTuple):
    """One input as a generation listed it."""

    relpath: str
    size: int
    mtime: float

    def changed(self, other: LedgerEntry) -> bool:
        """True when ``other`` (the same relpath, listed later) is not the input this entry recorded."""
        return self.size != other.size or self.mtime != other.mtime


def ledger_bytes(entries: Iterable[LedgerEntry]) -> bytes:
    """The ledger file's bytes: the entries sorted by relpath, one JSON line each, gzip with mtime 0."""
    # What json.dumps gives for {"relpath", "size", "mtime"} (ensure_ascii, its default separators), formatted
    # directly: one call per entry is most of a large listing's ledger time.
    lines = (
        f'{{"relpath": {json.dumps(e.relpath)}, "size": {int(e.size)}, "mtime": {float(e.mtime)!r}}}\n'
        for e in sorted(entries)
    )
    return gzip.compress("".join(lines).encode("ascii"), mtime=0)  # names escaped: any name, even not UTF-8


def parse_ledger(data: bytes, where: str) -> List[LedgerEntry]:
    """The entries of a ledger file's bytes; ValueError naming ``where`` and the line when one is not an entry."""
    try:
        text = gzip.decompress(data).decode("ascii")
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise ValueError(f"{where}: not a gzip file ({e})") from None
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            doc = json.loads(line)
            entries.append(LedgerEntry(str(doc["relpath"]), int(doc["size"]), float(doc["mtime"])))
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"{where}: line {number} is not a ledger entry") from None
    return entries
