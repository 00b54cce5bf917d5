"""Composable PTransforms for your own Beam pipeline: image references in, ``tf.train.Example`` records out.

``ImagesToTFRecords(output, ...)`` writes a complete output folder from a ``PCollection`` of image
references, as ``convert`` does: shards, index files, ``dataset.json``, ``labels.txt``, ``errors.jsonl``,
TFDS metadata and ``_SUCCESS`` last, with class ids and shard counts computed inside the graph::

    refs | img2tfrecord.beam.ImagesToTFRecords("gs://bucket/records", image_size=224, splits="train=0.9,test=0.1")

``ImagesToExamples`` converts a ``PCollection`` of image references — :class:`ImageRef` or dicts with
the keys ``uri`` and ``label`` (``path`` is taken for ``uri``) — read from whatever your pipeline reads
(a BigQuery table, a Parquet file, an upstream join), with ``convert``'s image options, its seeded
splits and its class ids computed inside the graph::

    converted = refs | img2tfrecord.beam.ImagesToExamples(image_size=224, splits="train=0.9,test=0.1", seed=42)
    converted["examples"]   # ConvertedExample(split, class_name, example, key): the serialized tf.train.Example
    converted["rejected"]   # one errors.jsonl row per reference that could not be read, decoded or placed
    converted["labels"]     # one element: the sorted class names; class id i is labels[i]

and ``ExamplesToTFRecords(output, split_names, seed=..., num_shards=...)`` writes such records (filtered
or joined as you like) into each split's shards and index files, placed and ordered as ``convert``
places them.

A record is byte for byte the one ``convert --input refs.csv`` writes for the same reference, options and
seed, when ``refs.csv`` names the same URIs (absolute, outside the CSV's folder, or relative to ``root``).
"""

from img2tfrecord.beam.examples import OPTIONS, ConvertedExample, ImagesToExamples
from img2tfrecord.beam.folders import OUTPUT_OPTIONS, ImagesToTFRecords
from img2tfrecord.beam.shards import ExamplesToTFRecords
from img2tfrecord.sources.references import ImageRef

__all__ = [
    "OPTIONS",
    "OUTPUT_OPTIONS",
    "ConvertedExample",
    "ExamplesToTFRecords",
    "ImageRef",
    "ImagesToExamples",
    "ImagesToTFRecords",
]
