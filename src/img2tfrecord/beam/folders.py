"""Image references -> a complete output folder, as ``convert`` writes it (``ImagesToTFRecords``)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from typing import Any, Optional

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

import img2tfrecord
from img2tfrecord import api
from img2tfrecord.beam.examples import OPTIONS, REJECTED, _record_converter, _to_items
from img2tfrecord.model import ERRORS
from img2tfrecord.option_values import TASK_DETECTION
from img2tfrecord.pipeline.build import manifest_template
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.schemas import manifest
from img2tfrecord.schemas.dataset_manifest import Task
from img2tfrecord.transforms.beam_tfrecord_sink import ShardSinks
from img2tfrecord.transforms.discover import DiscoverClasses
from img2tfrecord.transforms.finalize import FinalizeOutput, WriteErrorReport
from img2tfrecord.transforms.shard_counts import CountShards
from img2tfrecord.transforms.shard_writer import ANALYSIS
from img2tfrecord.transforms.shards import WriteShards

OUTPUT_OPTIONS = (
    "num_shards",
    "shard_size_mb",
    "compression",
    "file_format",
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
        """convert's configuration of these options (the same checks), analysing and converting as set here."""
        return dataclasses.replace(api.config_from_args(self._ns), analyze=self._analyze, processes=processes)

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
        from img2tfrecord.pipeline.output_errors import OutputNotWritable
        from img2tfrecord.pipeline.outputs import OutputNotEmpty, prepare_output
        from img2tfrecord.pipeline.runner import default_processes

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
            ShardSinks(
                config.output,
                config.compression,
                FileSystems.join(run_dir, manifest.RUN_SHARDS_DIR),
                file_format=config.file_format,
            ),
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

            statistics = analyze_train_split(written[ANALYSIS], labels, config, split_names, self._labeled)
            if statistics is not None:
                analysis["statistics"] = beam.pvalue.AsSingleton(statistics)
        task = Task.DETECTION if self._detection else Task.CLASSIFICATION
        template = manifest_template(config, task.value, self._labeled, fingerprint)
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
