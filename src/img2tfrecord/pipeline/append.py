"""``convert --append`` at launch: the output's generations and ledgers against a new listing of the input.

Every run writes the ledger of its inputs
(``kinds/``, ``write_ledger``) before its pipeline starts; an append reads every generation's
ledger and error report, lists the input once, and either refuses (changed or removed inputs, new
classes, other options: a ``PlanError``, exit 2, before anything is written), finds nothing new, or
describes the next generation (:class:`AppendRun`): exactly the inputs to convert, their labels and
their shard counts.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import tempfile
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from img2tfrecord import storage
from img2tfrecord.conversion.appends import (
    GenerationInputs,
    InputChanges,
    compare_in_order,
    recorded_in_order,
    stale_inputs,
)
from img2tfrecord.conversion.converter import Converter
from img2tfrecord.conversion.record_sizes import estimated_record_bytes
from img2tfrecord.conversion.run_totals import RunTotals, totals_of
from img2tfrecord.model import ErrorRow, Item, frames
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.kinds import InputKind
from img2tfrecord.pipeline.kinds.ledger import InputLedger, ListedItems, frames_of
from img2tfrecord.pipeline.listing import digest, resolve_input
from img2tfrecord.pipeline.plan_model import Plan, PlanError
from img2tfrecord.pipeline.sizing import estimate_size_ratio, num_shards
from img2tfrecord.pipeline.staged_files import write_chunks
from img2tfrecord.pipeline.withdrawals import SplitOf, withdrawals
from img2tfrecord.readers.records import read_manifest
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas.dataset_json import DatasetManifest
from img2tfrecord.schemas.generations import Withdrawal
from img2tfrecord.schemas.ledger import LedgerEntry, LedgerFile, ledger_chunks
from img2tfrecord.sources import input_paths
from img2tfrecord.sources import layout as layouts
from img2tfrecord.sources.layout import PlacementError

# Options an append may give otherwise than the run that made the output: they do not change a record.
FREE_OPTIONS = ("shard_size_mb", "num_shards", "max_error_rate", "analyze", "exact_statistics", "decode_timeout_s")
_SHOWN = 3  # paths named in a refusal line


@dataclasses.dataclass(frozen=True)
class AppendRun:
    """The next generation of an output: what it converts and how, or why it cannot go on.

    ``plan`` is the run's plan narrowed to ``items`` (its shard counts sized from them, its
    ``generation`` set); ``labels`` are the output's classes, then any new ones (``--allow-new-classes``);
    ``withdrawn``: the records of changed and removed inputs it withdraws (``--accept-changes``);
    ``listed``: the work items of the inputs it converts and the rows rejected while making them (None:
    the pipeline reads them, from the archives ``plan.input.units`` names);
    ``analysis_base``: the totals of the train records the output's statistics cover, less the
    withdrawn ones, which the generation's analysis adds to (None: it is not analysed); ``retried``: the
    earlier rejections, per reason, of the inputs it tries again (``Generation.retried``);
    ``nothing_new``: why the append converts nothing (it writes nothing); :meth:`refusal`: why it cannot
    go on without a choice from the user.
    """

    previous: DatasetManifest
    plan: Plan
    changes: InputChanges  # its ``to_convert`` is the generation's ledger
    labels: Tuple[str, ...]
    new_classes: Tuple[str, ...]
    ledger: InputLedger
    class_noun: str  # what a class is called in messages (InputKind.class_noun)
    allow_new_classes: bool = False
    withdrawn: Tuple[Withdrawal, ...] = ()
    analysis_base: Optional[RunTotals] = None
    listed: Optional[ListedItems] = dataclasses.field(default_factory=ListedItems)
    nothing_new: Optional[str] = None
    retried: Dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def resolved(self) -> Tuple[str, ...]:
        """The folders earlier generations could not list that this one lists (``Generation.resolved``)."""
        return tuple(entry.relpath for entry in self.changes.resolved)

    @property
    def generation(self) -> int:
        return self.plan.generation

    @property
    def noun(self) -> str:
        """What the ledger counts: input(s), archive(s), annotated image(s), clip(s)."""
        return self.ledger.noun

    @property
    def base_exact(self) -> bool:
        """Whether the statistics it adds to are of the stored pixels."""
        return bool((self.previous.statistics or {}).get("exact", True))

    @property
    def refused(self) -> Optional[str]:
        """:meth:`refusal` without the list file."""
        return self.refusal(list_file=False)

    def refusal(self, list_file: bool) -> Optional[str]:
        """Why the append cannot go on without a choice from the user (one line), or None; ``list_file``:
        changed and removed inputs are also listed in a local file the line names."""
        changes, new_classes = self.changes, self.new_classes
        if (changes.changed or changes.removed) and not changes.accepted:
            return _changes_refused(changes, list_file, self.noun)
        if new_classes and not self.allow_new_classes:
            shown = ", ".join(repr(c) for c in new_classes[:_SHOWN]) + (" ..." if len(new_classes) > _SHOWN else "")
            return (
                f"--append: {len(new_classes)} new {self.class_noun} ({shown}) not among the output's classes; "
                "pass --allow-new-classes to add them with the next ids, or rebuild with --overwrite"
            )
        return None


# ---------------------------------------------------------------------------
# The ledger every run writes.


def write_ledger(run_dir: str, entries: Sequence[LedgerEntry]) -> str:
    """Write a run's ledger (``entries``, sorted by relpath) into its staging folder ``run_dir`` a piece at
    a time (the pipeline reads its work items from it; ``FinalizeOutput`` moves it to ``ledger/``);
    -> its path."""
    path = storage.join(run_dir, output_files.RUN_LEDGER_FILE)
    write_chunks(path, ledger_chunks(entries))
    return path


# ---------------------------------------------------------------------------
# Reading what the output holds.


def _read(output: str, name: str) -> bytes:
    return storage.read_bytes(storage.join(output, name))


def is_finished(output: str) -> bool:
    """Whether ``output`` holds a finished conversion (``_SUCCESS``); an append into one that does not
    converts everything as generation 0, so a scheduled job runs one command from its first night."""
    return storage.exists(storage.join(output, output_files.SUCCESS_FILE))


def read_finished(output: str) -> DatasetManifest:
    """The manifest of a finished output an append can add to; PlanError naming what is missing."""
    if not is_finished(output):
        raise PlanError(f"--append adds to a finished conversion, and {output} has no {output_files.SUCCESS_FILE}")
    try:
        doc = read_manifest(output)
    except (OSError, ValueError) as e:
        raise PlanError(f"--append: cannot read {output}/{output_files.MANIFEST_FILE}: {e}") from None
    if not doc.generations:
        raise PlanError(
            f"--append: {output} has no input ledger (it was written before outputs recorded their inputs); "
            "convert it again with --overwrite once, then append"
        )
    return doc


def generation_inputs(output: str, doc: DatasetManifest, key_of: Callable[[ErrorRow], str]) -> List[GenerationInputs]:
    """Every generation's ledger (held as its file's bytes, read when compared), rejections (keyed by
    ``key_of`` of their error rows: the ledger's key of the input each came from) and withdrawals, oldest
    first."""
    generations = []
    for generation in doc.generations:
        ledger = LedgerFile(_read(output, generation.ledger), generation.ledger)
        rejected: Dict[str, str] = {}
        for line in _read(output, generation.errors).decode("utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                rejected[key_of(row)] = str(row.get("reason", ""))
        # A withdrawn record's relpath, and the archive that held it: neither is recorded any more; nor a
        # folder that could not be listed once its files are inputs.
        withdrawn = frozenset(key for w in generation.withdrawn for key in (w.relpath, w.input))
        withdrawn |= frozenset(generation.resolved)
        generations.append(GenerationInputs(generation.number, ledger, rejected, withdrawn, generation.shards))
    return generations


def check_options(config: ConvertConfig, doc: DatasetManifest) -> None:
    """PlanError when an option that changes records differs from the run that made the output."""
    if resolve_input(config.input)[0] != resolve_input(doc.input)[0]:
        if input_paths.absolute_input(doc.input) != doc.input:  # recorded as given, relative to where that run started
            raise PlanError(
                f"--append: the output was converted from {doc.input}, relative to the folder that run started "
                f"in, not {config.input} ({resolve_input(config.input)[0].rstrip('/')}); run the append from "
                "that folder, or rebuild with --overwrite"
            )
        raise PlanError(f"--append: the output was converted from {doc.input}, not {config.input}")
    if config.file_format != doc.file_format:  # also for outputs whose options predate --file-format
        raise PlanError(
            f"--append: the output's shards are {doc.file_format} files, and --file-format is "
            f"{config.file_format} here; an append writes the output's file format (give --file-format "
            f"{doc.file_format}, or rebuild with --overwrite)"
        )
    mine = config.options_json()
    for name, value in doc.options.items():
        if name in FREE_OPTIONS or mine.get(name) == value:
            continue
        flag = "--" + name.replace("_", "-")
        raise PlanError(
            f"--append: {flag} is {_shown(mine.get(name))} here but {_shown(value)} in the output; an append does not "
            "inherit the output's options: give it the ones the output was made with (or rebuild with --overwrite)"
        )


def _shown(value) -> str:
    return "unset" if value is None else json.dumps(value)


# ---------------------------------------------------------------------------
# The append.


def append_ledger(config: ConvertConfig, kind: InputKind, plan: Plan) -> InputLedger:
    """The listing of the inputs an append compares with the output; PlanError for an input kind or
    options that allow no append."""
    ledger = kind.ledger(config, plan)
    if ledger is None:
        raise PlanError(f"--append: {kind.name} inputs keep no input ledger: rebuild with --overwrite")
    if config.dedupe:
        raise PlanError("--append converts only new inputs, and --dedupe compares all of them: give one")
    repeated = ledger.repeated()
    if repeated:
        raise PlanError(
            f"--append: {len(repeated)} image(s) are named more than once, by two manifest rows or annotations "
            f"(e.g. {repeated[0]}); an append tells inputs apart by the image they name: remove the repeats, or "
            "rebuild with --overwrite"
        )
    return ledger


def compare_with_output(
    config: ConvertConfig, plan: Plan, ledger: InputLedger
) -> Tuple[DatasetManifest, List[GenerationInputs], InputChanges]:
    """The finished output an append adds to, its generations and the input ``ledger`` lists compared
    with theirs (changes accepted with ``--accept-changes``); PlanError when the options or the output
    allow no append."""
    previous = read_finished(config.output)
    check_options(config, previous)
    new_splits = sorted(set(plan.input.split_names) - set(previous.splits))
    if new_splits and plan.input.has_split_column:
        raise PlanError(
            f"--append: the manifest names split(s) {', '.join(new_splits)} the output does not have; an append "
            "adds records to the output's splits: rebuild with --overwrite"
        )
    generations = generation_inputs(config.output, previous, ledger.rejection_key)
    changes = compare_in_order(
        ledger.entries, recorded_in_order(generations), config.retry_rejected, ledger.transient_reasons
    )
    return previous, generations, dataclasses.replace(changes, accepted=config.accept_changes)


def new_classes_of(plan: Plan, items: Sequence[Item], previous: DatasetManifest) -> List[str]:
    """The classes of ``items`` (class folders, a manifest's labels, objects) the output does not have, sorted."""
    return sorted(set(layouts.class_names(frames_of(items), plan.input.layout)) - set(previous.labels))


def plan_append(config: ConvertConfig, kind: InputKind, plan: Plan, converter: Converter) -> AppendRun:
    """The next generation of ``config.output``: what it converts, or why it cannot go on (``refused``), or
    that there is nothing new; PlanError for an output or options that allow no append.

    ``plan`` is the launch plan of the whole input (its listing is reused when inside
    ``listing.listing_once``); ``converter`` places each new input in its split.
    """
    ledger = append_ledger(config, kind, plan)
    previous, generations, changes = compare_with_output(config, plan, ledger)
    number = previous.generations[-1].number
    items = ledger.work_items(changes.to_convert)
    rejected = items.rejected
    new_classes = new_classes_of(plan, items, previous)
    sized = sized_for(config, plan, converter, items).sizing
    narrowed = Plan(
        dataclasses.replace(
            plan.input,
            listing_digest=digest((e.relpath, e.size, e.mtime) for e in changes.to_convert),
            units=ledger.units(changes.to_convert),
        ),
        dataclasses.replace(
            sized, num_files=len(items) + len(rejected), input_bytes=sum(f.size for f in frames_of(items))
        ),
        generation=number + 1,
    )
    run = AppendRun(
        previous,
        narrowed,
        changes,
        tuple(previous.labels) + tuple(new_classes),
        tuple(new_classes),
        ledger,
        kind.class_noun(plan),
        config.allow_new_classes,
        listed=items if kind.places_at_launch(config) else None,
        retried=changes.retried_reasons,
    )
    if run.refused is not None:
        return run
    stale = stale_inputs(changes) if changes.accepted else {}
    if not changes.to_convert and not stale:
        return dataclasses.replace(
            run, nothing_new=f"nothing new since generation {number} in {config.output}; nothing was written"
        )
    base = analysis_base(config, previous)
    split_of = SplitOf(converter, ledger.placed_item)
    withdrawn, withdrawn_totals = withdrawals(
        config.output, previous, generations, stale, split_of, config.seed, base is not None, ledger.locate
    )
    if base is not None:
        base.subtract(withdrawn_totals)
    return dataclasses.replace(run, withdrawn=tuple(withdrawn), analysis_base=base)


def analysis_base(config: ConvertConfig, previous: DatasetManifest) -> Optional[RunTotals]:
    """The totals an append's analysis adds to: the output's statistics, when they cover every generation
    and record their exact totals; None (the append is not analysed) otherwise or with ``--no-analyze``."""
    if not config.analyze or not all(g.analyzed for g in previous.generations):
        return None
    return totals_of(previous.statistics, previous.channels or 3)


def sized_for(config: ConvertConfig, plan: Plan, converter: Converter, items: Sequence[Item]) -> Plan:
    """``plan`` sized for a generation of ``items``: the size ratio sampled from their files, and each
    split's shards by ``--shard-size-mb`` from its new inputs, at most one per input (none for a split
    with none)."""
    ratio = estimate_size_ratio(config, list(frames_of(items)))
    split_bytes: Dict[str, float] = {}
    split_items: Dict[str, int] = {}
    for item in items:
        try:
            split = converter.split_of(item)
        except PlacementError:
            continue  # the pipeline rejects it, as a full run would
        size = sum(f.size for f in frames(item))
        split_bytes[split] = split_bytes.get(split, 0.0) + estimated_record_bytes(size, ratio)
        split_items[split] = split_items.get(split, 0) + 1
    sized = num_shards(dataclasses.replace(config, num_shards=None), list(split_bytes), split_bytes)
    counts = {name: min(n, split_items[name]) for name, n in sized.items()}
    return dataclasses.replace(plan, sizing=dataclasses.replace(plan.sizing, size_ratio=ratio, num_shards=counts))


def _changes_refused(changes: InputChanges, list_file: bool, noun: str) -> str:
    """The refusal of changed or removed inputs: counts per kind on one line, the list in a local file."""
    parts = []
    if changes.changed:
        parts.append(
            f"{len(changes.changed)} {noun} changed since they were converted (e.g. {changes.changed[0][1].relpath})"
        )
    if changes.removed:
        parts.append(f"{len(changes.removed)} converted {noun} removed (e.g. {changes.removed[0].relpath})")
    choice = "pass --accept-changes to withdraw them (and convert the changed ones again), or rebuild with --overwrite"
    line = f"--append: {'; '.join(parts)}; their records would be stale: {choice}"
    if not list_file:
        return line
    with tempfile.NamedTemporaryFile(
        "w", prefix="img2tfrecord-append-changes-", suffix=".jsonl", delete=False, encoding="utf-8"
    ) as listing:
        for before, now in changes.changed:
            listing.write(
                json.dumps({"change": "changed", "relpath": now.relpath, "was": before._asdict(), "now": now._asdict()})
                + "\n"
            )
        for entry in changes.removed:
            listing.write(json.dumps({"change": "removed", "relpath": entry.relpath, "was": entry._asdict()}) + "\n")
    return f"{line} (the list is in {listing.name})"


def log_append(run: AppendRun) -> None:
    changes = run.changes
    changed = len(changes.changed) if changes.accepted else 0
    logging.info(
        "append: generation %d converts %d new, %d retried and %d changed %s; %d unchanged%s%s",
        run.generation,
        len(changes.new),
        len(changes.retried),
        changed,
        run.noun,
        changes.unchanged,
        f"; withdraws {len(run.withdrawn)} record(s) of changed or removed inputs" if run.withdrawn else "",
        f"; new classes {', '.join(run.new_classes)}" if run.new_classes else "",
    )
    if run.previous.statistics is not None and run.analysis_base is None:
        logging.info(
            "append: the tf.Transform statistics stay those of the generations analysed so far%s; "
            "rebuild with --overwrite to analyse every record",
            "" if all(g.analyzed for g in run.previous.generations) else " (not every generation was analysed)",
        )
