"""Checks on the output location made by the launcher before a pipeline starts."""

from __future__ import annotations

import json
import os
import posixpath
import shutil
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple

from img2tfrecord import storage
from img2tfrecord.pipeline.output_errors import OutputNotWritable, error_cause
from img2tfrecord.pipeline.plan_model import run_difference
from img2tfrecord.schemas import dataset_json, output_files

if TYPE_CHECKING:
    from img2tfrecord.pipeline.lock import OutputLock


class OutputNotEmpty(ValueError):
    pass


class OutputChanged(ValueError):
    """The output's committed state changed between the run's plan and its lock (another run finished there
    meanwhile): a usage error, nothing was changed."""


class AlreadyComplete(Exception):
    """``--resume`` of a run whose output is already finished: nothing to do."""


def check_writable(output_dir: str) -> None:
    """Create ``output_dir`` (with its parents) and write, then delete, a small file in it.

    OutputNotWritable when that fails: a read-only or full filesystem, a
    missing permission, a file where a folder should be. Root may write
    where permission bits say no; the filesystem still refuses a read-only
    mount or a path through a file.
    """
    probe = storage.join(output_dir, output_files.TEMP_PREFIXES[1] + "write-check")
    try:
        filesystems = storage.beam_filesystems()
        with filesystems.create(probe) as f:
            f.write(b"img2tfrecord write check\n")
        filesystems.delete([probe])
    except Exception as e:  # pylint: disable=broad-except
        raise OutputNotWritable(f"output {output_dir} is not writable: {error_cause(e)}") from None


def list_output(output_dir: str) -> List[str]:
    """Paths of every file under ``output_dir`` (empty when it does not exist), except the run lock.

    The lock (``output_files.LOCK_FILE``, ``pipeline/lock.py``) says who writes
    the output, not what it holds: it never makes an output non-empty.
    """
    try:
        found = list(storage.walk_files(output_dir))
    except Exception:  # a missing directory is an empty output
        return []
    return [storage.join(output_dir, relpath) for relpath, _ in found if relpath != output_files.LOCK_FILE]


def _relative(base: str, path: str) -> str:
    return path[len(base) :] if path.startswith(base) else posixpath.basename(path)


def _run_folders(output_dir: str, existing: List[str]) -> List[str]:
    """Base names of the run staging folders in an output (files listed, or local empty folders)."""
    base = output_dir.rstrip("/") + "/"
    names = {_relative(base, p).split("/", 1)[0] for p in existing}
    names.update(os.path.basename(p) for p in _temp_folders(output_dir))
    return sorted(n for n in names if n.startswith(output_files.RUN_FOLDER_PREFIX))


def _read_finished(output_dir: str) -> Optional[dataset_json.DatasetManifest]:
    try:
        return dataset_json.loads(storage.read_text(storage.join(output_dir, output_files.MANIFEST_FILE)))
    except Exception:  # pylint: disable=broad-except
        return None


def _read_started(output_dir: str, run_folder: str) -> Optional[Dict[str, Any]]:
    """What the fingerprint of the run that left ``run_folder`` covers (None: not recorded, or unreadable)."""
    try:
        doc = json.loads(storage.read_text(storage.join(output_dir, run_folder, output_files.RUN_STARTED_FILE)))
    except Exception:  # pylint: disable=broad-except
        return None
    return doc if isinstance(doc, dict) else None


def _differs(there: Optional[Mapping[str, Any]], here: Optional[Mapping[str, Any]]) -> str:
    """How an earlier run differs from this one, as a refusal says it (``differently: --seed is 1 here but
    0 there``), or ``with other options, seed or input`` when that cannot be told."""
    found = run_difference(there, here) if there is not None and here is not None else None
    return f"differently: {found}" if found else "with other options, seed or input"


def _committed_generations(doc: Optional[dataset_json.DatasetManifest]) -> List[Tuple[int, str]]:
    return [(g.number, g.created) for g in doc.generations] if doc is not None else []


