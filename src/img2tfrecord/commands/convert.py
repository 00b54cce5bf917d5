"""``img2tfrecord convert``: options to a ``ConvertConfig``, the run, the summary.

``convert`` splits its own options (declared once, in ``img2tfrecord/options.py``)
from Beam's: every standard Beam option (``--runner``, ``--project``,
``--direct_num_workers``, ...) passes through untouched, and anything
neither side knows is a usage error.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any, Dict, List, Sequence

from img2tfrecord import storage
from img2tfrecord.api import check_pipeline_args
from img2tfrecord.commands.errors import EXIT_ERROR_BUDGET, EXIT_OK, UsageError
from img2tfrecord.errors import STOP_SIGNALS, Interrupted

if TYPE_CHECKING:
    from img2tfrecord.schemas.dataset_json import DatasetManifest
from img2tfrecord.options import add_convert_arguments


def add_parser(subparsers) -> List[str]:
    """Register ``convert``; -> its option strings."""
    p = subparsers.add_parser(
        "convert",
        help="convert images into TFRecord shards",
        description="Convert images into shuffled, split, sharded TFRecord files. "
        "Unrecognised --flags are passed to Apache Beam (e.g. --runner DataflowRunner --project P).",
    )
    return add_convert_arguments(p)


def format_summary(doc: DatasetManifest, all_classes: bool = False) -> str:
    """The run's summary: its accounting, each split's records and shards, its classes (their spread where
    they are many: ``class_counts.py``, every class with ``all_classes``), rejections and statistics."""
    from img2tfrecord import inspection
    from img2tfrecord.class_counts import is_many, spread_lines
    from img2tfrecord.images.geometry import CLIPPED_TO_IMAGE
    from img2tfrecord.schemas import output_files

    lines = []
    acc = doc.accounting
    assert acc is not None  # every manifest a run writes has its accounting
    lines.append(
        f"{acc.inputs} inputs: {acc.written} records written, {acc.rejected} rejected"
        + (f", {acc.skipped} junk files skipped" if acc.skipped else "")
        + (f"; {acc.withdrawn} records withdrawn (changed or removed inputs)" if acc.withdrawn else "")
    )
    spread = is_many(doc.labels, all_classes) and any(info.examples_per_class for info in doc.splits.values())
    for split, info in doc.splits.items():
        lines.append(
            f"  {split}: {info.num_examples} records in {len(info.shards)} shard(s), {info.num_bytes / 1e6:.1f} MB"
        )
        for class_name, n in () if spread else info.examples_per_class.items():
            lines.append(f"    {class_name}: {n}")
        if info.boxes_per_class is not None:
            per_class = ", ".join(f"{name} {n}" for name, n in info.boxes_per_class.items())
            lines.append(f"    boxes: {per_class or 'none'}")
            dropped = dict(info.dropped_boxes or {})
            clipped = dropped.pop(CLIPPED_TO_IMAGE, 0)  # kept, not dropped
            if dropped:
                lines.append("    boxes dropped: " + ", ".join(f"{reason} {n}" for reason, n in dropped.items()))
            if clipped:
                lines.append(f"    boxes partly outside their image, clipped to it: {clipped} ({CLIPPED_TO_IMAGE})")
    if spread:
        lines.append(f"  {len(doc.labels)} classes (every one: --all-classes, or {output_files.MANIFEST_FILE}):")
        lines.extend(spread_lines(doc.labels, {s: i.examples_per_class for s, i in doc.splits.items()}, "    "))
    if acc.rejected_by_reason:
        lines.append("rejected by reason (details in errors.jsonl):")
        for reason, n in acc.rejected_by_reason.items():
            lines.append(f"  {reason}: {n}")
    stats = doc.statistics
    if stats:
        lines.append(f"{inspection.statistics_line(stats)} (tf.Transform output: {stats['files']['transform_fn']}/)")
    return "\n".join(lines)


def print_plan(config, as_json: bool, all_classes: bool = False) -> int:
    """``convert --plan``: print what a run would do (``pipeline/preview.py``); nothing is written."""
    from img2tfrecord.pipeline.plan_model import PlanError
    from img2tfrecord.pipeline.preview import plan_run
    from img2tfrecord.pipeline.preview_report import format_plan

    try:
        found = plan_run(config)
    except PlanError as e:
        raise UsageError(str(e)) from None
    print(found.to_json() if as_json else format_plan(found, all_classes), end="" if as_json else "\n")
    return EXIT_OK


def run(ns: argparse.Namespace, pipeline_args: List[str], own_options: Sequence[str]) -> int:
    """``convert``; without ``--verbose`` stderr carries only img2tfrecord's own lines (``commands/quiet.py``)."""
    from img2tfrecord.commands.quiet import StderrFilter
    from img2tfrecord.pipeline.fast_start import one_blas_thread, pause_collection, resume_collection

    pause_collection()  # until the job starts (pipeline/fast_start.py)
    one_blas_thread()  # before numpy is imported
    # Before Beam, gRPC or TensorFlow is loaded: their C++ code writes to fd 2 as it loads.
    stderr_filter = None if ns.verbose else StderrFilter().start()
    previous = _stop_on_sigterm()
    try:
        return _run(ns, pipeline_args, own_options)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        resume_collection()
        if stderr_filter is not None:
            stderr_filter.stop()


