"""``convert --sequence``: one ``tf.train.SequenceExample`` per clip folder.

The layout is ``SRC/<class>/<clip>/<frame files>`` (or
``SRC/<split>/<class>/<clip>/<frame files>``; with a manifest, a clip is the
folder of its rows' paths and its label and split are the rows'). Frames
are grouped by clip folder, put in natural name order (``frame_2`` before
``frame_10``) and converted one by one with the same ``convert_image`` as
images, so ``--image-size``, ``--channels`` and ``--format`` apply to every
frame.

The clip is the unit of everything downstream: its split and shuffle key
are seeded hashes of the clip's relpath, the accounting counts clips as
inputs, and a clip with one bad frame is rejected whole, with the frame
named in its ``errors.jsonl`` row. Every frame of a clip must end up with
the same size, channels and format (converting with ``--image-size``
guarantees the size; ``--format jpeg/png/raw`` the format); a clip whose
frames differ is rejected as ``inconsistent_frames``.
"""
from __future__ import annotations

import posixpath
import re
from typing import List, Tuple

import apache_beam as beam

from img2tfrecord.transforms.convert import ERRORS, ConvertImageFn, error_row, is_permanent_read_error, read_file
from img2tfrecord.transforms.discover import LAYOUT_MANIFEST, LAYOUT_SPLIT, PlacementError, placement
from img2tfrecord.transforms.encode import encode_sequence_example
from img2tfrecord.transforms.image import ImageError, ImageOptions, convert_image
from img2tfrecord.transforms.parallel import ParDoInThreads
from img2tfrecord.transforms.sources import read_source
from img2tfrecord.transforms.split import Splits, assign_split, shuffle_key

_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str):
    """Sort key putting ``frame_2`` before ``frame_10`` (digit runs compare as numbers)."""
    parts = _DIGITS.split(name)
    return [int(p) if i % 2 else p.lower() for i, p in enumerate(parts)], name


def _min_depth(layout: str) -> int:
    """Path parts of a frame inside a clip: class/clip/frame, split/class/clip/frame, clip/frame."""
    return {LAYOUT_SPLIT: 4, LAYOUT_MANIFEST: 2}.get(layout, 3)


def clip_key(source, layout: str) -> Tuple[Tuple[str, bool], tuple]:
    """``((clip relpath, True), source)``, or ``((relpath, False), source)`` for a frame outside any clip."""
    relpath = source[1]
    if len(relpath.split("/")) < _min_depth(layout):
        return (relpath, False), source
    return (posixpath.dirname(relpath), True), source


class ConvertClipFn(ConvertImageFn):
    """``((clip, is_clip), frames)`` -> one SequenceExample record, or one error row.

    Thread-safe, like ConvertImageFn (``ParDoInThreads`` runs it).
    """

    @staticmethod
    def _reject(path: str, relpath: str, reason: str, message: str):
        return beam.pvalue.TaggedOutput(ERRORS, error_row(path, relpath, reason, message))

    def process(self, element, label_names: List[str]):
        (clip, is_clip), frames = element
        frames = sorted(frames, key=lambda s: natural_key(posixpath.basename(s[1])))
        first = frames[0]
        clip_path = posixpath.dirname(first[0])
        try:
            split_folder, class_name = placement(first, self._layout)
        except PlacementError as e:
            yield self._reject(first[0], first[1], e.reason, str(e))
            return
        if not is_clip:
            yield self._reject(
                first[0], first[1], "no_clip_folder", f"{first[1]!r} is not inside a clip folder SRC/<class>/<clip>/"
            )
            return
        for source in frames[1:]:
            if placement(source, self._layout) != (split_folder, class_name):
                yield self._reject(
                    source[0], clip, "inconsistent_clip",
                    f"frame {posixpath.basename(source[1])}: its label/split differ from the clip's other frames",
                )
                return
        converted = []
        for source in frames:
            frame = posixpath.basename(source[1])
            try:
                data = read_source(source, self._options.max_file_bytes, read_file)
                converted.append(convert_image(data, self._options))
            except ImageError as e:
                yield self._reject(source[0], clip, e.reason, f"frame {frame}: {e.message}")
                return
            except Exception as e:  # pylint: disable=broad-except
                if not is_permanent_read_error(e):
                    raise  # a transient fault: the runner retries the bundle
                yield self._reject(source[0], clip, "unreadable", f"frame {frame}: {type(e).__name__}: {e}")
                return
        shape = lambda image: (image.width, image.height, image.channels, image.format)  # noqa: E731
        for source, image in zip(frames, converted):
            if shape(image) != shape(converted[0]):
                w, h, c, f = shape(image)
                w0, h0, c0, f0 = shape(converted[0])
                yield self._reject(
                    source[0], clip, "inconsistent_frames",
                    f"frame {posixpath.basename(source[1])} is {w}x{h}x{c} {f}, the first frame {w0}x{h0}x{c0} {f0} "
                    f"(convert with --image-size and a fixed --format)",
                )
                return
        ids = self._label_ids(label_names)
        if class_name is not None and class_name not in ids:
            yield self._reject(clip_path, clip, "unknown_class", f"class {class_name!r} is not in the label map")
            return
        split = split_folder or assign_split(clip, self._seed, self._splits)
        yield split, shuffle_key(clip, self._seed), class_name, encode_sequence_example(
            converted, ids.get(class_name), class_name, clip
        )


class ConvertClips(beam.PTransform):
    """Work items (frames) -> ``{"records", "errors", "inputs"}``; ``inputs`` has one element per clip.

    A frame outside any clip folder is an input of its own (rejected).
    """

    def __init__(self, options: ImageOptions, layout: str, splits: Splits, seed: int, threads: int, label_names):
        super().__init__()
        self._fn = ConvertClipFn(options, layout, splits, seed)
        self._layout = layout
        self._threads = threads
        self._label_names = label_names

    def expand(self, frames):
        clips = (
            frames
            | "KeyByClip" >> beam.Map(clip_key, self._layout)
            | "GroupFrames" >> beam.GroupByKey()
        )
        converted = clips | "ConvertClip" >> ParDoInThreads(
            self._fn,
            threads=self._threads,
            errors_tag=ERRORS,
            main="records",
            label_names=beam.pvalue.AsSingleton(self._label_names),
        )
        return {"records": converted.records, ERRORS: converted[ERRORS], "inputs": clips}
