"""What an append converts and how its generation joins the output: the listing against the ledger, the merge.

``compare`` sorts a new listing of the input against the ledgers of every generation: inputs never
converted, inputs to try again (rejected last time for a transient reason), and inputs changed or
removed since a record was written from them. ``merge`` adds a finished generation's splits and
accounting to the manifest it appends to. Nothing here does I/O.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Iterable, List, Mapping, Sequence, Tuple

from img2tfrecord.schemas.dataset_manifest import Accounting, DatasetManifest, SplitInfo
from img2tfrecord.schemas.generations import Generation
from img2tfrecord.schemas.ledger import LedgerEntry

# Rejections that may not happen again: the next append tries these inputs again.
TRANSIENT_REASONS = ("decode_timeout", "not_found", "unreadable", "worker_crashed")
WRITTEN = ""  # an input's outcome when a record was written from it


@dataclasses.dataclass(frozen=True)
class InputChanges:
    """A listing against the ledgers, each part sorted by relpath.

    ``new``: never converted; ``retried``: rejected last time for a transient reason (any reason with
    ``retry_rejected``), converted again; ``changed``: (as recorded, as listed now) for inputs a record
    was written from whose size or change marker differs; ``removed``: recorded inputs with a record
    that the listing no longer has. ``unchanged`` counts the rest.
    """

    new: Tuple[LedgerEntry, ...]
    retried: Tuple[LedgerEntry, ...]
    changed: Tuple[Tuple[LedgerEntry, LedgerEntry], ...]
    removed: Tuple[LedgerEntry, ...]
    unchanged: int

    @property
    def to_convert(self) -> Tuple[LedgerEntry, ...]:
        """The inputs the next generation converts: the new ones and those tried again."""
        return tuple(sorted(self.new + self.retried))


Recorded = Dict[str, Tuple[LedgerEntry, str]]  # relpath -> (latest ledger entry, latest outcome)


def outcomes(generations: Sequence[Tuple[Iterable[LedgerEntry], Mapping[str, str]]]) -> Recorded:
    """relpath -> (its latest ledger entry, its latest outcome: ``WRITTEN`` or the rejection reason).

    ``generations``: per generation, oldest first, its ledger and its rejections (relpath -> reason).
    """
    latest: Recorded = {}
    for ledger, rejected in generations:
        for entry in ledger:
            latest[entry.relpath] = (entry, rejected.get(entry.relpath, WRITTEN))
    return latest


def compare(
    listed: Iterable[LedgerEntry], recorded: Mapping[str, Tuple[LedgerEntry, str]], retry_rejected: bool = False
) -> InputChanges:
    """Sort ``listed`` (the input now) against ``recorded`` (``outcomes`` of every generation)."""
    new: List[LedgerEntry] = []
    retried: List[LedgerEntry] = []
    changed: List[Tuple[LedgerEntry, LedgerEntry]] = []
    seen = set()
    unchanged = 0
    for entry in sorted(listed):
        seen.add(entry.relpath)
        found = recorded.get(entry.relpath)
        if found is None:
            new.append(entry)
            continue
        before, outcome = found
        if outcome != WRITTEN:  # no record holds it: a changed input is simply tried again
            if retry_rejected or outcome in TRANSIENT_REASONS or before.changed(entry):
                retried.append(entry)
            else:
                unchanged += 1
        elif before.changed(entry):
            changed.append((before, entry))
        else:
            unchanged += 1
    removed = [entry for relpath, (entry, outcome) in sorted(recorded.items()) if relpath not in seen and not outcome]
    return InputChanges(tuple(new), tuple(retried), tuple(changed), tuple(removed), unchanged)


def _sum_counts(a: Mapping[str, int], b: Mapping[str, int]) -> Dict[str, int]:
    total = dict(a)
    for name, n in b.items():
        total[name] = total.get(name, 0) + n
    return dict(sorted(total.items()))


def _merge_split(old: SplitInfo, new: SplitInfo) -> SplitInfo:
    return SplitInfo(
        num_examples=old.num_examples + new.num_examples,
        num_bytes=old.num_bytes + new.num_bytes,
        examples_per_class=_sum_counts(old.examples_per_class, new.examples_per_class),
        shards=old.shards + new.shards,
    )


def merge(previous: DatasetManifest, added: DatasetManifest, generation: Generation) -> DatasetManifest:
    """The manifest of ``previous`` with the generation ``added`` describes: splits and accounting summed,
    shards listed after the earlier ones, ``added``'s labels (the earlier ones first, unchanged ids),
    ``previous``'s input and options (the append's may differ only in those that change no record) and
    its statistics (the analysis of the generations it covers)."""
    empty = SplitInfo(0, 0, {}, ())
    names = list(previous.splits) + sorted(set(added.splits) - set(previous.splits))
    splits = {name: _merge_split(previous.splits.get(name, empty), added.splits.get(name, empty)) for name in names}
    old, new = previous.accounting or Accounting(0, 0, 0), added.accounting or Accounting(0, 0, 0)
    accounting = Accounting(
        inputs=old.inputs + new.inputs,
        written=old.written + new.written,
        rejected=old.rejected + new.rejected,
        skipped=old.skipped + new.skipped,
        rejected_by_reason=_sum_counts(old.rejected_by_reason, new.rejected_by_reason),
    )
    return added.replace(
        input=previous.input,
        options=previous.options,
        splits=splits,
        accounting=accounting,
        statistics=previous.statistics,
        generations=previous.generations + (generation,),
    )
