"""The tf.Transform analysis of the train split: the exported transform and the run's statistics.

    train analysis rows (a record without its image bytes, plus its pixel sums: converter.Record.analysis)
      -> Arrow RecordBatches (tfx_bsl's Example decoder; schema: analysis_schema)
      -> tft_beam.AnalyzeDataset(preprocessing_fn)    one pass over the sums; no image decoded here
      -> tft_beam.WriteTransformFn(<temp dir>/export)  then copied into the output through Beam's
         FileSystems: transform_fn/, transformed_metadata/, metadata/schema.pbtxt, schema.pbtxt
      -> one statistics dict (run_totals.statistics_json), emitted once all of it is written,
         for dataset.json (FinalizeOutput's side input)

The ``preprocessing_fn`` maps raw records (``TFTransformOutput.raw_feature_spec()``) to
``image``, float32 ``[H, W, C]`` scaled to [0, 1] and normalised with the train split's
per-channel mean and std (dense batches with ``--image-size``, else ``tf.RaggedTensor``), and,
for labeled records, ``label``, the int64 id in the ``label`` vocabulary (= ``labels.txt``).
The pixel sums are inputs of the analysis only: the exported transform never needs them.
How and why: docs/tf-transform.md, "How the transform is built".
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import posixpath
import shutil
import tempfile
import uuid
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import apache_beam as beam
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import StandardOptions
from google.protobuf import text_format
from tensorflow_transform.tf_metadata import schema_utils
from tfx_bsl.public import tfxio

from img2tfrecord import faults, storage
from img2tfrecord.conversion.run_totals import BATCH_CLASSES, MAX_PIXEL, RunTotals, pixel_moments, statistics_json
from img2tfrecord.images.options import LOSSLESS_FORMATS, ImageOptions
from img2tfrecord.readers.tfdata import decode_encoded, decode_raw
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import labels as label_map
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas import transformed as names
from img2tfrecord.transforms.analysis_totals import TotalsCombineFn

_PLACEHOLDER_VOCABULARY = b"placeholder-before-analysis\n"  # the vocabulary file while the graph is traced
_MAP_PARALLELISM = 16  # images decoded at the same time inside one batch


@dataclasses.dataclass(frozen=True)
class TransformSpec:
    """What the preprocessing_fn needs to know about the stored images; fixed for a run."""

    channels: int = 3
    image_size: Optional[Tuple[int, int]] = None  # (height, width) of every stored image; None: sizes vary
    raw_pixels: bool = False  # image/encoded holds uint8 pixels (--format raw), not JPEG/PNG bytes
    labeled: bool = True  # the records carry image/class/text and image/class/label

    @classmethod
    def from_options(cls, image: ImageOptions, labeled: bool = True) -> TransformSpec:
        size = (image.size[1], image.size[0]) if image.size else None  # options are (width, height)
        return cls(channels=image.channels, image_size=size, raw_pixels=image.format == "raw", labeled=labeled)


# ---------------------------------------------------------------------------
# The graph.


def _decode(spec: TransformSpec, fields: Sequence[tf.Tensor]) -> tf.Tensor:
    """One stored image -> uint8 [H, W, C], decoded as ``img2tfrecord.load`` decodes it."""
    if spec.raw_pixels:
        encoded, height, width = fields
        image = decode_raw(encoded, height, width, tf.constant(spec.channels, tf.int64))
    else:
        image = decode_encoded(fields[0], spec.channels)
    if spec.image_size is not None:
        return tf.ensure_shape(image, [*spec.image_size, spec.channels])
    image.set_shape([None, None, spec.channels])
    return image


def _image_fields(spec: TransformSpec, inputs: Mapping[str, tf.Tensor]) -> Tuple[tf.Tensor, ...]:
    # Only what decoding needs, so a serving call can pass image/encoded alone.
    if spec.raw_pixels:
        return inputs[keys.IMAGE_ENCODED], inputs[keys.IMAGE_HEIGHT], inputs[keys.IMAGE_WIDTH]
    return (inputs[keys.IMAGE_ENCODED],)


def _batch_totals(spec: TransformSpec, inputs: Mapping[str, tf.Tensor]) -> List[tf.Tensor]:
    """The analyzer's inputs: one batch reduced to a few numbers (laid out as ``conversion/run_totals`` reads them)."""
    heights, widths = inputs[keys.IMAGE_HEIGHT], inputs[keys.IMAGE_WIDTH]
    totals = [
        tf.size(heights, out_type=tf.int64),
        tf.reduce_sum(heights * widths),
        tf.reduce_sum(inputs[names.PIXEL_SUM], 0),
        tf.reduce_sum(inputs[names.PIXEL_SQUARE_SUM], 0),
        tf.reduce_min(heights),
        tf.reduce_max(heights),
        tf.reduce_min(widths),
        tf.reduce_max(widths),
    ]
    if spec.labeled:
        classes, _, counts = tf.unique_with_counts(inputs[keys.CLASS_TEXT])
        totals += [classes, tf.cast(counts, tf.int64)]
    return totals


