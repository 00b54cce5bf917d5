"""The ledger of one input kind's launch listing (``InputLedger``): the inputs a run records, listed once
at launch, and the work items of any subset of them (the whole run, or the inputs an append converts);
``placed_item`` makes, from a ledger entry alone, a work item that a converter places in the split the
entry's record went to. Each kind's ledger sits beside its planner (``pipeline/kinds/``)."""

from __future__ import annotations

import os
import posixpath
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

from img2tfrecord import storage
from img2tfrecord.conversion.appends import TRANSIENT_REASONS, GenerationInputs, locate
from img2tfrecord.model import Clip, ErrorRow, Item, WorkItem, frames
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.listing import list_stamped
from img2tfrecord.pipeline.plan_model import Plan
from img2tfrecord.schemas.generations import Withdrawal
from img2tfrecord.schemas.ledger import LedgerEntry

T = TypeVar("T")


class ListedItems(Sequence[Item]):
    """The work items of some ledger entries (clips with ``--sequence``), in ledger order, and ``rejected``: the
    rows of the inputs rejected making them. A kind whose listing is compact (a folder's) makes its items as
    they are read instead of holding them."""

    def __init__(self, items: Sequence[Item] = (), rejected: Sequence[ErrorRow] = ()):
        self._items = items
        self.rejected: List[ErrorRow] = list(rejected)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Item]:
        return iter(self._items)

    def __getitem__(self, index):
        return self._items[index]


class Picked(Sequence[T]):
    """Some of a sequence's items, by their ascending indices (an array of them, not a list of the items);
    read in order, the sequence is read in order (a compact one is slow to read by index)."""

    def __init__(self, items: Sequence[T], picked: Sequence[int]):
        self._items, self._picked = items, picked

    def __len__(self) -> int:
        return len(self._picked)

    def __iter__(self) -> Iterator[T]:
        wanted = iter(self._picked)
        next_index = next(wanted, None)
        for index, item in enumerate(self._items):
            if index == next_index:
                yield item
                next_index = next(wanted, None)
                if next_index is None:
                    return

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._items[i] for i in self._picked[index]]
        return self._items[self._picked[index]]


class InputLedger:
    """The inputs of one listing, made by ``Kind(config, plan)``: ``entries`` (sorted by relpath) and the
    ``junk`` names it left out.

    ``places_at_launch``: its work items can be grouped by shard at launch (not an archive's, whose
    tar.gz members carry their bytes); ``noun``: what one entry is, for messages.
    """

    places_at_launch = True
    noun = "input(s)"
    transient_reasons: Tuple[str, ...] = TRANSIENT_REASONS  # an append tries inputs rejected for these again

    def __init__(self, config: ConvertConfig, plan: Plan):
        self.entries: Sequence[LedgerEntry] = []  # sorted by relpath
        self.junk: List[str] = []

    def work_items(self, entries: Sequence[LedgerEntry]) -> ListedItems:
        """The work items of ``entries`` (this listing's, or a subset of them), and the rows rejected making them."""
        raise NotImplementedError

    def placed_item(self, entry: LedgerEntry) -> Optional[Item]:
        """A work item the converter places where the record of ``entry`` (as a ledger holds it) went."""
        raise NotImplementedError

    def repeated(self) -> List[str]:
        """The relpaths more than one input names (a manifest naming an image twice), sorted."""
        return []

    def key_of(self, found: Union[WorkItem, ErrorRow]) -> str:
        """The ledger key of the input a work item or early error row came from."""
        if isinstance(found, WorkItem):
            return found.relpath
        return found["relpath"] or found["path"]

    def rejection_key(self, row: ErrorRow) -> str:
        """What a generation's error row rejected, keyed as this ledger keys its inputs (``key_of``)."""
        return self.key_of(row)

    def units(self, entries: Sequence[LedgerEntry]) -> Tuple[str, ...]:
        """What the pipeline reads for ``entries`` instead of the plan's pattern (archives), or ()."""
        return ()

    def locate(
        self,
        stale: Mapping[str, str],
        generations: Sequence[GenerationInputs],
        split_of: Callable[[LedgerEntry], Optional[str]],
        seed: int,
        compression: str,
    ) -> List[Withdrawal]:
        """Where the live records of the ``stale`` entries are (``conversion.appends.locate``: one record per
        entry); ValueError for a record that cannot be located."""
        return locate(stale, generations, split_of, seed, compression)


class ReadAtLaunch(InputLedger):
    """Inputs read whole at launch (manifest rows, annotated images, clips): each kept with its ledger
    entry, keyed by the entry's relpath (an image named twice has two)."""

    def __init__(self, config: ConvertConfig, plan: Plan):
        super().__init__(config, plan)
        self.entries: List[LedgerEntry] = []
        self._by_key: Dict[str, List[Union[Item, ErrorRow]]] = {}

    def _add(self, entry: LedgerEntry, found: Union[Item, ErrorRow]) -> None:
        self.entries.append(entry)
        self._by_key.setdefault(entry.relpath, []).append(found)

    def work_items(self, entries: Sequence[LedgerEntry]) -> ListedItems:
        items: List[Item] = []
        rejected: List[ErrorRow] = []
        for key in sorted({e.relpath for e in entries}):
            for found in self._by_key.get(key, ()):
                if isinstance(found, (WorkItem, Clip)):
                    items.append(found)
                else:
                    rejected.append(found)
        return ListedItems(items, rejected)

    def repeated(self) -> List[str]:
        return sorted(key for key, found in self._by_key.items() if len(found) > 1)


def frames_of(items: Iterable[Item]) -> Iterator[WorkItem]:
    """The files of work items (``model.frames``)."""
    return (frame for item in items for frame in frames(item))


def file_stamps(paths: Sequence[str]) -> Dict[str, Tuple[int, float]]:
    """path -> (size, change marker) of the files ``paths`` name that exist: a local file's stat, and
    on a remote filesystem one listing per folder holding them."""
    found: Dict[str, Tuple[int, float]] = {}
    remote: Dict[str, set] = {}
    for path in paths:
        if storage.is_remote(path):
            remote.setdefault(posixpath.dirname(path), set()).add(path)
            continue
        try:
            stat = os.stat(path)
        except OSError:
            continue
        found[path] = (stat.st_size, stat.st_mtime)
    for folder, wanted in sorted(remote.items()):
        for path, size, mtime in list_stamped(folder + "/*"):
            if path in wanted:
                found[path] = (size, mtime)
    return found
