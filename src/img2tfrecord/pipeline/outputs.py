"""Checks on the output location made by the launcher before a pipeline starts."""

from __future__ import annotations

import os
import posixpath
import shutil
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

from img2tfrecord.pipeline.output_errors import OutputNotWritable, error_cause
from img2tfrecord.readers import storage
from img2tfrecord.schemas import dataset_manifest, manifest

if TYPE_CHECKING:
    from img2tfrecord.pipeline.lock import OutputLock


class OutputNotEmpty(ValueError):
    pass


class AlreadyComplete(Exception):
    """``--resume`` of a run whose output is already finished: nothing to do."""


def check_writable(output_dir: str) -> None:
    """Create ``output_dir`` (with its parents) and write, then delete, a small file in it.

    OutputNotWritable when that fails: a read-only or full filesystem, a
    missing permission, a file where a folder should be. Root may write
    where permission bits say no; the filesystem still refuses a read-only
    mount or a path through a file.
    """
    probe = storage.join(output_dir, manifest.TEMP_PREFIXES[1] + "write-check")
    try:
        filesystems = storage.beam_filesystems()
        with filesystems.create(probe) as f:
            f.write(b"img2tfrecord write check\n")
        filesystems.delete([probe])
    except Exception as e:  # pylint: disable=broad-except
        raise OutputNotWritable(f"output {output_dir} is not writable: {error_cause(e)}") from None


def list_output(output_dir: str) -> List[str]:
    """Paths of every file under ``output_dir`` (empty when it does not exist), except the run lock.

    The lock (``manifest.LOCK_FILE``, ``pipeline/lock.py``) says who writes
    the output, not what it holds: it never makes an output non-empty.
    """
    try:
        found = list(storage.walk_files(output_dir))
    except Exception:  # a missing directory is an empty output
        return []
    return [storage.join(output_dir, relpath) for relpath, _ in found if relpath != manifest.LOCK_FILE]


def _relative(base: str, path: str) -> str:
    return path[len(base) :] if path.startswith(base) else posixpath.basename(path)


def _run_folders(output_dir: str, existing: List[str]) -> List[str]:
    """Base names of the run staging folders in an output (files listed, or local empty folders)."""
    base = output_dir.rstrip("/") + "/"
    names = {_relative(base, p).split("/", 1)[0] for p in existing}
    names.update(os.path.basename(p) for p in _temp_folders(output_dir))
    return sorted(n for n in names if n.startswith(manifest.RUN_FOLDER_PREFIX))


def _read_fingerprint(output_dir: str) -> Optional[str]:
    try:
        return dataset_manifest.loads(
            storage.read_text(storage.join(output_dir, manifest.MANIFEST_FILE))
        ).run_fingerprint
    except Exception:  # pylint: disable=broad-except
        return None