def _normalised_images(spec: TransformSpec, inputs, mean: tf.Tensor, std: tf.Tensor):
    scale = 1.0 / MAX_PIXEL

    def normalise(pixels):
        return (tf.cast(pixels, tf.float32) * scale - mean) / std

    fields = _image_fields(spec, inputs)
    if spec.image_size is not None:
        images = tf.map_fn(
            lambda f: _decode(spec, f),
            fields,
            fn_output_signature=tf.TensorSpec([*spec.image_size, spec.channels], tf.uint8),
            parallel_iterations=_MAP_PARALLELISM,
        )
        return normalise(images)
    images = tf.map_fn(
        lambda f: tf.RaggedTensor.from_tensor(_decode(spec, f)),
        fields,
        fn_output_signature=tf.RaggedTensorSpec([None, None, spec.channels], tf.uint8, ragged_rank=1),
        parallel_iterations=_MAP_PARALLELISM,
    )
    return tf.ragged.map_flat_values(normalise, images)


def make_preprocessing_fn(
    spec: TransformSpec,
    statistics: Optional[beam.PTransform] = None,
    vocabulary: Optional[beam.PTransform] = None,
):
    """The tf.Transform ``preprocessing_fn`` of a run (see the module docstring).

    ``statistics`` and ``vocabulary`` are the analyzers' PTransforms
    (``_TrainStatistics``, ``_LabelVocabulary``); made here when not given
    (the run totals are then out of reach, and the vocabulary is the sorted
    train classes).
    """
    statistics = statistics if statistics is not None else _TrainStatistics(spec)
    vocabulary = vocabulary if vocabulary is not None else _LabelVocabulary(None)

    def preprocessing_fn(inputs: Dict[str, tf.Tensor]) -> Dict[str, Any]:
        totals = _batch_totals(spec, inputs)
        mean, std = tft.experimental.ptransform_analyzer(
            inputs=totals,
            ptransform=statistics,
            output_dtypes=[tf.float32, tf.float32],
            output_shapes=[[spec.channels], [spec.channels]],
            name="train_statistics",
        )
        result = {names.IMAGE: _normalised_images(spec, inputs, mean, std)}
        if spec.labeled:
            # A separate analyzer: TFT takes either all or none of one analyzer's outputs as assets.
            (vocabulary_file,) = tft.experimental.ptransform_analyzer(
                inputs=[totals[BATCH_CLASSES]],
                ptransform=vocabulary,
                output_dtypes=[tf.string],
                output_shapes=[[]],
                output_asset_default_values=[_PLACEHOLDER_VOCABULARY],
                name="label_vocabulary",
            )
            result[names.LABEL] = tft.apply_vocabulary(inputs[keys.CLASS_TEXT], vocabulary_file, default_value=-1)
        return result

    return preprocessing_fn


# ---------------------------------------------------------------------------
# The analyzers' Beam side (the totals themselves: conversion/run_totals).


