"""The Beam graph of a conversion, built from a config and a launch plan.

    MatchFiles -> ShuffleItems (seeded order; the fusion break) -> ConvertImage (read, decode, resize,
        encode, split; local worker processes) -> per split: WriteToTFRecord -> CountRecords
    errors -> errors.jsonl;  counts + shard files -> FinalizeOutput (dataset.json, labels.txt, _SUCCESS)
"""
from __future__ import annotations

from typing import Optional

import apache_beam as beam

import img2tfrecord
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.plan import Plan
from img2tfrecord.schemas import manifest
from img2tfrecord.schemas import transformed as names
from img2tfrecord.transforms.converter import ERRORS, ImageConverter
from img2tfrecord.transforms.discover import SKIPPED, DiscoverClasses
from img2tfrecord.transforms.sources import DiscoverSources
from img2tfrecord.transforms.parallel import ConvertInParallel
from img2tfrecord.transforms.report import FinalizeOutput, WriteErrorReport
from img2tfrecord.transforms.shuffle import ShuffleItems, num_buckets
from img2tfrecord.transforms.split import DEFAULT_SPLIT
from img2tfrecord.transforms.write import WriteSplit, count_records


def _split_and_class(record):
    return record[0], record[1]


def _reason(row):
    return row["reason"]


def _split_index(element, num_partitions, split_names):
    return split_names.index(element[0])


def _example(record):
    return record[2]


def _one(unused_element):
    return 1


def image_converter(config: ConvertConfig, plan: Plan) -> ImageConverter:
    """The converter of a run's images; the analysed split's records carry their pixel sums (transforms/analyze.py)."""
    sums_split = names.ANALYZED_SPLIT if config.analyze else None
    return ImageConverter(
        config.image, plan.layout, config.splits or ((DEFAULT_SPLIT, 1.0),), config.seed, sums_split,
        config.exact_statistics,
    )


def build_pipeline(p: beam.Pipeline, config: ConvertConfig, plan: Plan, ahead: Optional[str] = None) -> None:
    """Add the conversion of ``config`` to pipeline ``p``.

    ``ahead``: the token of a ``ConvertAhead`` already converting the plan's first items (run.py).
    """
    # A folder, archives or manifests: the same work items, whatever holds the bytes (transforms/sources.py).
    discovered = p | "DiscoverImages" >> DiscoverSources(
        plan.input_kind, plan.pattern, plan.base, config.image.max_file_bytes, config.sequence,
        plan.labeled, plan.has_split_column, plan.split_names,
    )
    files = discovered["files"]
    label_names = files | "DiscoverClasses" >> DiscoverClasses(plan.layout)

    inputs = files  # what the accounting counts: images, or clips with --sequence
    if config.sequence:
        from img2tfrecord.transforms.sequence import ConvertClips

        converted = files | "ConvertClips" >> ConvertClips(
            config.image, plan.layout, config.splits or ((DEFAULT_SPLIT, 1.0),), config.seed, config.processes,
            label_names, num_buckets(plan.num_files),
        )
        inputs = converted["inputs"]
    else:
        converted = (
            files
            | "ShuffleItems" >> ShuffleItems(config.seed, num_buckets(plan.num_files))
            | "ConvertImage"
            >> ConvertInParallel(
                image_converter(config, plan),
                processes=config.processes,
                ahead=ahead,
                label_names=beam.pvalue.AsSingleton(label_names),
            )
        )
    records = converted["records"]
    # Inputs rejected before conversion (an unreadable archive, a bad manifest row) join the report.
    errors = (converted[ERRORS], discovered[ERRORS]) | "AllErrors" >> beam.Flatten()

    split_names = list(plan.split_names)
    by_split = records | "PartitionSplits" >> beam.Partition(_split_index, len(split_names), split_names)
    shard_files = []
    for split, examples in zip(split_names, by_split):
        shard_files.append(
            examples
            | f"Examples[{split}]" >> beam.Map(_example)
            | f"Write[{split}]" >> WriteSplit(config.output, split, plan.num_shards[split], config.compression)
        )
    shards = (
        shard_files
        | "AllShards" >> beam.Flatten()
        | "CountRecords" >> beam.Map(count_records)
    )

    class_counts = records | "SplitAndClass" >> beam.Map(_split_and_class) | "CountPerClass" >> beam.combiners.Count.PerElement()
    reason_counts = errors | "Reason" >> beam.Map(_reason) | "CountPerReason" >> beam.combiners.Count.PerElement()
    error_files = errors | "ErrorReport" >> WriteErrorReport(config.output)
    num_inputs = (
        (inputs | "InputUnits" >> beam.Map(_one), discovered[ERRORS] | "RejectedUnits" >> beam.Map(_one))
        | "AllInputs" >> beam.Flatten()
        | "CountInputs" >> beam.combiners.Count.Globally()
    )
    num_skipped = discovered[SKIPPED] | "CountSkipped" >> beam.combiners.Count.Globally()

    analysis = {}  # tf.Transform statistics of the train split; FinalizeOutput waits for its transform_fn
    if config.analyze:
        from img2tfrecord.transforms.analyze import analyze_train_split  # imports TensorFlow

        statistics = analyze_train_split(records, label_names, config, plan)
        if statistics is not None:
            analysis["statistics"] = beam.pvalue.AsSingleton(statistics)

    manifest_fields = {
        "tool_version": img2tfrecord.__version__,
        "input_path": config.input,
        "options": config.options_json(),
        "compression": config.compression,
        "record_type": manifest.SEQUENCE_RECORD_TYPE if config.sequence else manifest.RECORD_TYPE,
        "labeled": plan.labeled,
    }
    _ = (
        p
        | "Start" >> beam.Create([None])
        | "FinalizeOutput"
        >> beam.ParDo(
            FinalizeOutput(config.output, manifest_fields, split_names, config.max_error_rate),
            label_names=beam.pvalue.AsSingleton(label_names),
            class_counts=beam.pvalue.AsList(class_counts),
            shards=beam.pvalue.AsList(shards),
            rejected_counts=beam.pvalue.AsList(reason_counts),
            num_inputs=beam.pvalue.AsSingleton(num_inputs),
            num_skipped=beam.pvalue.AsSingleton(num_skipped),
            unused_error_files=beam.pvalue.AsList(error_files),
            **analysis,
        )
    )
