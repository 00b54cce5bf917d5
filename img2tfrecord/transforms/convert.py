"""The DoFn that turns one source file into one record or one error row."""
from __future__ import annotations

import logging
from typing import Dict, List, Optional

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from img2tfrecord.schemas import labels as label_map
from img2tfrecord.transforms.discover import PlacementError, SourceFile, parse_relpath
from img2tfrecord.transforms.encode import encode_example
from img2tfrecord.transforms.image import ImageError, ImageOptions, convert_image
from img2tfrecord.transforms.split import Splits, assign_split, shuffle_key

ERRORS = "errors"
NAMESPACE = "img2tfrecord"

# Main output element: (split, shuffle key, class name, serialized tf.train.Example).
Record = tuple


def error_row(path: str, relpath: str, reason: str, message: str) -> Dict[str, str]:
    return {"path": path, "relpath": relpath, "reason": reason, "error": message}


def read_file(path: str, limit: int) -> bytes:
    """All bytes of ``path`` on any Beam filesystem; ImageError past ``limit`` bytes."""
    with FileSystems.open(path, compression_type="uncompressed") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ImageError(
            "file_too_large", f"file is over the limit of {limit} bytes (--max-file-mb)"
        )
    return data


class ConvertImageFn(beam.DoFn):
    """SourceFile -> Record, or an error row on the ``errors`` output.

    ``label_names`` (side input) is the sorted class list of the whole input,
    so a class seen only in one split still gets its id from the one list.
    """

    def __init__(self, options: ImageOptions, layout: str, splits: Splits, seed: int):
        self._options = options
        self._layout = layout
        self._splits = splits
        self._seed = seed
        self._written = beam.metrics.Metrics.counter(NAMESPACE, "images_written")
        self._rejected = beam.metrics.Metrics.counter(NAMESPACE, "images_rejected")
        self._ids: Optional[Dict[str, int]] = None
        self._ids_of: Optional[int] = None

    def _label_ids(self, names: List[str]) -> Dict[str, int]:
        if self._ids is None or self._ids_of != id(names):
            self._ids, self._ids_of = label_map.label_ids(names), id(names)
        return self._ids

    def _reject(self, path: str, relpath: str, reason: str, message: str):
        self._rejected.inc()
        beam.metrics.Metrics.counter(NAMESPACE, f"rejected_{reason}").inc()
        return beam.pvalue.TaggedOutput(ERRORS, error_row(path, relpath, reason, message))

    def process(self, source: SourceFile, label_names: List[str]):
        path, relpath, _ = source
        try:
            split_folder, class_name = parse_relpath(relpath, self._layout)
        except PlacementError as e:
            yield self._reject(path, relpath, e.reason, str(e))
            return
        try:
            data = read_file(path, self._options.max_file_bytes)
            image = convert_image(data, self._options)
        except ImageError as e:
            yield self._reject(path, relpath, e.reason, e.message)
            return
        except (OSError, IOError) as e:
            yield self._reject(path, relpath, "unreadable", f"{type(e).__name__}: {e}")
            return
        ids = self._label_ids(label_names)
        if class_name not in ids:  # the file appeared after classes were listed
            yield self._reject(path, relpath, "unknown_class", f"class {class_name!r} is not in the label map")
            return
        split = split_folder or assign_split(relpath, self._seed, self._splits)
        self._written.inc()
        yield split, shuffle_key(relpath, self._seed), class_name, encode_example(
            image, ids[class_name], class_name, relpath
        )
