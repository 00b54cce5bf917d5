"""The Beam graph of a conversion, built from a config and a launch plan.

Discover -> work items (files, archive members, manifest rows, annotated images; clips with --sequence)
  [-> Dedupe (--dedupe): one work item per content, the other copies -> duplicate error rows]
  -> WriteShards: AssignShards ((split, shard) from seeded hashes) -> GroupByShard (small tuples only)
                  -> WriteShard (convert in the seeded order, stream into the shard file) -> CommitSplit
error rows -> errors.jsonl;  analysis rows of the train split -> tf.Transform
committed shards + counts -> FinalizeOutput (dataset.json, labels.txt, _SUCCESS last)
"""

from __future__ import annotations

import logging
from typing import Callable, Optional, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

import img2tfrecord
from img2tfrecord import faults
from img2tfrecord.images.options import image_library_versions
from img2tfrecord.model import ERRORS
from img2tfrecord.pipeline.append import AppendRun
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.kinds import keeps_ledger
from img2tfrecord.pipeline.kinds.archive import archive_root
from img2tfrecord.pipeline.launch import analysed, class_list, image_converter, run_dir
from img2tfrecord.pipeline.plan_model import Plan
from img2tfrecord.schemas import manifest
from img2tfrecord.schemas.dataset_manifest import Compression, DatasetManifest, FileFormat, RecordType, Task
from img2tfrecord.sources import kinds
from img2tfrecord.transforms.archive_members import RecordArchiveMembers
from img2tfrecord.transforms.beam_tfrecord_sink import ShardSinks
from img2tfrecord.transforms.counters import CountRejectedFn
from img2tfrecord.transforms.dedupe import Dedupe
from img2tfrecord.transforms.discover import SKIPPED, Discover, DiscoverClasses, JunkCount
from img2tfrecord.transforms.finalize import FinalizeOutput, WriteErrorReport
from img2tfrecord.transforms.placed_shards import PlacedShards
from img2tfrecord.transforms.shard_writer import ANALYSIS
from img2tfrecord.transforms.shards import WriteShards


def _reason(row):
    return row["reason"]


def _one(unused_element):
    return 1


def shard_sinks(config: ConvertConfig, plan: Plan) -> ShardSinks:
    """Where the run's splits are written: temp files in its staging folder, final names in the output."""
    staging = FileSystems.join(run_dir(config, plan), manifest.RUN_SHARDS_DIR)
    return ShardSinks(config.output, config.compression, staging, plan.generation, config.file_format, config.sequence)


def manifest_template(config: ConvertConfig, task: str, labeled: bool, fingerprint: str) -> DatasetManifest:
    """``dataset.json``'s fields known before a run (tool, image libraries, input, options, task, record type);
    ``FinalizeOutput`` fills in the rest."""
    return DatasetManifest(
        tool_version=img2tfrecord.__version__,
        image_libraries=image_library_versions(),
        created="",
        input=kinds.absolute_input(config.input),  # an append started from another folder names the same input
        options=config.options_json(),
        compression=Compression(config.compression),
        file_format=FileFormat(config.file_format),
        labels=(),
        splits={},
        accounting=None,
        record_type=RecordType.SEQUENCE_EXAMPLE if config.sequence else RecordType.EXAMPLE,
        task=Task(task),
        labeled=labeled,
        run_fingerprint=fingerprint,
    )


