"""What an append converts and how its generation joins the output: the listing against the ledger, the merge.

``compare`` sorts a new listing of the input against the ledgers of every generation: inputs never
converted, inputs to try again (rejected last time for a transient reason), and inputs changed or
removed since a record was written from them. ``locate`` finds the records of changed and removed
inputs (``--accept-changes``) from the ledgers alone, as the shard writer placed them. ``merge`` adds
a finished generation's splits and accounting to the manifest it appends to. Nothing here does I/O.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from typing import AbstractSet, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from img2tfrecord.conversion.seeded_hashes import assign_shard, shuffle_key
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas.dataset_json import Accounting, DatasetManifest, SplitInfo
from img2tfrecord.schemas.generations import CHANGED, REMOVED, Generation, Withdrawal
from img2tfrecord.schemas.ledger import LedgerEntry
from img2tfrecord.sources.layout import UNLISTABLE

# Rejections that may not happen again: the next append tries these inputs again.
TRANSIENT_REASONS = ("decode_timeout", "not_found", UNLISTABLE, "unreadable", "worker_crashed")
WRITTEN = ""  # an input's outcome when a record was written from it


@dataclasses.dataclass(frozen=True)
class InputChanges:
    """A listing against the ledgers, each part sorted by relpath.

    ``new``: never converted; ``retried``: rejected last time for a transient reason (any reason with
    ``retry_rejected``), converted again; ``changed``: (as recorded, as listed now) for inputs a record
    was written from whose size or change marker differs; ``removed``: recorded inputs with a record
    that the listing no longer has. ``unchanged`` counts the rest. ``resolved``: folders recorded as
    ``unlistable`` that the listing no longer has as such (listed now, their files are among ``new``);
    ``retried_reasons``: reason -> how many of the inputs retried or resolved were last rejected for it.
    """

    new: Tuple[LedgerEntry, ...]
    retried: Tuple[LedgerEntry, ...]
    changed: Tuple[Tuple[LedgerEntry, LedgerEntry], ...]
    removed: Tuple[LedgerEntry, ...]
    unchanged: int
    accepted: bool = False  # --accept-changes: the changed inputs are converted again, stale records withdrawn
    resolved: Tuple[LedgerEntry, ...] = ()
    retried_reasons: Dict[str, int] = dataclasses.field(default_factory=dict)  # Generation.retried

    @property
    def to_convert(self) -> Tuple[LedgerEntry, ...]:
        """The inputs the next generation converts: the new ones, those tried again and, once the changes
        are accepted, the changed ones."""
        changed = tuple(now for _, now in self.changed) if self.accepted else ()
        return tuple(sorted(self.new + self.retried + changed))


Recorded = Dict[str, Tuple[LedgerEntry, str]]  # relpath -> (latest ledger entry, latest outcome)


@dataclasses.dataclass(frozen=True)
class GenerationInputs:
    """One generation as its files record it: its ledger (sorted by relpath; ``schemas.ledger.LedgerFile``
    reads it from its bytes each time), its rejections (relpath -> reason), the relpaths whose earlier
    records it withdrew, and its shard count per split."""

    number: int
    ledger: Iterable[LedgerEntry]
    rejected: Mapping[str, str]
    withdrawn: AbstractSet[str] = frozenset()
    shards: Mapping[str, int] = dataclasses.field(default_factory=dict)

    def written(self) -> List[str]:
        """The relpaths a record of this generation was written from, sorted."""
        return [e.relpath for e in self.ledger if e.relpath not in self.rejected]


def _latest(
    generations: Sequence[GenerationInputs], only: Optional[AbstractSet[str]] = None
) -> Dict[str, Tuple[LedgerEntry, str, GenerationInputs]]:
    """relpath -> (its latest ledger entry, its latest outcome, the generation that listed it last); an
    input whose record a generation withdrew and did not convert again is left out. ``only``: of these
    relpaths alone."""
    latest: Dict[str, Tuple[LedgerEntry, str, GenerationInputs]] = {}
    for generation in generations:
        for relpath in generation.withdrawn:
            latest.pop(relpath, None)
        for entry in generation.ledger:
            if only is None or entry.relpath in only:
                latest[entry.relpath] = (entry, generation.rejected.get(entry.relpath, WRITTEN), generation)
    return latest


def recorded_in_order(generations: Sequence[GenerationInputs]) -> Iterator[Tuple[LedgerEntry, str]]:
    """``(latest ledger entry, latest outcome)`` of every recorded input, by relpath: :func:`outcomes` made by
    merging the generations' sorted ledgers, one entry of each held at a time. ValueError for a ledger that
    is not sorted."""
    streams = [_events(index, generation) for index, generation in enumerate(generations)]
    merged = heapq.merge(*streams, key=lambda event: event[:3])
    for relpath, events in itertools.groupby(merged, key=lambda event: event[0]):
        state: Optional[Tuple[LedgerEntry, str]] = None
        for _, index, _, entry in events:
            if entry is None:
                state = None  # withdrawn by generation ``index``
            else:
                state = (entry, generations[index].rejected.get(relpath, WRITTEN))
        if state is not None:
            yield state


def _events(index: int, generation: GenerationInputs) -> Iterator[Tuple[str, int, int, Optional[LedgerEntry]]]:
    """``(relpath, index, 0, None)`` per input generation number ``index`` withdrew, then ``(relpath, index, 1,
    entry)`` per entry of its ledger: in relpath order, a withdrawal before an entry of the same relpath."""
    withdrawn = sorted(generation.withdrawn)
    entries = _in_order(generation.ledger, generation.number)
    return heapq.merge(
        ((relpath, index, 0, None) for relpath in withdrawn),
        ((e.relpath, index, 1, e) for e in entries),
        key=lambda event: event[:3],
    )


def _in_order(entries: Iterable[LedgerEntry], number: int) -> Iterator[LedgerEntry]:
    previous: Optional[str] = None
    for entry in entries:
        if previous is not None and entry.relpath < previous:
            raise ValueError(f"the ledger of generation {number} is not sorted: {entry.relpath!r} after {previous!r}")
        previous = entry.relpath
        yield entry


def outcomes(generations: Sequence[GenerationInputs]) -> Recorded:
    """relpath -> (its latest ledger entry, its latest outcome: ``WRITTEN`` or the rejection reason).

    ``generations`` oldest first. An input whose record a generation withdrew and did not convert again
    is not recorded: listed again, it is new.
    """
    return {relpath: (entry, outcome) for relpath, (entry, outcome, _) in _latest(generations).items()}


def holders(
    generations: Sequence[GenerationInputs], only: Optional[AbstractSet[str]] = None
) -> Dict[str, GenerationInputs]:
    """relpath -> the generation that holds its live record (the latest that wrote it); ``only``: of these
    relpaths alone."""
    latest = _latest(generations, only).items()
    return {relpath: generation for relpath, (_, outcome, generation) in latest if outcome == WRITTEN}


def compare(
    listed: Iterable[LedgerEntry], recorded: Mapping[str, Tuple[LedgerEntry, str]], retry_rejected: bool = False
) -> InputChanges:
    """Sort ``listed`` (the input now) against ``recorded`` (``outcomes`` of every generation)."""
    return compare_in_order(sorted(listed), (found for _, found in sorted(recorded.items())), retry_rejected)


def compare_in_order(
    listed: Iterable[LedgerEntry],
    recorded: Iterable[Tuple[LedgerEntry, str]],
    retry_rejected: bool = False,
    transient: Tuple[str, ...] = TRANSIENT_REASONS,
) -> InputChanges:
    """:func:`compare` of a sorted ``listed`` with ``recorded`` in relpath order (:func:`recorded_in_order`),
    walking both once; ValueError when ``listed`` is not sorted."""
    new: List[LedgerEntry] = []
    retried: List[LedgerEntry] = []
    changed: List[Tuple[LedgerEntry, LedgerEntry]] = []
    removed: List[LedgerEntry] = []
    resolved: List[LedgerEntry] = []
    reasons: Dict[str, int] = {}  # the latest rejections of the inputs tried again or resolved, per reason
    unchanged = 0
    pending = iter(recorded)
    head = next(pending, None)
    matched: Optional[str] = None  # the relpath of the recorded input the listing named last

    def pass_recorded(until: Optional[str]) -> None:
        """Move past the recorded inputs before relpath ``until`` (every one left for None); one the listing
        did not name is removed (it held a record) or resolved (its folder could not be listed)."""
        nonlocal head
        while head is not None and (until is None or head[0].relpath < until):
            before, outcome = head
            if before.relpath != matched and outcome == WRITTEN:
                removed.append(before)
            elif before.relpath != matched and outcome == UNLISTABLE:
                resolved.append(before)
                reasons[UNLISTABLE] = reasons.get(UNLISTABLE, 0) + 1
            head = next(pending, None)

    previous: Optional[LedgerEntry] = None
    for entry in listed:
        if previous is not None and entry < previous:
            raise ValueError(f"the listing is not sorted: {entry.relpath!r} after {previous.relpath!r}")
        previous = entry
        pass_recorded(entry.relpath)
        if head is None or head[0].relpath != entry.relpath:
            new.append(entry)
            continue
        matched = entry.relpath
        before, outcome = head
        if outcome != WRITTEN:  # no record holds it: a changed input is simply tried again
            unlisted = before.size < 0 and entry.size < 0  # a manifest row whose image was missing then and now
            if retry_rejected or (outcome in transient and not unlisted) or before.changed(entry):
                retried.append(entry)
                reasons[outcome] = reasons.get(outcome, 0) + 1
            else:
                unchanged += 1
        elif before.changed(entry):
            changed.append((before, entry))
        else:
            unchanged += 1
    pass_recorded(None)
    return InputChanges(
        tuple(new),
        tuple(retried),
        tuple(changed),
        tuple(removed),
        unchanged,
        resolved=tuple(resolved),
        retried_reasons=dict(sorted(reasons.items())),
    )


def stale_inputs(changes: InputChanges) -> Dict[str, str]:
    """relpath -> ``CHANGED`` or ``REMOVED``: the inputs whose records ``--accept-changes`` withdraws."""
    stale = {now.relpath: CHANGED for _, now in changes.changed}
    stale.update((entry.relpath, REMOVED) for entry in changes.removed)
    return dict(sorted(stale.items()))


def locate(
    stale: Mapping[str, str],
    generations: Sequence[GenerationInputs],
    split_of: Callable[[LedgerEntry], Optional[str]],
    seed: int,
    compression: str = "none",
) -> List[Withdrawal]:
    """Where the live record of each ``stale`` input is, as the shard writer placed it.

    A record lives in the latest generation that wrote it; its shard is the seeded hash of its relpath
    over that generation's shard count of its split, and its index its rank among the shard's records
    by (shuffle key, relpath). ``split_of``: the split of an input as a generation's ledger entry records
    it (None: it has none). Raises ValueError for an input no generation wrote.
    """
    holder = holders(generations, frozenset(stale))
    found = []
    by_shard: Dict[Tuple[int, int], Dict[int, List[str]]] = {}  # (generation, shard count) -> shard -> relpaths
    members: Dict[Tuple[int, str, int], List[str]] = {}
    entries: Dict[int, Dict[str, LedgerEntry]] = {}  # generation -> relpath -> its entry there

    def entry_in(generation: GenerationInputs, relpath: str) -> LedgerEntry:
        if generation.number not in entries:
            entries[generation.number] = {e.relpath: e for e in generation.ledger}
        return entries[generation.number][relpath]

    for relpath, change in stale.items():
        holding = holder.get(relpath)
        split = split_of(entry_in(holding, relpath)) if holding is not None else None
        if holding is None or split is None or split not in holding.shards:
            raise ValueError(f"no generation holds a record of {relpath}")
        n = holding.shards[split]
        shard = assign_shard(relpath, seed, n)
        key = (holding.number, split, shard)
        if key not in members:
            if (holding.number, n) not in by_shard:  # one pass over a generation per shard count
                groups: Dict[int, List[str]] = {}
                for r in holding.written():
                    groups.setdefault(assign_shard(r, seed, n), []).append(r)
                by_shard[(holding.number, n)] = groups
            mine = [r for r in by_shard[(holding.number, n)].get(shard, []) if split_of(entry_in(holding, r)) == split]
            members[key] = sorted(mine, key=lambda r: (shuffle_key(r, seed), r))
        file = output_files.shard_file_name(split, shard, n, compression, generation=holding.number)
        found.append(Withdrawal(relpath, split, file, members[key].index(relpath), change))
    return found


def _sum_counts(a: Mapping[str, int], b: Mapping[str, int]) -> Dict[str, int]:
    total = dict(a)
    for name, n in b.items():
        total[name] = total.get(name, 0) + n
    return dict(sorted(total.items()))


def _merge_split(old: SplitInfo, new: SplitInfo) -> SplitInfo:
    def summed(a: Optional[Mapping[str, int]], b: Optional[Mapping[str, int]]) -> Optional[Dict[str, int]]:
        return None if a is None and b is None else _sum_counts(a or {}, b or {})

    return SplitInfo(
        num_examples=old.num_examples + new.num_examples,
        num_bytes=old.num_bytes + new.num_bytes,
        examples_per_class=_sum_counts(old.examples_per_class, new.examples_per_class),
        shards=old.shards + new.shards,
        boxes_per_class=summed(old.boxes_per_class, new.boxes_per_class),  # detection
        dropped_boxes=summed(old.dropped_boxes, new.dropped_boxes),
    )


def _withdraw(info: SplitInfo, withdrawn: Sequence[Withdrawal]) -> SplitInfo:
    if not withdrawn:
        return info
    per_class = dict(info.examples_per_class)
    boxes = dict(info.boxes_per_class) if info.boxes_per_class is not None else None
    for w in withdrawn:
        if w.label is not None and per_class.get(w.label, 0) > 0:
            per_class[w.label] -= 1
        for name, n in (w.boxes or {}).items():
            if boxes is not None and boxes.get(name, 0) >= n:
                boxes[name] -= n
    return dataclasses.replace(
        info, num_examples=info.num_examples - len(withdrawn), examples_per_class=per_class, boxes_per_class=boxes
    )


def merge(previous: DatasetManifest, added: DatasetManifest, generation: Generation) -> DatasetManifest:
    """The manifest of ``previous`` with the generation ``added`` describes: splits and accounting summed,
    shards listed after the earlier ones, the records ``generation`` withdraws taken out of the counts,
    ``added``'s labels (the earlier ones first, unchanged ids), ``previous``'s input and options (the
    append's may differ only in those that change no record) and the statistics of ``added`` when it
    was analysed (they then cover every generation), else ``previous``'s."""
    empty = SplitInfo(0, 0, {}, ())
    names = list(previous.splits) + sorted(set(added.splits) - set(previous.splits))
    splits = {
        name: _withdraw(
            _merge_split(previous.splits.get(name, empty), added.splits.get(name, empty)),
            [w for w in generation.withdrawn if w.split == name],
        )
        for name in names
    }
    old, new = previous.accounting or Accounting(0, 0, 0), added.accounting or Accounting(0, 0, 0)
    retried = sum(generation.retried.values())  # counted again by ``added``: once per input, its latest outcome
    by_reason = _sum_counts(old.rejected_by_reason, new.rejected_by_reason)
    for reason, n in generation.retried.items():
        by_reason[reason] = by_reason.get(reason, 0) - n
    accounting = Accounting(
        inputs=old.inputs + new.inputs - retried,
        written=old.written + new.written,
        rejected=old.rejected + new.rejected - retried,
        skipped=old.skipped + new.skipped,
        rejected_by_reason={reason: n for reason, n in by_reason.items() if n > 0},
        withdrawn=old.withdrawn + new.withdrawn + len(generation.withdrawn),
    )
    return added.replace(
        input=previous.input,
        options=previous.options,
        splits=splits,
        accounting=accounting,
        statistics=added.statistics if added.statistics is not None else previous.statistics,
        generations=previous.generations + (generation,),
    )