def check_unchanged(output_dir: str, planned_on: Optional[dataset_json.DatasetManifest]) -> None:
    """``OutputChanged`` unless ``output_dir`` still holds the committed state an append planned on
    (``planned_on``: the finished output's manifest; None: there was no finished output). Called under the
    run's lock, before anything is changed: a plan made before the lock may be out of date."""
    finished = storage.exists(storage.join(output_dir, output_files.SUCCESS_FILE))
    now = _read_finished(output_dir) if finished else None
    if planned_on is None and not finished:
        return
    if planned_on is not None and now is not None:
        if _committed_generations(now) == _committed_generations(planned_on):
            return
        last = now.last_generation
        what = f"another run committed generation {last.number}" if last is not None else "it was rewritten"
    elif planned_on is None:
        what = "another run finished a conversion there"
    else:
        what = "its finished conversion was removed or is being replaced"
    raise OutputChanged(
        f"output {output_dir} changed while this run was starting ({what}); nothing was changed: "
        "run the same command again"
    )


def prepare_output(
    output_dir: str,
    overwrite: bool,
    resume_folder: Optional[str] = None,
    lock: Optional[OutputLock] = None,
    run_doc: Optional[Mapping[str, Any]] = None,
) -> bool:
    """Refuse a non-empty output, or with ``overwrite`` clear what an earlier run left.

    Only files img2tfrecord writes are removed; a directory holding anything
    else is refused even with ``overwrite``, so a mistyped ``--output`` never
    deletes a user's files. With ``resume_folder`` (the base name of this run's
    staging folder, ``output_files.run_folder``), what a killed run of the same
    fingerprint finished is kept: its staging folder, committed shards and
    indexes; anything else it left is cleared. Returns True when there is such
    a run to resume. Raises ``AlreadyComplete`` when the output is a finished
    conversion of this fingerprint, and ``OutputNotEmpty`` (changing nothing)
    when the output belongs to a run of other options, seed or input.

    ``lock`` is this run's lock on the output (``pipeline/lock.py``), acquired
    by the caller: nothing is deleted unless it still holds the output, and a
    stale lock it did not take over (neither flag given) is named in the
    refusal. The lock file itself is never counted or deleted here.
    ``run_doc``: what this run's fingerprint covers (``Plan.fingerprint_doc``), so that a refused
    ``--resume`` names the option (or input) that differs from the earlier run's.
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
    if [_relative(base, p) for p in existing] == [output_files.ERRORS_FILE] and not _temp_folders(output_dir):
        # only the error report of a run that wrote no record: there is no dataset to protect or resume
        if lock is not None:
            lock.ensure_held()
        _clear(output_dir, existing)
        check_writable(output_dir)
        return False
    foreign = [
        rel for rel in (_relative(base, p) for p in existing) if not output_files.is_output_file(rel.split("/", 1)[0])
    ]
    if foreign and (overwrite or resume_folder):
        raise OutputNotEmpty(
            f"output {output_dir} holds files img2tfrecord did not write (e.g. {foreign[0]!r}); "
            "refusing to overwrite it"
        )
    finished = any(posixpath.basename(p) == output_files.SUCCESS_FILE for p in existing)
    if resume_folder:
        if finished:
            done = _read_finished(output_dir)
            if done is not None and done.run_fingerprint == resume_folder[len(output_files.RUN_FOLDER_PREFIX) :]:
                raise AlreadyComplete(f"output {output_dir} already holds this conversion, finished; nothing to resume")
            recorded = {"input": done.input, "options": done.options} if done is not None else None
            raise OutputNotEmpty(
                f"output {output_dir} holds a finished conversion made {_differs(recorded, run_doc)}; "
                "pass --overwrite to replace it"
            )
        others = [r for r in runs if r != resume_folder]
        if others:
            why = _differs(_read_started(output_dir, others[0]), run_doc)
            raise OutputNotEmpty(
                f"cannot resume: the unfinished conversion in {output_dir} was started {why}; "
                "rerun it as it was started, or pass --overwrite to start over"
            )
        resumable = resume_folder in runs
        keep = (resume_folder,) if resumable else ()
        if lock is not None:
            lock.ensure_held()
        published = [p for p in existing if _is_shard_or_index(_relative(base, p))] if resumable else []
        if resume_folder and published:
            _return_to_staging(output_dir, resume_folder, published)
        _clear(
            output_dir,
            [p for p in existing if _relative(base, p).split("/", 1)[0] not in keep and p not in published],
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
    name = rel.split("/", 1)[1] if rel.startswith(output_files.INDEX_DIR + "/") else rel
    if name.endswith(output_files.INDEX_SUFFIX):
        name = name[: -len(output_files.INDEX_SUFFIX)]
    parsed = output_files.parse_shard_file_name(name)
    if parsed is not None:
        return parsed["generation"] >= generation
    return rel in (
        output_files.errors_file(generation),
        output_files.ledger_file(generation),
        output_files.members_file(generation),
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
    leftovers, published = [], []
    for path in existing:
        rel = _relative(base, path)
        top = rel.split("/", 1)[0]
        if resumable and _of_generation(rel, generation) and _is_shard_or_index(rel):
            published.append(path)
        elif top in keep or (resumable and _of_generation(rel, generation)):
            continue
        elif top.startswith(output_files.TEMP_PREFIXES) or _of_generation(rel, generation):
            leftovers.append(path)
    committed = _read_finished(output_dir)
    listed = committed.listed_files() if committed is not None else frozenset()
    touched = sorted(_relative(base, p) for p in leftovers + published if _relative(base, p) in listed)
    if touched:  # generation ``generation`` is committed already: never delete what a manifest lists
        raise OutputChanged(
            f"output {output_dir} already holds generation {generation}, committed by another run "
            f"(e.g. {touched[0]}); nothing was changed: run the same command again"
        )
    lock.ensure_held()
    if resume_folder and published:
        _return_to_staging(output_dir, resume_folder, published)
    _clear(output_dir, leftovers, keep_folders=keep + (output_files.INDEX_DIR, output_files.LEDGER_DIR))
    check_writable(output_dir)
    return resumable


def _is_shard_or_index(rel: str) -> bool:
    return output_files.parse_shard_file_name(rel) is not None or rel.startswith(output_files.INDEX_DIR + "/")


def _return_to_staging(output_dir: str, run_folder: str, paths: List[str]) -> None:
    """Move shards and indexes a stopped run had already moved into the output back into its staging folder
    (``run_folder``'s ``committed/``), where the resumed run commits and publishes them again."""
    base = output_dir.rstrip("/") + "/"
    committed = storage.join(output_dir, run_folder, output_files.RUN_COMMITTED_DIR)
    sources = sorted(paths)
    targets = [storage.join(committed, _relative(base, p)) for p in sources]
    try:
        for target in targets:
            folder = posixpath.dirname(target)
            if not storage.is_remote(folder):
                os.makedirs(folder, exist_ok=True)
        storage.beam_filesystems().rename(sources, targets)
    except Exception as e:  # pylint: disable=broad-except
        raise OutputNotWritable(f"cannot resume in {output_dir}: {error_cause(e)}") from None


def staging_left(output_dir: str) -> List[str]:
    """Paths of the staging files and folders a run left in ``output_dir`` (``output_files.TEMP_PREFIXES``)."""
    base = output_dir.rstrip("/") + "/"
    found = [p for p in list_output(output_dir) if _relative(base, p).startswith(output_files.TEMP_PREFIXES)]
    return found + _temp_folders(output_dir)


def remove_staging(output_dir: str, lock: OutputLock) -> None:
    """Delete the staging a finished run left (an append stopped after publishing its manifest), under ``lock``."""
    lock.ensure_held()
    base = output_dir.rstrip("/") + "/"
    _clear(
        output_dir, [p for p in list_output(output_dir) if _relative(base, p).startswith(output_files.TEMP_PREFIXES)]
    )


def _clear(output_dir: str, paths: List[str], keep_folders: Sequence[str] = ()) -> None:
    """Delete ``paths`` (``_SUCCESS`` first) and the emptied staging folders, except ``keep_folders``."""
    base = output_dir.rstrip("/") + "/"
    # _SUCCESS goes first: an interrupted clean-up never leaves a directory that looks complete.
    paths = sorted(paths, key=lambda p: posixpath.basename(p) != output_files.SUCCESS_FILE)
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
        if name.startswith(output_files.TEMP_PREFIXES) and os.path.isdir(path) and not os.path.islink(path):
            found.append(path)
    return found


def remove_write_staging(output_dir: str) -> None:
    """Delete Beam's write staging folders (``beam-temp-*``) of a run that was stopped.

    Their writes never finalise; a ``--resume``'d run writes those files
    again. The run's own staging folder (``.tmp-run-*``) is kept for it.
    """
    prefix = output_files.TEMP_PREFIXES[0]
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
        return len(storage.listdir(storage.join(output_dir, run_folder, output_files.RUN_DONE_DIR)))
    except Exception:  # pylint: disable=broad-except  # no staging folder yet
        return 0