def build_pipeline(
    p: beam.Pipeline,
    config: ConvertConfig,
    plan: Plan,
    resume: bool = False,
    append: Optional[AppendRun] = None,
    junk: Sequence[str] = (),
    labels: Optional[Sequence[str]] = None,
    after_success: Optional[Callable[[], None]] = None,
    placed: Optional[PlacedShards] = None,
) -> None:
    """Add the conversion of ``config`` to pipeline ``p``; ``resume`` replays the shards a killed run finished.

    The work items of every input but archives are those the launcher listed for the input ledger it
    writes before the run (``pipeline/kinds/``): the input is listed once, and the ledger holds
    exactly what was converted;
    ``junk`` are the names that listing skipped, ``labels`` the classes it found (None: discovered in the
    graph, in a pass over the work items). ``append``: the next generation of a finished output,
    converted with the output's labels into shards named after the generation. ``after_success``:
    called by the job once ``_SUCCESS`` is written (a job submitted without waiting removes its lock).
    ``placed``: those work items grouped by shard at launch (``conversion/placement.py``), read by
    each shard's writer instead of discovered and shuffled in the graph.
    """
    ledger = manifest.ledger_file(plan.generation) if keeps_ledger(config, plan) else None
    # The class list known at launch (an append's: the output's, whose ids never change, then the new ones),
    # the one the launch converts ahead with; None: the graph discovers the classes.
    listed_classes = class_list(append, labels)
    if listed_classes is not None:
        label_names = p | "ListedClasses" >> beam.Create([listed_classes])
    if placed is not None:  # placed at launch: no work item crosses the graph before its shard's writer
        if listed_classes is None:
            raise ValueError("work items placed at launch need the classes of the same listing")
        items, rejected_early = p, []
        num_inputs = p | "PlacedInputs" >> beam.Create([placed.num_inputs])
        num_skipped = p | "Skipped" >> JunkCount(len(junk))
    else:
        # Any input kind: the same work items, whatever holds the bytes (sources/inputs/, transforms/discover.py).
        # A folder's files are read from its ledger; manifests are read again (the ledger holds no paths).
        reads_ledger = ledger is not None and plan.input.input_kind == kinds.INPUT_FOLDER
        ledger_path = FileSystems.join(run_dir(config, plan), manifest.RUN_LEDGER_FILE) if reads_ledger else None
        step = "DiscoverAnnotations" if plan.input.annotations else "DiscoverImages"
        discovered = p | step >> Discover(plan.input.source(config), ledger_path, junk)
        files = discovered["files"]
        if listed_classes is None:
            label_names = files | "DiscoverClasses" >> DiscoverClasses(plan.input.layout)
        items = files  # what the accounting counts: images, or clips with --sequence
        if config.sequence:
            from img2tfrecord.transforms.sequence import GroupClips

            items = files | "GroupClips" >> GroupClips(plan.input.layout)
        rejected_early = [discovered[ERRORS]]
        num_inputs = (
            (items | "InputUnits" >> beam.Map(_one), discovered[ERRORS] | "RejectedUnits" >> beam.Map(_one))
            | "AllInputs" >> beam.Flatten()
            | "CountInputs" >> beam.combiners.Count.Globally()
        )
        num_skipped = discovered[SKIPPED] | "CountSkipped" >> beam.combiners.Count.Globally()
    converter = image_converter(config, plan)
    to_write = items
    if config.dedupe:
        if config.sequence or placed is not None:
            raise ValueError("--dedupe compares single work items in the graph, not --sequence clips or placed ones")
        deduped = items | "Dedupe" >> Dedupe(converter, plan.input.split_names)
        to_write = deduped["items"]
        rejected_early.append(deduped[ERRORS])
    if ledger is not None and plan.input.input_kind == kinds.INPUT_ARCHIVES:  # what each archive gave
        members_path = FileSystems.join(run_dir(config, plan), manifest.RUN_MEMBERS_FILE)
        members = to_write | "ArchiveMembers" >> RecordArchiveMembers(converter, archive_root(plan), members_path)
        members_input = {"unused_members": beam.pvalue.AsList(members)}
    else:
        members_input = {}
    written = to_write | "WriteShards" >> WriteShards(
        converter,
        shard_sinks(config, plan),
        run_dir(config, plan),
        config.seed,
        config.processes,
        beam.pvalue.AsSingleton(label_names),
        dict(plan.sizing.num_shards),
        batch_size=1 if config.sequence else 32,  # a clip is many frames: one clip per task
        resume=resume,
        faults=faults.from_environment(),  # test-only: none unless IMG2TFRECORD_FAULT is set
        placed=placed,
    )
    shards = written["shards"]
    # Inputs rejected before conversion (an unreadable archive, a bad manifest row, a duplicate) join the report.
    errors = (written[ERRORS], *rejected_early) | "AllErrors" >> beam.Flatten()
    # Counted as the shard step counts its own rejections, so the run's progress reaches its inputs.
    if rejected_early:
        _ = (
            tuple(rejected_early)
            | "EarlyRejections" >> beam.Flatten()
            | "CountEarlyRejections" >> beam.ParDo(CountRejectedFn())
        )

    reason_counts = errors | "Reason" >> beam.Map(_reason) | "CountPerReason" >> beam.combiners.Count.PerElement()
    error_files = errors | "ErrorReport" >> WriteErrorReport(config.output, plan.generation)

    analysis = {}  # tf.Transform statistics of the train split; FinalizeOutput waits for its transform_fn
    if config.analyze and plan.input.annotations:
        logging.info("detection: no tf.Transform analysis (its features are those of classification records)")
    elif analysed(config, plan, append):
        from img2tfrecord.transforms.analyze import analyze_train_split  # imports TensorFlow

        # An append's analysis adds its train records to the totals of the generations before it.
        statistics = analyze_train_split(
            written[ANALYSIS],
            label_names,
            config,
            plan.input.split_names,
            plan.input.labeled,
            base=append.analysis_base if append is not None else None,
            base_exact=append.base_exact if append is not None else True,
        )
        if statistics is not None:
            analysis["statistics"] = beam.pvalue.AsSingleton(statistics)

    template = manifest_template(config, plan.input.task, plan.input.labeled, plan.fingerprint(config))
    _ = (
        p
        | "Start" >> beam.Create([None])
        | "FinalizeOutput"
        >> beam.ParDo(
            FinalizeOutput(
                config.output,
                template,
                list(plan.input.split_names),
                run_dir(config, plan),
                config.max_error_rate,
                ledger=ledger,
                previous=append.previous if append is not None else None,
                generation=plan.generation,
                withdrawn=append.withdrawn if append is not None else (),
                after_success=after_success,
                members=manifest.members_file(plan.generation) if members_input else None,
            ),
            label_names=beam.pvalue.AsSingleton(label_names),
            shards=beam.pvalue.AsList(shards),
            rejected_counts=beam.pvalue.AsList(reason_counts),
            num_inputs=beam.pvalue.AsSingleton(num_inputs),
            num_skipped=beam.pvalue.AsSingleton(num_skipped),
            unused_error_files=beam.pvalue.AsList(error_files),
            **analysis,
            **members_input,
        )
    )