def prepare_output(
    output_dir: str, overwrite: bool, resume_folder: Optional[str] = None, lock: Optional[OutputLock] = None
) -> bool:
    """Refuse a non-empty output, or with ``overwrite`` clear what an earlier run left.

    Only files img2tfrecord writes are removed; a directory holding anything
    else is refused even with ``overwrite``, so a mistyped ``--output`` never
    deletes a user's files. With ``resume_folder`` (the base name of this run's
    staging folder, ``manifest.run_folder``), what a killed run of the same
    fingerprint finished is kept: its staging folder, committed shards and
    indexes; anything else it left is cleared. Returns True when there is such
    a run to resume. Raises ``AlreadyComplete`` when the output is a finished
    conversion of this fingerprint, and ``OutputNotEmpty`` (changing nothing)
    when the output belongs to a run of other options, seed or input.

    ``lock`` is this run's lock on the output (``pipeline/lock.py``), acquired
    by the caller: nothing is deleted unless it still holds the output, and a
    stale lock it did not take over (neither flag given) is named in the
    refusal. The lock file itself is never counted or deleted here.
    """
    existing = list_output(output_dir)
    base = output_dir.rstrip("/") + "/"
    runs = _run_folders(output_dir, existing)
    stale = lock.stale_note() if lock is not None and not lock.held else ""
    if not existing and not _temp_folders(output_dir):
        if stale:
            raise OutputNotEmpty(
                f"output {output_dir} holds only the lock of a run that stopped; "
                f"pass --resume or --overwrite to take it over ({stale})"
            )
        check_writable(output_dir)
        return False
    foreign = [
        rel for rel in (_relative(base, p) for p in existing) if not manifest.is_output_file(rel.split("/", 1)[0])
    ]
    if foreign and (overwrite or resume_folder):
        raise OutputNotEmpty(
            f"output {output_dir} holds files img2tfrecord did not write (e.g. {foreign[0]!r}); "
            "refusing to overwrite it"
        )
    finished = any(posixpath.basename(p) == manifest.SUCCESS_FILE for p in existing)
    if resume_folder:
        if finished:
            if _read_fingerprint(output_dir) == resume_folder[len(manifest.RUN_FOLDER_PREFIX) :]:
                raise AlreadyComplete(f"output {output_dir} already holds this conversion, finished; nothing to resume")
            raise OutputNotEmpty(
                f"output {output_dir} holds a finished conversion of other options, seed or input; "
                "pass --overwrite to replace it"
            )
        others = [r for r in runs if r != resume_folder]
        if others:
            formats = {manifest.file_format_of(p) for p in existing} - {None}
            written = f" (it writes {formats.pop()} shards: give its --file-format)" if len(formats) == 1 else ""
            raise OutputNotEmpty(
                f"cannot resume: the unfinished conversion in {output_dir} was started with other options, "
                f"seed or input{written}; rerun it with those, or pass --overwrite to start over"
            )
        resumable = resume_folder in runs
        keep = (resume_folder, manifest.INDEX_DIR) if resumable else ()
        if lock is not None:
            lock.ensure_held()
        _clear(
            output_dir,
            [
                p
                for p in existing
                if _relative(base, p).split("/", 1)[0] not in keep
                and not (resumable and manifest.parse_shard_file_name(_relative(base, p)) is not None)
            ],
            keep_folders=keep,
        )
        check_writable(output_dir)
        return resumable
    if not overwrite:
        also = f"; {stale}" if stale else ""
        if runs:
            raise OutputNotEmpty(
                f"output {output_dir} holds the staging folder of an unfinished conversion ({runs[0]}); "
                f"pass --resume to finish it, or --overwrite to replace it{also}"
            )
        if not existing:
            raise OutputNotEmpty(
                f"output {output_dir} holds the staging folder of an unfinished conversion "
                f"({os.path.basename(_temp_folders(output_dir)[0])}); pass --overwrite to replace it{also}"
            )
        if finished:  # a scheduled job over a growing input adds to it instead
            raise OutputNotEmpty(
                f"output {output_dir} already holds a finished conversion; pass --overwrite to replace it, "
                f"or --append to add the inputs that are new since{also}"
            )
        raise OutputNotEmpty(
            f"output {output_dir} already holds {len(existing)} file(s); pass --overwrite to replace it{also}"
        )
    if lock is not None:
        lock.ensure_held()
    _clear(output_dir, existing)
    check_writable(output_dir)
    return False


def _of_generation(rel: str, generation: int) -> bool:
    """True for a file a run of ``generation`` (or a later one) writes: its shards, indexes, errors, ledger files."""
    name = rel.split("/", 1)[1] if rel.startswith(manifest.INDEX_DIR + "/") else rel
    if name.endswith(manifest.INDEX_SUFFIX):
        name = name[: -len(manifest.INDEX_SUFFIX)]
    parsed = manifest.parse_shard_file_name(name)
    if parsed is not None:
        return parsed["generation"] >= generation
    return rel in (
        manifest.errors_file(generation),
        manifest.ledger_file(generation),
        manifest.members_file(generation),
    )


def prepare_append(output_dir: str, generation: int, resume_folder: Optional[str], lock: OutputLock) -> bool:
    """Clear what an unfinished append left in a finished output before generation ``generation`` starts.

    Only staging folders and files of ``generation`` (shards, indexes, error report, ledger), which no
    manifest lists yet, are removed; every earlier generation and ``_SUCCESS`` stay. With
    ``resume_folder`` and a staging folder of that name, what the stopped append finished is kept and
    True returned.
    """
    existing = list_output(output_dir)
    base = output_dir.rstrip("/") + "/"
    runs = _run_folders(output_dir, existing)
    keep: Tuple[str, ...] = (resume_folder,) if resume_folder is not None and resume_folder in runs else ()
    resumable = bool(keep)
    leftovers = []
    for path in existing:
        rel = _relative(base, path)
        top = rel.split("/", 1)[0]
        if top in keep or (resumable and _of_generation(rel, generation)):
            continue
        if top.startswith(manifest.TEMP_PREFIXES) or _of_generation(rel, generation):
            leftovers.append(path)
    lock.ensure_held()
    _clear(output_dir, leftovers, keep_folders=keep + (manifest.INDEX_DIR, manifest.LEDGER_DIR))
    check_writable(output_dir)
    return resumable


