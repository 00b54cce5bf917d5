"""``convert --sequence``: one ``tf.train.SequenceExample`` per clip folder.

The layout is ``SRC/<class>/<clip>/<frame files>`` (or
``SRC/<split>/<class>/<clip>/<frame files>``; with a manifest, a clip is the
folder of its rows' paths and its label and split are the rows'). Frames
are grouped by clip folder, put in natural name order (``frame_2`` before
``frame_10``) and converted one by one with the same ``convert_image`` as
images, so ``--image-size``, ``--channels`` and ``--format`` apply to every
frame.

The clip is the unit of everything downstream: it is the work item the
shard step places and converts (``transforms/write_shards.py``), its split, shard
and position are seeded hashes of the clip's relpath, the accounting counts clips as
inputs, and a clip with one bad frame is rejected whole, with the frame
named in its ``errors.jsonl`` row. Every frame of a clip must end up with
the same size, channels and format (converting with ``--image-size``
guarantees the size; ``--format jpeg/png/raw`` the format); a clip whose
frames differ is rejected as ``inconsistent_frames``.
"""

from __future__ import annotations

import apache_beam as beam

from img2tfrecord.model import Clip
from img2tfrecord.sources.clips import clip_key, clip_of


def _clip(element) -> Clip:
    """A grouped clip as the work item ``ClipConverter`` takes (``sources.clips.clip_of``)."""
    key, frames = element
    return clip_of(key, frames)


class GroupClips(beam.PTransform):
    """Frames -> ``Clip`` work items: the inputs of ``--sequence``.

    A frame outside any clip folder is a clip of its own (rejected by the converter).
    """

    def __init__(self, layout: str):
        super().__init__()
        self._layout = layout

    def expand(self, frames):
        return (
            frames
            | "KeyByClip" >> beam.Map(clip_key, self._layout)
            | "GroupFrames" >> beam.GroupByKey()
            | "ClipItem" >> beam.Map(_clip)
        )
