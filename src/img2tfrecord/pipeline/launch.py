"""The launch: what a run will do, decided once, before Beam is loaded, as one value (:class:`Launch`).

``launch(config)`` finds the input's kind and plan (``kinds/``), lists the inputs the run records (its
ledger) and, where they are placed at launch, their work items and classes; for ``--append`` it compares
the input with the output (the next generation, or nothing new). It checks a local input folder and
writes nothing. The run, ``--plan`` and ``--append`` take the value; ``--plan`` only renders it. Over a
local input none of it imports Beam, so a scheduled append that finds nothing new ends without loading it.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, List, Optional, Sequence, Tuple

from img2tfrecord import storage
from img2tfrecord.conversion.converter import Converter
from img2tfrecord.conversion.placement import Placement, place_all
from img2tfrecord.conversion.record_sizes import SAMPLE_SIZE
from img2tfrecord.model import ErrorRow, Item
from img2tfrecord.pipeline.append import AppendRun, is_finished, log_append, plan_append
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.inputs import LocalInputReport
from img2tfrecord.pipeline.kinds import InputKind, kind_of, plan_input
from img2tfrecord.pipeline.kinds.ledger import InputLedger, ListedItems, frames_of
from img2tfrecord.pipeline.listing import list_input, listing_once
from img2tfrecord.pipeline.plan_model import Plan, PlanError
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas.ledger import LedgerEntry
from img2tfrecord.sources.inputs import discover
from img2tfrecord.sources.inputs.archive import slim_members
from img2tfrecord.sources.layout import class_names, folder_classes


@dataclasses.dataclass(frozen=True)
class Listing:
    """What the launch listed of the input: the ledger the run records and, where the launch makes them, the
    work items and their classes.

    ``entries``: the ledger entries the run records (an append's: those it converts); ``junk``: the names the
    run reports as left out; ``items``: the work items and the rows rejected making them (None: the graph
    discovers them); ``labels``: the class list the records are labelled with (None: the graph discovers it).
    """

    ledger: InputLedger
    entries: Sequence[LedgerEntry]
    junk: Sequence[str] = ()
    items: Optional[ListedItems] = None
    labels: Optional[List[str]] = None


@dataclasses.dataclass(frozen=True)
class Launch:
    """What a run will do: the input's ``kind`` and launch ``plan`` (an append's narrowed to its new inputs),
    the ``converter`` of its work items, and three values of their own:

    ``listing``: what was listed (None: the kind keeps no ledger, the graph discovers everything);
    ``append``: what an append adds to a finished output (None: not an append; its ``nothing_new`` says why
    the run converts nothing, decided here once); ``local_input``: what the check of a local input folder
    found (None: not checked). Where the listed work items go is a value of its own (:func:`place`).
    """

    config: ConvertConfig
    kind: InputKind
    plan: Plan
    converter: Converter[Any]
    listing: Optional[Listing] = None
    append: Optional[AppendRun] = None
    local_input: Optional[LocalInputReport] = None

    @property
    def nothing_new(self) -> Optional[str]:
        """Why an append converts nothing (the run then ends at its launch and writes nothing), or None."""
        return self.append.nothing_new if self.append is not None else None

    @property
    def labels(self) -> Optional[List[str]]:
        """The classes known at launch (None: the graph discovers them)."""
        return self.listing.labels if self.listing is not None else None

    @property
    def analysed(self) -> bool:
        """Whether the run analyses its train split with tf.Transform: ``--analyze`` (the default) on a kind
        that can be analysed, and for an append only onto statistics that cover every generation."""
        append = self.append
        return self.config.analyze and self.kind.analysable and (append is None or append.analysis_base is not None)

    @property
    def fingerprint(self) -> str:
        return self.plan.fingerprint(self.config)

    @property
    def run_dir(self) -> str:
        """The run's staging folder inside the output (``output_files.run_folder``)."""
        return storage.join(self.config.output, output_files.run_folder(self.fingerprint))

    def listed_units(self) -> Tuple[Sequence[Item], List[str], List[ErrorRow]]:
        """``(work items, junk names, early error rows)`` of what the run converts, listed in this process where
        the graph would discover them (archives: most tar.gz members without their bytes)."""
        listing = self.listing
        if listing is not None and listing.items is not None:
            return listing.items, sorted(listing.junk), list(listing.items.rejected)
        if self.append is not None and not self.plan.input.units:  # an append that reads no archive
            return [], [], []
        found = discover(self.kind.source(self.config, self.plan), list_input, slim_members(4 * SAMPLE_SIZE))
        return list(self.kind.units(found.files, self.plan.input.layout)), sorted(found.skipped), found.errors


