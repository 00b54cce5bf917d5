"""Files on any filesystem Beam knows: local paths with the standard library, the rest through Beam.

The one filesystem facade of the readers, ``inspect``, ``verify``, ``report``
and the tf.Transform export: a path with a scheme (``gs://``, ``s3://``,
``hdfs://``, ...) goes through ``apache_beam.io.filesystems.FileSystems``,
imported on first use, so reading a local output never loads Beam (nor
TensorFlow). Object stores have no directories: a "directory" there is a
prefix that some object starts with.

Beam's filesystems take their settings (``--s3_endpoint_url``,
``--azure_connection_string``, ...) from pipeline options: a run names them
once (:func:`use_pipeline_options`), and they hold for every remote path of
this process and of the processes it spawns; without any, each filesystem
reads the standard environment (``AWS_*`` and profiles,
``AZURE_STORAGE_CONNECTION_STRING``, Google's application default credentials).
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import shutil
import sys
from typing import Any, BinaryIO, Iterator, List, Optional, Sequence, Tuple, cast

from img2tfrecord import beam_filesystem_fixes

_READ_BUFFER = 1 << 20
_COPY_CHUNK = 8 << 20
# Beam's options of the run (a JSON list of flags), inherited by the processes it spawns.
PIPELINE_OPTIONS_ENV = "IMG2TFRECORD_PIPELINE_OPTIONS"
_applied: Optional[Tuple[str, ...]] = None  # the flags last given to Beam's FileSystems by this module


def is_remote(path: str) -> bool:
    """True for a path with a scheme (``gs://...``): Beam's FileSystems opens it."""
    return "://" in path


def use_pipeline_options(args: Sequence[str]) -> None:
    """Beam's options ``args`` (flags) for every remote path this process, and the processes it spawns, open
    from now on: the filesystems' settings (``--s3_endpoint_url``, ...) of the run, at launch as in its job."""
    os.environ[PIPELINE_OPTIONS_ENV] = json.dumps([str(arg) for arg in args])
    if "apache_beam.io.filesystems" in sys.modules:  # loaded already: set now for its direct users too
        beam_filesystems()


def _wanted_args() -> Tuple[str, ...]:
    try:
        return tuple(str(arg) for arg in json.loads(os.environ.get(PIPELINE_OPTIONS_ENV, "[]")))
    except ValueError:
        return ()


def pipeline_options() -> Any:
    """The ``PipelineOptions`` Beam's filesystems open remote paths with here (empty ones where none are set)."""
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.options.value_provider import RuntimeValueProvider

    FileSystems = beam_filesystems()
    current = getattr(FileSystems, "_pipeline_options", None) or RuntimeValueProvider.runtime_options
    if isinstance(current, dict):  # a worker's runtime options
        return PipelineOptions.from_dictionary(current)
    return current if current is not None else PipelineOptions([])


def beam_filesystems() -> Any:
    """Beam's ``FileSystems``, imported on first use: code that may touch a local path only never loads Beam.

    Its options are the run's (:func:`use_pipeline_options`); where none were named, empty options unless
    a pipeline or a worker set its own, so that every filesystem reads the standard environment.
    """
    global _applied
    from apache_beam.io.filesystems import FileSystems

    beam_filesystem_fixes.apply()
    wanted = _wanted_args()
    if _applied != wanted:
        if wanted or getattr(FileSystems, "_pipeline_options", None) is None:
            FileSystems.set_options(_parse(wanted))
        _applied = wanted
    return FileSystems


def _parse(args: Tuple[str, ...]) -> Any:
    """``PipelineOptions(args)`` without Beam's warning about the flags that are not its own."""
    from apache_beam.options.pipeline_options import PipelineOptions

    beam_log = logging.getLogger("apache_beam.options.pipeline_options")
    disabled, beam_log.disabled = beam_log.disabled, True
    try:
        return PipelineOptions(list(args))
    finally:
        beam_log.disabled = disabled


def _uncompressed() -> str:
    from apache_beam.io.filesystem import CompressionTypes

    return CompressionTypes.UNCOMPRESSED


def join(directory: str, *names: str) -> str:
    """``directory/name...`` with the separator of the path's filesystem."""
    if is_remote(directory):
        return posixpath.join(directory, *names)
    return os.path.join(directory, *names)


def _prefix(directory: str) -> str:
    return directory if directory.endswith("/") else directory + "/"


def walk_files(directory: str) -> Iterator[Tuple[str, int]]:
    """``(path relative to directory, size)`` of every file under ``directory``, recursively (metadata only)."""
    if not is_remote(directory):
        for root, _, files in os.walk(directory):
            for name in files:
                path = os.path.join(root, name)
                yield os.path.relpath(path, directory).replace(os.sep, "/"), os.path.getsize(path)
        return
    prefix = _prefix(directory)
    for result in beam_filesystems().match([prefix + "**"]):
        for m in result.metadata_list:
            if m.path.startswith(prefix) and not m.path.endswith("/"):
                yield m.path[len(prefix) :], m.size_in_bytes


def exists(path: str) -> bool:
    """True when ``path`` is a file (or, locally, a folder)."""
    return beam_filesystems().exists(path) if is_remote(path) else os.path.exists(path)


def isdir(path: str) -> bool:
    """True for a local folder, or a remote prefix that at least one object starts with."""
    if not is_remote(path):
        return os.path.isdir(path)
    result = beam_filesystems().match([_prefix(path) + "**"], limits=[1])[0]
    return bool(result.metadata_list)


def listdir(path: str) -> List[str]:
    """Sorted base names in a directory (subdirectories without a trailing slash)."""
    if not is_remote(path):
        return sorted(os.listdir(path))
    return sorted({relative.split("/", 1)[0] for relative, _ in walk_files(path)})


def file_size(path: str) -> int:
    """The size of a file in bytes; FileNotFoundError when there is none."""
    if not is_remote(path):
        return os.path.getsize(path)
    found = [m for m in beam_filesystems().match([path])[0].metadata_list if m.path == path]
    if not found:
        raise FileNotFoundError(f"no such file: {path}")
    return int(found[0].size_in_bytes)


def open_binary(path: str) -> BinaryIO:
    """``path`` opened for seekable binary reading, never decompressed behind the caller's back."""
    if is_remote(path):
        return cast(BinaryIO, beam_filesystems().open(path, compression_type=_uncompressed()))
    return open(path, "rb", buffering=_READ_BUFFER)


def create_binary(path: str) -> BinaryIO:
    """``path`` opened for binary writing (parent folders made); the file appears complete when closed."""
    if is_remote(path):
        return cast(BinaryIO, beam_filesystems().create(path, compression_type=_uncompressed()))
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    return open(path, "wb")


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path``; locally through a temporary file renamed into place."""
    if is_remote(path):
        with create_binary(path) as f:
            f.write(data)
        return
    temp = f"{path}.tmp-{os.getpid()}"
    with create_binary(temp) as f:
        f.write(data)
    os.replace(temp, path)


def read_bytes(path: str) -> bytes:
    """The whole file at ``path`` (local or on any Beam filesystem)."""
    with open_binary(path) as f:
        return f.read()


def read_text(path: str) -> str:
    """A whole file as UTF-8 text."""
    return read_bytes(path).decode("utf-8")


def copy_tree(source: str, destination: str) -> List[str]:
    """Copy every file under ``source`` to the same relative path under ``destination``; returns them.

    Source and destination may be on different filesystems (a worker's local
    folder into a bucket): files are streamed, not renamed. Local empty folders
    are recreated; object stores have none to recreate.
    """
    copied = []
    for relative, _ in sorted(walk_files(source)):
        target = join(destination, *relative.split("/"))
        with open_binary(join(source, *relative.split("/"))) as src, create_binary(target) as dst:
            shutil.copyfileobj(src, dst, _COPY_CHUNK)
        copied.append(target)
    if not is_remote(source) and not is_remote(destination):
        for root, folders, _ in os.walk(source):
            for name in folders:
                relative = os.path.relpath(os.path.join(root, name), source)
                os.makedirs(os.path.join(destination, relative), exist_ok=True)
    return copied