def _stop_on_sigterm() -> Dict[int, Any]:
    """Until the run holds its output (``pipeline/run.py`` takes over then), SIGTERM, SIGHUP and SIGQUIT stop the
    command as Ctrl-C does: one line, exit 128 + the signal; -> the handlers they replaced ({} off the main
    thread)."""

    def stop(signum, unused_frame):
        raise Interrupted(signum)

    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signum: signal.signal(signum, stop) for signum in STOP_SIGNALS if signum != signal.SIGINT}


def _run(ns: argparse.Namespace, pipeline_args: List[str], own_options: Sequence[str]) -> int:
    from img2tfrecord.api import run_config
    from img2tfrecord.commands.quiet import OwnLinesOnly
    from img2tfrecord.errors import ErrorBudgetExceeded
    from img2tfrecord.option_keywords import option_arguments
    from img2tfrecord.pipeline.config import config_from_options
    from img2tfrecord.pipeline.fast_start import import_beam_for_options, import_beam_lean
    from img2tfrecord.schemas import output_files

    # Before Beam is asked about its options: Beam adds a stderr handler to an unconfigured root logger.
    configured = list(logging.getLogger().handlers)
    logging.basicConfig(level=logging.WARNING if ns.quiet else logging.INFO, format="%(levelname)s %(message)s")
    if not ns.verbose:
        for handler in logging.getLogger().handlers:
            if handler not in configured:
                handler.addFilter(OwnLinesOnly())
    import_beam_for_options(pipeline_args, analyse=ns.analyze)  # checking Beam's flags imports Beam
    check_pipeline_args(pipeline_args, own_options, ns.input)
    if ns.json and not ns.plan:
        raise UsageError("--json prints the plan as JSON: give it with --plan")
    config = config_from_options(ns.input, ns.output, **option_arguments(ns))
    if not ns.verbose:
        # Beam's own INFO lines (worker start-up, bundle progress) drown the useful ones.
        logging.getLogger("apache_beam").setLevel(logging.WARNING)
        # So do those of tf.Transform's libraries (the analysis, transforms/analyze.py).
        for name in ("absl", "tensorflow"):
            logging.getLogger(name).setLevel(logging.WARNING)
        # TensorFlow's own C++ log lines (no GPU found, CPU features) say nothing about the run.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if ns.plan:
        storage.use_pipeline_options(pipeline_args)
        import_beam_lean()  # the plan times building the graph without the analysis (pipeline/startup.py)
        return print_plan(config, ns.json, ns.all_classes)
    # The job itself enforces --max-error-rate: it writes everything, then fails.
    try:
        doc = run_config(config, pipeline_args, wait=not ns.no_wait, show_progress=not ns.quiet, own_process=True)
    except ErrorBudgetExceeded as e:
        if e.result is not None:  # a finished output over the budget; a run that wrote no record has none
            print(format_summary(e.result, ns.all_classes))
            print(f"output: {config.output}")
        # One line; the runner's traceback of the job's failure shows only with --verbose (commands/quiet.py).
        errors_file = e.result.files["errors"] if e.result is not None else output_files.ERRORS_FILE
        details = "" if errors_file in str(e) else f"; details in {config.output}/{errors_file}"
        print(f"img2tfrecord: {e}{details}", file=sys.stderr)
        return EXIT_ERROR_BUDGET
    if doc is None:
        from img2tfrecord.pipeline.runner import is_dry_run, pipeline_options

        if is_dry_run(pipeline_options(pipeline_args)):
            print("dry run: the job was built and translated; nothing ran and nothing was written")
        else:
            print(f"submitted: {config.output}/{output_files.SUCCESS_FILE} appears when the job completes")
        return EXIT_OK
    print(format_summary(doc, ns.all_classes))
    print(f"output: {config.output}")
    return EXIT_OK
