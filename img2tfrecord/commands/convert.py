"""``img2tfrecord convert``: options to a ``ConvertConfig``, the run, the summary.

``convert`` splits its own options (declared once, in ``img2tfrecord/options.py``)
from Beam's: every standard Beam option (``--runner``, ``--project``,
``--direct_num_workers``, ...) passes through untouched, and anything
neither side knows is a usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import io
import logging
import os
import sys
from typing import List, Optional, Sequence

from img2tfrecord.commands.errors import EXIT_ERROR_BUDGET, EXIT_OK, UsageError
from img2tfrecord.options import DEFAULT_SHARD_SIZE_MB, TASK_CLASSIFICATION, TASK_DETECTION, add_convert_arguments


def add_parser(subparsers) -> List[str]:
    """Register ``convert``; -> its option strings."""
    p = subparsers.add_parser(
        "convert",
        help="convert images into TFRecord shards",
        description="Convert images into shuffled, split, sharded TFRecord files. "
        "Unrecognised --flags are passed to Apache Beam (e.g. --runner DataflowRunner --project P).",
    )
    return add_convert_arguments(p)


def _expanded_glob(input_path: str, strays: Sequence[str]) -> Optional[str]:
    """The glob a shell expanded into ``--input``'s value and the bare words after it, or None.

    Such words name existing paths as deep as the input (a shell expands a glob into those only);
    the glob keeps what they share and has ``*`` where they differ (``photos/*/*.jpg``).
    """
    paths = [input_path, *strays]
    depth = input_path.count("/")
    if not all(p.count("/") == depth and os.path.lexists(p) for p in paths):
        return None
    columns = list(zip(*(p.split("/") for p in paths)))
    parts = [column[0] if len(set(column)) == 1 else "*" for column in columns[:-1]]
    names = columns[-1]
    suffixes = {os.path.splitext(name)[1] for name in names}
    parts.append(names[0] if len(set(names)) == 1 else "*" + (suffixes.pop() if len(suffixes) == 1 else ""))
    return "/".join(parts)


def check_pipeline_args(args: Sequence[str], own_options: Sequence[str], input_path: Optional[str] = None) -> None:
    """UsageError for an argument that neither convert nor Beam knows, or a Beam option Beam refuses.

    Bare words that look like more matches of a glob the shell expanded into ``input_path`` get a
    hint to quote the glob.
    """
    from apache_beam.options.pipeline_options import PipelineOptions

    args = list(args)
    # A Beam flag takes at most one value: two bare words in a row are a stray.
    strays = [
        arg
        for i, arg in enumerate(args)
        if not arg.startswith("-") and (i == 0 or not args[i - 1].startswith("-") or "=" in args[i - 1])
    ]
    if strays:
        glob = _expanded_glob(input_path, strays) if input_path else None
        quote = f" (quote a glob so that the shell does not expand it: --input '{glob}')" if glob else ""
        raise UsageError(f"unrecognized argument {strays[0]}{quote}")
    beam_log = logging.getLogger("apache_beam.options.pipeline_options")
    disabled, beam_log.disabled = beam_log.disabled, True  # its "Discarding unparseable args" warning
    refused = io.StringIO()
    try:
        with contextlib.redirect_stderr(refused):
            options = PipelineOptions(args)
            known = options.get_all_options()
            everything = options.get_all_options(retain_unknown_options=True)
    except SystemExit:  # argparse refused a value of a Beam option; its message says which
        lines = [line for line in refused.getvalue().splitlines() if line.strip()]
        raise UsageError(
            f"invalid pipeline option: {lines[-1].split('error: ', 1)[-1] if lines else ' '.join(args)}"
        ) from None
    finally:
        beam_log.disabled = disabled
    unknown = [name for name in everything if name not in known]
    if unknown:
        flag = next(
            (a.split("=", 1)[0] for a in args if a.lstrip("-").split("=", 1)[0].replace("-", "_") == unknown[0]),
            f"--{unknown[0]}",
        )
        candidates = list(own_options) + [f"--{name}" for name in known]
        hint = difflib.get_close_matches(flag, candidates, n=1)
        raise UsageError(f"unrecognized argument {flag}" + (f" (did you mean {hint[0]}?)" if hint else ""))


def config_from_args(ns: argparse.Namespace):
    from img2tfrecord.conversion.sharding import parse_splits
    from img2tfrecord.images import ImageOptions
    from img2tfrecord.pipeline.config import ConvertConfig
    from img2tfrecord.sources.kinds import output_inside_input

    try:
        splits = parse_splits(ns.splits) if ns.splits is not None else None
    except ValueError as e:
        raise UsageError(f"--splits: {e}") from None
    fmt = ns.format
    if fmt is None:
        fmt = "keep" if ns.image_size is None and ns.channels == 3 else "jpeg"
    if ns.input.rstrip("/") == ns.output.rstrip("/"):
        raise UsageError("--output must differ from --input")
    if ns.resume and ns.overwrite:
        raise UsageError("--resume keeps what an interrupted run finished, --overwrite replaces it: give one")
    if ns.json and not ns.plan:
        raise UsageError("--json prints the plan as JSON: give it with --plan")
    if ns.exact_statistics and not ns.analyze:
        raise UsageError("--exact-statistics applies to the analysis, which --no-analyze skips")
    if ns.exact_statistics and ns.sequence:
        raise UsageError("--exact-statistics applies to the analysis, and --sequence records are not analysed")
    if ns.task == TASK_DETECTION and ns.sequence:
        raise UsageError("--sequence makes one record per clip; detection records are one per image")
    if ns.require_boxes and ns.task == TASK_CLASSIFICATION:
        raise UsageError("--require-boxes applies to detection, not to --task classification")
    if ns.dedupe and ns.sequence:
        raise UsageError("--dedupe compares single files; a --sequence clip is many frames: give one of them")
    if "://" not in ns.output and os.path.exists(ns.output) and not os.path.isdir(ns.output):
        raise UsageError(f"--output {ns.output} is a file: give a folder (it is created if missing)")
    if output_inside_input(ns.input, ns.output):
        raise UsageError(
            f"--output {ns.output} is inside --input {ns.input}: a later run over the input would read the "
            f"output as a class; give an --output outside the input, e.g. {_sibling_output(ns.input)}"
        )
    image = ImageOptions(
        size=ns.image_size,
        resize=ns.resize,
        channels=ns.channels,
        format=fmt,
        quality=ns.quality,
        max_pixels=ns.max_pixels,
        max_file_bytes=int(ns.max_file_mb * 1024 * 1024),
        decode_timeout_s=ns.decode_timeout_s,
    )
    return ConvertConfig(
        input=ns.input,
        output=ns.output.rstrip("/") if "://" in ns.output else _local_abs(ns.output),
        image=image,
        splits=splits,
        seed=ns.seed,
        shard_size_mb=ns.shard_size_mb or DEFAULT_SHARD_SIZE_MB,
        num_shards=ns.num_shards,
        compression=ns.compression,
        overwrite=ns.overwrite,
        resume=ns.resume,
        analyze=ns.analyze,
        exact_statistics=ns.exact_statistics,
        sequence=ns.sequence,
        task=ns.task,
        require_boxes=ns.require_boxes,
        dedupe=ns.dedupe,
    )


def _sibling_output(input_path: str) -> str:
    """An output folder beside the folder ``input_path`` lists: ``photos/`` -> ``photos-tfrecords``."""
    from img2tfrecord.sources.kinds import input_folder, listed_folder

    folder = (listed_folder(input_path) or input_path).rstrip("/")
    if os.path.basename(folder) in ("", ".", ".."):  # name it: "./-tfrecords" would be inside
        folder = input_folder(input_path) or folder
    return f"{folder}-tfrecords"


def _local_abs(path: str) -> str:
    import os

    return os.path.abspath(path)


def format_summary(doc) -> str:
    from img2tfrecord import inspection
    from img2tfrecord.images.geometry import CLIPPED_TO_IMAGE
    from img2tfrecord.schemas import manifest

    lines = []
    acc = doc["accounting"]
    lines.append(
        f"{acc['inputs']} inputs: {acc['written']} records written, {acc['rejected']} rejected"
        + (f", {acc['skipped']} junk files skipped" if acc.get("skipped") else "")
    )
    for split, info in doc["splits"].items():
        lines.append(
            f"  {split}: {info['num_examples']} records in {len(info['shards'])} shard(s), "
            f"{info['num_bytes'] / 1e6:.1f} MB"
        )
        for class_name, n in info["examples_per_class"].items():
            lines.append(f"    {class_name}: {n}")
        if manifest.BOXES_PER_CLASS in info:
            per_class = ", ".join(f"{name} {n}" for name, n in info[manifest.BOXES_PER_CLASS].items())
            lines.append(f"    boxes: {per_class or 'none'}")
            dropped = dict(info[manifest.DROPPED_BOXES])
            clipped = dropped.pop(CLIPPED_TO_IMAGE, 0)  # kept, not dropped
            if dropped:
                lines.append("    boxes dropped: " + ", ".join(f"{reason} {n}" for reason, n in dropped.items()))
            if clipped:
                lines.append(f"    boxes partly outside their image, clipped to it: {clipped} ({CLIPPED_TO_IMAGE})")
    if acc["rejected_by_reason"]:
        lines.append("rejected by reason (details in errors.jsonl):")
        for reason, n in acc["rejected_by_reason"].items():
            lines.append(f"  {reason}: {n}")
    stats = doc.get(manifest.STATISTICS)
    if stats:
        lines.append(f"{inspection.statistics_line(stats)} (tf.Transform output: {stats['files']['transform_fn']}/)")
    return "\n".join(lines)


def print_plan(config, as_json: bool, processes: int) -> int:
    """``convert --plan``: print what a run would do (``pipeline/preview.py``); nothing is written."""
    from img2tfrecord.pipeline import PlanError
    from img2tfrecord.pipeline.preview import format_plan, plan_run

    try:
        found = plan_run(config, processes)
    except PlanError as e:
        raise UsageError(str(e)) from None
    print(found.to_json() if as_json else format_plan(found), end="" if as_json else "\n")
    return EXIT_OK


def run(ns: argparse.Namespace, pipeline_args: List[str], own_options: Sequence[str]) -> int:
    """``convert``; without ``--verbose`` stderr carries only img2tfrecord's own lines (``commands/quiet.py``)."""
    from img2tfrecord.commands.quiet import StderrFilter

    # Before Beam, gRPC or TensorFlow is loaded: their C++ code writes to fd 2 as it loads.
    stderr_filter = None if ns.verbose else StderrFilter().start()
    try:
        return _run(ns, pipeline_args, own_options)
    finally:
        if stderr_filter is not None:
            stderr_filter.stop()


def _run(ns: argparse.Namespace, pipeline_args: List[str], own_options: Sequence[str]) -> int:
    from img2tfrecord.commands.quiet import OwnLinesOnly
    from img2tfrecord.pipeline import OutputNotEmpty, PlanError
    from img2tfrecord.pipeline.lock import OutputLocked
    from img2tfrecord.pipeline.outputs import AlreadyComplete, OutputNotWritable
    from img2tfrecord.pipeline.run import default_processes, is_dry_run, pipeline_options
    from img2tfrecord.pipeline.run import run as run_pipeline
    from img2tfrecord.readers.records import read_manifest
    from img2tfrecord.schemas import manifest
    from img2tfrecord.transforms.finalize import ErrorBudgetExceeded

    # Before Beam is asked about its options: Beam adds a stderr handler to an unconfigured root logger.
    configured = list(logging.getLogger().handlers)
    logging.basicConfig(level=logging.WARNING if ns.quiet else logging.INFO, format="%(levelname)s %(message)s")
    if not ns.verbose:
        for handler in logging.getLogger().handlers:
            if handler not in configured:
                handler.addFilter(OwnLinesOnly())
    check_pipeline_args(pipeline_args, own_options, ns.input)
    config = config_from_args(ns)
    config = dataclasses.replace(
        config,
        processes=ns.processes or default_processes(pipeline_options(pipeline_args)),
        max_error_rate=ns.max_error_rate,
    )
    if not ns.verbose:
        # Beam's own INFO lines (worker start-up, bundle progress) drown the useful ones.
        logging.getLogger("apache_beam").setLevel(logging.WARNING)
        # So do those of tf.Transform's libraries (the analysis, transforms/analyze.py).
        for name in ("absl", "tensorflow"):
            logging.getLogger(name).setLevel(logging.WARNING)
        # TensorFlow's own C++ log lines (no GPU found, CPU features) say nothing about the run.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # tf.Transform runs on Keras 2 and sets this itself, but only after TensorFlow is
    # imported, which then has loaded Keras 3 as well (~0.5 s); set before the import.
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    if ns.plan:
        return print_plan(config, ns.json, ns.processes or default_processes())
    # The job itself enforces --max-error-rate: it writes everything, then fails.
    budget_exceeded = None
    try:
        doc = run_pipeline(config, pipeline_args, wait=not ns.no_wait, show_progress=not ns.quiet)
    except AlreadyComplete as e:
        logging.info("%s", e)
        doc = read_manifest(config.output)
    except (PlanError, OutputNotEmpty, OutputNotWritable, OutputLocked) as e:
        raise UsageError(str(e)) from None
    except Exception as e:
        # Runners re-raise the job's exception as it was or wrapped in their own.
        if not isinstance(e, ErrorBudgetExceeded) and ErrorBudgetExceeded.__name__ not in str(e):
            raise
        budget_exceeded = next(
            (line for line in str(e).splitlines() if line.startswith("error budget exceeded")), str(e)
        ).split(" [while running")[0]
        doc = read_manifest(config.output)
    if doc is None:
        if is_dry_run(pipeline_options(pipeline_args)):
            print("dry run: the job was built and translated; nothing ran and nothing was written")
        else:
            print(f"submitted: {config.output}/{manifest.SUCCESS_FILE} appears when the job completes")
        return EXIT_OK
    print(format_summary(doc))
    print(f"output: {config.output}")
    if budget_exceeded:
        # One line; the runner's traceback of the job's failure shows only with --verbose (commands/quiet.py).
        errors_file = doc.get("files", {}).get("errors", manifest.ERRORS_FILE)
        details = "" if errors_file in budget_exceeded else f"; details in {config.output}/{errors_file}"
        print(f"img2tfrecord: {budget_exceeded}{details}", file=sys.stderr)
        return EXIT_ERROR_BUDGET
    return EXIT_OK
