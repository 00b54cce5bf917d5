"""The launch plan (``Plan``: the input described, ``InputPlan``, and the run sized, ``Sizing``) and the
usage error planning raises (``PlanError``).

A digest of the launch listing goes into the run's fingerprint (``Plan.fingerprint``), which names
the staging folder a ``--resume`` picks up; what it covers is recorded there too, so a ``--resume``
refused names what differs (``run_difference``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Dict, Mapping, Optional, Tuple

from img2tfrecord.options import recorded_flag
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.sources import input_paths


class PlanError(ValueError):
    """The input cannot be converted as given (a usage error)."""


@dataclasses.dataclass(frozen=True)
class InputPlan:
    """What the input is: its kind and root, its layout and splits, what the launch listing saw."""

    base: str  # the input root, ending with "/"
    pattern: str  # what the pipeline matches
    layout: str
    split_names: Tuple[str, ...]
    kind: str = ""  # the name of the input kind that made the plan (pipeline/kinds/)
    labeled: bool = True  # False: a manifest without a label column
    has_split_column: bool = False  # a manifest whose rows name their split
    listing_digest: str = ""  # sha256 of what the launch listing saw (names, sizes, manifest rows)
    annotations: str = ""  # detection: the annotation format (sources.detection: voc, coco, boxes)
    patterns: Tuple[str, ...] = ()  # detection: globs of the annotation files the pipeline reads
    listing_complete: bool = True  # False: Sizing.num_files counts what a partial peek into the archives saw
    skipped_outputs: Tuple[str, ...] = ()  # a folder's folders holding earlier outputs: not inputs (relative)
    units: Tuple[str, ...] = ()  # archives: the ones the pipeline reads instead of matching pattern (an append's)


@dataclasses.dataclass(frozen=True)
class Sizing:
    """How big the run is: the inputs the launch counted, their bytes, the output/input ratio, shards per split."""

    num_shards: Dict[str, int]
    num_files: int  # archives and manifests: the members/rows seen at launch
    input_bytes: int
    size_ratio: float


@dataclasses.dataclass(frozen=True)
class Plan:
    """A launch plan: the input described, the run sized, and the generation it writes."""

    input: InputPlan
    sizing: Sizing
    generation: int = 0  # > 0: an append (convert --append), whose shards are named after it

    def fingerprint(self, config: ConvertConfig) -> str:
        """16 hex digits that change with the options, the seed, the input listing or the shard counts."""
        return digest_of(self.fingerprint_doc(config))

    def fingerprint_doc(self, config: ConvertConfig) -> Dict[str, Any]:
        """What the fingerprint covers: the tool's version, the input, the options, the listing, the shards."""
        parts: Dict[str, Any] = {
            "listing": self.input.listing_digest,
            "layout": self.input.layout,
            "num_shards": dict(sorted(self.sizing.num_shards.items())),
        }
        if self.generation:
            parts["generation"] = self.generation
        return fingerprint_doc(config, input_paths.absolute_input(config.input), **parts)


def fingerprint_doc(config: ConvertConfig, input_name: str, **parts: Any) -> Dict[str, Any]:
    """What a run's fingerprint covers: the tool's version, its input (``input_name``: named as from any
    folder), its options and ``parts`` (what else decides its records)."""
    import img2tfrecord

    return {"tool_version": img2tfrecord.__version__, "input": input_name, "options": config.options_json(), **parts}


def digest_of(doc: Dict[str, Any]) -> str:
    """A run's fingerprint: 16 hex digits of its :func:`fingerprint_doc`; names its staging folder."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def _shown(value: Any) -> str:
    return "unset" if value is None else json.dumps(value)


def run_difference(there: Mapping[str, Any], here: Mapping[str, Any]) -> Optional[str]:
    """What differs between the run ``there`` and this one (``Plan.fingerprint_doc``s, or the ``input`` and
    ``options`` of a ``dataset.json``), first the input, then an option by its flag; None when nothing
    they both record does."""
    if "input" in there and there.get("input") != here.get("input"):
        return f"--input is {here.get('input')} here but {there.get('input')} there"
    if "options" in there:
        mine, theirs = here.get("options") or {}, there.get("options") or {}
        for name in sorted(set(mine) | set(theirs)):
            if mine.get(name) != theirs.get(name):
                return f"{recorded_flag(name)} is {_shown(mine.get(name))} here but {_shown(theirs.get(name))} there"
    if "tool_version" in there and there["tool_version"] != here.get("tool_version"):
        return f"it was started by img2tfrecord {there['tool_version']}, this is {here.get('tool_version')}"
    if any(key in there and there[key] != here.get(key) for key in ("listing", "layout")):
        return "the input changed since it was started (files added, removed or changed)"
    if "num_shards" in there and there["num_shards"] != here.get("num_shards"):
        return f"the shards per split are {_shown(here.get('num_shards'))} here but {_shown(there['num_shards'])} there"
    return None
