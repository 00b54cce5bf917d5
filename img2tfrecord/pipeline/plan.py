"""Launch plans: ``make_plan``'s dispatch over input kinds, and the planners of folders, archives, manifests.

The launcher takes one metadata listing of the input (``listing.py``), which also detects the
split-folder layout and reports "no matches" before any pipeline starts, and sizes the splits from it
(``sizing.py``). The pipeline lists the input again itself and discovers the classes there; of this
listing only the folders holding earlier img2tfrecord outputs (``Plan.skipped_outputs``, never
inputs) are shipped into the graph. An input that can give no record (no images, or none inside a
class folder) is refused here, before anything starts. Detection inputs (VOC, COCO, manifests of
boxes; with ``--task detection`` or when their annotations show) are planned by ``plan_detection.py``.

Archives (``.zip``, ``.tar``, ``.tar.gz``, ``.tgz``) are peeked at: a zip's
central directory is read whole, a tar's first members (a tar.gz is
decompressed only that far), from the first few archives of a glob. The
peek decides the layout; when it did not see everything, a split-folder
layout gets every split name (train, validation, test) so a split first
seen in the pipeline still has somewhere to go (one never seen is listed
with 0 records). Manifests (``.csv``, ``.jsonl``) are read whole: their
columns decide labeled/unlabeled, their split column the split names.
"""

from __future__ import annotations

import logging
import os
from typing import Dict, List, Set, Tuple

from img2tfrecord import faults
from img2tfrecord.conversion.sharding import DEFAULT_SPLIT, assign_split
from img2tfrecord.images import ImageError
from img2tfrecord.images.decode import open_image
from img2tfrecord.images.names import looks_like_image
from img2tfrecord.model import ErrorEntry, MemberEntry, WorkItem
from img2tfrecord.option_values import TASK_CLASSIFICATION, TASK_DETECTION
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.listing import digest, file_pattern, is_file, list_input, resolve_input
from img2tfrecord.pipeline.plan_detection import (
    coco_base,
    detection_layout,
    plan_archived_detection,
    plan_box_manifest,
    plan_detection,
    plan_folder_detection,
)
from img2tfrecord.pipeline.plan_model import InputPlan, Plan, PlanError
from img2tfrecord.pipeline.sizing import (
    MIB,
    SAMPLE_SIZE,
    estimate_size_ratio,
    estimated_record_bytes,
    sampled_sizes,
    sized,
)
from img2tfrecord.schemas import manifest
from img2tfrecord.sources import archives, detection, kinds, manifests
from img2tfrecord.sources import layout as layouts
from img2tfrecord.sources.files import read_source
from img2tfrecord.sources.split_folders import SPLIT_FOLDERS, is_split_layout, split_of_folder

_PEEK_ARCHIVES = 4  # archives of a glob looked into at launch
_PEEK_MEMBERS = 2000  # members of a tar / tar.gz looked at (a zip's central directory is read whole)
_PEEK_ZIP_MEMBERS = 10_000_000
_PEEK_STREAM_BYTES = 64 * MIB  # member data decompressed from a tar.gz at launch, at most


