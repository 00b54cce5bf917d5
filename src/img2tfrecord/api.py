"""The Python API: :func:`convert` and :func:`plan`, with the command line's options, checks and messages.

Their keyword options are generated from ``options.py``'s declaration: the same names (the flags' ``dest``:
``--image-size`` is ``image_size``, ``--no-analyze`` is ``analyze=False``), defaults and validation, through
the same parser, so an option error is the text the command line prints. Beam options are a
``PipelineOptions`` or a list of flags. Beam and TensorFlow are imported on the first call, not on import.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import inspect
import io
import logging
import os
from typing import TYPE_CHECKING, Any, List, Mapping, Optional, Sequence, Tuple, Union, cast

from img2tfrecord.errors import ConversionFailed, ErrorBudgetExceeded, UsageError
from img2tfrecord.option_values import DEFAULT_SHARD_SIZE_MB, TASK_CLASSIFICATION, TASK_DETECTION
from img2tfrecord.options import CONVERT_OPTIONS, add_convert_arguments
from img2tfrecord.schemas.manifest import COMPRESSION_NONE, FILE_FORMAT_TFRECORD

if TYPE_CHECKING:
    from apache_beam.options.pipeline_options import PipelineOptions

    from img2tfrecord.images import ImageOptions
    from img2tfrecord.pipeline.config import ConvertConfig
    from img2tfrecord.pipeline.preview_report import RunPlan
    from img2tfrecord.schemas.dataset_manifest import DatasetManifest

BeamOptions = Union["PipelineOptions", Sequence[str], None]

# Command-line switches that are not conversion options: the API has plan() for --plan and --json,
# convert(wait=False) for --no-wait, and prints nothing (--quiet, --verbose are the command's).
_COMMAND_ONLY = ("input", "output", "plan", "json", "quiet", "verbose", "no_wait")
KEYWORD_OPTIONS = {option.dest: option for option in CONVERT_OPTIONS if option.dest not in _COMMAND_ONLY}


class _RaisingParser(argparse.ArgumentParser):
    """``convert``'s parser, raising the message it would print instead of exiting."""

    def error(self, message):
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    parser = _RaisingParser(prog="img2tfrecord.convert", add_help=False)
    add_convert_arguments(parser)
    return parser


def _flag_value(name: str, value: Any) -> str:
    """A keyword's value as its flag's text: ``(320, 240)`` -> ``320x240``, ``{"train": 0.8}`` -> ``train=0.8``."""
    if name == "image_size" and isinstance(value, (tuple, list)) and len(value) == 2:
        return f"{value[0]}x{value[1]}"
    if name == "splits" and isinstance(value, Mapping):
        return ",".join(f"{split}={fraction}" for split, fraction in value.items())
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise UsageError(f"{name}: {value!r} is not a {name.replace('_', ' ')} ({KEYWORD_OPTIONS[name].flag})")
    return str(value)


def _unexpected(name: str, allowed: Sequence[str]) -> str:
    """``unexpected keyword argument 'fromat' (did you mean format?)``."""
    hint = difflib.get_close_matches(name, list(allowed), n=1)
    return f"unexpected keyword argument {name!r}" + (f" (did you mean {hint[0]}?)" if hint else "")


def _arguments(input: str, output: str, options: Mapping[str, Any]) -> List[str]:
    """The command-line arguments that ask for ``options``; TypeError names an unknown keyword."""
    args = [f"--input={input}", f"--output={output}"]
    for name, value in options.items():
        option = KEYWORD_OPTIONS.get(name)
        if option is None:
            raise TypeError(f"convert() got an {_unexpected(name, list(KEYWORD_OPTIONS))}")
        if option.switch or option.negates:
            if not isinstance(value, bool):
                raise UsageError(f"{name}: {value!r} is not True or False ({option.flag})")
            if value != bool(option.negates):  # a switch turned on, a negating flag turned off
                args.append(option.flag)
        elif value is not None:
            args.append(f"{option.flag}={_flag_value(name, value)}")
    return args


