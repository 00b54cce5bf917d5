"""What the planners of several input kinds share: the splits a plan names, the layout of listed
files, the check that they can give a record, and each split's estimated bytes."""

from __future__ import annotations

import logging
import os
from typing import Dict, Iterable, Optional, Sequence, Tuple

from img2tfrecord.conversion.record_sizes import SAMPLE_SIZE, estimated_record_bytes
from img2tfrecord.conversion.seeded_hashes import DEFAULT_SPLIT, assign_split
from img2tfrecord.images.decode import open_image
from img2tfrecord.images.names import looks_like_image
from img2tfrecord.images.options import ImageError
from img2tfrecord.model import WorkItem
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.plan_model import PlanError
from img2tfrecord.pipeline.sizing import evenly_spaced
from img2tfrecord.schemas import output_files
from img2tfrecord.sources import archives, input_paths, manifests
from img2tfrecord.sources import layout as layouts
from img2tfrecord.sources.files import read_source
from img2tfrecord.sources.split_folders import SPLIT_FOLDERS, is_split_layout, split_of_folder


def option_splits(config: ConvertConfig) -> Tuple[str, ...]:
    """The split names ``--splits`` gives (one ``train`` split without it)."""
    return tuple(name for name, _ in config.splits) if config.splits else (DEFAULT_SPLIT,)


def named_splits(config: ConvertConfig, named: Iterable[str], where: str) -> Tuple[str, ...]:
    """The splits the input names (``where`` says how), sorted, else ``--splits``'; ``--splits`` given as
    well is warned about once, as ignored."""
    found = tuple(sorted(set(named)))
    if found and config.splits:
        logging.warning("%s (%s); --splits is ignored", where, ", ".join(found))
    return found or option_splits(config)


def layout_of(config: ConvertConfig, files: Sequence[WorkItem]) -> Tuple[str, Tuple[str, ...]]:
    """``(layout, split names)`` from the relpaths of (some of) the input files."""
    top_folders = sorted({f.relpath.split("/", 1)[0] for f in files if "/" in f.relpath})
    if is_split_layout(top_folders):
        if config.splits:
            logging.warning("input has split folders (%s); --splits is ignored", ", ".join(top_folders))
        return layouts.LAYOUT_SPLIT, tuple(sorted({SPLIT_FOLDERS[f] for f in top_folders}))
    return layouts.LAYOUT_CLASS, option_splits(config)


def split_bytes(config: ConvertConfig, layout: str, split_names, files: Sequence[WorkItem], ratio: float):
    """Estimated output bytes per split of ``files``: by split folder, else by the seeded hash."""
    found: Dict[str, float] = {name: 0.0 for name in split_names}
    for source in files:
        relpath = source.relpath
        if layout == layouts.LAYOUT_SPLIT:
            folder = split_of_folder(relpath.split("/", 1)[0]) if "/" in relpath else None
            split = folder if folder in found else None
        else:
            split = assign_split(relpath, config.seed, config.splits) if config.splits else DEFAULT_SPLIT
        if split is not None:
            found[split] += estimated_record_bytes(source.size, ratio)
    return found


def rows_split_bytes(
    config: ConvertConfig, split_names, rows: Iterable[Tuple[Optional[str], str]], record_bytes: float
) -> Dict[str, float]:
    """Estimated output bytes per split of rows ``(the split a row names, None for none; its image's
    relpath)`` of ``record_bytes`` each: a row naming no split goes where the seeded hash puts it."""
    found: Dict[str, float] = {name: 0.0 for name in split_names}
    splits = config.splits or ((DEFAULT_SPLIT, 1.0),)
    for named, relpath in rows:
        split = named if named is not None else assign_split(relpath, config.seed, splits)
        if split in found:
            found[split] += record_bytes
    return found


def skip_outputs(config: ConvertConfig, relpaths: Iterable[str]) -> Tuple[str, ...]:
    """The folders of a folder input that hold earlier img2tfrecord outputs (warned about once);
    PlanError when the input itself is one."""
    outputs = layouts.output_folders(relpaths)
    if "" in outputs:
        raise PlanError(
            f"--input {config.input} is an img2tfrecord output (it holds {output_files.MANIFEST_FILE} or "
            f"{output_files.SUCCESS_FILE}), not images: give the folder it was converted from, "
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


_UNLABELED_MANIFEST = (
    "a CSV/JSONL manifest with a path column and no label column, which makes an unlabeled dataset "
    "(docs/inputs.md#manifests)"
)


def check_images(config: ConvertConfig, files: Sequence[WorkItem], layout: str, in_archives: bool = False) -> None:
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
        if not in_archives and all(archives.archive_format(f.relpath) for f in files):
            glob = config.input.rstrip("/") + "/*"
            raise PlanError(f"no images in {where}: {listed} are archives; convert them with --input '{glob}'")
        if not in_archives and all(manifests.manifest_format(f.relpath) for f in files):
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


def _parent_folder(text: str) -> str:
    """The folder above an ``--input`` as the user wrote it (above a glob's fixed part)."""
    parts = text.rstrip("/").split("/")
    fixed = input_paths.first_glob_part(parts)
    fixed = len(parts) if fixed is None else fixed
    parent = "/".join(parts[: max(fixed - 1, 0)])
    return parent + "/" if parent else os.path.dirname(os.path.abspath(text.rstrip("/"))) + "/"


def _looks_like_image_content(items: Sequence[WorkItem], limit: int, max_pixels: int) -> bool:
    """True when any of up to SAMPLE_SIZE of ``items`` (spread over them) opens as an image, even a
    broken one; what cannot be read counts as an image (the run will say what it is)."""
    for item in evenly_spaced(items, SAMPLE_SIZE):
        try:
            open_image(read_source(item, limit), max_pixels)
            return True
        except ImageError as e:
            if e.reason not in ("not_an_image", "empty_file"):
                return True
        except OSError:
            return True
    return False
