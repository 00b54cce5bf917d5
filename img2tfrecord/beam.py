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
    converted["examples"]   # ConvertedExample(split, class_name, example): the serialized tf.train.Example
    converted["rejected"]   # one errors.jsonl row per reference that could not be read, decoded or placed
    converted["labels"]     # one element: the sorted class names; class id i is labels[i]

A record is byte for byte the one ``convert --input refs.csv`` writes for the same reference, options and
seed, when ``refs.csv`` names the same URIs (absolute, outside the CSV's folder, or relative to ``root``);
with ``ImagesToExamples`` writing shards is then yours, e.g. per split with ``beam.io.WriteToTFRecord``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
from typing import Any, List, NamedTuple, Optional, Tuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

import img2tfrecord
from img2tfrecord import api
from img2tfrecord.conversion.converter import Converter, DetectionConverter, ImageConverter
from img2tfrecord.conversion.sharding import DEFAULT_SPLIT, Splits, parse_splits
from img2tfrecord.model import ERRORS, DetectionRecord, Record, WorkItem
from img2tfrecord.option_values import DEFAULT_SHARD_SIZE_MB, TASK_DETECTION
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.schemas import manifest
from img2tfrecord.schemas import transformed as names
from img2tfrecord.schemas.dataset_manifest import Compression, DatasetManifest, RecordType, Task
from img2tfrecord.sources.layout import LAYOUT_DETECTION, LAYOUT_MANIFEST
from img2tfrecord.sources.references import ImageRef, reference_item
from img2tfrecord.transforms.beam_tfrecord_sink import ShardSinks
from img2tfrecord.transforms.discover import DiscoverClasses
from img2tfrecord.transforms.finalize import FinalizeOutput, WriteErrorReport
from img2tfrecord.transforms.shard_counts import CountShards
from img2tfrecord.transforms.shard_writer import ANALYSIS
from img2tfrecord.transforms.shards import WriteShards

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
    "task",
    "require_boxes",
)
REJECTED = "rejected"


class ConvertedExample(NamedTuple):
    """A converted image: its split, its class name (None when unlabeled or detection) and the serialized record."""

    split: str
    class_name: Optional[str]
    example: bytes


class _ToItems(beam.DoFn):
    def __init__(self, root: Optional[str], labeled: bool, detection: bool):
        self._root = root
        self._labeled = labeled
        self._detection = detection

    def process(self, ref):
        item = reference_item(ref, self._root, self._labeled, self._detection)
        if isinstance(item, WorkItem):
            yield item
        else:
            yield beam.pvalue.TaggedOutput(REJECTED, item)


class _Convert(beam.DoFn):
    def __init__(self, converter: Converter[WorkItem]):
        self._converter = converter

    def process(self, item: WorkItem, label_names: List[str]):
        tag, value = self._converter(item, label_names)
        if tag == ERRORS:
            yield beam.pvalue.TaggedOutput(REJECTED, value)
        else:
            assert isinstance(value, (Record, DetectionRecord))
            yield ConvertedExample(value.split, value.class_name, value.example)


def _record_converter(ns: argparse.Namespace, analyze: bool = False) -> Tuple[Converter[WorkItem], Splits]:
    """The converter of parsed record options, and the splits; UsageError for a bad combination."""
    try:
        splits = parse_splits(ns.splits) if ns.splits is not None else ((DEFAULT_SPLIT, 1.0),)
    except ValueError as e:
        raise api.UsageError(f"--splits: {e}") from None
    image = api.image_options(ns)
    if ns.task == TASK_DETECTION:
        return DetectionConverter(image, LAYOUT_DETECTION, splits, ns.seed, ns.require_boxes), splits
    if ns.require_boxes:
        raise api.UsageError("--require-boxes applies to detection: give it with task='detection'")
    sums_split = names.ANALYZED_SPLIT if analyze else None
    exact = bool(getattr(ns, "exact_statistics", False))
    return ImageConverter(image, LAYOUT_MANIFEST, splits, ns.seed, sums_split, exact), splits


def _to_items(converter: Converter[WorkItem], root: Optional[str], labeled: bool) -> _ToItems:
    return _ToItems(root, labeled, isinstance(converter, DetectionConverter))


