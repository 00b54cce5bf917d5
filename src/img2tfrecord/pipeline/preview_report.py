"""``convert --plan``'s result: what the plan holds (``RunPlan``, the ``--plan --json`` document) and its text.

``pipeline/preview.py`` computes the plan; this module only holds and shows it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Dict, List, Optional

from img2tfrecord.class_counts import is_many, spread_lines
from img2tfrecord.model import ErrorRow
from img2tfrecord.sources import layout as layouts


@dataclasses.dataclass(frozen=True)
class Listed:
    """How many, and the first few names."""

    count: int
    examples: List[str]


@dataclasses.dataclass(frozen=True)
class Rejected:
    """Inputs the run rejects, found without converting them (by the listing, placement or a missing file)."""

    count: int
    by_reason: Dict[str, int]
    examples: List[ErrorRow]  # as errors.jsonl rows


@dataclasses.dataclass(frozen=True)
class SplitPlan:
    examples: int  # inputs placed in this split: its records when every one converts
    examples_per_class: Dict[str, int]  # as dataset.json counts them (empty for detection)
    boxes_per_class: Dict[str, int]  # detection: valid boxes the annotations give (converting may drop some)
    num_shards: int
    estimated_bytes: int


@dataclasses.dataclass(frozen=True)
class TimeEstimate:
    """The local runner's run time: start-up + inputs x seconds per input / processes."""

    seconds: float
    startup_seconds: float  # measured: the sum of startup_parts (pipeline/startup.py)
    seconds_per_input: float  # measured on the sample, in one process
    processes: int
    sample_size: int
    sample_seconds: float
    sample_rejected: Dict[str, int]  # reasons of the sampled inputs the converter rejected
    startup_parts: Dict[str, float] = dataclasses.field(default_factory=dict)  # imports, listing, graph, placement (s)
    sample_image_size: Optional[List[int]] = None  # [width, height] the sample was timed at, when not --image-size


@dataclasses.dataclass(frozen=True)
class OutputState:
    path: str
    exists: bool  # holds anything (files, or a local staging folder)
    files: int
    finished: bool  # holds _SUCCESS
    note: str


@dataclasses.dataclass(frozen=True)
class AppendPlan:
    """``--plan --append``: the output's next generation, and what the input holds against its ledgers."""

    generation: int
    new: int  # inputs never converted
    retried: int  # inputs rejected before, tried again
    unchanged: int
    changed: Listed  # converted inputs whose size or change marker differs: refused, or converted again
    removed: Listed  # converted inputs no longer listed: refused, or their records withdrawn
    new_classes: List[str]
    refused: Optional[str]  # the line the run would exit 2 with; None: it would go on
    accepted: bool = False  # --accept-changes: the changed and removed inputs' records are withdrawn
    nothing_new: bool = False  # nothing to convert or withdraw: the run ends at its launch, writing nothing
    counted: str = "input(s)"  # what one of these counts is: input(s), archive(s), annotated image(s), clip(s)


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """Everything ``convert --plan`` reports; ``--plan --json`` prints it with these field names as keys."""

    input: str
    input_kind: str  # the input kind's name (pipeline/kinds/): folder, archives, manifest, detection, ...
    layout: str  # class, split, manifest, detection (sources/layout.py)
    task: str
    annotations: Optional[str]  # detection: voc, coco or boxes
    sequence: bool
    labeled: bool
    classes: List[str]  # the label map, sorted (ids are positions)
    inputs: int  # what dataset.json's accounting will count as inputs
    splits: Dict[str, SplitPlan]
    skipped: Listed  # junk, skipped and counted, never an input
    rejected: Rejected
    not_image_names: Listed  # names no image format uses: probably rejected (the content decides)
    size_ratio: float  # output / input bytes, from the launch plan's sample
    estimated_bytes: int
    time: TimeEstimate
    output: OutputState
    local_checks: Dict[str, List[str]]  # a local folder: what the run warns about at launch (logged too)
    skipped_outputs: List[str]  # a folder's folders holding earlier img2tfrecord outputs: not inputs
    append: Optional[AppendPlan] = None  # --append: the inputs above are those the next generation converts
    manifest_columns: Dict[str, str] = dataclasses.field(default_factory=dict)  # manifest -> what its rows hold

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, ensure_ascii=False) + "\n"


# ---------------------------------------------------------------------------
# The text form.

_LAYOUTS = {
    layouts.LAYOUT_CLASS: "class folders (SRC/<class>/<file>)",
    layouts.LAYOUT_SPLIT: "split folders (SRC/<split>/<class>/<file>)",
    layouts.LAYOUT_MANIFEST: "manifest rows",
    layouts.LAYOUT_DETECTION: "detection annotations",
}
_CLIP_LAYOUTS = {  # --sequence: one record per clip folder
    layouts.LAYOUT_CLASS: "class folders of clips (SRC/<class>/<clip>/<frame>)",
    layouts.LAYOUT_SPLIT: "split folders of clips (SRC/<split>/<class>/<clip>/<frame>)",
    layouts.LAYOUT_MANIFEST: "manifest rows, frames grouped into clips by folder",
}


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def _names(listed: Listed) -> str:
    more = listed.count - len(listed.examples)
    return ", ".join(listed.examples) + (f" and {more} more" if more > 0 else "")


