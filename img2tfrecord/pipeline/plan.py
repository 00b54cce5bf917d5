"""Launch-time planning: resolve the input, pick the layout, estimate shard counts.

``WriteToTFRecord`` needs each split's shard count when the graph is built,
but output sizes are known only after conversion. The launcher therefore
takes one metadata listing of the input (``FileSystems.match``: names and
sizes, nothing is read), which also detects the split-folder layout and
reports "no matches" before any pipeline starts, and converts a small
sample to measure the output/input size ratio when images are re-encoded.
The pipeline lists the input again itself and discovers the classes there;
of this listing only the folders holding earlier img2tfrecord outputs
(``Plan.skipped_outputs``, never inputs) are shipped into the graph. An input
that can give no record (no images, or none inside a class folder) is refused
here, before anything starts. A digest of the
listing goes into the run's fingerprint (``Plan.fingerprint``), which names
the staging folder a ``--resume`` picks up.

Archives (``.zip``, ``.tar``, ``.tar.gz``, ``.tgz``) are peeked at: a zip's
central directory is read whole, a tar's first members (a tar.gz is
decompressed only that far), from the first few archives of a glob. The
peek decides the layout; when it did not see everything, a split-folder
layout gets every split name (train, validation, test) so a split first
seen in the pipeline still has somewhere to go (one never seen is listed
with 0 records). When the peek shows detection annotations (or with
``--task detection``), every archive is listed whole: VOC image sets, COCO
file names and box manifests name the splits, wherever they sit in it.
Manifests (``.csv``, ``.jsonl``) are read whole: their
columns decide labeled/unlabeled, their split column the split names.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import json
import logging
import math
import os
from typing import Callable, Dict, Iterator, List, Optional, Set, Tuple

from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems

from img2tfrecord import faults
from img2tfrecord.conversion.sharding import DEFAULT_SPLIT, assign_split
from img2tfrecord.images import ImageError, convert_image
from img2tfrecord.images.decode import open_image
from img2tfrecord.images.names import looks_like_image
from img2tfrecord.model import ErrorEntry, MemberEntry, WorkItem
from img2tfrecord.options import TASK_CLASSIFICATION, TASK_DETECTION
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.schemas import manifest
from img2tfrecord.sources import archives, detection, kinds, manifests
from img2tfrecord.sources import detection_archives as archived
from img2tfrecord.sources import layout as layouts
from img2tfrecord.sources.files import read_source
from img2tfrecord.sources.split_folders import SPLIT_FOLDERS, is_split_layout, split_of_folder

_SAMPLE_SIZE = 16
_RECORD_OVERHEAD_BYTES = 200  # framing + the non-image features of one record
MIB = 1024 * 1024
_PEEK_ARCHIVES = 4  # archives of a glob looked into at launch
_PEEK_MEMBERS = 2000  # members of a tar / tar.gz looked at (a zip's central directory is read whole)
_PEEK_ZIP_MEMBERS = 10_000_000
_PEEK_STREAM_BYTES = 64 * MIB  # member data decompressed from a tar.gz at launch, at most


class PlanError(ValueError):
    """The input cannot be converted as given (a usage error)."""


@dataclasses.dataclass(frozen=True)
class Plan:
    base: str  # the input root, ending with "/"
    pattern: str  # what the pipeline matches
    layout: str
    split_names: Tuple[str, ...]
    num_shards: Dict[str, int]
    num_files: int  # archives and manifests: the members/rows seen at launch
    input_bytes: int
    size_ratio: float
    input_kind: str = kinds.INPUT_FOLDER  # folder (or glob of images), archives, manifest
    labeled: bool = True  # False: a manifest without a label column
    has_split_column: bool = False  # a manifest whose rows name their split
    listing_digest: str = ""  # sha256 of what the launch listing saw (names, sizes, manifest rows)
    annotations: str = ""  # detection: the annotation format (sources.detection: voc, coco, boxes)
    patterns: Tuple[str, ...] = ()  # detection: globs of the annotation files the pipeline reads
    listing_complete: bool = True  # False: num_files counts what a partial peek into the archives saw
    skipped_outputs: Tuple[str, ...] = ()  # a folder's folders holding earlier outputs: not inputs (relative)

    @property
    def task(self) -> str:
        """classification or detection."""
        return TASK_DETECTION if self.annotations else TASK_CLASSIFICATION

    def fingerprint(self, config: ConvertConfig) -> str:
        """16 hex digits that change with the options, the seed, the input listing or the shard counts."""
        import img2tfrecord

        doc = {
            "tool_version": img2tfrecord.__version__,
            "input": config.input,
            "options": config.options_json(),
            "listing": self.listing_digest,
            "layout": self.layout,
            "num_shards": dict(sorted(self.num_shards.items())),
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def _digest(entries) -> str:
    """sha256 of a listing: one JSON line per entry, in the given (sorted) order."""
    h = hashlib.sha256()
    for entry in entries:
        h.update(json.dumps(entry, sort_keys=True, default=str).encode("utf-8", "surrogateescape") + b"\n")
    return h.hexdigest()


def _is_uri(path: str) -> bool:
    return "://" in path


def resolve_input(path: str) -> Tuple[str, str]:
    """``(input root ending with '/', glob pattern)`` for a directory or a glob."""
    if not _is_uri(path):
        path = os.path.abspath(path) + ("/" if path.endswith("/") else "")
    if kinds.GLOB_CHARS.search(path):
        parts = path.split("/")
        base = "/".join(parts[: kinds.first_glob_part(parts)]) + "/"
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


# pattern -> listing, inside listing_once(); None outside it, where every call lists again.
_LISTINGS: contextvars.ContextVar[Optional[Dict[str, List[Tuple[str, int]]]]] = contextvars.ContextVar(
    "img2tfrecord_listings", default=None
)


@contextlib.contextmanager
def listing_once() -> Iterator[None]:
    """Inside the block each pattern is listed once and that listing reused (the plan, then ``--plan``'s
    count of every input): a bucket of a million objects is not listed twice."""
    token = _LISTINGS.set({})
    try:
        yield
    finally:
        _LISTINGS.reset(token)


def list_input(pattern: str) -> List[Tuple[str, int]]:
    """``(path, size)`` of every file matching ``pattern`` (metadata only); nothing matched is ``[]``."""
    listings = _LISTINGS.get()
    if listings is None:
        return _list(pattern)
    if pattern not in listings:
        listings[pattern] = _list(pattern)
    return listings[pattern]


def _list(pattern: str) -> List[Tuple[str, int]]:
    try:
        result = FileSystems.match([pattern])[0]
    except BeamIOError as e:  # the filesystem refused the listing (permissions, a missing bucket)
        details = [v for v in (e.exception_details or {}).values() if v is not None]
        if details and all(isinstance(v, FileNotFoundError) for v in details):
            return []
        raise PlanError(f"cannot list {pattern}: {details[0] if details else e}") from e
    return [(m.path, m.size_in_bytes) for m in result.metadata_list]


def _estimate_size_ratio(config: ConvertConfig, files: List[WorkItem]) -> float:
    """Output bytes per input byte, from converting a few evenly spaced files."""
    image = config.image
    if image.format == "keep" and image.size is None:
        return 1.0
    step = max(1, len(files) // _SAMPLE_SIZE)
    in_bytes = out_bytes = 0
    for source in files[::step][:_SAMPLE_SIZE]:
        size = source.size
        try:
            converted = convert_image(read_source(source, image.max_file_bytes), image)
        except (ImageError, OSError):
            continue
        in_bytes += size
        out_bytes += len(converted.encoded)
    return out_bytes / in_bytes if in_bytes else 1.0


def estimated_record_bytes(input_bytes: float, ratio: float) -> float:
    """Output bytes of one record made from ``input_bytes`` of image data at the output/input ``ratio``."""
    return input_bytes * ratio + _RECORD_OVERHEAD_BYTES


def make_plan(config: ConvertConfig) -> Plan:
    kind = kinds.input_kind(config.input)
    detect = config.task != TASK_CLASSIFICATION
    forced = config.task == TASK_DETECTION
    if kind == kinds.INPUT_ARCHIVES:
        return _plan_archives(config)
    if kind == kinds.INPUT_MANIFEST:
        if detect:
            base, pattern = _file_pattern(config.input)
            found = sorted(p for p, _ in list_input(pattern) if manifests.manifest_kind(p))
            if found and (forced or detection.is_box_manifest(found[0])):
                return _plan_box_manifest(config, base, pattern, found)
        return _plan_manifest(config)
    if detect and config.input.lower().endswith(".json"):
        base, pattern = _file_pattern(config.input)
        found = sorted(p for p, _ in list_input(pattern))
        if not found:
            raise PlanError(f"no COCO JSON files match {pattern}")
        return _plan_detection(config, detection.COCO, _coco_base(found), list(found), [], tuple(found))
    base, pattern = resolve_input(config.input)
    if not kinds.GLOB_CHARS.search(config.input) and _is_file(base.rstrip("/")):
        raise PlanError(
            f"--input {config.input} is a file; give a folder of class folders, a glob, an archive "
            f"(.zip, .tar, .tar.gz, .tgz) or a manifest (.csv, .jsonl)"
        )
    listing = list_input(pattern)
    faults.pause_at("listing")
    if kinds.GLOB_CHARS.search(config.input) and listing and all(archives.archive_kind(p) for p, _ in listing):
        return _plan_archives(config)  # a glob such as 'shards/*' that matches only archives
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
        found_kind = _detection_layout(files, forced)
        if found_kind is not None:
            return _plan_folder_detection(config, found_kind, base, files)
    if forced:
        raise PlanError(
            f"--task detection: {config.input} holds neither a Pascal VOC layout (Annotations/*.xml, "
            "JPEGImages/) nor COCO JSON (instances_*.json)"
        )
    layout, split_names = _layout(config, files)
    _check_images(config, files, layout)
    ratio = _estimate_size_ratio(config, files)
    split_bytes = _split_bytes(config, layout, split_names, files, ratio)
    return Plan(
        base=base,
        pattern=pattern,
        layout=layout,
        split_names=split_names,
        num_shards=_num_shards(config, split_names, split_bytes),
        num_files=len(files),
        input_bytes=sum(f.size for f in files),
        size_ratio=ratio,
        listing_digest=_digest((f.relpath, f.size) for f in files),
        skipped_outputs=outputs,
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
    """True when any of up to _SAMPLE_SIZE of ``items`` (spread over them) opens as an image, even a
    broken one; what cannot be read counts as an image (the run will say what it is)."""
    step = max(1, len(items) // _SAMPLE_SIZE)
    for item in items[::step][:_SAMPLE_SIZE]:
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
        raise PlanError(
            f"no images in {where}: its {len(files)} file(s) ({shown}{', ...' if len(files) > 3 else ''}) "
            "are not images; point --input at a folder of images with one sub-folder per class"
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
            split_bytes[split] += size * ratio + _RECORD_OVERHEAD_BYTES
    return split_bytes


def _num_shards(config: ConvertConfig, split_names, split_bytes: Dict[str, float]) -> Dict[str, int]:
    if config.num_shards:
        return {name: config.num_shards for name in split_names}
    target = config.shard_size_mb * MIB
    return {name: max(1, math.ceil(split_bytes.get(name, 0) / target)) for name in split_names}


def _file_pattern(path: str) -> Tuple[str, str]:
    """``(folder ending with '/', pattern)`` of an archive or manifest path or glob."""
    if not _is_uri(path):
        path = os.path.abspath(path)
    return path.rsplit("/", 1)[0] + "/", path


def _plan_archives(config: ConvertConfig) -> Plan:
    base, pattern = _file_pattern(config.input)
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
        detection_plan = _plan_archived_detection(config, base, pattern, found, peeked, peeked_names, complete)
        if detection_plan is not None:
            return detection_plan
    files.sort(key=lambda f: f.relpath)
    layout, split_names = _layout(config, files)
    if complete and (files or not refused):  # a partial peek may not have seen the images or class folders
        _check_images(config, files, layout, in_archives=True)
    if layout == layouts.LAYOUT_SPLIT and not complete:
        split_names = tuple(sorted(set(SPLIT_FOLDERS.values())))
    ratio = _estimate_size_ratio(config, files)
    split_bytes = _split_bytes(config, layout, split_names, files, ratio)
    input_bytes = sum(size for _, size in found)
    seen = sum(f.size for f in files)
    scale = input_bytes / seen if seen else 0.0  # the peek's split proportions, over every archive
    split_bytes = {name: b * scale for name, b in split_bytes.items()}
    return Plan(
        base=base,
        pattern=pattern,
        layout=layout,
        split_names=split_names,
        num_shards=_num_shards(config, split_names, split_bytes),
        num_files=len(files),
        input_bytes=input_bytes,
        size_ratio=ratio,
        input_kind=kinds.INPUT_ARCHIVES,
        listing_digest=_digest(found),
        listing_complete=complete,
    )


def _file_size(path: str) -> Optional[int]:
    try:
        if not _is_uri(path):
            return os.path.getsize(path)
        found = FileSystems.match([path])[0].metadata_list
        return found[0].size_in_bytes if found else None
    except Exception:
        return None


def _plan_manifest(config: ConvertConfig) -> Plan:
    base, pattern = _file_pattern(config.input)
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

    step = max(1, len(rows) // _SAMPLE_SIZE)
    sample = []
    for path, _number, row in rows[::step][:_SAMPLE_SIZE]:
        resolved, relpath = manifests.resolve_row_path(path, row["path"])
        size = _file_size(resolved)
        if size is not None:
            sample.append(WorkItem(resolved, relpath, size))
    mean_size = sum(f.size for f in sample) / len(sample) if sample else 0.0
    ratio = _estimate_size_ratio(config, sample)
    split_bytes = {name: 0.0 for name in split_names}
    for path, _, row in rows:
        if has_split:
            split = manifests.canonical_split(row.get("split", ""))
        elif config.splits:
            split = assign_split(manifests.resolve_row_path(path, row["path"])[1], config.seed, config.splits)
        else:
            split = DEFAULT_SPLIT
        if split in split_bytes:
            split_bytes[split] += mean_size * ratio + _RECORD_OVERHEAD_BYTES
    return Plan(
        base=base,
        pattern=pattern,
        layout=layouts.LAYOUT_MANIFEST,
        split_names=split_names,
        num_shards=_num_shards(config, split_names, split_bytes),
        num_files=len(rows),
        input_bytes=int(mean_size * len(rows)),
        size_ratio=ratio,
        input_kind=kinds.INPUT_MANIFEST,
        labeled=labeled,
        has_split_column=has_split,
        listing_digest=_digest(rows),
    )


# ---------------------------------------------------------------------------
# Detection: VOC, COCO, manifests of boxes.


def _is_image_name(relpath: str) -> bool:
    return not relpath.lower().endswith((".xml", ".json", ".txt", ".csv", ".jsonl", ".pbtxt"))


def _detection_layout(files: List[WorkItem], forced: bool) -> Optional[str]:
    """voc, coco or None: a folder's annotation layout, from its relpaths."""
    parts = [f.relpath.split("/") for f in files]
    if any(
        len(p) >= 2 and p[-2] == detection.VOC_ANNOTATIONS and p[-1].lower().endswith(".xml") for p in parts
    ) and any(detection.VOC_IMAGES in p[:-1] for p in parts):
        return detection.VOC
    if any(p[-1].lower().endswith(".json") and (forced or p[-1].lower().startswith("instances")) for p in parts):
        return detection.COCO
    return None