class ImagesToExamples(beam.PTransform):
    """Image references -> ``examples`` (:class:`ConvertedExample`), ``rejected`` (error rows) and ``labels``.

    Keywords are ``convert``'s options that shape a record (:data:`OPTIONS`, with the same names,
    defaults and checks: a bad value raises ``img2tfrecord.UsageError`` when the transform is built).
    ``root``: relpaths are URIs below it (else the whole URI); ``labeled`` False: records without label
    features (as a manifest without a label column); ``task="detection"``: TF Object Detection API
    records of each reference's boxes (as a manifest of boxes gives them; the label is ignored). Every
    reference comes out exactly once, as an example or a rejected row: one that is not a reference
    (no ``uri``, boxes that are not a list, boxes for a classification record), has no label or a
    label that is not a string or an int is a row with reason ``bad_reference``, ``missing_label`` or
    ``bad_label``, never an exception. Returns a dict of the three PCollections.
    """

    def __init__(self, *, root: Optional[str] = None, labeled: bool = True, **options: Any):
        super().__init__()
        self._converter, _ = _record_converter(api.parse_options(options, allowed=OPTIONS))
        self._root = root
        self._labeled = labeled

    def expand(self, refs):
        to_items = _to_items(self._converter, self._root, self._labeled)
        parsed = refs | "ToItems" >> beam.ParDo(to_items).with_outputs(REJECTED, main="items")
        labels = parsed.items | "ClassIds" >> DiscoverClasses(self._converter.layout)
        converted = parsed.items | "Convert" >> beam.ParDo(
            _Convert(self._converter), beam.pvalue.AsSingleton(labels)
        ).with_outputs(REJECTED, main="examples")
        rejected = (parsed[REJECTED], converted[REJECTED]) | "Rejected" >> beam.Flatten()
        return {"examples": converted.examples, "rejected": rejected, "labels": labels}


# The options that shape the output folder, besides those of a record.
OUTPUT_OPTIONS = (
    "num_shards",
    "shard_size_mb",
    "compression",
    "max_error_rate",
    "analyze",
    "exact_statistics",
    "processes",
    "overwrite",
)
INPUT_DESCRIPTION = "image references of a Beam pipeline"  # dataset.json's input, below ``root`` when given


def _count_one(unused_ref) -> int:
    return 1


def _reason(row) -> str:
    return row["reason"]


class _SplitsOnly(NamedTuple):
    """What the analysis needs to know of the input: its splits and whether records carry labels."""

    split_names: Tuple[str, ...]
    labeled: bool


