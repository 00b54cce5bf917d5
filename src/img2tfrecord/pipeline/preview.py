"""``convert --plan``: what a run would do with its input, without running it.

The plan renders the run's own launch (``launch.py``: the kind, the plan, the listing, an append's
comparison) and its placement of every work item (``conversion/placement.py``), listing in this process
what the run's graph would discover itself (archives). So the counts per split and class are what the
run writes when every input converts; an input that does not decode is found only by converting it,
and then is rejected.

Nothing is written: the output location is only listed. A few inputs spread over the listing are
converted in memory with the run's converter, timed, and the time extrapolated to every input over the
local processes, plus the start-up measured by ``startup.py``. The result and its text form are in
``preview_report.py``.
"""

from __future__ import annotations

import dataclasses
import os
import posixpath
import time
from array import array
from typing import Dict, Iterator, List, Sequence

from img2tfrecord.conversion.placement import place
from img2tfrecord.conversion.record_sizes import estimated_record_bytes, sample_options
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
from img2tfrecord.pipeline.append import AppendRun
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.kinds.ledger import Picked
from img2tfrecord.pipeline.launch import Launch, launch
from img2tfrecord.pipeline.listing import list_input, listing_once
from img2tfrecord.pipeline.outputs import list_output
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
from img2tfrecord.pipeline.sizing import evenly_spaced, processes_for
from img2tfrecord.pipeline.startup import ImportTimer, Startup, launch_only, measure
from img2tfrecord.schemas import output_files
from img2tfrecord.sources import layout as layouts
from img2tfrecord.sources import manifests

SAMPLE_SIZE = 16  # inputs converted and timed
SAMPLE_PASSES = 2
EXAMPLES = 5  # paths quoted per list


@dataclasses.dataclass
class _SplitTally:
    examples: int = 0
    classes: Dict[str, int] = dataclasses.field(default_factory=dict)
    boxes: Dict[str, int] = dataclasses.field(default_factory=dict)
    bytes: float = 0.0


_DOWNLOADED = ("http://", "https://")  # a URL list's entries: the downloaded content decides, not the name


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
        local_folders = [n for n in os.listdir(path) if n.startswith(output_files.TEMP_PREFIXES)]
    except OSError:  # remote, missing, not a folder or not listable
        local_folders = []
    finished = any(posixpath.basename(p) == output_files.SUCCESS_FILE for p in existing)
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


def _local_checks(launched: Launch) -> Dict[str, List[str]]:
    """The launch-time checks of a local folder the run makes (warnings are logged as the run logs them)."""
    report = launched.local_input
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
    """manifest path -> the columns its rows are read with, for an input of manifest rows (CSV: as its first
    row shows them, delimiter included; JSONL: keys)."""
    if plan.input.layout != layouts.LAYOUT_MANIFEST:
        return {}
    found = {}
    for path in sorted(p for p, _ in list_input(plan.input.pattern) if manifests.manifest_format(p)):
        head = manifests.manifest_head(path)
        found[path] = head.describe() if head is not None else "JSON objects with keys path, label, split"
    return found


