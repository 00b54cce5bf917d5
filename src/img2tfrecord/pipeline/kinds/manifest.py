"""CSV/JSONL manifests naming images: their plan, source and ledger (one entry per row), from one parse of
each manifest (``parsed_rows``)."""

from __future__ import annotations

import logging
from typing import List, Optional, Set, Tuple

from img2tfrecord.conversion.record_sizes import estimated_record_bytes
from img2tfrecord.conversion.seeded_hashes import DEFAULT_SPLIT
from img2tfrecord.model import Item, RowPlacement, WorkItem
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.kinds.base import InputKind
from img2tfrecord.pipeline.kinds.common import option_splits, rows_split_bytes
from img2tfrecord.pipeline.kinds.ledger import InputLedger, ReadAtLaunch, file_stamps
from img2tfrecord.pipeline.listing import digest, file_pattern, list_input, read_once
from img2tfrecord.pipeline.plan_model import InputPlan, Plan, PlanError
from img2tfrecord.pipeline.sizing import sampled_sizes, sized
from img2tfrecord.schemas.ledger import LedgerEntry, row_text
from img2tfrecord.sources import input_paths, manifests
from img2tfrecord.sources import layout as layouts
from img2tfrecord.sources.inputs import InputSource
from img2tfrecord.sources.inputs.manifest import ManifestSource


def parsed_rows(path: str) -> List[Tuple[int, dict]]:
    """``manifests.manifest_rows`` of the manifest at ``path``, parsed once per launch (``listing.read_once``)."""
    return read_once("manifest_rows", path, lambda p: list(manifests.manifest_rows(p)))


def plan_manifest(config: ConvertConfig, whole: bool = True) -> Plan:
    """The plan of CSV/JSONL manifests: read whole; their columns decide labeled or not,
    their split column the split names."""
    base, pattern = file_pattern(config.input)
    found = sorted(p for p, _ in list_input(pattern) if manifests.manifest_format(p))
    if not found:
        raise PlanError(f"no manifests (.csv, .jsonl) match {pattern}")
    rows: List[Tuple[str, int, dict]] = []
    columns = set()
    for path in found:
        try:
            parsed = parsed_rows(path)
        except (OSError, UnicodeDecodeError) as e:
            raise PlanError(f"cannot read manifest {path}: {type(e).__name__}: {e}") from e
        except manifests.ManifestError as e:
            raise PlanError(str(e)) from None
        columns.add(manifests.manifest_columns(path, parsed))
        rows.extend((path, number, row) for number, row in parsed if "error" not in row and row.get("path"))
    if not rows:
        raise PlanError(f"{', '.join(found)}: no rows naming an image (columns path,label[,split])")
    if len(columns) > 1:
        raise PlanError("the manifests differ in their columns: every one needs the same label and split columns")
    labeled, has_split = columns.pop()
    if has_split:
        named: Set[str] = set()
        for path, number, row in rows:
            if row.get("split"):
                problem = manifests.check_split_name(row["split"])
                if problem:
                    raise PlanError(f"{path}:{number}: {problem}")
                named.add(manifests.canonical_split(row["split"]))
        split_names: Tuple[str, ...] = tuple(sorted(named)) or (DEFAULT_SPLIT,)
        if config.splits:
            logging.warning("the manifest has a split column (%s); --splits is ignored", ", ".join(split_names))
    else:
        split_names = option_splits(config)

    resolved = [manifests.resolve_row_path(path, row["path"]) for path, _, row in rows]  # (path, relpath)
    mean_size, ratio = sampled_sizes(config, resolved) if whole else (0.0, 1.0)  # an append sizes its new rows
    record_bytes = estimated_record_bytes(mean_size, ratio)
    row_splits = (manifests.canonical_split(row.get("split", "")) if has_split else None for _, _, row in rows)
    split_bytes = rows_split_bytes(config, split_names, zip(row_splits, (r for _, r in resolved)), record_bytes)
    return Plan(
        InputPlan(
            base=base,
            pattern=pattern,
            layout=layouts.LAYOUT_MANIFEST,
            split_names=split_names,
            labeled=labeled,
            has_split_column=has_split,
            listing_digest=digest(rows),
        ),
        sized(config, split_names, split_bytes, len(rows), int(mean_size * len(rows)), ratio),
    )


def manifest_source(plan: Plan) -> ManifestSource:
    """The rows of every manifest ``plan`` names, with the columns it found."""
    return ManifestSource(plan.input.pattern, plan.input.labeled, plan.input.has_split_column, plan.input.split_names)


class Manifest(InputKind):
    """CSV or JSONL files (or a glob of them) whose rows name images: ``path[,label][,split]``."""

    name = "manifest"

    def claims(self, config: ConvertConfig) -> bool:
        return input_paths.input_form(config.input) == input_paths.INPUT_MANIFEST

    def plan(self, config: ConvertConfig, whole: bool) -> Optional[Plan]:
        return plan_manifest(config, whole)

    def source(self, config: ConvertConfig, plan: Plan) -> InputSource:
        return manifest_source(plan)

    def ledger(self, config: ConvertConfig, plan: Plan) -> Optional[InputLedger]:
        return ManifestLedger(config, plan)

    def class_noun(self, plan: Plan) -> str:
        return "label(s)"


class ManifestLedger(ReadAtLaunch):
    """The rows of every manifest a plan names, each with the size and change marker of its image.

    A row is keyed by the relpath of the image it names (a row naming none, by ``manifest:line``);
    its label and split are part of its entry, so a row relabelled or moved to another split is a
    changed input. Rows naming an image that cannot be listed get size -1: the run rejects them.
    """

    def __init__(self, config: ConvertConfig, plan: Plan):
        super().__init__(config, plan)
        source = manifest_source(plan)
        rows = [row for path, _ in source.units(list_input) for row in source.rows(path, parsed_rows(path))]
        stamps = file_stamps([row.found.path for row in rows if isinstance(row.found, WorkItem)])
        for row in rows:
            found = row.found
            size, mtime = stamps.get(found.path, (-1, 0.0)) if isinstance(found, WorkItem) else (-1, 0.0)
            placement = row_text(row.label, row.split) if (row.label, row.split) != (None, None) else ""
            self._add(LedgerEntry(self.key_of(found), size, mtime, placement), found)
        self.entries.sort()

    def placed_item(self, entry: LedgerEntry) -> Optional[Item]:
        label, split = entry.placement()
        return WorkItem(entry.relpath, entry.relpath, 0, row=RowPlacement(split, label))
