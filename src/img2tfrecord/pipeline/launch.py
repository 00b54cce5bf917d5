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
class Launch:
    """What a run will do.

    ``kind``, ``plan``: the input's kind and launch plan (an append's narrowed to its new inputs);
    ``converter``: what converts its work items; ``ledger``: the listing of the input (None: the kind keeps
    none) and ``entries`` the ledger entries the run records (an append's: those it converts);
    ``listed``: their work items and the rows rejected making them (None: the graph discovers them);
    ``junk``: the names the run reports as left out; ``labels``: the class list its records are labelled
    with (None: the graph discovers it); ``append``: the next generation of a finished output;
    ``nothing_new``: why an append converts nothing (the run then writes nothing); ``local_input``: what
    the check of a local input folder found; ``analysed``: the run analyses its train split with
    tf.Transform; ``fingerprint``: names the run's staging folder; ``placement``: the listed work items
    placed in their shards (:func:`placed`; None: not yet, or the graph places them).
    """

    config: ConvertConfig
    kind: InputKind
    plan: Plan
    converter: Converter[Any]
    ledger: Optional[InputLedger] = None
    entries: Optional[Sequence[LedgerEntry]] = None
    listed: Optional[ListedItems] = None
    junk: Sequence[str] = ()
    labels: Optional[List[str]] = None
    append: Optional[AppendRun] = None
    nothing_new: Optional[str] = None
    local_input: Optional[LocalInputReport] = None
    placement: Optional[Placement] = None

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
        if self.listed is not None:
            return self.listed, sorted(self.junk), list(self.listed.rejected)
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
                local_input = kind.check_local(append.plan) if preview else None
                return Launch(
                    config,
                    kind,
                    append.plan,
                    converter,
                    listed=append.listed,
                    append=append,
                    nothing_new=append.nothing_new,
                    local_input=local_input,
                )
            local_input = kind.check_local(append.plan)
            if not preview:
                log_append(append)
            entries = list(append.changes.to_convert)  # the junk was counted by the run that made the output
            return Launch(
                config,
                kind,
                append.plan,
                converter,
                append.ledger,
                entries,
                append.listed,
                (),
                list(append.labels),
                append,
                local_input=local_input,
            )
        local_input = kind.check_local(plan)
        if config.append:
            logging.info("append: %s holds no finished conversion yet; converting everything", config.output)
        ledger = kind.ledger(config, plan)
        if ledger is None:
            return Launch(config, kind, plan, converter, local_input=local_input)
        if not kind.places_at_launch(config):  # the graph reads the units (archives) or groups the items (--dedupe)
            return Launch(
                config, kind, plan, converter, ledger, ledger.entries, None, ledger.junk, local_input=local_input
            )
        listed = ledger.work_items(ledger.entries)
        layout = plan.input.layout  # a class folder that cannot be listed is still a class
        labels = sorted(set(class_names(frames_of(listed), layout)) | set(folder_classes(listed.rejected, layout)))
        return Launch(
            config, kind, plan, converter, ledger, ledger.entries, listed, ledger.junk, labels, local_input=local_input
        )


def launch_plan(plan: Plan, config: ConvertConfig) -> Launch:
    """A launch of an already made ``plan`` without a ledger (what the graph discovers itself)."""
    kind = kind_of(plan)
    return Launch(config, kind, plan, kind.converter(config, plan))


def placed(launched: Launch) -> Launch:
    """``launched`` with its listed work items placed in their shards (``conversion/placement.place_all``),
    once; as it is when they are placed already or in the graph (archives, ``--dedupe``)."""
    if launched.placement is not None or launched.listed is None or not launched.kind.places_at_launch(launched.config):
        return launched
    if launched.append is not None and launched.append.refused is not None:
        return launched
    plan = launched.plan
    placement = place_all(launched.converter, launched.listed, plan.sizing.num_shards)
    return dataclasses.replace(launched, placement=placement)