def beam_arguments(pipeline_options: BeamOptions) -> List[str]:
    """Beam's options as flags, the way ``PipelineOptions.from_dictionary`` reads them back."""
    if pipeline_options is None:
        return []
    if isinstance(pipeline_options, str):
        raise UsageError("pipeline_options: give a list of flags or a PipelineOptions, not one string")
    get_all_options = getattr(pipeline_options, "get_all_options", None)
    if get_all_options is None:
        return [str(arg) for arg in cast(Sequence[str], pipeline_options)]
    import json

    flags: List[str] = []
    values = get_all_options(drop_default=True, retain_unknown_options=True)
    for key, value in values.items():
        if isinstance(value, bool):
            flags.extend([f"--{key}"] if value else [])
        elif isinstance(value, list):
            flags.extend(f"--{key}={item}" for item in value)
        elif isinstance(value, dict):
            flags.append(f"--{key}={json.dumps(value)}")
        elif value is not None:
            flags.append(f"--{key}={value}")
    return flags


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
    args = list(args)
    if not args:  # nothing to check, and no reason to load Beam
        return
    from apache_beam.options.pipeline_options import PipelineOptions

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


# ---------------------------------------------------------------------------
# Options -> a checked ConvertConfig (shared with the command line).


def config_from_args(ns: argparse.Namespace, pipeline_args: Sequence[str] = ()) -> ConvertConfig:
    """The run's configuration from parsed ``convert`` options; UsageError for a combination that cannot run."""
    from img2tfrecord.conversion.sharding import parse_splits
    from img2tfrecord.pipeline.config import ConvertConfig
    from img2tfrecord.sources.kinds import output_inside_input

    try:
        splits = parse_splits(ns.splits) if ns.splits is not None else None
    except ValueError as e:
        raise UsageError(f"--splits: {e}") from None
    if ns.input.rstrip("/") == ns.output.rstrip("/"):
        raise UsageError("--output must differ from --input")
    if ns.resume and ns.overwrite:
        raise UsageError("--resume keeps what an interrupted run finished, --overwrite replaces it: give one")
    if ns.append and ns.overwrite:
        raise UsageError("--append adds to a finished output, --overwrite replaces it: give one")
    for flag, given in (
        ("--allow-new-classes", ns.allow_new_classes),
        ("--retry-rejected", ns.retry_rejected),
        ("--accept-changes", ns.accept_changes),
    ):
        if given and not ns.append:
            raise UsageError(f"{flag} applies to --append")
    if getattr(ns, "json", False) and not getattr(ns, "plan", False):
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
    if ns.file_format != FILE_FORMAT_TFRECORD and ns.compression != COMPRESSION_NONE:
        raise UsageError(f"--compression {ns.compression} compresses TFRecord shards, not {ns.file_format} ones")
    if "://" not in ns.output and os.path.exists(ns.output) and not os.path.isdir(ns.output):
        raise UsageError(f"--output {ns.output} is a file: give a folder (it is created if missing)")
    if output_inside_input(ns.input, ns.output):
        raise UsageError(
            f"--output {ns.output} is inside --input {ns.input}: a later run over the input would read the "
            f"output as a class; give an --output outside the input, e.g. {_sibling_output(ns.input)}"
        )
    image = image_options(ns)
    return ConvertConfig(
        input=ns.input,
        output=ns.output.rstrip("/") if "://" in ns.output else os.path.abspath(ns.output),
        image=image,
        splits=splits,
        seed=ns.seed,
        shard_size_mb=ns.shard_size_mb or DEFAULT_SHARD_SIZE_MB,
        num_shards=ns.num_shards,
        compression=ns.compression,
        file_format=ns.file_format,
        overwrite=ns.overwrite,
        resume=ns.resume,
        analyze=ns.analyze,
        exact_statistics=ns.exact_statistics,
        sequence=ns.sequence,
        task=ns.task,
        require_boxes=ns.require_boxes,
        dedupe=ns.dedupe,
        append=ns.append,
        allow_new_classes=ns.allow_new_classes,
        retry_rejected=ns.retry_rejected,
        accept_changes=ns.accept_changes,
        processes=ns.processes or 0,  # 0: the run picks (pipeline/run.default_processes)
        max_error_rate=ns.max_error_rate,
    )


def image_options(ns: argparse.Namespace) -> ImageOptions:
    """The image options of parsed ``convert`` options; ``--format`` by default keeps the stored bytes
    when nothing changes the pixels, else JPEG."""
    from img2tfrecord.images import ImageOptions

    fmt = ns.format
    if fmt is None:
        fmt = "keep" if ns.image_size is None and ns.channels == 3 else "jpeg"
    return ImageOptions(
        size=ns.image_size,
        resize=ns.resize,
        resample=ns.resample,
        channels=ns.channels,
        format=fmt,
        quality=ns.quality,
        max_pixels=ns.max_pixels,
        max_file_bytes=int(ns.max_file_mb * 1024 * 1024),
        decode_timeout_s=ns.decode_timeout_s,
    )