def _coco_base(jsons: List[str]) -> str:
    """The input root of COCO files given directly: the folder above ``annotations/``, else their folder."""
    directory = jsons[0].rsplit("/", 1)[0]
    if directory.rsplit("/", 1)[-1].lower() == "annotations":
        directory = directory.rsplit("/", 1)[0]
    return directory + "/"


def _plan_folder_detection(config: ConvertConfig, kind: str, base: str, files: List[WorkItem]) -> Plan:
    if kind == detection.VOC:
        folders = sorted(
            {f.path.rsplit("/", 1)[0] for f in files if f.relpath.split("/")[-2:-1] == [detection.VOC_ANNOTATIONS]}
        )
        patterns = tuple(folder + "/*.xml" for folder in folders)
        annotations = [f.path for f in files if f.path.rsplit("/", 1)[0] in folders and f.path.endswith(".xml")]
    else:
        wanted = [f for f in files if f.relpath.lower().endswith(".json")]
        instances = [f for f in wanted if f.relpath.rsplit("/", 1)[-1].lower().startswith("instances")]
        annotations = [f.path for f in instances or wanted]
        patterns = tuple(annotations)
    images = [f for f in files if _is_image_name(f.relpath)]
    return _plan_detection(config, kind, base, annotations, images, patterns)


