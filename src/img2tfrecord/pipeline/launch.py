"""The launch: what a run converts, decided from one listing of the input before Beam is loaded.

``launch`` plans the run, checks a local input folder, writes nothing, and returns what the graph
needs: the run's ledger (``kinds/``) and, where they are placed at launch, its work items and
classes, and for ``--append`` the next generation (or ``NothingNew``). Over a local input none of it
imports Beam, so a scheduled append that finds nothing new ends without loading it.

On the default local runner the launch also starts the conversion pool (``start_pool_early``), places the
work items in their shards (``placed``) and has the pool convert the first shards' items
(``prefetch_first_shards``) while the run imports Beam and starts its job.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple

from img2tfrecord.conversion.converter import ClipConverter, Converter, DetectionConverter, ImageConverter
from img2tfrecord.conversion.placement import Placement, place_all
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
from img2tfrecord.sources.layout import class_names, folder_classes

if TYPE_CHECKING:
    from img2tfrecord.conversion.pool import ConversionPool

__all__ = [
    "Launched",
    "NothingNew",
    "check_local",
    "class_list",
    "image_converter",
    "launch",
    "placed",
    "prefetch_first_shards",
    "run_dir",
    "start_pool_early",
]

# The default runner: Beam's FnApiRunner (what the DirectRunner falls back to offline), in_memory: the
# job's DoFns run in the launching process, each shard's images converted by its pool (conversion/pool.py).
LOCAL_RUNNER = "FnApiRunner"
LOCAL_RUNNING_MODE = "in_memory"

# What the pool converts ahead is held until the shard writer takes it: a bound on that memory (its outputs
# are about as large as its inputs at most), and about what two to four processes convert while Beam starts.
PREFETCH_BYTES = 64 * 2**20
PREFETCH_ITEMS = 1024


@dataclasses.dataclass(frozen=True)
class Launched:
    """What the launch found. ``ledger``: the inputs the run records (None: it keeps no ledger);
    ``listed``: their work items and the rows rejected while making them (None: the graph discovers
    them); ``junk``: the files the run reports as left out; ``labels``: their classes; ``append``: the
    next generation; ``placement``: the listed work items placed in their shards (``placed``; None: not yet,
    or the graph places them)."""

    plan: Plan
    ledger: Optional[List[LedgerEntry]] = None
    listed: Optional[Tuple[List[Item], List[ErrorRow]]] = None
    junk: Sequence[str] = ()
    labels: Optional[Sequence[str]] = None
    append: Optional[AppendRun] = None
    placement: Optional[Placement] = None


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
        layout = plan.input.layout  # a class folder that cannot be listed is still a class
        labels = sorted(set(class_names(frames_of(listed[0]), layout)) | set(folder_classes(listed[1], layout)))
        return Launched(plan, found.entries, listed, found.junk, labels)


def check_local(plan: Plan) -> Optional[LocalInputReport]:
    """The launch check of a local input folder (None for any other input): its empty class folders,
    links and unlistable folders logged as warnings; InputProblem for names no record can carry."""
    if plan.input.input_kind != kinds.INPUT_FOLDER or storage.is_remote(plan.input.base):
        return None
    return check_local_input(plan.input.base, plan.input.pattern, plan.input.layout)


def analysed(config: ConvertConfig, plan: Plan, append: Optional[AppendRun]) -> bool:
    """Whether the run analyses its train split with tf.Transform: ``--analyze`` (the default), not for
    detection records, and for an append only onto statistics that cover every generation."""
    return config.analyze and not plan.input.annotations and (append is None or append.analysis_base is not None)


def class_list(append: Optional[AppendRun], labels: Optional[Sequence[str]]) -> Optional[List[str]]:
    """The class list a run's records are labelled with (the shard writer's ``label_names``): an append's
    output classes, else the listing's classes sorted; None when the graph discovers them."""
    if append is not None:
        return list(append.labels)
    return sorted(labels) if labels is not None else None


def placed(config: ConvertConfig, launched: Launched) -> Launched:
    """``launched`` with its listed work items placed in their shards (``conversion/placement.place_all``),
    once; as it is when they are placed already or in the graph (archives, ``--dedupe``)."""
    if launched.placement is not None or launched.listed is None or config.dedupe:
        return launched
    plan = launched.plan
    placement = place_all(image_converter(config, plan), launched.listed[0], config.seed, plan.sizing.num_shards)
    return dataclasses.replace(launched, placement=placement)


def _arg_value(args: Sequence[str], flag: str) -> Optional[str]:
    """The value of ``--flag=V`` or ``--flag V`` in pass-through pipeline arguments (the last one), or None."""
    found = None
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            found = arg[len(flag) + 1 :]
        elif arg == flag and i + 1 < len(args):
            found = args[i + 1]
    return found


def converts_in_this_process(pipeline_args: Sequence[str]) -> bool:
    """Whether the job's shard writer runs in this process, read from the arguments without Beam: the local
    runner (``FnApiRunner``, the default) in its default ``in_memory`` mode."""
    runner = _arg_value(pipeline_args, "--runner")
    mode = _arg_value(pipeline_args, "--direct_running_mode")
    return (runner is None or runner.split(".")[-1] == LOCAL_RUNNER) and mode in (None, LOCAL_RUNNING_MODE)


def start_pool_early(
    config: ConvertConfig, launched: Launched, pipeline_args: Sequence[str]
) -> Optional[ConversionPool]:
    """Start the conversion pool of a run on the default local runner before Beam is imported; the pool, or
    None. The shard writer takes it (``conversion.pool.take_started``), so its processes are ready when
    the first shard converts instead of starting then. Not for other runners (their workers convert),
    clips (one per batch), or a run of one conversion process."""
    if not converts_in_this_process(pipeline_args) or config.sequence:
        return None
    plan = launched.plan
    processes = config.processes or processes_for(plan.sizing.num_files, plan.sizing.input_bytes)
    if processes < 2:
        return None
    from img2tfrecord.conversion.pool import start_early

    return start_early(image_converter(config, plan), processes)


def prefetch_first_shards(config: ConvertConfig, launched: Launched, pool: ConversionPool) -> int:
    """Have the early ``pool`` convert the first shards' items now, in the order their writer will queue
    them, within ``PREFETCH_ITEMS`` and ``PREFETCH_BYTES``; the items it converts ahead (0: none).

    Only for a run placed at launch (``placed``) whose classes are known, and not ``--resume`` (its
    finished shards are replayed, not converted), nor a run with the analysis (it imports TensorFlow
    meanwhile, and converting ahead then delays its job by more than it saves: performance.md). The
    shards go in placement order, the order the local runner hands them to the writer; one it hands
    later is taken then, one it never asks for is dropped.
    """
    labels = class_list(launched.append, launched.labels)
    if (
        config.resume
        or launched.placement is None
        or labels is None
        or analysed(config, launched.plan, launched.append)
    ):
        return 0
    shards: List[List[Any]] = []
    count = size = 0
    for found in launched.placement.shards.values():
        shard: List[Any] = []
        for item in (i.item for i in found):
            size += getattr(item, "size", 0)
            if count == PREFETCH_ITEMS or size > PREFETCH_BYTES:
                break
            shard.append(item)
            count += 1
        if shard:
            shards.append(shard)
        if len(shard) < len(found):
            break
    pool.prefetch(shards, labels)
    logging.debug("converting %d work item(s) of the first %d shard(s) ahead", count, len(shards))
    return count