def parse_options(
    options: Mapping[str, Any], allowed: Optional[Sequence[str]] = None, input: str = "-", output: str = "-"
) -> argparse.Namespace:
    """Keyword options parsed as ``convert`` parses its flags; ``allowed`` limits the keywords taken."""
    unknown = [name for name in options if allowed is not None and name not in allowed]
    if unknown and allowed is not None:
        raise TypeError(f"{_unexpected(unknown[0], allowed)}; takes {', '.join(allowed)}")
    return _parser().parse_args(_arguments(input, output, options))


def _sibling_output(input_path: str) -> str:
    """An output folder beside the folder ``input_path`` lists: ``photos/`` -> ``photos-tfrecords``."""
    from img2tfrecord.sources.kinds import input_folder, listed_folder

    folder = (listed_folder(input_path) or input_path).rstrip("/")
    if os.path.basename(folder) in ("", ".", ".."):  # name it: "./-tfrecords" would be inside
        folder = input_folder(input_path) or folder
    return f"{folder}-tfrecords"


def _config(input: str, output: str, options: Mapping[str, Any], beam_args: Sequence[str]) -> ConvertConfig:
    return config_from_args(parse_options(options, input=input, output=output), beam_args)


# ---------------------------------------------------------------------------
# Running.


def run_config(
    config: ConvertConfig,
    pipeline_args: Sequence[str] = (),
    wait: bool = True,
    show_progress: bool = False,
    own_process: bool = False,
) -> Optional[DatasetManifest]:
    """Run a checked configuration; the written manifest, or None for a dry run or ``wait=False``.
    ``own_process``: the caller owns this interpreter (the CLI), so a local run imports Beam without the
    optional modules it does not use and keeps Beam's DoFn specs per class (``pipeline/own_process.py``).

    Raises UsageError (before any work), ErrorBudgetExceeded (with the finished ``result``),
    ConversionFailed (the runner's exception as ``__cause__``), and ``pipeline.run.Interrupted``
    (a KeyboardInterrupt) on SIGINT or SIGTERM.
    """
    from img2tfrecord.conversion.pool import close_started
    from img2tfrecord.pipeline.launch import (
        NothingNew,
        analysed,
        converts_in_this_process,
        launch,
        placed,
        prefetch_first_shards,
        start_pool_early,
    )
    from img2tfrecord.pipeline.lock import OutputLocked
    from img2tfrecord.pipeline.output_errors import OutputNotWritable
    from img2tfrecord.pipeline.outputs import AlreadyComplete, OutputNotEmpty, staging_left
    from img2tfrecord.pipeline.own_process import (
        OPTIONAL_MODULES,
        OPTIONAL_WITH_ANALYSIS,
        cache_dofn_specs,
        import_beam_lean,
    )
    from img2tfrecord.pipeline.plan_model import PlanError
    from img2tfrecord.readers.records import read_manifest

    # tf.Transform runs on Keras 2 and sets this itself, but only after TensorFlow is
    # imported, which then has loaded Keras 3 as well; set before the import.
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    try:
        try:
            launched = launch(config)  # before Beam is loaded: an append may find nothing to do
        except NothingNew as e:
            if not staging_left(config.output):
                logging.info("%s", e)
                return read_manifest(config.output)
            launched = None  # the run removes what a stopped append left, under the output's lock
        # The pool's processes start while this one places the work items and imports Beam; meanwhile they
        # convert the first shards' items.
        pool = start_pool_early(config, launched, pipeline_args) if launched is not None else None
        try:
            if launched is not None:
                launched = placed(config, launched)
                if pool is not None:
                    prefetch_first_shards(config, launched, pool)
                if own_process and converts_in_this_process(pipeline_args):
                    analysis = analysed(config, launched.plan, launched.append)
                    import_beam_lean(OPTIONAL_WITH_ANALYSIS if analysis else OPTIONAL_MODULES)
                    cache_dofn_specs()
            from img2tfrecord.pipeline.run import run as run_pipeline

            return run_pipeline(config, pipeline_args, wait=wait, show_progress=show_progress, launched=launched)
        finally:
            close_started()
    except AlreadyComplete as e:
        logging.info("%s", e)
        return read_manifest(config.output)
    except (PlanError, OutputNotEmpty, OutputNotWritable, OutputLocked) as e:
        raise UsageError(str(e)) from None
    except KeyboardInterrupt:
        raise
    except Exception as e:
        # Runners re-raise the job's exception as it was or wrapped in their own.
        if isinstance(e, ErrorBudgetExceeded) or ErrorBudgetExceeded.__name__ in str(e):
            message = next(
                (line for line in str(e).splitlines() if line.startswith("error budget exceeded")), str(e)
            ).split(" [while running")[0]
            raise ErrorBudgetExceeded(message, read_manifest(config.output)) from None
        last_line = str(e).strip().splitlines()[-1] if str(e).strip() else ""
        raise ConversionFailed(f"{type(e).__name__}: {last_line}") from e


