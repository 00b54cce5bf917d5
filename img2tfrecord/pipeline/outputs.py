"""Checks on the output location made by the launcher before a pipeline starts."""
from __future__ import annotations

import os
import posixpath
import shutil
from typing import List

from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems

from img2tfrecord.schemas import manifest


class OutputNotEmpty(ValueError):
    pass


class OutputNotWritable(ValueError):
    """The output location cannot be written or cleared (a usage error, found before any pipeline starts)."""


def _one_line(e: Exception) -> str:
    """The cause of a filesystem error in a few words (``Permission denied``, ``Read-only file system``)."""
    if isinstance(e, BeamIOError) and e.exception_details:
        e = next(iter(e.exception_details.values()))
        if isinstance(e, BeamIOError) and e.exception_details:
            e = next(iter(e.exception_details.values()))
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    if isinstance(e, OSError) and e.args and isinstance(e.args[0], OSError) and e.args[0].strerror:
        return e.args[0].strerror  # LocalFileSystem wraps the OSError in an IOError
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


def check_writable(output_dir: str) -> None:
    """Create ``output_dir`` (with its parents) and write, then delete, a small file in it.

    OutputNotWritable when that fails: a read-only or full filesystem, a
    missing permission, a file where a folder should be. Root may write
    where permission bits say no; the filesystem still refuses a read-only
    mount or a path through a file.
    """
    probe = FileSystems.join(output_dir, manifest.TEMP_PREFIXES[1] + "write-check")
    try:
        with FileSystems.create(probe) as f:
            f.write(b"img2tfrecord write check\n")
        FileSystems.delete([probe])
    except Exception as e:  # pylint: disable=broad-except
        raise OutputNotWritable(f"output {output_dir} is not writable: {_one_line(e)}") from None


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
        stale = _temp_folders(output_dir)
        if stale and not overwrite:
            raise OutputNotEmpty(
                f"output {output_dir} holds the staging folder of an unfinished conversion "
                f"({os.path.basename(stale[0])}); pass --overwrite to replace it"
            )
        _remove_temp_folders(output_dir)
        check_writable(output_dir)
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
    try:
        FileSystems.delete(existing)
        for path in existing:  # local filesystems leave the emptied beam-temp-* folders
            rel = path[len(base):]
            if "/" in rel:
                folder = base + rel.split("/", 1)[0]
                if FileSystems.exists(folder):
                    FileSystems.delete([folder])
    except Exception as e:  # pylint: disable=broad-except
        raise OutputNotWritable(f"cannot clear output {output_dir} for --overwrite: {_one_line(e)}") from None
    _remove_temp_folders(output_dir)
    check_writable(output_dir)


def _remove_temp_folders(output_dir: str) -> None:
    """Remove the empty Beam staging folders (``beam-temp-*``) a killed run can leave.

    A listing shows files only, so on a local filesystem a staging folder
    created just before the run was stopped is found by name. Object stores
    have no empty folders.
    """
    for path in _temp_folders(output_dir):
        try:
            shutil.rmtree(path)
        except OSError as e:
            raise OutputNotWritable(f"cannot clear output {output_dir} for --overwrite: {e.strerror}") from None


def _temp_folders(output_dir: str) -> List[str]:
    if "://" in output_dir:
        return []
    try:
        names = sorted(os.listdir(output_dir))
    except OSError:  # missing, not a folder, or not listable: check_writable says which
        return []
    found = []
    for name in names:
        path = os.path.join(output_dir, name)
        if name.startswith(manifest.TEMP_PREFIXES) and os.path.isdir(path) and not os.path.islink(path):
            found.append(path)
    return found