def _named_splits(
    config: ConvertConfig,
    kind: str,
    annotations: List[str],
    voc_splits: Callable[[str], Tuple[str, ...]] = detection.voc_split_names,
) -> Tuple[str, ...]:
    """The splits VOC image sets (``voc_splits(root)``) or COCO file names give, sorted; () for none."""
    if kind == detection.VOC:
        roots = sorted({detection.voc_root(a) for a in annotations})
        return tuple(sorted({s for root in roots for s in voc_splits(root)}))
    by_file = [detection.coco_split(a) for a in annotations]
    if all(by_file) and len(set(by_file)) == len(by_file) and (len(by_file) > 1 or not config.splits):
        return tuple(sorted(s for s in by_file if s))
    return ()


def _plan_detection(
    config: ConvertConfig,
    kind: str,
    base: str,
    annotations: List[str],
    images: List[WorkItem],
    patterns: Tuple[str, ...],
    named: Optional[Tuple[str, ...]] = None,
    sample: Optional[List[WorkItem]] = None,
) -> Plan:
    """The plan of a VOC or COCO input: splits from the image sets / file names (or ``named``),
    shards from the image bytes (output/input ratio measured on ``sample``, else ``images``)."""
    if named is None:
        named = _named_splits(config, kind, annotations)
    if named and config.splits:
        logging.warning("the annotations name the splits (%s); --splits is ignored", ", ".join(named))
    split_names = named or (tuple(name for name, _ in config.splits) if config.splits else (DEFAULT_SPLIT,))
    ratio = _estimate_size_ratio(config, images if sample is None else sample)
    input_bytes = sum(f.size for f in images)
    per_split = (input_bytes * ratio + _RECORD_OVERHEAD_BYTES * len(images)) / len(split_names)
    return Plan(
        base=base,
        pattern=patterns[0] if patterns else base,
        layout=layouts.LAYOUT_DETECTION,
        split_names=split_names,
        num_shards=_num_shards(config, split_names, {name: per_split for name in split_names}),
        num_files=len(images) or len(annotations),
        input_bytes=input_bytes,
        size_ratio=ratio,
        input_kind=kinds.INPUT_DETECTION,
        has_split_column=bool(named),
        listing_digest=_digest([(a,) for a in annotations] + [(f.relpath, f.size) for f in images]),
        annotations=kind,
        patterns=patterns,
    )


