"""Image references -> a complete output folder, as ``convert`` writes it (``ImagesToTFRecords``)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Optional

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from img2tfrecord.beam.examples import INPUT_DESCRIPTION, OPTIONS, REJECTED, _to_items, record_converter
from img2tfrecord.errors import UsageError
from img2tfrecord.images.options import DEFAULT_DECODE_TIMEOUT_S, DEFAULT_MAX_FILE_MB, DEFAULT_MAX_PIXELS
from img2tfrecord.option_values import (
    DEFAULT_QUALITY,
    TASK_DETECTION,
    ChannelCount,
    CompressionName,
    FileFormatName,
    ImageSize,
    ResampleMode,
    ResizeMode,
    SplitsGiven,
    StoredFormat,
    TaskName,
)
from img2tfrecord.pipeline.build import GraphInput, manifest_template, shard_sinks, write_output
from img2tfrecord.pipeline.config import ConvertConfig, config_from_options
from img2tfrecord.pipeline.kinds.detection import AnnotationKind
from img2tfrecord.pipeline.plan_model import digest_of, fingerprint_doc
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas.dataset_json import Task
from img2tfrecord.sources.input_paths import absolute_input
from img2tfrecord.transforms import finish_output as tail
from img2tfrecord.transforms.count_shards import CountShards
from img2tfrecord.transforms.discover import DiscoverClasses
from img2tfrecord.transforms.finalize import FinalizeOutput
from img2tfrecord.transforms.launch_values import launch_value
from img2tfrecord.transforms.write_shards import WriteShards

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


def _count_one(unused_ref) -> int:
    return 1


class ImagesToTFRecords(beam.PTransform):
    """Image references -> a complete output folder at ``output``; returns the one-element ``PCollection`` of
    its :class:`~img2tfrecord.schemas.dataset_json.DatasetManifest`.

    Keywords are ``convert``'s options that shape a record (:data:`OPTIONS`) or the output
    (:data:`OUTPUT_OPTIONS`), with the same names, defaults and checks; ``root``, ``labeled`` and
    ``task="detection"`` as for :class:`ImagesToExamples` (detection records are not analysed). The
    output is checked (and with ``overwrite=True`` cleared) when the transform is applied: a
    non-empty output raises ``img2tfrecord.UsageError`` then. Class ids are the sorted class names;
    each split's shard count is ``num_shards``, or its records times a record size estimated from
    the 16 references with the smallest seeded hashes (as ``convert`` samples a manifest) over
    ``shard_size_mb``, so the shards are byte for byte those of ``convert --input refs.csv``.
    ``processes``: conversion processes per worker (default: the usable cores on a local runner, 1 on
    a distributed one). The last steps are ``convert``'s (``transforms/finish_output.FinishOutput``):
    the pipeline fails, leaving no ``_SUCCESS``, when no record was written (an empty input too) and,
    with the folder finished, past ``max_error_rate``.
    """

    def __init__(
        self,
        output: str,
        *,
        root: Optional[str] = None,
        labeled: bool = True,
        # convert()'s options that shape a record (OPTIONS), then the output (OUTPUT_OPTIONS), with its types and
        # defaults.
        image_size: Optional[ImageSize] = None,
        resize: ResizeMode = "fill",
        resample: ResampleMode = "fast",
        channels: ChannelCount = 3,
        format: Optional[StoredFormat] = None,
        quality: int = DEFAULT_QUALITY,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        max_file_mb: float = DEFAULT_MAX_FILE_MB,
        decode_timeout_s: float = DEFAULT_DECODE_TIMEOUT_S,
        splits: Optional[SplitsGiven] = None,
        seed: int = 0,
        task: Optional[TaskName] = None,
        require_boxes: bool = False,
        num_shards: Optional[int] = None,
        shard_size_mb: Optional[float] = None,
        compression: CompressionName = "none",
        file_format: FileFormatName = output_files.DEFAULT_FILE_FORMAT,
        max_error_rate: Optional[float] = None,
        analyze: bool = True,
        exact_statistics: bool = False,
        processes: Optional[int] = None,
        overwrite: bool = False,
    ):
        super().__init__()
        given = locals()
        options = {name: given[name] for name in OPTIONS + OUTPUT_OPTIONS}
        config = config_from_options(root or INPUT_DESCRIPTION, output, **options)
        self._detection = config.task == TASK_DETECTION
        if self._detection and config.analyze:
            logging.info("%s", AnnotationKind.analysis_note)  # the input kind table's note, as convert logs it
        self._config = dataclasses.replace(config, analyze=config.analyze and not self._detection)
        self._converter, self._splits = record_converter(self._config)
        self._root = root
        self._labeled = labeled or self._detection

    def expand(self, refs):
        from img2tfrecord.pipeline.output_errors import OutputNotWritable
        from img2tfrecord.pipeline.outputs import OutputNotEmpty, prepare_output
        from img2tfrecord.pipeline.runner import default_processes

        processes = self._config.processes or default_processes(refs.pipeline.options)
        config: ConvertConfig = dataclasses.replace(self._config, processes=processes)
        try:
            prepare_output(config.output, config.overwrite)
        except (OutputNotEmpty, OutputNotWritable) as e:
            raise UsageError(str(e)) from None
        split_names = tuple(name for name, _ in self._splits)
        input_name = absolute_input(self._root) if self._root else INPUT_DESCRIPTION
        run_fingerprint = digest_of(fingerprint_doc(config, input_name, output=config.output, labeled=self._labeled))
        run_dir = FileSystems.join(config.output, output_files.run_folder(run_fingerprint))

        to_items = _to_items(self._converter, self._root, self._labeled)
        parsed = refs | "ToItems" >> beam.ParDo(to_items).with_outputs(REJECTED, main="items")
        items = parsed.items
        labels = items | "ClassIds" >> DiscoverClasses(self._converter.layout)
        num_shards = items | "ShardCounts" >> CountShards(
            self._converter, split_names, config.shard_size_mb, config.num_shards
        )
        write = WriteShards(
            self._converter,
            shard_sinks(run_dir, config.compression, file_format=config.file_format),
            run_dir,
            config.processes,
            beam.pvalue.AsSingleton(labels),
            beam.pvalue.AsSingleton(num_shards),
        )
        task = Task.DETECTION if self._detection else Task.CLASSIFICATION
        template = manifest_template(config, input_name, task.value, False, self._labeled, run_fingerprint)
        finalize = FinalizeOutput(config.output, template, list(split_names), run_dir, config.max_error_rate)
        analysis = None
        if config.analyze:
            analysis = tail.Analysis(config.image, config.exact_statistics, config.sequence, split_names, self._labeled)
        # The references are the graph's input; the rest is convert's own assembly (pipeline/build.write_output).
        source = GraphInput(
            items=items,
            label_names=labels,
            rejected=(parsed[REJECTED],),
            num_inputs=refs | "InputUnits" >> beam.Map(_count_one) | "CountInputs" >> beam.combiners.Count.Globally(),
            num_skipped=launch_value(refs.pipeline, "NoJunk", 0),
        )
        return write_output(source, write, finalize, run_dir, analysis=analysis)
