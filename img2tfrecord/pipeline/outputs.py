"""Checks on the output location made by the launcher before a pipeline starts."""
from __future__ import annotations

import posixpath
from typing import List

from apache_beam.io.filesystems import FileSystems

from img2tfrecord.schemas import manifest


class OutputNotEmpty(ValueError):
    pass


def list_output(output_dir: str) -> List[str]:
    """Paths of every file under ``output_dir`` (empty when it does not exist)."""
    try:
        result = FileSystems.match([FileSystems.join(output_dir, "**")])[0]
    except Exception:  # a missing directory is an empty output
        return []
    return [m.path for m in result.metadata_list]


def prepare_output(output_dir: str, overwrite: bool) -> None:
    """Refuse a non-empty output, or with ``overwrite`` clear what an earlier run left.

    Only files img2tfrecord writes are removed; a directory holding anything
    else is refused even with ``overwrite``, so a mistyped ``--output`` never
    deletes a user's files.
    """
    existing = list_output(output_dir)
    if not existing:
        return
    if not overwrite:
        finished = any(posixpath.basename(p) == manifest.SUCCESS_FILE for p in existing)
        what = "a finished conversion" if finished else f"{len(existing)} file(s)"
        raise OutputNotEmpty(f"output {output_dir} already holds {what}; pass --overwrite to replace it")
    base = output_dir.rstrip("/") + "/"
    foreign = []
    for path in existing:
        rel = path[len(base):] if path.startswith(base) else posixpath.basename(path)
        top = rel.split("/", 1)[0]
        if not manifest.is_output_file(top):
            foreign.append(rel)
    if foreign:
        raise OutputNotEmpty(
            f"output {output_dir} holds files img2tfrecord did not write (e.g. {foreign[0]!r}); "
            "refusing to overwrite it"
        )
    # _SUCCESS goes first: an interrupted clean-up never leaves a directory that looks complete.
    existing.sort(key=lambda p: posixpath.basename(p) != manifest.SUCCESS_FILE)
    FileSystems.delete(existing)
    for path in existing:  # local filesystems leave the emptied beam-temp-* folders
        rel = path[len(base):]
        if "/" in rel:
            folder = base + rel.split("/", 1)[0]
            if FileSystems.exists(folder):
                FileSystems.delete([folder])