def _run_signature() -> Tuple[inspect.Signature, inspect.Signature]:
    """The signatures of :func:`convert` and :func:`plan`, their keywords the declared options."""
    ns = _parser().parse_args(["--input=i", "--output=o"])
    keywords = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=getattr(ns, name)) for name in KEYWORD_OPTIONS
    ]
    positional = [
        inspect.Parameter("input", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str),
        inspect.Parameter("output", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str),
    ]
    beam = inspect.Parameter("pipeline_options", inspect.Parameter.KEYWORD_ONLY, default=None)
    run_convert = [
        inspect.Parameter("wait", inspect.Parameter.KEYWORD_ONLY, default=True),
        inspect.Parameter("progress", inspect.Parameter.KEYWORD_ONLY, default=False),
    ]
    return (
        inspect.Signature(positional + keywords + [beam] + run_convert),
        inspect.Signature(positional + keywords + [beam]),
    )


def convert(
    input: str,
    output: str,
    *,
    pipeline_options: BeamOptions = None,
    wait: bool = True,
    progress: bool = False,
    **options: Any,
) -> Optional[DatasetManifest]:
    """Convert ``input`` into sharded TFRecord files in ``output``, as ``img2tfrecord convert`` does.

    Keywords are ``convert``'s options by their Python names (``image_size=224`` or ``(320, 240)``,
    ``splits={"train": 0.8, "validation": 0.2}``, ``analyze=False``, ``processes=2``, ...; see
    ``docs/options.md``); ``pipeline_options`` are Beam's (a ``PipelineOptions`` or a list of flags, e.g.
    ``["--runner=DataflowRunner", "--project=P"]``). ``progress`` logs the counts while it runs.

    Returns the written manifest (:class:`~img2tfrecord.schemas.dataset_manifest.DatasetManifest`), or None
    for a Dataflow ``--dry_run`` and with ``wait=False`` (the job was submitted and writes ``_SUCCESS`` itself).
    Raises :class:`~img2tfrecord.errors.UsageError` for a bad option, input or output before any work,
    :class:`~img2tfrecord.errors.ErrorBudgetExceeded` (its ``result`` the finished manifest) past
    ``max_error_rate`` or when no record was written, :class:`~img2tfrecord.errors.ConversionFailed` when
    the pipeline fails, and KeyboardInterrupt when SIGINT or SIGTERM stops it (``resume=True`` goes on).
    """
    beam_args = beam_arguments(pipeline_options)
    config = _config(input, output, options, beam_args)
    check_pipeline_args(beam_args, [option.flag for option in CONVERT_OPTIONS])
    return run_config(config, beam_args, wait=wait, show_progress=progress)


def plan(input: str, output: str, *, pipeline_options: BeamOptions = None, **options: Any) -> RunPlan:
    """What ``convert`` with these arguments would do, as ``convert --plan`` prints it; nothing is written.

    The plan lists and checks the input as the run does: layout, classes per split, junk, rejections
    known before converting, shards, output size and an estimated local run time (``.to_json()`` gives
    ``--plan --json``'s document). Raises :class:`~img2tfrecord.errors.UsageError` as :func:`convert` does.
    """
    from img2tfrecord.pipeline import PlanError
    from img2tfrecord.pipeline.preview import plan_run

    config = _config(input, output, options, beam_arguments(pipeline_options))
    try:
        return plan_run(config)
    except PlanError as e:
        raise UsageError(str(e)) from None


convert.__signature__, plan.__signature__ = _run_signature()  # type: ignore[attr-defined]


__all__ = ["ConversionFailed", "ErrorBudgetExceeded", "UsageError", "convert", "plan"]