class _TrainStatistics(beam.PTransform):
    """The statistics analyzer: batch totals -> (mean [C], std [C]), plus the run totals on the side.

    ``totals`` is set to the one-element PCollection of the run totals when
    TFT applies this transform inside ``AnalyzeDataset`` (once: it is one
    analyzer node of the graph). ``base``: totals the batches add to (an
    append's earlier generations).
    """

    def __init__(self, spec: TransformSpec, base: Optional[RunTotals] = None):
        super().__init__()
        self._spec = spec
        self._base = base
        self.totals: Optional[beam.PCollection] = None

    def expand(self, batches):
        totals = batches | "Totals" >> beam.CombineGlobally(TotalsCombineFn(self._spec.channels))
        if self._base is not None:
            base = self._base
            totals = totals | "AddEarlierGenerations" >> beam.Map(lambda t: base.copy().add(t))
        self.totals = totals
        outputs = self.totals | "Moments" >> beam.FlatMap(_moments).with_outputs("mean", "std")
        return outputs.mean, outputs.std


def _moments(totals):
    mean, std = pixel_moments(totals.pixels, totals.sums, totals.squares)
    # A channel without variance (e.g. all black) is only shifted, never divided by 0.
    yield beam.pvalue.TaggedOutput("mean", np.array(mean, np.float32))
    yield beam.pvalue.TaggedOutput("std", np.array([s if s > 0 else 1.0 for s in std], np.float32))


class _LabelVocabulary(tft_beam.experimental.PTransformAnalyzer):
    """The vocabulary analyzer: -> path of the ``label`` vocabulary file (a TF asset).

    The file holds the run's sorted class list (``label_names``, the list
    ``labels.txt`` holds), so ids agree with the records' image/class/label
    even for a class without train images (``tft.vocabulary`` orders by
    frequency and would leave it out); the train classes are checked to be in it.
    """

    def __init__(self, label_names: Optional[beam.PCollection]):
        super().__init__()
        self._label_names = label_names

    def expand(self, batches):
        side = {} if self._label_names is None else {"label_names": beam.pvalue.AsSingleton(self._label_names)}
        return (
            batches
            | "TrainClasses" >> beam.CombineGlobally(_ClassSet())
            | "WriteVocabulary" >> beam.Map(_write_vocabulary, self.base_temp_dir, **side)
        )


class _ClassSet(beam.CombineFn):
    def create_accumulator(self):
        return set()

    def add_input(self, acc, batch):
        acc.update(batch[0].tolist())
        return acc

    def merge_accumulators(self, accumulators):
        return set().union(*accumulators)

    def extract_output(self, acc):
        return acc


def _write_vocabulary(train_classes, temp_dir: str, label_names: Optional[List[str]] = None):
    """Write the vocabulary file; without ``label_names`` (outside ``convert``): the sorted train classes.

    A run without any class (every input rejected) gets the placeholder vocabulary: TensorFlow cannot
    initialise a lookup table from an empty file, and such a run publishes no transform (``_publish``).
    """
    train_names = {c.decode("utf-8") for c in train_classes}
    if label_names is None:
        label_names = label_map.label_names(train_names)
    unknown = train_names - set(label_names)
    if unknown:
        raise ValueError(f"train records of classes missing from the label map: {sorted(unknown)[:5]}")
    tf.io.gfile.makedirs(temp_dir)  # unique to this analyzer (set by TFT)
    path = posixpath.join(temp_dir, names.LABEL_VOCABULARY)
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(label_map.labels_text(label_names).encode("utf-8") if label_names else _PLACEHOLDER_VOCABULARY)
    return np.array(path)


# ---------------------------------------------------------------------------
# The composite transform.


def raw_schema(spec_json: Optional[Mapping[str, Any]] = None):
    """The records' tensorflow_metadata Schema, from the ``feature_spec`` of ``dataset.json``."""
    return schema_utils.schema_from_feature_spec(keys.feature_spec(dict(spec_json) if spec_json else None))


