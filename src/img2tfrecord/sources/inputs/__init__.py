"""One :class:`InputSource` per input kind: the units it starts from and what each unit gives.

A source names the patterns of its units (the listed files: images, archives, manifests, annotation
files), reads one unit into tagged findings (:meth:`InputSource.read`, plain Python) and, where a
finding depends on others (an archive's wrapping folder, an annotation naming an archive member),
joins them (:meth:`InputSource.join`). ``--plan`` runs :func:`discover` in-process; the pipeline maps
the same ``read`` over the same units (``transforms/discover.Discover``) and joins in Beam.
A new input kind is one new module here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Iterable, Iterator, List, Sequence, Tuple

from img2tfrecord.model import ERRORS, ErrorRow, WorkItem

FILES = "files"  # work items
SKIPPED = "skipped"  # printable names of junk files, not inputs
# ERRORS (model.py): error rows of inputs rejected before conversion; each counts as one input

Finding = Tuple[str, Any]  # (tag, value)
Lister = Callable[[str], Sequence[Tuple[str, int]]]  # pattern -> [(path, size)], as pipeline/listing.list_input


@dataclasses.dataclass
class Discovered:
    """What discovery gives: the work items, the junk names skipped and the early error rows."""

    files: List[WorkItem] = dataclasses.field(default_factory=list)
    skipped: List[str] = dataclasses.field(default_factory=list)
    errors: List[ErrorRow] = dataclasses.field(default_factory=list)


class InputSource:
    """An input kind: its unit patterns, the reading of one unit, and the join of the findings.

    ``read`` yields ``(FILES, WorkItem)``, ``(SKIPPED, name)``, ``(ERRORS, row)`` or a finding under one
    of ``join_tags``, which :meth:`join` turns into the first three. ``spread_units``: a unit is much
    work (an archive, an annotation file), so the pipeline spreads units over workers first.
    """

    join_tags: Tuple[str, ...] = ()
    spread_units = False

    def __init__(self, patterns: Sequence[str]):
        self.patterns = tuple(patterns)

    def is_unit(self, path: str) -> bool:
        """Whether a listed path is one of this source's units."""
        return True

    def units(self, list_files: Lister) -> List[Tuple[str, int]]:
        """``(path, size)`` of every unit, each once, in listing order."""
        seen, found = set(), []
        for pattern in self.patterns:
            for path, size in list_files(pattern):
                if path not in seen and self.is_unit(path):
                    seen.add(path)
                    found.append((path, size))
        return found

    def read(self, path: str, size: int) -> Iterator[Finding]:
        raise NotImplementedError

    def join(self, findings: Dict[str, List[Any]]) -> Iterator[Finding]:
        """The findings under ``join_tags`` -> files, skipped names and error rows."""
        return iter(())


def discover(
    source: InputSource, list_files: Lister, slim: Callable[[Finding], Finding] = lambda finding: finding
) -> Discovered:
    """Every unit of ``source`` read and joined in this process, as the pipeline's discovery does it;
    ``slim`` may shrink each finding before it is kept (``--plan`` drops most archive members' bytes)."""
    found = Discovered()
    pending: Dict[str, List[Any]] = {tag: [] for tag in source.join_tags}
    for path, size in source.units(list_files):
        _keep(found, pending, (slim(finding) for finding in source.read(path, size)))
    if source.join_tags:
        _keep(found, pending, source.join(pending))
    found.files.sort(key=lambda f: f.relpath)
    return found


def _keep(found: Discovered, pending: Dict[str, List[Any]], findings: Iterable[Finding]) -> None:
    for tag, value in findings:
        if tag == FILES:
            found.files.append(value)
        elif tag == SKIPPED:
            found.skipped.append(value)
        elif tag == ERRORS:
            found.errors.append(value)
        else:
            pending[tag].append(value)