def _time_sample(launched: Launch, items: Sequence[Item], classes: List[str], processes: int, startup: Startup):
    """Convert up to SAMPLE_SIZE evenly spaced inputs in memory, timed; -> the run's estimated time.

    The sample is converted twice and the faster pass counts: the first also loads Pillow's
    plugins and encoders, and either may lose the core to another process. A huge ``--image-size`` is
    timed at a smaller size of the same shape (``record_sizes.sample_options``) and the time scaled by
    the pixel count.
    """
    config, plan = launched.config, launched.plan
    small, scale = sample_options(config.image)
    converter = launched.kind.converter(dataclasses.replace(config, image=small), plan)
    candidates = Picked(items, array("q", (i for i, item in enumerate(items) if _has_bytes(item))))
    sample = evenly_spaced(candidates, SAMPLE_SIZE)
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
    started = time.perf_counter()
    with listing_once():  # the launch and the listing of what the graph would discover share one listing
        launched = launch(config, preview=True)
        items, junk, errors = launched.listed_units()
    labels = launched.labels
    if labels is None:  # the graph would discover them; a class folder that cannot be listed is still a class
        layout = launched.plan.input.layout
        labels = sorted(set(layouts.class_names(_files(items), layout)) | set(layouts.folder_classes(errors, layout)))
    listing_seconds = time.perf_counter() - started
    plan, converter, append = launched.plan, launched.converter, launched.append
    processes = processes or config.processes or processes_for(plan.sizing.num_files, plan.sizing.input_bytes)

    rejected: List[ErrorRow] = list(errors)  # the rejections found without converting
    placed_at = array("q")  # where the inputs placed in a split are in ``items``
    splits = {name: _SplitTally() for name in plan.input.split_names}
    mean_size = (
        plan.sizing.input_bytes / plan.sizing.num_files if plan.sizing.num_files else 0.0
    )  # manifest rows carry no size
    shard_counts = {name: max(1, plan.sizing.num_shards.get(name, 0)) for name in splits}
    for index, item in enumerate(items):
        key, found = place(converter, item, shard_counts)  # as the run places it
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
        placed_at.append(index)
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

    placed = Picked(items, placed_at)
    by_reason: Dict[str, int] = {}
    for row in rejected:
        by_reason[row["reason"]] = by_reason.get(row["reason"], 0) + 1
    if imports.analysis != launched.analysed:  # detection: no analysis, which the plan knows only now
        imports = ImportTimer(launched.analysed)
    if launched.nothing_new is not None:  # the run ends at its launch: no Beam, no job
        imports.close()
        startup = launch_only(listing_seconds)
    else:
        listing = launched.listing
        placed_at_launch: Sequence[Item] = placed if listing is not None and listing.items is not None else []
        startup = measure(
            dataclasses.replace(config, processes=processes), plan, listing_seconds, imports, placed_at_launch
        )
    return RunPlan(
        input=config.input,
        input_kind=launched.kind.name,
        layout=plan.input.layout,
        task=launched.kind.task,
        annotations=plan.input.annotations or None,
        sequence=launched.kind.sequence,
        labeled=plan.input.labeled,
        classes=labels,
        inputs=len(items) + len(errors),
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
        skipped=_listed(junk),
        rejected=Rejected(len(rejected), dict(sorted(by_reason.items())), rejected[:EXAMPLES]),
        not_image_names=_listed(
            [
                layouts.printable(f.relpath)
                for item in placed
                for f in frames(item)
                if not looks_like_image(f.relpath) and not f.path.startswith(_DOWNLOADED)
            ]
        ),
        size_ratio=round(plan.sizing.size_ratio, 4),
        estimated_bytes=int(sum(info.bytes for info in splits.values())),
        time=_time_sample(launched, placed, labels, processes, startup),
        output=_output_state(config, nothing_new=launched.nothing_new is not None),
        local_checks=_local_checks(launched),
        skipped_outputs=list(plan.input.skipped_outputs),
        append=_append_plan(append) if append is not None else None,
        manifest_columns=_manifest_columns(launched.plan),
    )


def _files(items: Sequence[Item]) -> Iterator[WorkItem]:
    return (f for item in items for f in frames(item))


def _append_plan(append: AppendRun) -> AppendPlan:
    """What ``--plan --append`` shows of the next generation."""
    changes = append.changes
    refused = append.refused
    return AppendPlan(
        generation=append.generation,
        new=len(changes.new),
        retried=len(changes.retried),
        unchanged=changes.unchanged,
        changed=_listed([now.relpath for _, now in changes.changed]),
        removed=_listed([e.relpath for e in changes.removed]),
        new_classes=list(append.new_classes),
        refused=refused,
        accepted=changes.accepted,
        nothing_new=append.nothing_new is not None,
        counted=append.noun,
    )
