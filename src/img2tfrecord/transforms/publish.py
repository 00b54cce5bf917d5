"""The publication of a run: its files moved from its staging folder into the output, and the files it writes
there, undone as a whole when it fails part way (``FinalizeOutput``): a failed run leaves its staging folder
and, in the output, what was there before it.

Moves are renames on any Beam filesystem (a folder is moved file by file); a file of the output a move
replaces (an append's new ``transform_fn/``) is first moved aside into the staging folder.
"""

from __future__ import annotations

import logging
import os
import posixpath
from typing import Dict, List, Mapping, Tuple

from apache_beam.io.filesystems import FileSystems

from img2tfrecord import storage
from img2tfrecord.schemas import output_files

_REPLACED_DIR = "replaced"  # in the staging folder: what a publication moved aside


def _make_parent(path: str) -> None:
    folder = path.rsplit("/", 1)[0]
    if "://" not in folder and not FileSystems.exists(folder):
        FileSystems.mkdirs(folder)


def _rename(source: str, target: str) -> None:
    _make_parent(target)
    FileSystems.rename([source], [target])


def _remove_if_empty(folder: str, output_dir: str) -> None:
    """Remove a local folder below ``output_dir`` that a move made and its undo left empty (``index/``)."""
    if "://" in folder or not folder.startswith(output_dir.rstrip("/") + "/"):
        return
    try:
        os.rmdir(folder)
    except OSError:  # not empty, or gone
        pass


def write_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary name, so readers never see half a file (nor the temporary
    one when the write fails or a stop signal lands in it, before or after the old file is replaced)."""
    directory, name = path.rsplit("/", 1)
    tmp = f"{directory}/{output_files.TEMP_PREFIXES[1]}{name}"
    try:
        with FileSystems.create(tmp) as f:
            f.write(text.encode("utf-8"))
        if FileSystems.exists(path):
            FileSystems.delete([path])
        FileSystems.rename([tmp], [path])
    except BaseException:  # a full disk, or a stop: no temporary file is left in the output
        try:
            if FileSystems.exists(tmp):
                FileSystems.delete([tmp])
        except Exception as e:  # pylint: disable=broad-except
            logging.warning("could not remove %s: %s", tmp, e)
        raise


class Publication:
    """What a run put into ``output_dir`` from its staging folder ``run_dir``, to :meth:`undo` on failure."""

    def __init__(self, run_dir: str, output_dir: str):
        self._run_dir = run_dir
        self._output_dir = output_dir
        self._moved: List[Tuple[str, str]] = []  # (from, to), in order
        self._written: List[str] = []

    def move(self, staged: str, name: str) -> None:
        """Move ``staged`` to ``name`` in the output (already there, ``staged`` gone: a retried publication)."""
        final = FileSystems.join(self._output_dir, name)
        if not FileSystems.exists(staged):
            if not FileSystems.exists(final):
                raise FileNotFoundError(f"a file of the run is missing from its staging folder: {staged}")
            return
        if FileSystems.exists(final):
            self._set_aside(name)
        _rename(staged, final)
        self._moved.append((staged, final))

    def move_tree(self, staged: str, name: str) -> None:
        """Move the folder ``staged`` to ``name`` in the output, replacing what is there."""
        files = [relative for relative, _ in storage.walk_files(staged)]
        if not files:
            return
        for relative, _ in list(storage.walk_files(FileSystems.join(self._output_dir, name))):
            self._set_aside(posixpath.join(name, relative))
        for relative in files:
            self.move(FileSystems.join(staged, relative), posixpath.join(name, relative))

    def write(self, name: str, text: str) -> None:
        """Write ``text`` as ``name`` in the output (whole: a temporary name, then a rename); recorded first, so
        that a write stopped after the old file went is undone too."""
        self._written.append(name)
        write_atomically(FileSystems.join(self._output_dir, name), text)

    def _set_aside(self, name: str) -> None:
        aside = FileSystems.join(self._run_dir, _REPLACED_DIR, name)
        final = FileSystems.join(self._output_dir, name)
        _rename(final, aside)
        self._moved.append((final, aside))

    def undo(self, before: Mapping[str, str]) -> None:
        """Put the output back as it was: written files rewritten as ``before`` holds them (name -> text) or
        removed, moved files moved back. Never raises: what cannot be undone is logged."""
        for name in reversed(self._written):
            path = FileSystems.join(self._output_dir, name)
            try:
                if name in before:
                    write_atomically(path, before[name])
                elif FileSystems.exists(path):
                    FileSystems.delete([path])
            except Exception as e:  # pylint: disable=broad-except  # e.g. the full disk that failed the run
                logging.warning("could not restore %s after the failure: %s", path, e)
        for source, target in reversed(self._moved):
            try:
                _rename(target, source)
                _remove_if_empty(target.rsplit("/", 1)[0], self._output_dir)
            except Exception as e:  # pylint: disable=broad-except
                logging.warning("could not move %s back to %s after the failure: %s", target, source, e)


def analysis_files() -> Dict[str, bool]:
    """What the tf.Transform analysis publishes, by name in the output: True for a folder."""
    return {
        output_files.TRANSFORM_FN_DIR: True,
        output_files.TRANSFORMED_METADATA_DIR: True,
        posixpath.join(output_files.RAW_METADATA_DIR, output_files.SCHEMA_FILE): False,
        output_files.SCHEMA_FILE: False,
    }