def launch(config: ConvertConfig, preview: bool = False) -> Launch:
    """What ``config``'s run will do.

    Raises PlanError (and its InputProblem) for an input or an append that cannot go on; ``preview``
    (``--plan``): an append's refusal is kept in the value (``append.refused``) instead of raised. The plan, the
    ledger and an append's comparison share one listing; the local folder check runs once the append
    knows it converts something.
    """
    with listing_once():
        appending = config.append and is_finished(config.output)
        kind, plan = plan_input(config, whole=not appending)
        converter = kind.converter(config, plan)
        if appending:
            append = plan_append(config, kind, plan, converter)
            if append.refused is not None and not preview:
                raise PlanError(append.refusal(list_file=True))
            if append.nothing_new is not None:  # --plan shows what the run's launch check would have warned about
                return Launch(
                    config=config,
                    kind=kind,
                    plan=append.plan,
                    converter=converter,
                    listing=Listing(ledger=append.ledger, entries=(), items=append.listed),
                    append=append,
                    local_input=kind.check_local(append.plan) if preview else None,
                )
            local_input = kind.check_local(append.plan)
            if not preview:
                log_append(append)
            adds = Listing(
                ledger=append.ledger,
                entries=list(append.changes.to_convert),
                junk=(),  # counted by the run that made the output
                items=append.listed,
                labels=list(append.labels),
            )
            return Launch(
                config=config,
                kind=kind,
                plan=append.plan,
                converter=converter,
                listing=adds,
                append=append,
                local_input=local_input,
            )
        local_input = kind.check_local(plan)
        if config.append:
            logging.info("append: %s holds no finished conversion yet; converting everything", config.output)
        listing = _listing(config, kind, plan)
        return Launch(
            config=config, kind=kind, plan=plan, converter=converter, listing=listing, local_input=local_input
        )


def _listing(config: ConvertConfig, kind: InputKind, plan: Plan) -> Optional[Listing]:
    """What the launch lists of a whole input: its ledger and, where the launch places them, the work items
    and their classes; None for a kind that keeps no ledger."""
    ledger = kind.ledger(config, plan)
    if ledger is None:
        return None
    if not kind.places_at_launch(config):  # the graph reads the units (archives) or groups the items (--dedupe)
        return Listing(ledger=ledger, entries=ledger.entries, junk=ledger.junk)
    items = ledger.work_items(ledger.entries)
    layout = plan.input.layout  # a class folder that cannot be listed is still a class
    labels = sorted(set(class_names(frames_of(items), layout)) | set(folder_classes(items.rejected, layout)))
    return Listing(ledger=ledger, entries=ledger.entries, junk=ledger.junk, items=items, labels=labels)


def launch_plan(plan: Plan, config: ConvertConfig) -> Launch:
    """A launch of an already made ``plan`` without a ledger (what the graph discovers itself)."""
    kind = kind_of(plan)
    return Launch(config=config, kind=kind, plan=plan, converter=kind.converter(config, plan))


def place(launched: Launch) -> Optional[Placement]:
    """The work items ``launched`` listed, placed in their shards (``conversion/placement.place_all``); None
    where the graph places them (archives, ``--dedupe``, a kind without a ledger)."""
    listing = launched.listing
    if listing is None or listing.items is None:
        return None
    return place_all(launched.converter, listing.items, launched.plan.sizing.num_shards)
