"""Run a conversion: check the output, plan, build the graph, run it, read the result."""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions, TestOptions

from img2tfrecord.conversion.pool import usable_cores
from img2tfrecord.pipeline.build import build_pipeline
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.inputs import check_local_input
from img2tfrecord.pipeline.outputs import prepare_output
from img2tfrecord.pipeline.plan import Plan, make_plan
from img2tfrecord.schemas import manifest

# The local default: Beam's FnApiRunner (what the DirectRunner falls back to
# offline) in_memory, with each shard's images converted by a pool of one
# process per core (transforms/pool.py says why not threads).
LOCAL_RUNNER = "FnApiRunner"
LOCAL_RUNNING_MODE = "in_memory"


def pipeline_options(pipeline_args: Sequence[str]) -> PipelineOptions:
    """Beam options from the pass-through args, with the local runner as the default runner."""
    options = PipelineOptions(list(pipeline_args))
    standard = options.view_as(StandardOptions)
    if not standard.runner:
        standard.runner = LOCAL_RUNNER
    return options


def is_local_runner(options: PipelineOptions) -> bool:
    runner = options.view_as(StandardOptions).runner or LOCAL_RUNNER
    return str(runner).split(".")[-1] in StandardOptions.LOCAL_RUNNERS


def is_dry_run(options: PipelineOptions) -> bool:
    """``--dry_run=True``: the job is built and translated, nothing runs (DataflowRunner)."""
    return str(options.view_as(TestOptions).dry_run).lower() in ("true", "1", "yes")


def default_processes(options: Optional[PipelineOptions] = None) -> int:
    """Conversion processes: one per usable core locally; 1 (the worker itself) on distributed runners."""
    if options is not None and not is_local_runner(options):
        return 1
    return usable_cores()


def read_manifest(output_dir: str) -> Dict[str, Any]:
    with FileSystems.open(FileSystems.join(output_dir, manifest.MANIFEST_FILE)) as f:
        return manifest.loads(f.read().decode("utf-8"))


def run(
    config: ConvertConfig,
    pipeline_args: Sequence[str] = (),
    plan: Optional[Plan] = None,
    wait: bool = True,
) -> Optional[Dict[str, Any]]:
    """Convert ``config.input`` into ``config.output``; returns the written ``dataset.json``.

    Returns None for a ``--dry_run`` (the job is built and translated, nothing
    runs) and when ``wait`` is False (the job is submitted; it writes
    ``_SUCCESS`` itself when it completes). Raises ``PlanError``/``OutputNotEmpty``
    (usage errors) before any pipeline starts; any pipeline failure propagates.
    """
    options = pipeline_options(pipeline_args)
    mode = options.view_as(DirectOptions).direct_running_mode
    if is_local_runner(options) and mode != LOCAL_RUNNING_MODE:
        logging.warning(
            "--direct_running_mode=%s: Beam's local runner can drop elements in this mode (every record is "
            "still accounted for: the run fails instead of writing an incomplete output); the default %s mode "
            "with --processes is safe and faster",
            mode,
            LOCAL_RUNNING_MODE,
        )
    plan = plan or make_plan(config)
    if getattr(plan, "input_kind", "folder") == "folder" and "://" not in plan.base:
        # Warns about empty class folders, links and unlistable folders; InputProblem for unusable names.
        check_local_input(plan.base, plan.pattern, plan.layout)
    dry_run = is_dry_run(options)
    resuming = False
    if not dry_run:
        run_folder = manifest.run_folder(plan.fingerprint(config)) if config.resume else None
        resuming = prepare_output(config.output, config.overwrite, run_folder)
        if config.resume:
            logging.info(
                "resuming %s: finished shards are kept"
                if resuming
                else "nothing to resume in %s: converting everything",
                config.output,
            )
    logging.info(
        "input: %d files, %.1f MB, layout %s; shards per split: %s",
        plan.num_files,
        plan.input_bytes / 1e6,
        plan.layout,
        plan.num_shards,
    )
    p = beam.Pipeline(options=options)
    build_pipeline(p, config, plan, resume=resuming)
    result = p.run()
    if not wait and not dry_run:
        job_id = getattr(result, "job_id", None)
        logging.info(
            "submitted%s; %s appears in %s when it completes",
            f" job {job_id()}" if callable(job_id) else "",
            manifest.SUCCESS_FILE,
            config.output,
        )
        return None
    result.wait_until_finish()
    if resuming:
        resumed = result.metrics().query(beam.metrics.MetricsFilter().with_name("shards_resumed"))["counters"]
        logging.info("%d finished shard(s) kept from the interrupted run", sum(c.committed or 0 for c in resumed))
    if dry_run:
        return None
    return read_manifest(config.output)
