"""Launch-time planning: resolve the input, pick the layout, estimate shard counts.

``WriteToTFRecord`` needs each split's shard count when the graph is built,
but output sizes are known only after conversion. The launcher therefore
takes one metadata listing of the input (``FileSystems.match``: names and
sizes, nothing is read), which also detects the split-folder layout and
reports "no matches" before any pipeline starts, and converts a small
sample to measure the output/input size ratio when images are re-encoded.
The pipeline lists the input again itself and discovers the classes there;
nothing from this listing is shipped into the graph.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
from typing import Dict, List, Optional, Tuple

from apache_beam.io.filesystems import FileSystems

from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.transforms import discover
from img2tfrecord.transforms.convert import read_file
from img2tfrecord.transforms.image import ImageError, convert_image
from img2tfrecord.transforms.split import (
    DEFAULT_SPLIT,
    assign_split,
    is_split_layout,
    split_of_folder,
)

_GLOB_CHARS = re.compile(r"[*?\[]")
_SAMPLE_SIZE = 16
_RECORD_OVERHEAD_BYTES = 200  # framing + the non-image features of one record
MIB = 1024 * 1024


class PlanError(ValueError):
    """The input cannot be converted as given (a usage error)."""


@dataclasses.dataclass(frozen=True)
class Plan:
    base: str  # the input root, ending with "/"
    pattern: str  # what the pipeline matches
    layout: str
    split_names: Tuple[str, ...]
    num_shards: Dict[str, int]
    num_files: int
    input_bytes: int
    size_ratio: float


def _is_uri(path: str) -> bool:
    return "://" in path


def resolve_input(path: str) -> Tuple[str, str]:
    """``(input root ending with '/', glob pattern)`` for a directory or a glob."""
    if not _is_uri(path):
        path = os.path.abspath(path) + ("/" if path.endswith("/") else "")
    if _GLOB_CHARS.search(path):
        parts = path.split("/")
        first_glob = next(i for i, part in enumerate(parts) if _GLOB_CHARS.search(part))
        base = "/".join(parts[:first_glob]) + "/"
        return base, path
    root = path.rstrip("/")
    return root + "/", root + "/**"


def _is_file(path: str) -> bool:
    if not _is_uri(path):
        return os.path.isfile(path)
    try:
        return any(m.path == path for m in FileSystems.match([path])[0].metadata_list)
    except Exception:
        return False


def list_input(pattern: str) -> List[Tuple[str, int]]:
    """``(path, size)`` of every file matching ``pattern`` (metadata only)."""
    try:
        result = FileSystems.match([pattern])[0]
    except Exception as e:  # Beam raises BeamIOError for a missing local root
        if "No such file" in str(e) or "not found" in str(e).lower() or "no matches" in str(e).lower():
            return []
        raise PlanError(f"cannot list {pattern}: {e}") from e
    return [(m.path, m.size_in_bytes) for m in result.metadata_list]


def _estimate_size_ratio(config: ConvertConfig, files: List[Tuple[str, str, int]]) -> float:
    """Output bytes per input byte, from converting a few evenly spaced files."""
    image = config.image
    if image.format == "keep" and image.size is None:
        return 1.0
    step = max(1, len(files) // _SAMPLE_SIZE)
    in_bytes = out_bytes = 0
    for path, _, size in files[::step][:_SAMPLE_SIZE]:
        try:
            converted = convert_image(read_file(path, image.max_file_bytes), image)
        except (ImageError, OSError):
            continue
        in_bytes += size
        out_bytes += len(converted.encoded)
    return out_bytes / in_bytes if in_bytes else 1.0


def make_plan(config: ConvertConfig) -> Plan:
    base, pattern = resolve_input(config.input)
    if not _GLOB_CHARS.search(config.input) and _is_file(base.rstrip("/")):
        raise PlanError(f"--input {config.input} is a file; give a folder of class folders or a glob")
    listing = list_input(pattern)
    files = []
    for path, size in listing:
        if not path.startswith(base):
            continue
        relpath = discover.relative_path(base, path)
        if not discover.is_junk(relpath):
            files.append((path, relpath, size))
    if not files:
        raise PlanError(f"no input files match {pattern}")
    files.sort(key=lambda f: f[1])

    top_folders = sorted({f[1].split("/", 1)[0] for f in files if "/" in f[1]})
    if is_split_layout(top_folders):
        layout = discover.LAYOUT_SPLIT
        split_names = tuple(sorted({split_of_folder(f) for f in top_folders}))
        if config.splits:
            logging.warning(
                "input has split folders (%s); --splits is ignored", ", ".join(top_folders)
            )
    else:
        layout = discover.LAYOUT_CLASS
        split_names = tuple(name for name, _ in config.splits) if config.splits else (DEFAULT_SPLIT,)

    ratio = _estimate_size_ratio(config, files)
    split_bytes = {name: 0 for name in split_names}
    for _, relpath, size in files:
        if layout == discover.LAYOUT_SPLIT:
            folder = split_of_folder(relpath.split("/", 1)[0]) if "/" in relpath else None
            split = folder if folder in split_bytes else None
        else:
            split = assign_split(relpath, config.seed, config.splits) if config.splits else DEFAULT_SPLIT
        if split is not None:
            split_bytes[split] += size * ratio + _RECORD_OVERHEAD_BYTES
    if config.num_shards:
        num_shards = {name: config.num_shards for name in split_names}
    else:
        target = config.shard_size_mb * MIB
        num_shards = {name: max(1, math.ceil(b / target)) for name, b in split_bytes.items()}
    return Plan(
        base=base,
        pattern=pattern,
        layout=layout,
        split_names=split_names,
        num_shards=num_shards,
        num_files=len(files),
        input_bytes=sum(f[2] for f in files),
        size_ratio=ratio,
    )