class ImagesToTFRecords(beam.PTransform):
    """Image references -> a complete output folder at ``output``; returns the one-element ``PCollection`` of
    its :class:`~img2tfrecord.schemas.dataset_manifest.DatasetManifest`.

    Keywords are ``convert``'s options that shape a record (:data:`OPTIONS`) or the output
    (:data:`OUTPUT_OPTIONS`), with the same names, defaults and checks; ``root``, ``labeled`` and
    ``task="detection"`` as for :class:`ImagesToExamples` (detection records are not analysed). The
    output is checked (and with ``overwrite=True`` cleared) when the transform is applied: a
    non-empty output raises ``img2tfrecord.UsageError`` then. Class ids are the sorted class names;
    each split's shard count is ``num_shards``, or its records times a record size estimated from
    the 16 references with the smallest seeded hashes (as ``convert`` samples a manifest) over
    ``shard_size_mb``, so the shards are byte for byte those of ``convert --input refs.csv``.
    ``processes``: conversion processes per worker (default: the usable cores on a local runner, 1 on
    a distributed one). The pipeline fails, leaving no ``_SUCCESS``, when no record was written (an
    empty input too) and, with the folder finished, past ``max_error_rate``.
    """

    def __init__(self, output: str, *, root: Optional[str] = None, labeled: bool = True, **options: Any):
        super().__init__()
        allowed = OPTIONS + OUTPUT_OPTIONS
        ns = api.parse_options(options, allowed=allowed, input=root or INPUT_DESCRIPTION, output=output)
        if not ns.analyze and ns.exact_statistics:
            raise api.UsageError("--exact-statistics applies to the analysis, which --no-analyze skips")
        self._detection = ns.task == TASK_DETECTION
        if self._detection and ns.analyze:
            logging.info("detection: no tf.Transform analysis (its features are those of classification records)")
        self._analyze = ns.analyze and not self._detection
        self._converter, self._splits = _record_converter(ns, analyze=self._analyze)
        self._ns = ns
        self._root = root
        self._labeled = labeled or self._detection
        self._output = output.rstrip("/") if "://" in output else os.path.abspath(output)

    def _config(self, processes: int) -> ConvertConfig:
        ns = self._ns
        return ConvertConfig(
            input=self._root or INPUT_DESCRIPTION,
            output=self._output,
            image=self._converter.options,
            splits=self._splits if ns.splits is not None else None,
            seed=ns.seed,
            shard_size_mb=ns.shard_size_mb or DEFAULT_SHARD_SIZE_MB,
            num_shards=ns.num_shards,
            compression=ns.compression,
            overwrite=ns.overwrite,
            analyze=self._analyze,
            exact_statistics=ns.exact_statistics,
            processes=processes,
            max_error_rate=ns.max_error_rate,
            task=ns.task,
            require_boxes=ns.require_boxes,
        )

    def _fingerprint(self, config: ConvertConfig) -> str:
        doc = {
            "tool_version": img2tfrecord.__version__,
            "input": config.input,
            "output": config.output,
            "options": config.options_json(),
            "labeled": self._labeled,
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode("utf-8")).hexdigest()[:16]

    def expand(self, refs):
        from img2tfrecord.pipeline.outputs import OutputNotEmpty, OutputNotWritable, prepare_output
        from img2tfrecord.pipeline.run import default_processes

        config = self._config(self._ns.processes or default_processes(refs.pipeline.options))
        try:
            prepare_output(config.output, config.overwrite)
        except (OutputNotEmpty, OutputNotWritable) as e:
            raise api.UsageError(str(e)) from None
        split_names = tuple(name for name, _ in self._splits)
        fingerprint = self._fingerprint(config)
        run_dir = FileSystems.join(config.output, manifest.run_folder(fingerprint))

        to_items = _to_items(self._converter, self._root, self._labeled)
        parsed = refs | "ToItems" >> beam.ParDo(to_items).with_outputs(REJECTED, main="items")
        items = parsed.items
        labels = items | "ClassIds" >> DiscoverClasses(self._converter.layout)
        num_shards = items | "ShardCounts" >> CountShards(
            self._converter, split_names, config.seed, config.shard_size_mb, config.num_shards
        )
        written = items | "WriteShards" >> WriteShards(
            self._converter,
            ShardSinks(config.output, config.compression, FileSystems.join(run_dir, manifest.RUN_SHARDS_DIR)),
            run_dir,
            config.seed,
            config.processes,
            beam.pvalue.AsSingleton(labels),
            beam.pvalue.AsSingleton(num_shards),
        )
        errors = (written[ERRORS], parsed[REJECTED]) | "AllErrors" >> beam.Flatten()
        reason_counts = errors | "Reason" >> beam.Map(_reason) | "CountPerReason" >> beam.combiners.Count.PerElement()
        error_files = errors | "ErrorReport" >> WriteErrorReport(config.output)
        num_inputs = refs | "InputUnits" >> beam.Map(_count_one) | "CountInputs" >> beam.combiners.Count.Globally()
        analysis = {}
        if config.analyze:
            from img2tfrecord.transforms.analyze import analyze_train_split  # imports TensorFlow

            statistics = analyze_train_split(written[ANALYSIS], labels, config, _SplitsOnly(split_names, self._labeled))
            if statistics is not None:
                analysis["statistics"] = beam.pvalue.AsSingleton(statistics)
        template = DatasetManifest(
            tool_version=img2tfrecord.__version__,
            created="",
            input=config.input,
            options=config.options_json(),
            compression=Compression(config.compression),
            labels=(),
            splits={},
            accounting=None,
            record_type=RecordType.EXAMPLE,
            task=Task.DETECTION if self._detection else Task.CLASSIFICATION,
            labeled=self._labeled,
            run_fingerprint=fingerprint,
        )
        return (
            refs.pipeline
            | "Start" >> beam.Create([None], reshuffle=False)
            | "FinalizeOutput"
            >> beam.ParDo(
                FinalizeOutput(config.output, template, list(split_names), run_dir, config.max_error_rate),
                label_names=beam.pvalue.AsSingleton(labels),
                shards=beam.pvalue.AsList(written["shards"]),
                rejected_counts=beam.pvalue.AsList(reason_counts),
                num_inputs=beam.pvalue.AsSingleton(num_inputs),
                num_skipped=0,
                unused_error_files=beam.pvalue.AsList(error_files),
                **analysis,
            )
        )


__all__ = ["OPTIONS", "OUTPUT_OPTIONS", "ConvertedExample", "ImageRef", "ImagesToExamples", "ImagesToTFRecords"]