def make_plan(config: ConvertConfig, whole: bool = True) -> Plan:
    """The launch plan of ``config``; ``whole`` False: a plan without what only a run over all of the
    input needs (the size sample; a folder's listing digest), for an append, which sizes its new inputs."""
    kind = kinds.input_kind(config.input)
    detect = config.task != TASK_CLASSIFICATION
    forced = config.task == TASK_DETECTION
    if kind == kinds.INPUT_ARCHIVES:
        return _plan_archives(config, whole)
    if kind == kinds.INPUT_MANIFEST:
        if detect:
            base, pattern = file_pattern(config.input)
            found = sorted(p for p, _ in list_input(pattern) if manifests.manifest_kind(p))
            if found and (forced or detection.is_box_manifest(found[0])):
                return plan_box_manifest(config, base, pattern, found)
        return _plan_manifest(config, whole)
    if detect and config.input.lower().endswith(".json"):
        base, pattern = file_pattern(config.input)
        found = sorted(p for p, _ in list_input(pattern))
        if not found:
            raise PlanError(f"no COCO JSON files match {pattern}")
        return plan_detection(config, detection.COCO, coco_base(found), list(found), [], tuple(found))
    base, pattern = resolve_input(config.input)
    if not kinds.GLOB_CHARS.search(config.input) and is_file(base.rstrip("/")):
        raise PlanError(
            f"--input {config.input} is a file; give a folder of class folders, a glob, an archive "
            f"(.zip, .tar, .tar.gz, .tgz) or a manifest (.csv, .jsonl)"
        )
    listing = list_input(pattern)
    faults.pause_at("listing")
    if kinds.GLOB_CHARS.search(config.input) and listing and all(archives.archive_kind(p) for p, _ in listing):
        return _plan_archives(config, whole)  # a glob such as 'shards/*' that matches only archives
    listed = [(path, layouts.relative_path(base, path), size) for path, size in listing if path.startswith(base)]
    outputs = _skip_outputs(config, [relpath for _, relpath, _ in listed])
    files = [
        WorkItem(path, relpath, size)
        for path, relpath, size in listed
        if not layouts.is_junk(relpath) and not layouts.in_folders(relpath, outputs)
    ]
    if not files:
        if not listing and not kinds.GLOB_CHARS.search(config.input) and "://" not in base and not os.path.exists(base):
            missing = base.rstrip("/")
            raise PlanError(f"--input {config.input}: no such file or folder ({missing}); check the path")
        raise PlanError(f"no input files match {pattern}")
    files.sort(key=lambda f: f.relpath)
    if detect:
        found_kind = detection_layout(files, forced)
        if found_kind is not None:
            return plan_folder_detection(config, found_kind, base, files)
    if forced:
        raise PlanError(
            f"--task detection: {config.input} holds neither a Pascal VOC layout (Annotations/*.xml, "
            "JPEGImages/) nor COCO JSON (instances_*.json)"
        )
    layout, split_names = _layout(config, files)
    _check_images(config, files, layout)
    ratio = estimate_size_ratio(config, files) if whole else 1.0
    # An append sizes the splits of its new inputs (append.sized_for), not of the whole input.
    split_bytes = _split_bytes(config, layout, split_names, files, ratio) if whole else {}
    return Plan(
        InputPlan(
            base=base,
            pattern=pattern,
            layout=layout,
            split_names=split_names,
            listing_digest=digest((f.relpath, f.size) for f in files) if whole else "",
            skipped_outputs=outputs,
        ),
        sized(config, split_names, split_bytes, len(files), sum(f.size for f in files), ratio),
    )


def _skip_outputs(config: ConvertConfig, relpaths: List[str]) -> Tuple[str, ...]:
    """The folders of a folder input that hold earlier img2tfrecord outputs (warned about once);
    PlanError when the input itself is one."""
    outputs = layouts.output_folders(relpaths)
    if "" in outputs:
        raise PlanError(
            f"--input {config.input} is an img2tfrecord output (it holds {manifest.MANIFEST_FILE} or "
            f"{manifest.SUCCESS_FILE}), not images: give the folder it was converted from, "
            "or look at it with img2tfrecord inspect"
        )
    if outputs:
        shown = ", ".join(repr(f) for f in outputs[:3]) + (f" and {len(outputs) - 3} more" if len(outputs) > 3 else "")
        logging.warning(
            "%d folder(s) hold an img2tfrecord output (%s), so their files are not inputs: %s",
            len(outputs),
            ", ".join(layouts.OUTPUT_MARKERS),
            shown,
        )
    return outputs


def _parent_folder(text: str) -> str:
    """The folder above an ``--input`` as the user wrote it (above a glob's fixed part)."""
    parts = text.rstrip("/").split("/")
    fixed = kinds.first_glob_part(parts)
    fixed = len(parts) if fixed is None else fixed
    parent = "/".join(parts[: max(fixed - 1, 0)])
    return parent + "/" if parent else os.path.dirname(os.path.abspath(text.rstrip("/"))) + "/"


