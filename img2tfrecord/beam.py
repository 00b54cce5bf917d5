"""Composable PTransforms for your own Beam pipeline: image references in, ``tf.train.Example`` records out.

``ImagesToExamples`` converts a ``PCollection`` of image references — :class:`ImageRef` or dicts with
the keys ``uri`` and ``label`` (``path`` is taken for ``uri``) — read from whatever your pipeline reads
(a BigQuery table, a Parquet file, an upstream join), with ``convert``'s image options, its seeded
splits and its class ids computed inside the graph::

    converted = refs | img2tfrecord.beam.ImagesToExamples(image_size=224, splits="train=0.9,test=0.1", seed=42)
    converted["examples"]   # ConvertedExample(split, class_name, example): the serialized tf.train.Example
    converted["rejected"]   # one errors.jsonl row per reference that could not be read, decoded or placed
    converted["labels"]     # one element: the sorted class names; class id i is labels[i]

A record is byte for byte the one ``convert --input refs.csv`` writes for the same reference, options and
seed, when ``refs.csv`` names the same URIs (absolute, outside the CSV's folder, or relative to ``root``).
Writing shards is then yours, e.g. per split with ``beam.io.WriteToTFRecord``.
"""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Union

import apache_beam as beam

from img2tfrecord import api
from img2tfrecord.conversion.converter import ImageConverter
from img2tfrecord.conversion.sharding import DEFAULT_SPLIT, parse_splits
from img2tfrecord.model import ERRORS, ErrorRow, Record, RowPlacement, WorkItem, error_row
from img2tfrecord.sources.layout import LAYOUT_MANIFEST
from img2tfrecord.sources.manifests import label_problem, relpath_below
from img2tfrecord.transforms.discover import DiscoverClasses

# The options that shape a record; the rest of convert's options are about the output folder.
OPTIONS = (
    "image_size",
    "resize",
    "channels",
    "format",
    "quality",
    "max_pixels",
    "max_file_mb",
    "decode_timeout_s",
    "splits",
    "seed",
)
REJECTED = "rejected"


class ImageRef(NamedTuple):
    """One image to convert: a URI on any Beam filesystem and its class name (an int is taken as its text)."""

    uri: str
    label: Optional[Union[str, int]] = None


class ConvertedExample(NamedTuple):
    """A converted image: its split, its class name (None when unlabeled) and the serialized record."""

    split: str
    class_name: Optional[str]
    example: bytes


def reference_item(
    ref: Union[ImageRef, Dict[str, Any]], root: Optional[str] = None, labeled: bool = True
) -> Union[WorkItem, ErrorRow]:
    """The work item of an image reference, or the error row that says why it is none.

    Its relpath (what its split, its record's name and key come from) is the URI below ``root``, else
    the whole URI. ``labeled`` False: labels are ignored and records have no label features.
    """
    if isinstance(ref, dict):
        uri, label = ref.get("uri", ref.get("path")), ref.get("label")
    elif isinstance(ref, ImageRef):
        uri, label = ref.uri, ref.label
    else:
        return error_row(repr(ref)[:200], "", "bad_reference", f"not an ImageRef or a dict: {type(ref).__name__}")
    if not isinstance(uri, str) or not uri:
        return error_row(repr(ref)[:200], "", "bad_reference", "the reference has no uri")
    relpath = relpath_below(root, uri) if root else uri
    if not labeled:
        return WorkItem(uri, relpath, 0, row=RowPlacement(None, None))
    if label is not None and (isinstance(label, bool) or not isinstance(label, (str, int))):
        return error_row(uri, relpath, "bad_label", f"label {label!r} is not a string or an integer")
    name = "" if label is None else str(label)
    problem = label_problem(name)  # as a manifest row's label
    if problem:
        return error_row(uri, relpath, *problem)
    return WorkItem(uri, relpath, 0, row=RowPlacement(None, name))


class _ToItems(beam.DoFn):
    def __init__(self, root: Optional[str], labeled: bool):
        self._root = root
        self._labeled = labeled

    def process(self, ref):
        item = reference_item(ref, self._root, self._labeled)
        if isinstance(item, WorkItem):
            yield item
        else:
            yield beam.pvalue.TaggedOutput(REJECTED, item)


class _Convert(beam.DoFn):
    def __init__(self, converter: ImageConverter):
        self._converter = converter

    def process(self, item: WorkItem, label_names: List[str]):
        tag, value = self._converter(item, label_names)
        if tag == ERRORS:
            yield beam.pvalue.TaggedOutput(REJECTED, value)
        else:
            assert isinstance(value, Record)
            yield ConvertedExample(value.split, value.class_name, value.example)


class ImagesToExamples(beam.PTransform):
    """Image references -> ``examples`` (:class:`ConvertedExample`), ``rejected`` (error rows) and ``labels``.

    Keywords are ``convert``'s options that shape a record (:data:`OPTIONS`, with the same names,
    defaults and checks: a bad value raises ``img2tfrecord.UsageError`` when the transform is built).
    ``root``: relpaths are URIs below it (else the whole URI); ``labeled`` False: records without label
    features (as a manifest without a label column). Every reference comes out exactly once, as an
    example or a rejected row: one that is not a reference (no ``uri``), has no label or a label that
    is not a string or an int is a row with reason ``bad_reference``, ``missing_label`` or
    ``bad_label``, never an exception. Returns a dict of the three PCollections.
    """

    def __init__(self, *, root: Optional[str] = None, labeled: bool = True, **options: Any):
        super().__init__()
        ns = api.parse_options(options, allowed=OPTIONS)
        try:
            splits = parse_splits(ns.splits) if ns.splits is not None else ((DEFAULT_SPLIT, 1.0),)
        except ValueError as e:
            raise api.UsageError(f"--splits: {e}") from None
        self._converter = ImageConverter(api.image_options(ns), LAYOUT_MANIFEST, splits, ns.seed)
        self._root = root
        self._labeled = labeled

    def expand(self, refs):
        parsed = refs | "ToItems" >> beam.ParDo(_ToItems(self._root, self._labeled)).with_outputs(
            REJECTED, main="items"
        )
        labels = parsed.items | "ClassIds" >> DiscoverClasses(LAYOUT_MANIFEST)
        converted = parsed.items | "Convert" >> beam.ParDo(
            _Convert(self._converter), beam.pvalue.AsSingleton(labels)
        ).with_outputs(REJECTED, main="examples")
        rejected = (parsed[REJECTED], converted[REJECTED]) | "Rejected" >> beam.Flatten()
        return {"examples": converted.examples, "rejected": rejected, "labels": labels}
