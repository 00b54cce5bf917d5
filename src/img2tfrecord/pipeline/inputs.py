"""Launch-time checks of a local input folder: what the pipeline's listing cannot report.

A local input is listed as Beam's ``LocalFileSystem`` lists it, with
``os.walk``: links to folders are not followed (so a link loop cannot make the
listing run forever), broken links and folders that cannot be listed are left
out without a word, and an empty folder has no file to list. This module reads
that same walk (``listing.walk_folder``: the launch walks the folder once)
before the pipeline starts, and says what it finds:

* file names that are not valid UTF-8 are warned about: a record stores its
  name as text, so each such file becomes an ``errors.jsonl`` row (reason
  ``bad_name``, the name with its other bytes shown as ``\\xNN``);
* class folder names holding a line break stop the run: ``labels.txt`` is
  one class name per line;
* empty class folders (none or only junk files), links to folders (not
  followed) and broken links are warned about: none of them gives an input;
* folders that cannot be listed are warned about too: each is an input the
  run rejects (an ``errors.jsonl`` row, reason ``unlistable``, counted against
  ``--max-error-rate``), and a class folder among them stays a class.

Folders holding an earlier img2tfrecord output are not looked into
(``sources/layout.py`` ``marks_output``; the launch plan warns about them).

Only local filesystems have empty folders, links or unreadable folders;
object stores such as ``gs://`` have names only, so these checks do not
apply there (their names are always UTF-8).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Dict, List, Optional

from img2tfrecord.pipeline.listing import local_matcher, unlisted_paths, walk_folder
from img2tfrecord.pipeline.plan_model import PlanError
from img2tfrecord.sources import layout as layouts
from img2tfrecord.sources.layout import is_text, printable
from img2tfrecord.sources.split_folders import split_of_folder

_EXAMPLES = 3  # names quoted per kind of problem


class InputProblem(PlanError):
    """The input cannot be converted as it is (a usage error, exit 2)."""


@dataclasses.dataclass
class LocalInputReport:
    files: int = 0
    bad_names: List[str] = dataclasses.field(default_factory=list)  # escaped relpaths
    bad_class_names: List[str] = dataclasses.field(default_factory=list)
    empty_class_folders: List[str] = dataclasses.field(default_factory=list)
    folder_links: List[str] = dataclasses.field(default_factory=list)
    broken_links: List[str] = dataclasses.field(default_factory=list)
    unlistable: List[str] = dataclasses.field(default_factory=list)


def _class_folder(relpath: str, layout: str) -> Optional[str]:
    """The class folder (relative to the input root) a path under the root belongs to."""
    parts = relpath.split("/")
    depth = 2 if layout == layouts.LAYOUT_SPLIT else 1
    return "/".join(parts[:depth]) if len(parts) > depth else None


def scan_local_input(base: str, pattern: str, layout: str) -> LocalInputReport:
    """Walk the local input root ``base`` like Beam's listing does (the launch's own walk of it, inside
    ``listing.listing_once()``) and report what it leaves out."""
    report = LocalInputReport()
    matches = local_matcher(pattern)
    unlisted = unlisted_paths(pattern)  # what the launch's listing could not stat (None: it made none)
    whole_folder = pattern == base + "**"
    files_per_class: Dict[str, int] = {}
    outputs: List[str] = []  # folders holding earlier outputs, not walked into
    root = base.rstrip("/") or "/"
    walk = walk_folder(root)  # the walk the launch's listing made, when it made one
    pruned: List[str] = []  # folders of earlier outputs: what is inside them is not looked at

    def inside_pruned(folder: str) -> bool:
        return any(folder.startswith(p.rstrip(os.sep) + os.sep) for p in pruned)

    for dirpath, dirnames, filenames in walk.entries:
        if pruned and inside_pruned(dirpath):
            continue
        rel_dir = layouts.relative_path(base, dirpath + "/").rstrip("/")
        if any(layouts.marks_output(n) for n in filenames) or any(
            layouts.marks_output(n, is_folder=True) for n in dirnames
        ):  # an earlier output: not an input, and not an empty class folder (the plan warned about it)
            pruned.append(dirpath)
            files_per_class.pop(rel_dir, None)
            outputs.append(rel_dir)
            continue
        for name in dirnames:  # os.walk does not descend into links to folders, nor does Beam's listing
            relpath = f"{rel_dir}/{name}" if rel_dir else name
            if os.path.islink(os.path.join(dirpath, name)):
                if whole_folder and not layouts.is_junk(relpath):
                    report.folder_links.append(printable(relpath))
            elif whole_folder and not layouts.is_junk(relpath):
                if relpath.count("/") + 1 == (2 if layout == layouts.LAYOUT_SPLIT else 1):
                    files_per_class.setdefault(relpath, 0)
        for name in filenames:
            path = os.path.join(dirpath, name)
            relpath = f"{rel_dir}/{name}" if rel_dir else name
            if matches is not None and not matches(path):
                continue
            if layouts.is_junk(relpath):
                continue
            if not is_text(relpath):
                report.bad_names.append(printable(relpath))
            if (unlisted is None or path in unlisted) and not os.path.exists(path):  # a broken link?
                report.broken_links.append(printable(relpath))
                continue
            report.files += 1
            class_name = layouts.class_of(relpath, layout)
            if class_name is not None and ("\n" in class_name or "\r" in class_name):
                if class_name not in report.bad_class_names:
                    report.bad_class_names.append(class_name)
            folder = _class_folder(relpath, layout)
            if folder is not None:
                files_per_class[folder] = files_per_class.get(folder, 0) + 1
    if whole_folder:  # a glob's scope is narrower than the folder walked
        for error in walk.unlistable:
            folder = str(error.filename)
            relpath = layouts.relative_path(base, f"{folder}/").rstrip("/")
            if not inside_pruned(folder) and not layouts.is_junk(relpath):
                report.unlistable.append(printable(relpath or "."))
                files_per_class.pop(relpath, None)  # not seen inside: no empty class folder
    if layout == layouts.LAYOUT_SPLIT:  # only folders inside split folders are class folders
        files_per_class = {k: n for k, n in files_per_class.items() if split_of_folder(k.split("/", 1)[0]) is not None}
    report.empty_class_folders = sorted(  # a folder of earlier outputs only is not an empty class: warned about
        k for k, n in files_per_class.items() if n == 0 and not any(layouts.in_folders(o, (k,)) for o in outputs)
    )
    return report


def _examples(names: List[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:_EXAMPLES])
    return shown + (f" and {len(names) - _EXAMPLES} more" if len(names) > _EXAMPLES else "")


def check_local_input(base: str, pattern: str, layout: str) -> LocalInputReport:
    """Log a warning for each kind of left-out entry; InputProblem for names that cannot be converted."""
    report = scan_local_input(base, pattern, layout)
    if report.bad_names:
        logging.warning(
            "%d file name(s) are not valid UTF-8 and will be rejected as bad_name: %s; "
            "rename them (e.g. with convmv) to convert them",
            len(report.bad_names),
            _examples(report.bad_names),
        )
    if report.bad_class_names:
        raise InputProblem(
            f"class folder name(s) with a line break ({_examples(report.bad_class_names)}): "
            "labels.txt holds one class name per line; rename the folder(s)"
        )
    if report.empty_class_folders:
        logging.warning(
            "%d empty class folder(s), no class and no label id for them: %s",
            len(report.empty_class_folders),
            _examples(report.empty_class_folders),
        )
    if report.folder_links:
        logging.warning(
            "%d link(s) to folders are not followed (their files are not inputs): %s",
            len(report.folder_links),
            _examples(report.folder_links),
        )
    if report.broken_links:
        logging.warning(
            "%d broken link(s) are not inputs: %s", len(report.broken_links), _examples(report.broken_links)
        )
    if report.unlistable:
        logging.warning(
            "%d folder(s) cannot be listed (%s): their files are not inputs; each is an errors.jsonl row "
            "(unlistable), counted against --max-error-rate",
            len(report.unlistable),
            _examples(report.unlistable),
        )
    return report