def analysis_schema(spec_json: Optional[Mapping[str, Any]] = None, channels: int = 3):
    """What the analysis reads: the records' schema plus the per-image pixel sums (int64 [C])."""
    spec = keys.feature_spec(dict(spec_json) if spec_json else None)
    for key in names.ANALYSIS_FEATURES:
        spec[key] = tf.io.FixedLenFeature([channels], tf.int64)
    return schema_utils.schema_from_feature_spec(spec)


def temp_dir_for(output_dir: str, temp_location: Optional[str], dry_run: bool = False, local: bool = False) -> str:
    """tf.Transform's temp dir: a local throw-away folder on the ``local`` runner and for a dry run,
    else under ``--temp_location`` when given, else inside the output.

    TFT opens it with TensorFlow's filesystem, which cannot open every path Beam can, so only its
    finished files reach the output, through Beam's FileSystems. TFT creates it (and traces into it)
    while the graph is built, so a dry run, which must write nothing, also gets the local folder.
    """
    if dry_run or local:
        path = tempfile.mkdtemp(prefix="img2tfrecord-tft-")
        atexit.register(shutil.rmtree, path, ignore_errors=True)
        return path
    if temp_location:
        return FileSystems.join(temp_location, f"img2tfrecord-tft-{uuid.uuid4().hex}")
    return FileSystems.join(output_dir, output_files.ANALYSIS_TEMP_DIR)


def _export_dir(temp_dir: str) -> str:
    return posixpath.join(temp_dir, "export") if "://" in temp_dir else os.path.join(temp_dir, "export")


def _publish(unused_written, output_dir: str, schema_text: str, temp_dir: str, exact: bool, totals, label_names=None):
    """After WriteTransformFn: the export and the raw schema files in ``output_dir``, the temp dir removed,
    the statistics out; None, and nothing published, for labeled records without any class (every input
    was rejected: the run ends as "no records written", not with a transform of nothing)."""
    if label_names is not None and not label_names:
        if tf.io.gfile.exists(temp_dir):
            tf.io.gfile.rmtree(temp_dir)
        logging.warning("no class has a record: no tf.Transform output is written")
        return None
    faults.pause_at("analysis")
    faults.fail_at("analysis", output_dir)
    export = _export_dir(temp_dir)
    for folder in (output_files.TRANSFORM_FN_DIR, output_files.TRANSFORMED_METADATA_DIR):
        storage.copy_tree(storage.join(export, folder), storage.join(output_dir, folder))
    for path in (
        storage.join(output_dir, output_files.RAW_METADATA_DIR, output_files.SCHEMA_FILE),
        storage.join(output_dir, output_files.SCHEMA_FILE),
    ):
        storage.write_bytes(path, schema_text.encode("utf-8"))
    if tf.io.gfile.exists(temp_dir):
        tf.io.gfile.rmtree(temp_dir)
    stats = statistics_json(totals, label_names, exact)
    if not stats["num_examples"]:
        logging.warning("the %r split is empty: the transform only scales images to [0, 1]", names.ANALYZED_SPLIT)
    return stats


