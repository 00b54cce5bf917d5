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
from typing import Tuple

import apache_beam as beam

from img2tfrecord.transforms.converter import ERRORS, ClipConverter
from img2tfrecord.transforms.image import ImageOptions
from img2tfrecord.transforms.layout import LAYOUT_MANIFEST, LAYOUT_SPLIT
from img2tfrecord.transforms.parallel import ConvertInParallel
from img2tfrecord.transforms.shuffle import ShuffleItems
from img2tfrecord.transforms.split import Splits


def _min_depth(layout: str) -> int:
    """Path parts of a frame inside a clip: class/clip/frame, split/class/clip/frame, clip/frame."""
    return {LAYOUT_SPLIT: 4, LAYOUT_MANIFEST: 2}.get(layout, 3)


def clip_key(source, layout: str) -> Tuple[Tuple[str, bool], tuple]:
    """``((clip relpath, True), source)``, or ``((relpath, False), source)`` for a frame outside any clip."""
    relpath = source[1]
    if len(relpath.split("/")) < _min_depth(layout):
        return (relpath, False), source
    return (posixpath.dirname(relpath), True), source


def clip_relpath(element) -> str:
    """The relpath a clip's record is keyed by: its folder."""
    (clip, _), _ = element
    return clip


class ConvertClips(beam.PTransform):
    """Work items (frames) -> ``{"records", "errors", "inputs"}``; ``inputs`` has one element per clip.

    A frame outside any clip folder is an input of its own (rejected).
    """

    def __init__(
        self, options: ImageOptions, layout: str, splits: Splits, seed: int, processes: int, label_names, buckets: int,
    ):
        super().__init__()
        self._seed = seed
        self._buckets = buckets
        self._converter = ClipConverter(options, layout, splits, seed)
        self._layout = layout
        self._processes = processes
        self._label_names = label_names

    def expand(self, frames):
        clips = (
            frames
            | "KeyByClip" >> beam.Map(clip_key, self._layout)
            | "GroupFrames" >> beam.GroupByKey()
        )
        converted = (
            clips
            | "ShuffleClips" >> ShuffleItems(self._seed, self._buckets, clip_relpath)
            | "ConvertClip"
            >> ConvertInParallel(
                self._converter,
                processes=self._processes,
                batch_size=1,  # a clip is many frames: one clip per task
                label_names=beam.pvalue.AsSingleton(self._label_names),
            )
        )
        return {"records": converted.records, ERRORS: converted[ERRORS], "inputs": clips}
