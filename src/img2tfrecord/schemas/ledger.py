"""The input ledger: which inputs each generation of an output converted, as ``convert --append`` compares them.

``ledger/generation-<N>.jsonl.gz`` (``output_files.ledger_file``) holds one JSON object per input the
generation took, ``{"relpath", "size", "mtime"}``, sorted by relpath, gzip-compressed (level 6) without a
timestamp (the same inputs give the same bytes). ``mtime`` is the filesystem's change marker: a
file's modification time, an object's update time on gs://; with ``size`` it tells a replaced input
from the one converted. A manifest row's entry adds ``"row": [label, split]`` (null where the
manifest has no such column): a row whose label or split changed is a changed input too. A row
naming no image is keyed by where it is (``manifest:line``), with size -1.

An archive is one entry; what it held is ``ledger/members-<N>.jsonl.gz`` (``output_files.members_file``),
written by the run: one line per archive, ``{"archive": relpath, "items": [[relpath, split], ...]}``
sorted, each item a record's relpath and split (null: it has no place) as the run placed it, so
``--accept-changes`` can locate the records of an archive that changed or is gone. Nothing here does I/O.
"""

from __future__ import annotations

import gzip
import json
import zlib
from typing import Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple


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
    return b"".join(ledger_chunks(sorted(entries)))


def ledger_chunks(entries: Iterable[LedgerEntry]) -> Iterator[bytes]:
    """:func:`ledger_bytes` of ``entries`` already sorted, a piece at a time (a listing of millions is not
    one string); ValueError when they are not sorted."""
    previous: Optional[LedgerEntry] = None

    def lines() -> Iterator[str]:
        nonlocal previous
        for e in entries:
            if previous is not None and e < previous:
                raise ValueError(f"ledger entries out of order: {e.relpath!r} after {previous.relpath!r}")
            previous = e
            # What json.dumps gives for {"relpath", "size", "mtime"} (ensure_ascii, its default separators),
            # formatted directly: one call per entry is most of a large listing's ledger time.
            yield (
                f'{{"relpath": {json.dumps(e.relpath)}, "size": {int(e.size)}, "mtime": {float(e.mtime)!r}'
                + (f', "row": {e.row}' if e.row else "")
                + "}\n"
            )

    return _gzipped(lines())


def parse_ledger(data: bytes, where: str) -> List[LedgerEntry]:
    """The entries of a ledger file's bytes; ValueError naming ``where`` and the line when one is not an entry."""
    return list(iter_ledger(data, where))


def iter_ledger(data: bytes, where: str) -> Iterator[LedgerEntry]:
    """The entries of a ledger file's bytes, in file order, read a batch of lines at a time; ValueError naming
    ``where`` and the line when one is not an entry."""
    number = 0
    for lines in _line_batches(data, where):
        try:  # one JSON document per batch: one parse instead of one per line
            docs = json.loads("[" + ",".join(lines) + "]")
        except ValueError:
            docs = None  # a line that is not JSON: found and named below
        for i, line in enumerate(lines):
            number += 1
            try:
                doc = docs[i] if docs is not None else json.loads(line)
                row = doc.get("row")
                if row is not None:
                    label, split = row
                    row = row_text(label, split)
                yield LedgerEntry(str(doc["relpath"]), int(doc["size"]), float(doc["mtime"]), row or "")
            except (ValueError, KeyError, TypeError, AttributeError):
                raise ValueError(f"{where}: line {number} is not a ledger entry") from None


_BATCH_BYTES = 1 << 20  # decompressed text parsed at once


def _line_batches(data: bytes, where: str) -> Iterator[List[str]]:
    """The lines of a ledger file's bytes, a batch at a time; ValueError naming ``where`` when it is not one."""
    if not data:
        return
    try:
        stream = zlib.decompressobj(wbits=31)  # gzip
        rest = ""
        view = memoryview(data)
        for start in range(0, len(data), _BATCH_BYTES // 8):
            text = rest + stream.decompress(view[start : start + _BATCH_BYTES // 8]).decode("ascii")
            lines = text.split("\n")
            rest = lines.pop()
            if lines:
                yield lines
        text = rest + stream.flush().decode("ascii")
        if not stream.eof:
            raise EOFError("compressed file ended before the end-of-stream marker was reached")
        if stream.unused_data:
            raise OSError("trailing data after the gzip stream")
        lines = text.splitlines()
        if lines:
            yield lines
    except (zlib.error, OSError, EOFError, UnicodeDecodeError) as e:
        raise ValueError(f"{where}: not a gzip file ({e})") from None


class LedgerFile(Iterable[LedgerEntry]):
    """A ledger file's entries, parsed from its bytes each time they are read (a generation of a million
    inputs is held as its compressed file, not as a million entries); ValueError as :func:`iter_ledger`."""

    def __init__(self, data: bytes, where: str):
        self._data, self._where = data, where

    def __iter__(self) -> Iterator[LedgerEntry]:
        return iter_ledger(self._data, self._where)


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
    return b"".join(_gzipped(lines))


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


def _gzipped(lines: Iterable[str]) -> Iterator[bytes]:
    """A ledger file's bytes, a piece at a time: ``lines`` as ASCII (names are escaped, so any name, even one
    that is not UTF-8, is carried), gzip at zlib's default level (written before the job starts; level 9 takes
    several times as long) without a timestamp, so the same lines give the same bytes (those of
    ``gzip.compress(text, 6, mtime=0)``, however the text is cut)."""
    stream = zlib.compressobj(6, zlib.DEFLATED, 31)  # gzip
    batch: List[str] = []
    size = 0
    for line in lines:
        batch.append(line)
        size += len(line)
        if size >= _BATCH_BYTES:
            yield stream.compress("".join(batch).encode("ascii"))
            batch, size = [], 0
    yield stream.compress("".join(batch).encode("ascii")) + stream.flush()


def _text(data: bytes, where: str) -> str:
    """A ledger file's text; ValueError naming ``where`` when it is not one."""
    try:
        return gzip.decompress(data).decode("ascii")
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise ValueError(f"{where}: not a gzip file ({e})") from None
