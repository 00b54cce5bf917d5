"""``convert --plan``: finding what a run would do with its input, without running it.

The input is listed with the code the pipeline's discovery steps call
(``sources/``: folder entries, archive listings, manifest rows, annotation
files or archive members), every work item is placed by the run's own converter (its split
from ``conversion/sharding.py`` or its split folder, manifest row or
annotations; its class from ``sources/layout.py``), and shards come from the
launch plan (``plan.py``) the run would use. So the counts per split and
class are what the run writes when every input converts; an input that
does not decode is found only by converting it, and then is rejected.

Nothing is written: the output location is only listed. A few inputs
spread over the listing are converted in memory with the run's converter,
timed, and the time extrapolated to every input over the local processes,
plus the start-up measured by ``startup.py``. The result and its text form are in ``preview_report.py``.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import time
from typing import Dict, List, Sequence, Tuple

from img2tfrecord.conversion.appends import stale_inputs
from img2tfrecord.conversion.placement import place
from img2tfrecord.conversion.record_sizes import sample_options
from img2tfrecord.images.names import looks_like_image
from img2tfrecord.model import (
    Clip,
    DetectionPlacement,
    ErrorRow,
    InlineMember,
    Item,
    WorkItem,
    frames,
)
from img2tfrecord.option_values import TASK_DETECTION
from img2tfrecord.pipeline.append import (
    append_ledger,
    compare_with_output,
    is_finished,
    new_classes_of,
    refusal,
    sized_for,
)
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.kinds import places_at_launch
from img2tfrecord.pipeline.kinds.folder import unlistable_entries
from img2tfrecord.pipeline.launch import check_local, image_converter
from img2tfrecord.pipeline.listing import list_input, listing_once
from img2tfrecord.pipeline.outputs import list_output
from img2tfrecord.pipeline.plan import make_plan
from img2tfrecord.pipeline.plan_model import Plan
from img2tfrecord.pipeline.preview_report import (
    AppendPlan,
    Listed,
    OutputState,
    Rejected,
    RunPlan,
    SplitPlan,
    TimeEstimate,
)
from img2tfrecord.pipeline.sizing import estimated_record_bytes, processes_for
from img2tfrecord.pipeline.startup import ImportTimer, Startup, launch_only, measure
from img2tfrecord.schemas import manifest
from img2tfrecord.sources import kinds, manifests
from img2tfrecord.sources import layout as layouts
from img2tfrecord.sources.clips import group_clips
from img2tfrecord.sources.inputs import ERRORS, Discovered, discover
from img2tfrecord.sources.inputs.archive import slim_members
from img2tfrecord.sources.inputs.folder import FolderSource

SAMPLE_SIZE = 16  # inputs converted and timed
SAMPLE_PASSES = 2
EXAMPLES = 5  # paths quoted per list


@dataclasses.dataclass
class _SplitTally:
    examples: int = 0
    classes: Dict[str, int] = dataclasses.field(default_factory=dict)
    boxes: Dict[str, int] = dataclasses.field(default_factory=dict)
    bytes: float = 0.0


def list_sources(config: ConvertConfig, plan: Plan) -> Discovered:
    """Every work item, junk name and early error row the run's discovery step would give: the run's
    own source (``InputPlan.source``), read in this process, and the folders of a local folder input
    that cannot be listed (the run's ledger holds them, ``kinds/folder.py``)."""
    source = plan.input.source(config)
    found = discover(source, list_input, slim_members(4 * SAMPLE_SIZE))
    if isinstance(source, FolderSource) and not plan.input.annotations:
        for entry in unlistable_entries(plan):
            found.errors.extend(row for tag, row in source.read(source.base + entry.relpath, 0) if tag == ERRORS)
    return found


def _missing_local_file(item: Item) -> bool:
    """A local file a manifest row or annotation names that does not exist (a stat, not a read)."""
    return (
        isinstance(item, WorkItem)
        and item.row is not None
        and item.member is None
        and "://" not in item.path
        and not os.path.exists(item.path)
    )


def _has_bytes(item: Item) -> bool:
    """False for a tar.gz member whose bytes the listing dropped."""
    return all(not (isinstance(f.member, InlineMember) and f.size and not f.member.data) for f in frames(item))


def _output_state(config: ConvertConfig, nothing_new: bool = False) -> OutputState:
    """What the output location holds, listed only; ``nothing_new``: an append would find nothing to add."""
    path = config.output
    existing = list_output(path)
    try:  # Beam's staging folders a killed run can leave: empty, so not listed as files
        local_folders = [n for n in os.listdir(path) if n.startswith(manifest.TEMP_PREFIXES)]
    except OSError:  # remote, missing, not a folder or not listable
        local_folders = []
    finished = any(posixpath.basename(p) == manifest.SUCCESS_FILE for p in existing)
    exists = bool(existing or local_folders)
    if "://" not in path and os.path.exists(path) and not os.path.isdir(path):
        exists, note = True, "not a folder: a run cannot write there"
    elif not exists:
        note = "absent or empty: a run writes there"
    elif config.append and finished and nothing_new:
        note = "a finished conversion holding every input: a run would change nothing (--append)"
    elif config.append and finished:
        note = "a finished conversion: a run would add a generation of new shards to it (--append)"
    elif config.overwrite:
        note = "output exists: a run would replace what an earlier run wrote (--overwrite)"
    elif config.resume:
        note = "output exists: a run would finish an interrupted conversion there (--resume)"
    else:
        held = "a finished conversion" if finished else f"{len(existing) or len(local_folders)} file(s)"
        note = f"output exists ({held}): a run would need --overwrite or --resume"
    return OutputState(path, exists, len(existing), finished, note)


def _listed(names: Sequence[str]) -> Listed:
    return Listed(len(names), list(names[:EXAMPLES]))


def _local_checks(plan: Plan) -> Dict[str, List[str]]:
    """The launch-time checks of a local folder the run makes (warnings are logged as the run logs them)."""
    report = check_local(plan)
    if report is None:
        return {}
    found = {  # names that are not UTF-8 are among the rejected (bad_name)
        "empty_class_folders": report.empty_class_folders,
        "folder_links": report.folder_links,
        "broken_links": report.broken_links,
        "unlistable": report.unlistable,
    }
    return {name: names for name, names in found.items() if names}


def _manifest_columns(plan: Plan) -> Dict[str, str]:
    """manifest path -> the columns its rows are read with, for a manifest input (CSV: as its first row
    shows them, delimiter included; JSONL: keys)."""
    if plan.input.input_kind != kinds.INPUT_MANIFEST:
        return {}
    found = {}
    for path in sorted(p for p, _ in list_input(plan.input.pattern) if manifests.manifest_kind(p)):
        head = manifests.manifest_head(path)
        found[path] = head.describe() if head is not None else "JSON objects with keys path, label, split"
    return found


def _time_sample(
    config: ConvertConfig, plan: Plan, items: Sequence[Item], classes: List[str], processes: int, startup: Startup
):
    """Convert up to SAMPLE_SIZE evenly spaced inputs in memory, timed; -> the run's estimated time.

    The sample is converted twice and the faster pass counts: the first also loads Pillow's
    plugins and encoders, and either may lose the core to another process. A huge ``--image-size`` is
    timed at a smaller size of the same shape (``record_sizes.sample_options``) and the time scaled by
    the pixel count.
    """
    small, scale = sample_options(config.image)
    converter = image_converter(dataclasses.replace(config, image=small), plan)
    candidates = [item for item in items if _has_bytes(item)]
    step = max(1, len(candidates) // SAMPLE_SIZE)
    sample = candidates[::step][:SAMPLE_SIZE]
    passes, outputs = [], []
    for _ in range(SAMPLE_PASSES if sample else 0):
        started = time.perf_counter()
        outputs = [converter(item, classes) for item in sample]
        passes.append(time.perf_counter() - started)
    rejected: Dict[str, int] = {}
    for tag, out in outputs:
        if tag is not None:
            rejected[out["reason"]] = rejected.get(out["reason"], 0) + 1
    elapsed = min(passes, default=0.0)
    per_input = elapsed * scale / len(sample) if sample else 0.0
    return TimeEstimate(
        seconds=round(startup.seconds + per_input * len(items) / processes, 1),
        startup_seconds=startup.seconds,
        startup_parts=startup.parts(),
        seconds_per_input=round(per_input, 6),
        processes=processes,
        sample_size=len(sample),
        sample_seconds=round(elapsed, 3),
        sample_rejected=dict(sorted(rejected.items())),
        sample_image_size=list(small.size) if scale != 1.0 and small.size else None,
    )


def plan_run(config: ConvertConfig, processes: int = 0) -> RunPlan:
    """The plan of converting ``config`` with the local runner and ``processes`` processes (0: ``config``'s,
    else as many as a run picks, ``sizing.processes_for``).

    Raises ``PlanError`` (a usage error) as a run would; writes nothing.
    """
    # Runs beside the listing and the sample; a detection input the plan finds is timed again without the analysis.
    imports = ImportTimer(config.analyze and not config.sequence and config.task != TASK_DETECTION)
    try:
        return _plan_run(config, processes, imports)
    finally:
        imports.close()


def _plan_run(config: ConvertConfig, processes: int, imports: ImportTimer) -> RunPlan:
    append, started = None, time.perf_counter()
    with listing_once():
        plan = make_plan(config)
        local_checks = _local_checks(plan)
        columns = _manifest_columns(plan)
        listing = list_sources(config, plan)
        converter = image_converter(config, plan)
        labels = sorted(
            set(layouts.class_names(listing.files, plan.input.layout))
            | set(layouts.folder_classes(listing.errors, plan.input.layout))
        )
        if config.append and is_finished(config.output):
            plan, labels, append = _narrow_to_append(config, plan, converter, listing)
    listing_seconds = time.perf_counter() - started
    processes = processes or config.processes or processes_for(plan.sizing.num_files, plan.sizing.input_bytes)
    items: List[Item] = list(group_clips(listing.files, plan.input.layout) if config.sequence else listing.files)

    rejected: List[ErrorRow] = list(listing.errors)  # the rejections found without converting
    placed: List[Item] = []
    splits = {name: _SplitTally() for name in plan.input.split_names}
    mean_size = (
        plan.sizing.input_bytes / plan.sizing.num_files if plan.sizing.num_files else 0.0
    )  # manifest rows carry no size
    shard_counts = {name: max(1, plan.sizing.num_shards.get(name, 0)) for name in splits}
    for item in items:
        key, found = place(converter, item, config.seed, shard_counts)  # as the run places it
        if key is None:
            rejected.append(found)  # type: ignore[arg-type]
            continue
        split = key[0]
        if isinstance(item, Clip) and not item.is_clip:
            rejected.append(converter(item, [])[1])
            continue
        if _missing_local_file(item):  # named by a manifest or annotation: the converter's not_found row
            rejected.append(converter(item, labels)[1])
            continue
        placed.append(item)
        info = splits[split]
        info.examples += 1
        first = frames(item)[0]
        class_name = layouts.placement(first, plan.input.layout)[1]
        if class_name is not None:
            info.classes[class_name] = info.classes.get(class_name, 0) + 1
        if isinstance(first.row, DetectionPlacement):
            for box in first.row.annotation.boxes:
                info.boxes[box.label] = info.boxes.get(box.label, 0) + 1
        size = sum(f.size or mean_size for f in frames(item))
        info.bytes += estimated_record_bytes(size, plan.sizing.size_ratio)

    by_reason: Dict[str, int] = {}
    for row in rejected:
        by_reason[row["reason"]] = by_reason.get(row["reason"], 0) + 1
    analysed = config.analyze and not plan.input.annotations and not config.sequence
    if imports.analysis != analysed:  # detection: no analysis, which the plan knows only now
        imports = ImportTimer(analysed)
    if append is not None and append.nothing_new:  # the run ends at its launch: no Beam, no job
        imports.close()
        startup = launch_only(listing_seconds)
    else:
        placed_at_launch = placed if places_at_launch(config, plan) else []
        startup = measure(
            dataclasses.replace(config, processes=processes), plan, listing_seconds, imports, placed_at_launch
        )
    return RunPlan(
        input=config.input,
        input_kind=plan.input.input_kind,
        layout=plan.input.layout,
        task=plan.input.task,
        annotations=plan.input.annotations or None,
        sequence=config.sequence,
        labeled=plan.input.labeled,
        classes=labels,
        inputs=len(items) + len(listing.errors),
        splits={
            name: SplitPlan(
                examples=info.examples,
                examples_per_class=dict(sorted(info.classes.items())),
                boxes_per_class=dict(sorted(info.boxes.items())),
                num_shards=plan.sizing.num_shards.get(name, 0),
                estimated_bytes=int(info.bytes),
            )
            for name, info in splits.items()
        },
        skipped=_listed(sorted(listing.skipped)),
        rejected=Rejected(len(rejected), dict(sorted(by_reason.items())), rejected[:EXAMPLES]),
        not_image_names=_listed(
            [layouts.printable(f.relpath) for item in placed for f in frames(item) if not looks_like_image(f.relpath)]
        ),
        size_ratio=round(plan.sizing.size_ratio, 4),
        estimated_bytes=int(sum(info.bytes for info in splits.values())),
        time=_time_sample(config, plan, placed, labels, processes, startup),
        output=_output_state(config, nothing_new=append is not None and append.nothing_new),
        local_checks=local_checks,
        skipped_outputs=list(plan.input.skipped_outputs),
        append=append,
        manifest_columns=columns,
    )


def _narrow_to_append(
    config: ConvertConfig, plan: Plan, converter, listing: Discovered
) -> Tuple[Plan, List[str], AppendPlan]:
    """``--plan --append``: the listing narrowed to what the next generation converts, its plan and labels."""
    ledger = append_ledger(config, plan)
    previous, _, changes = compare_with_output(config, plan, ledger)
    keep = {e.relpath for e in changes.to_convert}
    listing.files = [f for f in listing.files if ledger.key_of(f) in keep]
    listing.errors = [row for row in listing.errors if ledger.key_of(row) in keep]
    listing.skipped = []
    new_classes = new_classes_of(plan, listing.files, previous)
    units = group_clips(listing.files, plan.input.layout) if config.sequence else listing.files
    plan = sized_for(config, plan, converter, units)
    refused = refusal(plan, ledger, changes, new_classes, config.allow_new_classes, list_file=False)
    withdraws = changes.accepted and bool(stale_inputs(changes))
    summary = AppendPlan(
        generation=previous.generations[-1].number + 1,
        new=len(changes.new),
        retried=len(changes.retried),
        unchanged=changes.unchanged,
        changed=_listed([now.relpath for _, now in changes.changed]),
        removed=_listed([e.relpath for e in changes.removed]),
        new_classes=new_classes,
        refused=refused,
        accepted=changes.accepted,
        nothing_new=refused is None and not changes.to_convert and not withdraws,  # as plan_append decides
        counted=ledger.noun,
    )
    return plan, list(previous.labels) + new_classes, summary