def format_plan(p: RunPlan, all_classes: bool = False) -> str:
    """The plan's text: one row per class where classes are few (or ``all_classes``), else their spread
    (``class_counts.py``)."""
    spread = is_many(p.classes, all_classes) and any(split.examples_per_class for split in p.splits.values())
    lines = ["plan: nothing converted or written (a timed sample was converted in memory)"]
    layout = (_CLIP_LAYOUTS if p.sequence else _LAYOUTS).get(p.layout, p.layout)
    if p.annotations:
        layout += f" ({p.annotations})"
    if p.layout == layouts.LAYOUT_MANIFEST and not p.labeled:
        layout += ", unlabeled"
    lines.append(f"input: {p.input} ({p.input_kind}), layout: {layout}, task: {p.task}")
    for path, columns in p.manifest_columns.items():
        lines.append(f"manifest {path}: {columns}")
    if p.classes:
        shown = ", ".join(p.classes[:20]) + (f" and {len(p.classes) - 20} more" if len(p.classes) > 20 else "")
        lines.append(f"classes: {len(p.classes)} ({shown})")
    lines.append(
        f"inputs: {p.inputs} ({p.inputs - p.rejected.count} placed in a split, {p.rejected.count} rejected); "
        f"junk skipped: {p.skipped.count}" + (f" ({_names(p.skipped)})" if p.skipped.count else "")
    )
    if p.append is not None:
        a = p.append
        if a.nothing_new:
            lines.append(
                f"append: nothing new since generation {a.generation - 1} ({a.unchanged} unchanged): "
                "a run would write nothing"
            )
        else:
            lines.append(
                f"append: generation {a.generation} converts {a.new} new and {a.retried} retried {a.counted}; "
                f"{a.unchanged} unchanged" + (f"; new classes: {', '.join(a.new_classes)}" if a.new_classes else "")
            )
        accepted = ", records withdrawn" if a.accepted else ""
        if a.changed.count:
            again = ", converted again" if a.accepted else ""
            lines.append(f"  changed since converted: {a.changed.count} ({_names(a.changed)}){accepted}{again}")
        if a.removed.count:
            lines.append(f"  removed since converted: {a.removed.count} ({_names(a.removed)}){accepted}")
        if a.refused:
            lines.append(f"  the run would refuse: {a.refused}")
    for name, split in p.splits.items():
        lines.append(
            f"  {name}: {split.examples} inputs -> {split.num_shards} shard(s), about {_mb(split.estimated_bytes)}"
        )
        for class_name, n in () if spread else split.examples_per_class.items():
            lines.append(f"    {class_name}: {n}")
        if split.boxes_per_class:
            lines.append("    boxes: " + ", ".join(f"{c} {n}" for c, n in split.boxes_per_class.items()))
    if spread:
        lines.append("  inputs per class (every class: --all-classes or --json):")
        lines.extend(spread_lines(p.classes, {name: s.examples_per_class for name, s in p.splits.items()}, "    "))
    if p.rejected.count:
        lines.append("rejected, found without converting (errors.jsonl rows):")
        for reason, n in p.rejected.by_reason.items():
            paths = [r["path"] for r in p.rejected.examples if r["reason"] == reason]
            lines.append(f"  {reason}: {n}" + (f" ({', '.join(paths)})" if paths else ""))
    if p.skipped_outputs:
        lines.append(f"not inputs, folders holding an img2tfrecord output: {', '.join(p.skipped_outputs)}")
    if p.not_image_names.count:
        lines.append(
            f"not image names, probably rejected (the content decides): {p.not_image_names.count} "
            f"({_names(p.not_image_names)})"
        )
    t = p.time
    lines.append(f"estimated output: about {_mb(p.estimated_bytes)} (output/input size ratio {p.size_ratio:g})")
    parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in t.startup_parts.items())
    fixed = f"{t.startup_seconds:.0f} s start-up" + (f" ({parts})" if parts else "")
    lines.append(
        f"estimated run time on the local runner: about {t.seconds:.0f} s = {fixed} + "
        f"{p.inputs - p.rejected.count} inputs x {t.seconds_per_input * 1000:.1f} ms / {t.processes} process(es)"
    )
    rejected = ", ".join(f"{r} {n}" for r, n in t.sample_rejected.items())
    scaled = ""
    if t.sample_image_size:
        width, height = t.sample_image_size
        scaled = f" at {width}x{height}, scaled to --image-size by the pixel count"
    lines.append(
        f"  per input: timed on {t.sample_size} inputs converted in memory{scaled}"
        + (f" ({rejected} rejected)" if rejected else "")
    )
    lines.append(f"output: {p.output.path}: {p.output.note}")
    lines.append("counts are of inputs: one that does not decode is rejected when converted, and not written")
    return "\n".join(lines)
