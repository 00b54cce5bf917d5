"""Run a conversion: check the output, plan, build the graph, run it, read the result."""
from __future__ import annotations

import logging
import os
from typing import Any, Dict, List, Optional, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

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


def _has_flag(args: Sequence[str], name: str) -> bool:
    return any(a == name or a.startswith(name + "=") for a in args)


def _flag_value(args: Sequence[str], name: str) -> Optional[str]:
    value = None
    for i, a in enumerate(args):
        if a.startswith(name + "="):
            value = a.split("=", 1)[1]
        elif a == name and i + 1 < len(args):
            value = args[i + 1]
    return value


def is_local_runner(pipeline_args: Sequence[str]) -> bool:
    runner = _flag_value(pipeline_args, "--runner") or LOCAL_RUNNER
    return runner.split(".")[-1] in StandardOptions.LOCAL_RUNNERS


def pipeline_options(pipeline_args: Sequence[str]) -> PipelineOptions:
    """Beam options from the pass-through args, with the local defaults filled in."""
    args: List[str] = list(pipeline_args)
    if not _has_flag(args, "--runner"):
        args.append(f"--runner={LOCAL_RUNNER}")
    if is_local_runner(args):
        mode = _flag_value(args, "--direct_running_mode")
        if mode is None:
            args.append(f"--direct_running_mode={LOCAL_RUNNING_MODE}")
            if not _has_flag(args, "--direct_num_workers"):
                args.append("--direct_num_workers=1")
        elif mode != "in_memory":
            logging.warning(
                "--direct_running_mode=%s: Beam's local runner was seen to drop elements in this mode "
                "(every record is still accounted for: the run fails instead of writing an incomplete output); "
                "the default in_memory mode with --processes is safe and faster", mode,
            )
    return PipelineOptions(args)


def is_dry_run(pipeline_args: Sequence[str]) -> bool:
    value = _flag_value(pipeline_args, "--dry_run")
    return value is not None and value.lower() in ("true", "1", "yes")


def default_processes(pipeline_args: Sequence[str]) -> int:
    """Conversion processes: one per usable core locally; 1 (the worker itself) on distributed runners."""
    if not is_local_runner(pipeline_args):
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


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
    plan = plan or make_plan(config)
    if getattr(plan, "input_kind", "folder") == "folder" and "://" not in plan.base:
        # Warns about empty class folders, links and unlistable folders; InputProblem for unusable names.
        check_local_input(plan.base, plan.pattern, plan.layout)
    dry_run = bool(options.get_all_options().get("dry_run"))
    resuming = False
    if not dry_run:
        run_folder = manifest.run_folder(plan.fingerprint(config)) if config.resume else None
        resuming = prepare_output(config.output, config.overwrite, run_folder)
        if config.resume:
            logging.info("resuming %s: finished shards are kept" if resuming else "nothing to resume in %s: converting everything", config.output)
    logging.info(
        "input: %d files, %.1f MB, layout %s; shards per split: %s",
        plan.num_files, plan.input_bytes / 1e6, plan.layout, plan.num_shards,
    )
    p = beam.Pipeline(options=options)
    build_pipeline(p, config, plan, resume=resuming)
    result = p.run()
    if not wait and not dry_run:
        job_id = getattr(result, "job_id", None)
        logging.info("submitted%s; %s appears in %s when it completes", f" job {job_id()}" if callable(job_id) else "", manifest.SUCCESS_FILE, config.output)
        return None
    result.wait_until_finish()
    if resuming:
        resumed = result.metrics().query(beam.metrics.MetricsFilter().with_name("shards_resumed"))["counters"]
        logging.info("%d finished shard(s) kept from the interrupted run", sum(c.committed or 0 for c in resumed))
    if dry_run:
        return None
    return read_manifest(config.output)
