"""The launch: what a run converts, decided from one listing of the input before Beam is loaded.

``launch`` plans the run, checks a local input folder, writes nothing, and returns what the graph
needs: the run's ledger (``kinds/``) and, where they are placed at launch, its work items and
classes, and for ``--append`` the next generation (or ``NothingNew``). Over a local input none of it
imports Beam, so a scheduled append that finds nothing new ends without loading it.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, List, Optional, Sequence, Tuple

from img2tfrecord.conversion.converter import ClipConverter, Converter, DetectionConverter, ImageConverter
from img2tfrecord.conversion.sharding import DEFAULT_SPLIT
from img2tfrecord.model import ErrorRow, Item
from img2tfrecord.pipeline.append import AppendRun, NothingNew, is_finished, log_append, plan_append
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.inputs import LocalInputReport, check_local_input
from img2tfrecord.pipeline.kinds import frames_of, input_ledger
from img2tfrecord.pipeline.listing import listing_once
from img2tfrecord.pipeline.plan import make_plan
from img2tfrecord.pipeline.plan_model import Plan
from img2tfrecord.pipeline.sizing import processes_for
from img2tfrecord.readers import storage
from img2tfrecord.schemas import manifest
from img2tfrecord.schemas import transformed as names
from img2tfrecord.schemas.ledger import LedgerEntry
from img2tfrecord.sources import kinds
from img2tfrecord.sources.layout import class_names

__all__ = ["Launched", "NothingNew", "check_local", "image_converter", "launch", "run_dir", "start_pool_early"]


@dataclasses.dataclass(frozen=True)
class Launched:
    """What the launch found. ``ledger``: the inputs the run records (None: it keeps no ledger);
    ``listed``: their work items and the rows rejected while making them (None: the graph discovers
    them); ``junk``: the files the run reports as left out; ``labels``: their classes; ``append``: the
    next generation."""

    plan: Plan
    ledger: Optional[List[LedgerEntry]] = None
    listed: Optional[Tuple[List[Item], List[ErrorRow]]] = None
    junk: Sequence[str] = ()
    labels: Optional[Sequence[str]] = None
    append: Optional[AppendRun] = None


def image_converter(config: ConvertConfig, plan: Plan) -> Converter[Any]:
    """The converter of a run's work items; the analysed split's records carry their analysis rows."""
    splits = config.splits or ((DEFAULT_SPLIT, 1.0),)
    if plan.input.annotations:
        return DetectionConverter(config.image, plan.input.layout, splits, config.seed, config.require_boxes)
    if config.sequence:
        return ClipConverter(config.image, plan.input.layout, splits, config.seed)
    sums_split = names.ANALYZED_SPLIT if config.analyze else None
    return ImageConverter(config.image, plan.input.layout, splits, config.seed, sums_split, config.exact_statistics)


def run_dir(config: ConvertConfig, plan: Plan) -> str:
    """The run's staging folder inside the output (``manifest.run_folder``)."""
    return storage.join(config.output, manifest.run_folder(plan.fingerprint(config)))


def launch(config: ConvertConfig, plan: Optional[Plan] = None) -> Launched:
    """What ``config``'s run converts (``plan``: its launch plan, when already made).

    Raises PlanError (and its InputProblem) for an input or an append that cannot go on, NothingNew
    when an append finds nothing to convert. The plan, the ledger and an append's comparison share
    one listing; the local folder check runs once the append knows it converts something.
    """
    with listing_once():
        appending = config.append and is_finished(config.output)
        plan = plan or make_plan(config, whole=not appending)
        if appending:
            append = plan_append(config, plan, image_converter(config, plan))
            check_local(append.plan)
            log_append(append)
            ledger = list(append.changes.to_convert)  # the junk was counted by the run that made the output
            return Launched(append.plan, ledger, append.listed, (), None, append)
        check_local(plan)
        if config.append:
            logging.info("append: %s holds no finished conversion yet; converting everything", config.output)
        found = input_ledger(config, plan)
        if found is None:
            return Launched(plan)
        if not found.places_at_launch:  # archives: the pipeline reads their members
            return Launched(plan, found.entries, None, found.junk)
        listed = found.work_items(found.entries)
        return Launched(plan, found.entries, listed, found.junk, class_names(frames_of(listed[0]), plan.input.layout))


def check_local(plan: Plan) -> Optional[LocalInputReport]:
    """The launch check of a local input folder (None for any other input): its empty class folders,
    links and unlistable folders logged as warnings; InputProblem for names no record can carry."""
    if plan.input.input_kind != kinds.INPUT_FOLDER or storage.is_remote(plan.input.base):
        return None
    return check_local_input(plan.input.base, plan.input.pattern, plan.input.layout)


def start_pool_early(config: ConvertConfig, launched: Launched, pipeline_args: Sequence[str]) -> bool:
    """Start the conversion pool of a run on the default local runner before Beam is imported; True when
    started. The shard writer takes it (``conversion.pool.take_started``), so its processes are ready when
    the first shard converts instead of starting then. Not for other runners (their workers convert),
    clips (one per batch), or a run of one conversion process."""
    if any(arg.startswith(("--runner", "--direct_running_mode")) for arg in pipeline_args) or config.sequence:
        return False
    plan = launched.plan
    processes = config.processes or processes_for(plan.sizing.num_files, plan.sizing.input_bytes)
    if processes < 2:
        return False
    from img2tfrecord.conversion.pool import start_early

    start_early(image_converter(config, plan), processes)
    return True
