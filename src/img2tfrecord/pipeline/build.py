"""The Beam graph of a conversion, built from its launch (``launch.Launch``).

Discover -> work items (files, archive members, manifest rows, annotated images; clips with --sequence)
  [-> Dedupe (--dedupe): one work item per content, the other copies -> duplicate error rows]
  -> WriteShards: AssignShards ((split, shard) from seeded hashes) -> GroupByShard (small tuples only)
                  -> WriteShard (convert in the seeded order, stream into the shard file) -> CommitSplit
error rows -> errors.jsonl;  analysis rows of the train split -> tf.Transform
committed shards + counts -> FinishOutput (the graph's tail, shared with ImagesToTFRecords: dataset.json,
  labels.txt, _SUCCESS last)
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, Dict, Optional, Tuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

import img2tfrecord
from img2tfrecord import faults
from img2tfrecord.images.options import image_library_versions
from img2tfrecord.model import ERRORS
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.kinds.archive import archive_root
from img2tfrecord.pipeline.launch import Launch
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas.dataset_json import Compression, DatasetManifest, RecordType, Task
from img2tfrecord.schemas.output_files import DEFAULT_FILE_FORMAT
from img2tfrecord.sources import input_paths
from img2tfrecord.sources.inputs import SKIPPED
from img2tfrecord.transforms import finish_output as tail
from img2tfrecord.transforms.archive_members import RecordArchiveMembers
from img2tfrecord.transforms.beam_tfrecord_sink import ShardSinks
from img2tfrecord.transforms.counters import CountRejectedFn
from img2tfrecord.transforms.dedupe import Dedupe
from img2tfrecord.transforms.discover import Discover, DiscoverClasses, JunkCount
from img2tfrecord.transforms.finalize import FinalizeOutput
from img2tfrecord.transforms.launch_values import launch_value
from img2tfrecord.transforms.read_placed_shards import PlacedShards
from img2tfrecord.transforms.shard_writer import ANALYSIS
from img2tfrecord.transforms.write_shards import WriteShards


def _one(unused_element):
    return 1


def shard_sinks(
    run_dir: str, compression: str, generation: int = 0, file_format: str = DEFAULT_FILE_FORMAT, sequence: bool = False
) -> ShardSinks:
    """Where a run's splits are written: temp files in its staging folder ``run_dir``, committed under their
    final names in it too; ``FinalizeOutput`` moves them into the output."""
    committed = FileSystems.join(run_dir, output_files.RUN_COMMITTED_DIR)
    staging = FileSystems.join(run_dir, output_files.RUN_SHARDS_DIR)
    return ShardSinks(committed, compression, staging, generation, file_format, sequence)


def manifest_template(
    config: ConvertConfig,
    input_name: str,
    task: str,
    sequence: bool,
    labeled: bool,
    fingerprint: str,
    feature_spec: Optional[Dict[str, Dict[str, Any]]] = None,
) -> DatasetManifest:
    """``dataset.json``'s fields known before a run (tool, image libraries, input, options, task, record type);
    ``FinalizeOutput`` fills in the rest. ``input_name``: what the output records as its input; ``feature_spec``:
    the records' spec when not the task's (URL lists)."""
    return DatasetManifest(
        tool_version=img2tfrecord.__version__,
        image_libraries=image_library_versions(),
        created="",
        input=input_name,
        options=config.options_json(),
        compression=Compression(config.compression),
        file_format=config.file_format,
        labels=(),
        splits={},
        accounting=None,
        record_type=RecordType.SEQUENCE_EXAMPLE if sequence else RecordType.EXAMPLE,
        task=Task(task),
        labeled=labeled,
        run_fingerprint=fingerprint,
        feature_spec=feature_spec,
    )


def build_pipeline(
    p: beam.Pipeline,
    launched: Launch,
    processes: int = 1,
    resume: bool = False,
    after_success: Optional[Callable[[], None]] = None,
    placed: Optional[PlacedShards] = None,
) -> None:
    """Add the run ``launched`` describes to pipeline ``p``; ``processes``: conversion processes per worker (the
    run resolves them for its runner; 1: in the runner's worker); ``resume`` replays the shards a killed run
    finished.

    The work items of every input but archives are those the launch listed for the input ledger the run
    writes before it starts (``pipeline/kinds/``): the input is listed once, and the ledger holds exactly
    what was converted; the graph discovers them (and their classes, where the launch did not list them)
    otherwise. ``after_success``: called by the job once ``_SUCCESS`` is written (a job submitted without
    waiting removes its lock). ``placed``: the listed work items grouped by shard at launch
    (``conversion/placement.py``), read by each shard's writer instead of discovered and shuffled.
    """
    config, plan, kind, append = launched.config, launched.plan, launched.kind, launched.append
    listing = launched.listing
    ledger = output_files.ledger_file(plan.generation) if listing is not None else None
    junk = listing.junk if listing is not None else ()
    # The class list known at launch (an append's: the output's, whose ids never change, then the new ones),
    # the one the launch converts ahead with; None: the graph discovers the classes.
    labels = launched.labels
    if labels is not None:
        label_names = launch_value(p, "ListedClasses", labels)
    if placed is not None:  # placed at launch: no work item crosses the graph before its shard's writer
        if labels is None:
            raise ValueError("work items placed at launch need the classes of the same listing")
        items, rejected_early = p, []
        num_inputs = launch_value(p, "PlacedInputs", placed.num_inputs)
        num_skipped = p | "Skipped" >> JunkCount(len(junk))
    else:
        # Any input kind: the same work items, whatever holds the bytes (sources/inputs/, transforms/discover.py).
        # A folder's files are read from its ledger; manifests are read again (the ledger holds no paths).
        reads_ledger = ledger is not None and kind.discovers_from_ledger
        ledger_path = FileSystems.join(launched.run_dir, output_files.RUN_LEDGER_FILE) if reads_ledger else None
        source = kind.source(config, plan)
        discovered = p | kind.discover_step >> Discover(source, ledger_path, junk)
        files = discovered["files"]
        if labels is None:
            label_names = files | "DiscoverClasses" >> DiscoverClasses(plan.input.layout)
        items = files  # what the accounting counts: images, or clips with --sequence
        if kind.sequence:
            from img2tfrecord.transforms.sequence import GroupClips

            items = files | "GroupClips" >> GroupClips(plan.input.layout)
        rejected_early = [discovered[ERRORS]]
        num_inputs = (
            (items | "InputUnits" >> beam.Map(_one), discovered[ERRORS] | "RejectedUnits" >> beam.Map(_one))
            | "AllInputs" >> beam.Flatten()
            | "CountInputs" >> beam.combiners.Count.Globally()
        )
        num_skipped = discovered[SKIPPED] | "CountSkipped" >> beam.combiners.Count.Globally()
    converter = launched.converter
    to_write = items
    if config.dedupe:
        if kind.sequence or placed is not None:
            raise ValueError("--dedupe compares single work items in the graph, not --sequence clips or placed ones")
        deduped = items | "Dedupe" >> Dedupe(converter, plan.input.split_names)
        to_write = deduped["items"]
        rejected_early.append(deduped[ERRORS])
    parts = {}
    if ledger is not None and kind.records_members:  # what each archive gave
        members_path = FileSystems.join(launched.run_dir, output_files.RUN_MEMBERS_FILE)
        parts[tail.MEMBERS] = to_write | "ArchiveMembers" >> RecordArchiveMembers(
            converter, archive_root(plan), members_path
        )
    write = WriteShards(
        converter,
        shard_sinks(launched.run_dir, config.compression, plan.generation, config.file_format, kind.sequence),
        launched.run_dir,
        processes,
        beam.pvalue.AsSingleton(label_names),
        dict(plan.sizing.num_shards),
        batch_size=1 if kind.sequence else kind.batch_size,  # a clip is many frames: one clip per task
        resume=resume,
        faults=faults.from_environment(),  # test-only: none unless IMG2TFRECORD_FAULT is set
        placed=placed,
    )
    if config.analyze and not kind.analysable:
        logging.log(kind.analysis_note_level, "%s", kind.analysis_note)
    analysis = None
    if launched.analysed:  # an append's analysis adds its train records to the totals of the generations before it
        analysis = tail.Analysis(
            config.image,
            config.exact_statistics,
            config.sequence,
            plan.input.split_names,
            plan.input.labeled,
            base=append.analysis_base if append is not None else None,
            base_exact=append.base_exact if append is not None else True,
            record_spec=kind.feature_spec(config, plan),
        )
    input_name = input_paths.absolute_input(config.input)  # an append started from another folder names the same input
    spec = kind.feature_spec(config, plan)
    template = manifest_template(
        config, input_name, kind.task, kind.sequence, plan.input.labeled, launched.fingerprint, spec
    )
    finalize = FinalizeOutput(
        config.output,
        template,
        list(plan.input.split_names),
        launched.run_dir,
        config.max_error_rate,
        ledger=ledger,
        previous=append.previous if append is not None else None,
        generation=plan.generation,
        withdrawn=append.withdrawn if append is not None else (),
        after_success=after_success,
        members=output_files.members_file(plan.generation) if tail.MEMBERS in parts else None,
        retried=append.retried if append is not None else None,
        resolved=append.resolved if append is not None else (),
    )
    graph_input = GraphInput(to_write, label_names, tuple(rejected_early), num_inputs, num_skipped)
    write_output(graph_input, write, finalize, launched.run_dir, analysis, parts)


@dataclasses.dataclass(frozen=True)
class GraphInput:
    """What a graph's input gives the steps after it: the work items to write (the pipeline itself where they
    were placed at launch: each shard's writer reads its own), the class list (one element), the rows
    rejected before conversion, and the inputs and junk files counted (one element each)."""

    items: Any
    label_names: beam.PCollection
    rejected: Tuple[beam.PCollection, ...]
    num_inputs: beam.PCollection
    num_skipped: beam.PCollection


def write_output(
    source: GraphInput,
    write: WriteShards,
    finalize: FinalizeOutput,
    run_dir: str,
    analysis: Optional[tail.Analysis] = None,
    parts: Optional[Dict[str, Any]] = None,
) -> beam.PCollection:
    """The one assembly after a graph's input, for ``convert`` and ``ImagesToTFRecords``: ``source``'s items
    written (``write``), every rejected row joined, then the shared tail (``FinishOutput``: the analysis,
    ``dataset.json``, ``_SUCCESS``); ``parts``: more of the tail's parts (an archive run's members). Returns
    the manifest's one-element PCollection."""
    written = source.items | "WriteShards" >> write
    # Inputs rejected before conversion (an unreadable archive, a bad manifest row, a duplicate) join the report.
    errors = (written[ERRORS], *source.rejected) | "AllErrors" >> beam.Flatten()
    # Counted as the shard step counts its own rejections, so the run's progress reaches its inputs.
    if source.rejected:
        _ = (
            source.rejected
            | "EarlyRejections" >> beam.Flatten()
            | "CountEarlyRejections" >> beam.ParDo(CountRejectedFn())
        )
    finished = {
        **(parts or {}),
        tail.SHARDS: written["shards"],
        tail.ERRORS: errors,
        tail.ANALYSIS_ROWS: written[ANALYSIS],
        tail.LABELS: source.label_names,
        tail.NUM_INPUTS: source.num_inputs,
        tail.NUM_SKIPPED: source.num_skipped,
    }
    return finished | "FinishOutput" >> tail.FinishOutput(finalize, run_dir, analysis)