def _looks_like_image_content(items: List[WorkItem], limit: int, max_pixels: int) -> bool:
    """True when any of up to SAMPLE_SIZE of ``items`` (spread over them) opens as an image, even a
    broken one; what cannot be read counts as an image (the run will say what it is)."""
    step = max(1, len(items) // SAMPLE_SIZE)
    for item in items[::step][:SAMPLE_SIZE]:
        try:
            open_image(read_source(item, limit), max_pixels)
            return True
        except ImageError as e:
            if e.reason not in ("not_an_image", "empty_file"):
                return True
        except OSError:
            return True
    return False


_UNLABELED_MANIFEST = (
    "a CSV/JSONL manifest with a path column and no label column, which makes an unlabeled dataset "
    "(docs/inputs.md#manifests)"
)


def _check_images(config: ConvertConfig, files: List[WorkItem], layout: str, in_archives: bool = False) -> None:
    """PlanError when ``files`` (of a folder, or members of archives) can give no record: there are
    none, none is an image, or none lies inside a class folder.

    Judged by the names (image suffixes, ``sources/layout.py``'s class folders) and, when no name has
    an image suffix, by the content of a few files.
    """
    where = f"--input {config.input}"
    if not files:  # a folder with no files is "no input files match" before this
        raise PlanError(f"no images in {where}: the archive(s) hold no files")
    if not any(looks_like_image(f.relpath) for f in files) and not _looks_like_image_content(
        files, config.image.max_file_bytes, config.image.max_pixels
    ):
        shown = ", ".join(repr(layouts.printable(f.relpath)) for f in files[:3])
        listed = f"its {len(files)} file(s) ({shown}{', ...' if len(files) > 3 else ''})"
        if not in_archives and all(archives.archive_kind(f.relpath) for f in files):
            glob = config.input.rstrip("/") + "/*"
            raise PlanError(f"no images in {where}: {listed} are archives; convert them with --input '{glob}'")
        if not in_archives and all(manifests.manifest_kind(f.relpath) for f in files):
            raise PlanError(f"no images in {where}: {listed} are manifests; give one as --input, e.g. {files[0].path}")
        raise PlanError(
            f"no images in {where}: {listed} are not images; point --input at a folder of images with one "
            "sub-folder per class"
        )
    if any(layouts.class_of(f.relpath, layout) is not None for f in files):
        return
    if in_archives:
        fix = "re-pack it with one folder per class, or unpack it and list the files in " + _UNLABELED_MANIFEST
        raise PlanError(f"{where} holds {len(files)} file(s) but no class folders (<class>/<file> inside): {fix}")
    if layout == layouts.LAYOUT_SPLIT:
        fix = "move each split's images into one folder per class, or list them in " + _UNLABELED_MANIFEST
        raise PlanError(f"{where} has split folders but no class folders in them (SRC/<split>/<class>/<file>): {fix}")
    fix = (
        f"point --input at the folder above it, {_parent_folder(config.input)}, if its sub-folders are the "
        f"classes, or list the files in {_UNLABELED_MANIFEST}"
    )
    raise PlanError(f"{where} holds {len(files)} file(s) but no class folders (SRC/<class>/<file>): {fix}")


def _layout(config: ConvertConfig, files) -> Tuple[str, Tuple[str, ...]]:
    """``(layout, split names)`` from the relpaths of (some of) the input files."""
    top_folders = sorted({f.relpath.split("/", 1)[0] for f in files if "/" in f.relpath})
    if is_split_layout(top_folders):
        layout = layouts.LAYOUT_SPLIT
        split_names = tuple(sorted({SPLIT_FOLDERS[f] for f in top_folders}))  # all split folders, as checked
        if config.splits:
            logging.warning("input has split folders (%s); --splits is ignored", ", ".join(top_folders))
    else:
        layout = layouts.LAYOUT_CLASS
        split_names = tuple(name for name, _ in config.splits) if config.splits else (DEFAULT_SPLIT,)
    return layout, split_names


def _split_bytes(config: ConvertConfig, layout: str, split_names, files, ratio: float) -> Dict[str, float]:
    """Estimated output bytes per split of ``files``."""
    split_bytes = {name: 0.0 for name in split_names}
    for source in files:
        relpath, size = source.relpath, source.size
        if layout == layouts.LAYOUT_SPLIT:
            folder = split_of_folder(relpath.split("/", 1)[0]) if "/" in relpath else None
            split = folder if folder in split_bytes else None
        else:
            split = assign_split(relpath, config.seed, config.splits) if config.splits else DEFAULT_SPLIT
        if split is not None:
            split_bytes[split] += estimated_record_bytes(size, ratio)
    return split_bytes


def _plan_archives(config: ConvertConfig, whole: bool = True) -> Plan:
    base, pattern = file_pattern(config.input)
    found = sorted((p, size) for p, size in list_input(pattern) if archives.archive_kind(p))
    if not found:
        raise PlanError(f"no archives (.zip, .tar, .tar.gz, .tgz) match {pattern}")
    limit = config.image.max_file_bytes
    min_depth = archives.MIN_DEPTH_SEQUENCES if config.sequence else archives.MIN_DEPTH_IMAGES
    files: List[WorkItem] = []
    peeked: List[Tuple[str, MemberEntry]] = []
    peeked_names: List[str] = []  # every named entry, also those refused (a tar.gz member over the image limit)
    complete = len(found) <= _PEEK_ARCHIVES
    refused = False  # an entry the run rejects (a damaged archive, a link): the run's errors.jsonl says why
    for path, size in found[:_PEEK_ARCHIVES]:
        max_members = _PEEK_ZIP_MEMBERS if archives.archive_kind(path) == "zip" else _PEEK_MEMBERS
        entries, whole = archives.peek_archive(path, size, limit, max_members, _PEEK_STREAM_BYTES)
        complete = complete and whole
        members = [e for e in entries if isinstance(e, MemberEntry)]
        refused = refused or any(isinstance(e, ErrorEntry) for e in entries)
        peeked.extend((path, m) for m in members)
        peeked_names.extend(e.name for e in entries if e.name)
        prefix = archives.top_folder_to_strip([m.name for m in members], min_depth)
        for m in members:
            files.append(WorkItem(archives.member_path(path, m.name), m.name[len(prefix) :], m.size, m.member))
    if config.task != TASK_CLASSIFICATION:
        detection_plan = plan_archived_detection(config, base, pattern, found, peeked, peeked_names, complete)
        if detection_plan is not None:
            return detection_plan
    files.sort(key=lambda f: f.relpath)
    layout, split_names = _layout(config, files)
    if complete and (files or not refused):  # a partial peek may not have seen the images or class folders
        _check_images(config, files, layout, in_archives=True)
    if layout == layouts.LAYOUT_SPLIT and not complete:
        split_names = tuple(sorted(set(SPLIT_FOLDERS.values())))
    ratio = estimate_size_ratio(config, files) if whole else 1.0  # an append sizes its new inputs
    split_bytes = _split_bytes(config, layout, split_names, files, ratio)
    input_bytes = sum(size for _, size in found)
    seen = sum(f.size for f in files)
    scale = input_bytes / seen if seen else 0.0  # the peek's split proportions, over every archive
    split_bytes = {name: b * scale for name, b in split_bytes.items()}
    return Plan(
        InputPlan(
            base=base,
            pattern=pattern,
            layout=layout,
            split_names=split_names,
            input_kind=kinds.INPUT_ARCHIVES,
            listing_digest=digest(found),
            listing_complete=complete,
        ),
        sized(config, split_names, split_bytes, len(files), input_bytes, ratio),
    )


def _plan_manifest(config: ConvertConfig, whole: bool = True) -> Plan:
    base, pattern = file_pattern(config.input)
    found = sorted(p for p, _ in list_input(pattern) if manifests.manifest_kind(p))
    if not found:
        raise PlanError(f"no manifests (.csv, .jsonl) match {pattern}")
    rows: List[Tuple[str, int, dict]] = []
    columns = set()
    for path in found:
        try:
            parsed = list(manifests.manifest_rows(path))
        except (OSError, UnicodeDecodeError) as e:
            raise PlanError(f"cannot read manifest {path}: {type(e).__name__}: {e}") from e
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
        split_names = tuple(name for name, _ in config.splits) if config.splits else (DEFAULT_SPLIT,)

    resolved = [manifests.resolve_row_path(path, row["path"]) for path, _, row in rows]  # (path, relpath)
    mean_size, ratio = sampled_sizes(config, resolved) if whole else (0.0, 1.0)  # an append sizes its new rows
    record_bytes = estimated_record_bytes(mean_size, ratio)
    split_bytes = {name: 0.0 for name in split_names}
    for (_, _, row), (_, relpath) in zip(rows, resolved):
        if has_split:
            split = manifests.canonical_split(row.get("split", ""))
        elif config.splits:
            split = assign_split(relpath, config.seed, config.splits)
        else:
            split = DEFAULT_SPLIT
        if split in split_bytes:
            split_bytes[split] += record_bytes
    return Plan(
        InputPlan(
            base=base,
            pattern=pattern,
            layout=layouts.LAYOUT_MANIFEST,
            split_names=split_names,
            input_kind=kinds.INPUT_MANIFEST,
            labeled=labeled,
            has_split_column=has_split,
            listing_digest=digest(rows),
        ),
        sized(config, split_names, split_bytes, len(rows), int(mean_size * len(rows)), ratio),
    )