def staging_left(output_dir: str) -> List[str]:
    """Paths of the staging files and folders a run left in ``output_dir`` (``manifest.TEMP_PREFIXES``)."""
    base = output_dir.rstrip("/") + "/"
    found = [p for p in list_output(output_dir) if _relative(base, p).startswith(manifest.TEMP_PREFIXES)]
    return found + _temp_folders(output_dir)


def remove_staging(output_dir: str, lock: OutputLock) -> None:
    """Delete the staging a finished run left (an append stopped after publishing its manifest), under ``lock``."""
    lock.ensure_held()
    base = output_dir.rstrip("/") + "/"
    _clear(output_dir, [p for p in list_output(output_dir) if _relative(base, p).startswith(manifest.TEMP_PREFIXES)])


def _clear(output_dir: str, paths: List[str], keep_folders: Sequence[str] = ()) -> None:
    """Delete ``paths`` (``_SUCCESS`` first) and the emptied staging folders, except ``keep_folders``."""
    base = output_dir.rstrip("/") + "/"
    # _SUCCESS goes first: an interrupted clean-up never leaves a directory that looks complete.
    paths = sorted(paths, key=lambda p: posixpath.basename(p) != manifest.SUCCESS_FILE)
    try:
        filesystems = storage.beam_filesystems()
        if paths:
            filesystems.delete(paths)
        for path in paths:  # local filesystems leave the emptied folders
            rel = _relative(base, path)
            if "/" in rel and rel.split("/", 1)[0] not in keep_folders:
                folder = base + rel.split("/", 1)[0]
                if storage.exists(folder):
                    filesystems.delete([folder])
    except Exception as e:  # pylint: disable=broad-except
        raise OutputNotWritable(f"cannot clear output {output_dir}: {error_cause(e)}") from None
    _remove_temp_folders(output_dir, keep_folders)


def _remove_temp_folders(output_dir: str, keep: Sequence[str] = ()) -> None:
    """Remove the empty Beam staging folders (``beam-temp-*``) a killed run can leave.

    A listing shows files only, so on a local filesystem a staging folder
    created just before the run was stopped is found by name. Object stores
    have no empty folders.
    """
    for path in _temp_folders(output_dir):
        if os.path.basename(path) in keep:
            continue
        try:
            shutil.rmtree(path)
        except OSError as e:
            raise OutputNotWritable(f"cannot clear output {output_dir}: {e.strerror}") from None


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


def remove_write_staging(output_dir: str) -> None:
    """Delete Beam's write staging folders (``beam-temp-*``) of a run that was stopped.

    Their writes never finalise; a ``--resume``'d run writes those files
    again. The run's own staging folder (``.tmp-run-*``) is kept for it.
    """
    prefix = manifest.TEMP_PREFIXES[0]
    base = output_dir.rstrip("/") + "/"
    found = [p for p in list_output(output_dir) if _relative(base, p).startswith(prefix)]
    try:
        if found:
            storage.beam_filesystems().delete(found)
        for path in _temp_folders(output_dir):
            if os.path.basename(path).startswith(prefix):
                shutil.rmtree(path, ignore_errors=True)
    except Exception as e:  # pylint: disable=broad-except
        raise OutputNotWritable(f"cannot clear output {output_dir}: {error_cause(e)}") from None


def finished_shards(output_dir: str, run_folder: str) -> int:
    """How many shards the staging folder ``run_folder`` records as finished (what ``--resume`` keeps)."""
    try:
        return len(storage.listdir(storage.join(output_dir, run_folder, manifest.RUN_DONE_DIR)))
    except Exception:  # pylint: disable=broad-except  # no staging folder yet
        return 0