def _plan_box_manifest(config: ConvertConfig, base: str, pattern: str, found: List[str]) -> Plan:
    """The plan of manifests of boxes: splits from a split column, shards from a sample of the images."""
    named: Set[str] = set()
    paths: Dict[str, None] = {}
    digest_rows = []
    for path in found:
        if not detection.is_box_manifest(path):
            raise PlanError(f"{path}: a manifest of boxes needs the columns path,label,xmin,ymin,xmax,ymax")
        try:
            for number, row in detection.box_rows(path):
                digest_rows.append((path, number, row))
                split = _row_split(path, number, row)
                if split is not None:
                    named.add(split)
                if row.get("path"):
                    paths.setdefault(manifests.resolve_row_path(path, str(row["path"]))[0])
        except (OSError, UnicodeDecodeError) as e:
            raise PlanError(f"cannot read manifest {path}: {type(e).__name__}: {e}") from e
    if not paths:
        raise PlanError(f"{', '.join(found)}: no rows naming an image (columns path,label,xmin,ymin,xmax,ymax)")
    if named and config.splits:
        logging.warning("the manifest has a split column (%s); --splits is ignored", ", ".join(sorted(named)))
    split_names = tuple(sorted(named)) or (
        tuple(name for name, _ in config.splits) if config.splits else (DEFAULT_SPLIT,)
    )
    listed = list(paths)
    step = max(1, len(listed) // _SAMPLE_SIZE)
    sample = []
    for resolved in listed[::step][:_SAMPLE_SIZE]:
        size = _file_size(resolved)
        if size is not None:
            sample.append(WorkItem(resolved, detection.rel(base, resolved), size))
    mean_size = sum(f.size for f in sample) / len(sample) if sample else 0.0
    ratio = _estimate_size_ratio(config, sample)
    per_split = len(listed) * (mean_size * ratio + _RECORD_OVERHEAD_BYTES) / len(split_names)
    return Plan(
        base=base,
        pattern=pattern,
        layout=layouts.LAYOUT_DETECTION,
        split_names=split_names,
        num_shards=_num_shards(config, split_names, {name: per_split for name in split_names}),
        num_files=len(listed),
        input_bytes=int(mean_size * len(listed)),
        size_ratio=ratio,
        input_kind=kinds.INPUT_DETECTION,
        has_split_column=bool(named),
        listing_digest=_digest(digest_rows),
        annotations=detection.BOXES,
        patterns=tuple(found),
    )


def _row_split(path: str, number: int, row: Dict) -> Optional[str]:
    """The split a row of a manifest of boxes names (canonical), None for none; PlanError for a bad name."""
    if not row.get("split"):
        return None
    problem = manifests.check_split_name(str(row["split"]))
    if problem:
        raise PlanError(f"{path}:{number}: {problem}")
    return manifests.canonical_split(str(row["split"]))


def _plan_archived_detection(
    config: ConvertConfig,
    base: str,
    pattern: str,
    found: List[Tuple[str, int]],
    peeked: List[Tuple[str, MemberEntry]],
    peeked_names: List[str],
    complete: bool,
) -> Optional[Plan]:
    """The plan of detection inputs inside archives; None (classification) unless the peek at their
    first members (``peeked``; ``peeked_names`` also names the entries it refused) shows a VOC, COCO
    or box-manifest layout, or ``--task detection`` forces it.

    Detection lists every archive whole (the splits may be named by a member near the end); the
    output/input ratio is measured on the peeked images.
    """
    forced = config.task == TASK_DETECTION

    def peeked_data(name: str) -> Optional[bytes]:
        for archive, entry in peeked:
            if entry.name == name:
                try:
                    return archived.member_reader(archive, entry)("", detection.MAX_COCO_BYTES)
                except (ImageError, OSError):
                    return None
        return None

    if not forced and archived.find_annotations(peeked_names, peeked_data, False, complete) is None:
        return None
    limit = config.image.max_file_bytes
    try:
        scans = [archived.scan_archive(path, size, limit) for path, size in found]
    except (ImageError, OSError) as e:
        raise PlanError(f"cannot read the annotations in {pattern}: {type(e).__name__}: {e}") from e
    data = {name: content for scan in scans for name, content in scan.data.items()}
    names = sorted({m.name for scan in scans for m in scan.members})
    annotations = archived.find_annotations(names, data.get, forced)
    if annotations is None:
        if forced:
            raise PlanError(
                f"--task detection: {config.input} holds neither a Pascal VOC layout (Annotations/*.xml, "
                "JPEGImages/), COCO JSON nor a CSV/JSONL manifest of boxes"
            )
        return None

    def voc_splits(root: str) -> Tuple[str, ...]:
        splits: Set[str] = set()
        for scan in scans:
            head = archives.member_path(scan.archive, "")
            if root.startswith(head):
                texts = {
                    archived.image_set_name(n): d
                    for n, d in scan.data.items()
                    if archived.image_set_root(n) == root[len(head) :]
                }
                splits.update(detection.parse_image_sets(texts.__getitem__, texts).values())
        return tuple(sorted(splits))

    kind, patterns = annotations.kind, annotations.patterns
    if kind == detection.VOC:
        named = _named_splits(
            config, kind, [archives.member_path(a, p) for a, _ in found for p in patterns], voc_splits
        )
    elif kind == detection.COCO:
        named = _named_splits(config, kind, list(patterns))
    else:
        box_splits: Set[str] = set()
        for name in patterns:
            try:
                for number, row in detection.box_rows(name, data[name]):
                    split = _row_split(name, number, row)
                    if split is not None:
                        box_splits.add(split)
            except UnicodeDecodeError as e:
                raise PlanError(f"cannot read manifest {name}: {type(e).__name__}: {e}") from e
        named = tuple(sorted(box_splits))

    def image_items(listed: List[Tuple[str, MemberEntry]]) -> List[WorkItem]:
        items = [
            WorkItem(archives.member_path(a, e.name), annotations.relpath(e.name), e.size, e.member)
            for a, e in listed
            if _is_image_name(e.name)
        ]
        return sorted(items, key=lambda f: f.relpath)

    images = image_items([(scan.archive, m) for scan in scans for m in scan.members])
    plan = _plan_detection(config, kind, base, [], images, patterns, named=named, sample=image_items(peeked))
    return dataclasses.replace(plan, pattern=pattern, input_kind=kinds.INPUT_ARCHIVES, listing_digest=_digest(found))