class AnalyzeTrainSplit(beam.PTransform):
    """Serialized train examples with their analysis features -> one statistics dict, emitted once
    everything is written.

    Writes ``transform_fn/``, ``transformed_metadata/``, ``metadata/schema.pbtxt``
    and ``schema.pbtxt`` into ``output_dir``. ``label_names`` is the
    one-element PCollection of the run's sorted class list; ``exact`` is
    recorded in the statistics (see ``statistics_json``).
    """

    def __init__(
        self,
        output_dir: str,
        label_names: Optional[beam.PCollection],
        spec: TransformSpec,
        temp_dir: str,
        spec_json: Optional[Mapping[str, Any]] = None,
        exact: bool = True,
        base: Optional[RunTotals] = None,
        record_spec: Optional[Mapping[str, Any]] = None,
    ):
        super().__init__()
        self._record_spec = record_spec or spec_json
        self._base = base
        self._output_dir = output_dir
        self._label_names = label_names
        self._spec = spec
        self._temp_dir = temp_dir
        self._spec_json = spec_json
        self._exact = exact

    def expand(self, examples):
        schema = raw_schema(self._record_spec)
        source = tfxio.TFExampleBeamRecord(
            physical_format="tfrecord", schema=analysis_schema(self._spec_json, self._spec.channels)
        )
        statistics = _TrainStatistics(self._spec, self._base)
        vocabulary = _LabelVocabulary(self._label_names)
        # TF2 tracing: the exported SavedModel prunes unused inputs, so serving passes image/encoded alone.
        with tft_beam.Context(temp_dir=self._temp_dir, force_tf_compat_v1=False):
            record_batches = examples | "ToRecordBatches" >> source.BeamSource()
            transform_fn = (record_batches, source.TensorAdapterConfig()) | "Analyze" >> tft_beam.AnalyzeDataset(
                make_preprocessing_fn(self._spec, statistics, vocabulary)
            )
            written = transform_fn | "WriteTransformFn" >> tft_beam.WriteTransformFn(_export_dir(self._temp_dir))
        if statistics.totals is None:
            raise RuntimeError("tf.Transform did not apply the train statistics analyzer")
        side = {"label_names": beam.pvalue.AsSingleton(self._label_names)} if self._spec.labeled else {}
        return written | "Publish" >> beam.Map(
            _publish,
            self._output_dir,
            text_format.MessageToString(schema),
            self._temp_dir,
            self._exact,
            totals=beam.pvalue.AsSingleton(statistics.totals),
            **side,
        )


def analyze_train_split(
    rows,
    label_names,
    image: ImageOptions,
    split_names: Sequence[str],
    staging: str,
    labeled: bool = True,
    base: Optional[RunTotals] = None,
    base_exact: bool = True,
    exact_statistics: bool = False,
    sequence: bool = False,
    record_spec: Optional[Mapping[str, Any]] = None,
) -> Optional[beam.PCollection]:
    """The statistics PCollection of a run, or None (logged) when there is nothing to analyse.

    ``rows`` are the train records' analysis rows (``converter.Record.analysis``: the
    record without its image bytes, plus its pixel sums); ``label_names`` the
    one-element PCollection of the sorted class list; ``split_names`` the run's splits; ``staging``: the
    run's staging folder, which the transform is published into (``FinalizeOutput`` moves it into the output);
    ``labeled``: the records carry labels; ``base``: the totals of an append's earlier generations
    (``base_exact``: theirs are exact), which the statistics and the exported transform then cover too;
    ``exact_statistics``: ``--exact-statistics``; ``sequence``: the records are ``--sequence`` clips (not analysed);
    ``record_spec``: the records' feature spec, for the written schema, when it is more than the analysed one.
    """
    split_names = list(split_names)
    if sequence:
        logging.warning("--sequence records are SequenceExamples: skipping the tf.Transform analysis")
        return None
    if names.ANALYZED_SPLIT not in split_names:
        logging.warning(
            "no %r split (splits: %s): skipping the tf.Transform analysis; no transform_fn is written",
            names.ANALYZED_SPLIT,
            ", ".join(split_names),
        )
        return None
    logging.info(
        "analysing the %r split with tf.Transform: pixel statistics, label vocabulary, %s/ (skip with --no-analyze)",
        names.ANALYZED_SPLIT,
        output_files.TRANSFORM_FN_DIR,
    )
    spec_json = keys.feature_spec_json() if labeled else keys.feature_spec_json(labeled=False)
    options = rows.pipeline.options.get_all_options()
    runner = str(options.get("runner") or "DirectRunner").split(".")[-1]
    return rows | "AnalyzeTrainSplit" >> AnalyzeTrainSplit(
        FileSystems.join(staging, output_files.RUN_COMMITTED_DIR),
        label_names,
        TransformSpec.from_options(image, labeled=labeled),
        temp_dir_for(
            staging,
            options.get("temp_location"),
            bool(options.get("dry_run")),
            local=runner in StandardOptions.LOCAL_RUNNERS,
        ),
        spec_json,
        exact=(exact_statistics or image.format in LOSSLESS_FORMATS) and base_exact,
        base=base,
        record_spec=record_spec,
    )
