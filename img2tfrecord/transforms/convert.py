"""The DoFn that turns one source file into one record or one error row."""
from __future__ import annotations

import os
import stat
from typing import Dict, List, Optional

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from img2tfrecord.schemas import labels as label_map
from img2tfrecord.transforms.discover import PlacementError, SourceFile, parse_relpath, placement  # noqa: F401
from img2tfrecord.transforms.encode import encode_example
from img2tfrecord.transforms.image import ImageError, ImageOptions, convert_image
from img2tfrecord.transforms.sources import read_source
from img2tfrecord.transforms.split import Splits, assign_split, shuffle_key

ERRORS = "errors"
NAMESPACE = "img2tfrecord"

# Main output element: (split, shuffle key, class name, serialized tf.train.Example).
Record = tuple


def error_row(path: str, relpath: str, reason: str, message: str) -> Dict[str, str]:
    return {"path": path, "relpath": relpath, "reason": reason, "error": message}


def _open_local(path: str, limit: int):
    """A local file opened for reading, refused (ImageError) unless it is a regular file within ``limit``.

    Opened without blocking and checked on the open descriptor: a named pipe
    would block a plain ``open`` forever, and a device (``/dev/zero``) never
    ends. A regular file over the limit is refused without reading it.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ImageError("unreadable", "not a regular file (a named pipe, socket or device)")
        if st.st_size > limit:
            raise ImageError(
                "file_too_large", f"file is {st.st_size} bytes, over the limit of {limit} bytes (--max-file-mb)"
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_file(path: str, limit: int) -> bytes:
    """All bytes of ``path`` on any Beam filesystem; ImageError past ``limit`` bytes."""
    if "://" not in path:
        opened = _open_local(path, limit)
    else:
        opened = FileSystems.open(path, compression_type="uncompressed")
    with opened as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ImageError(
            "file_too_large", f"file is over the limit of {limit} bytes (--max-file-mb)"
        )
    return data


def is_permanent_read_error(e: Exception) -> bool:
    """True for a read failure that retrying cannot fix: the file becomes an ``unreadable`` error row.

    Local files raise OSError (permission denied, gone since the listing,
    I/O error). Cloud storage raises its client's 4xx errors (forbidden, not
    found), except "too many requests", which is transient like any 5xx error,
    lost connection or time-out: those propagate and the runner retries the bundle.
    """
    if isinstance(e, OSError):
        return not isinstance(e, (ConnectionError, TimeoutError))
    try:
        from google.api_core import exceptions as google_errors
    except ImportError:  # pragma: no cover - apache-beam[gcp] is a dependency
        return False
    return isinstance(e, google_errors.ClientError) and not isinstance(e, google_errors.TooManyRequests)


class ConvertImageFn(beam.DoFn):
    """SourceFile -> Record, or an error row on the ``errors`` output.

    ``label_names`` (side input) is the sorted class list of the whole input,
    so a class seen only in one split still gets its id from the one list.
    Thread-safe: ``ParDoInThreads`` calls ``process`` from several threads
    and keeps the Beam counters of its outputs.
    """

    def __init__(self, options: ImageOptions, layout: str, splits: Splits, seed: int):
        self._options = options
        self._layout = layout
        self._splits = splits
        self._seed = seed
        self._ids: Optional[Dict[str, int]] = None
        self._ids_of: Optional[int] = None

    def _label_ids(self, names: List[str]) -> Dict[str, int]:
        if self._ids is None or self._ids_of != id(names):
            self._ids, self._ids_of = label_map.label_ids(names), id(names)
        return self._ids

    def _reject(self, path: str, relpath: str, reason: str, message: str):
        return beam.pvalue.TaggedOutput(ERRORS, error_row(path, relpath, reason, message))

    def process(self, source: SourceFile, label_names: List[str]):
        path, relpath = source[0], source[1]  # archive members and manifest rows carry more (sources.py)
        try:
            split_folder, class_name = placement(source, self._layout)
        except PlacementError as e:
            yield self._reject(path, relpath, e.reason, str(e))
            return
        try:
            data = read_source(source, self._options.max_file_bytes, read_file)
            image = convert_image(data, self._options)
        except ImageError as e:
            yield self._reject(path, relpath, e.reason, e.message)
            return
        except Exception as e:  # pylint: disable=broad-except
            if not is_permanent_read_error(e):
                raise  # a transient fault: the runner retries the bundle
            yield self._reject(path, relpath, "unreadable", f"{type(e).__name__}: {e}")
            return
        ids = self._label_ids(label_names)
        if class_name is not None and class_name not in ids:  # the file appeared after classes were listed
            yield self._reject(path, relpath, "unknown_class", f"class {class_name!r} is not in the label map")
            return
        split = split_folder or assign_split(relpath, self._seed, self._splits)
        yield split, shuffle_key(relpath, self._seed), class_name, encode_example(
            image, ids.get(class_name), class_name, relpath  # class None: an unlabeled manifest row
        )
