"""The Python API: :func:`convert` and :func:`plan`, with the command line's options, checks and messages.

Their keyword options are ``options.py``'s declaration: the same names (the flags' ``dest``: ``--image-size``
is ``image_size``, ``--no-analyze`` is ``analyze=False``), defaults and checks, taken as Python values
(``image_size=(320, 240)``, ``splits={"train": 0.8, "validation": 0.2}``) into the same ``ConvertConfig`` the
command line makes, so an option error is the text the command line prints. Beam options are a
``PipelineOptions`` or a list of flags. Beam and TensorFlow are imported on the first call, not on import.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import logging
import os
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Union, cast

from img2tfrecord import storage
from img2tfrecord.errors import ConversionFailed, ErrorBudgetExceeded, UsageError
from img2tfrecord.failures import RunLog, failure_of
from img2tfrecord.images.options import (
    DEFAULT_DECODE_TIMEOUT_S,
    DEFAULT_MAX_FILE_MB,
    DEFAULT_MAX_PIXELS,
)
from img2tfrecord.option_keywords import KEYWORD_OPTIONS
from img2tfrecord.option_values import (
    DEFAULT_QUALITY,
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
from img2tfrecord.options import CONVERT_OPTIONS
from img2tfrecord.schemas.output_files import DEFAULT_FILE_FORMAT

if TYPE_CHECKING:
    from apache_beam.options.pipeline_options import PipelineOptions

    from img2tfrecord.pipeline.config import ConvertConfig
    from img2tfrecord.pipeline.preview_report import RunPlan
    from img2tfrecord.schemas.dataset_json import DatasetManifest

BeamOptions = Union["PipelineOptions", Sequence[str], None]


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
    _check_runner(options)


def _check_runner(options: PipelineOptions) -> None:
    """UsageError for a ``--runner`` Beam does not know, or options it requires missing (Dataflow's project,
    region, temporary location): found before the launch writes anything."""
    from apache_beam.options.pipeline_options import GoogleCloudOptions, StandardOptions
    from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator
    from apache_beam.runners.runner import create_runner

    name = options.view_as(StandardOptions).runner
    if not name:
        return
    try:
        runner = create_runner(name)
    except (ValueError, ImportError, AttributeError) as e:
        known = "DirectRunner, FnApiRunner, DataflowRunner, PortableRunner, FlinkRunner, SparkRunner"
        why = "no such module" if isinstance(e, ImportError) else "not a Beam runner"
        raise UsageError(f"--runner {name}: {why} (runners: {known}, or a runner class's full name)") from None
    if type(runner).__name__ != "DataflowRunner":
        return
    errors = PipelineOptionsValidator(options, runner).validate()
    if options.view_as(GoogleCloudOptions).temp_location:  # Dataflow stages below it when not told otherwise
        errors = [e for e in errors if "staging_location" not in e]
    if errors:
        raise UsageError(f"--runner {name}: {' '.join(errors)}")


def config_of(input: str, output: str, options: Mapping[str, Any]) -> ConvertConfig:
    """The ``ConvertConfig`` of ``convert``'s keyword options given as a mapping; TypeError names an unknown
    keyword, UsageError a value or combination that cannot run."""
    from img2tfrecord.pipeline.config import config_from_options

    return config_from_options(input, output, **options)


def _options_of(arguments: Mapping[str, Any]) -> Dict[str, Any]:
    """The option keywords among :func:`convert`'s or :func:`plan`'s arguments (their ``locals()``)."""
    return {name: arguments[name] for name in KEYWORD_OPTIONS}


# ---------------------------------------------------------------------------
# Running.


def run_config(
    config: ConvertConfig,
    pipeline_args: Sequence[str] = (),
    wait: bool = True,
    show_progress: bool = False,
    own_process: bool = False,
) -> Optional[DatasetManifest]:
    """Launch and run a checked configuration; the written manifest, or None for a dry run or ``wait=False``.
    An append that finds nothing new ends here, at its launch, without Beam. ``own_process``: the caller owns
    this interpreter (the command line), so the run may start sooner (``pipeline/fast_start.py``).

    Raises UsageError (before any work), ErrorBudgetExceeded (with the finished ``result``),
    ConversionFailed (the runner's exception as ``__cause__``), and ``errors.Interrupted``
    (a KeyboardInterrupt) on SIGINT or SIGTERM.
    """
    from img2tfrecord.pipeline.launch import launch
    from img2tfrecord.pipeline.lock import OutputLocked
    from img2tfrecord.pipeline.output_errors import OutputNotWritable
    from img2tfrecord.pipeline.outputs import AlreadyComplete, OutputChanged, OutputNotEmpty, staging_left
    from img2tfrecord.pipeline.plan_model import PlanError
    from img2tfrecord.readers.records import read_manifest

    # tf.Transform runs on Keras 2 and sets this itself, but only after TensorFlow is
    # imported, which then has loaded Keras 3 as well; set before the import.
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    staging: Optional[str] = None
    stage = "listing the input"  # until the launch is done
    storage.use_pipeline_options(pipeline_args)  # the filesystems' settings, for the launch's listing too
    with RunLog(quiet_libraries=not logging.getLogger().handlers) as log:
        try:
            launched = launch(config)  # before Beam is loaded: an append may find nothing to do
            staging, stage = launched.run_dir, "running"
            if launched.nothing_new is not None:
                logging.info("%s", launched.nothing_new)
                if staging_left(config.output):
                    from img2tfrecord.pipeline.run import remove_append_staging

                    remove_append_staging(config, pipeline_args)
                return read_manifest(config.output)
            from img2tfrecord.pipeline.fast_start import start

            return start(launched, pipeline_args, wait=wait, show_progress=show_progress, own_process=own_process)
        except AlreadyComplete as e:
            logging.info("%s", e)
            return read_manifest(config.output)
        except (PlanError, OutputNotEmpty, OutputNotWritable, OutputLocked, OutputChanged) as e:
            raise UsageError(str(e)) from None
        except KeyboardInterrupt:
            raise
        except Exception as e:
            # Runners re-raise the job's exception as it was or wrapped in their own.
            if isinstance(e, ErrorBudgetExceeded) or ErrorBudgetExceeded.__name__ in str(e):
                message = next(
                    (line for line in str(e).splitlines() if line.startswith("error budget exceeded")), str(e)
                ).split(" [while running")[0]
                from img2tfrecord.schemas import output_files

                written = storage.exists(storage.join(config.output, output_files.MANIFEST_FILE))
                raise ErrorBudgetExceeded(message, read_manifest(config.output) if written else None) from None
            failure = failure_of(e, config.output, stage)
            kept = log.keep(e, staging)
            message = failure.line("call convert() again with resume=True", kept)
            raise ConversionFailed(message, failure.stage, failure.cause, failure.fix, kept) from e


def convert(
    input: str,
    output: str,
    *,
    # The options (options.py, in its order; tests/test_typed_api.py holds them against it), then the run's own.
    image_size: Optional[ImageSize] = None,
    resize: ResizeMode = "fill",
    resample: ResampleMode = "fast",
    channels: ChannelCount = 3,
    format: Optional[StoredFormat] = None,
    sequence: bool = False,
    task: Optional[TaskName] = None,
    require_boxes: bool = False,
    dedupe: bool = False,
    quality: int = DEFAULT_QUALITY,
    splits: Optional[SplitsGiven] = None,
    seed: int = 0,
    shard_size_mb: Optional[float] = None,
    num_shards: Optional[int] = None,
    compression: CompressionName = "none",
    file_format: FileFormatName = DEFAULT_FILE_FORMAT,
    overwrite: bool = False,
    allow_unguarded_lock: bool = False,
    resume: bool = False,
    append: bool = False,
    allow_new_classes: bool = False,
    retry_rejected: bool = False,
    accept_changes: bool = False,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_file_mb: float = DEFAULT_MAX_FILE_MB,
    decode_timeout_s: float = DEFAULT_DECODE_TIMEOUT_S,
    max_error_rate: Optional[float] = None,
    processes: Optional[int] = None,
    url_column: Optional[str] = None,
    caption_column: Optional[str] = None,
    label_column: Optional[str] = None,
    download_concurrency: Optional[int] = None,
    download_per_host: Optional[int] = None,
    download_timeout: Optional[float] = None,
    download_retries: Optional[int] = None,
    opt_out: Optional[str] = None,
    retry_failed: bool = False,
    analyze: bool = True,
    exact_statistics: bool = False,
    pipeline_options: BeamOptions = None,
    wait: bool = True,
    progress: bool = False,
) -> Optional[DatasetManifest]:
    """Convert ``input`` into sharded TFRecord files in ``output``, as ``img2tfrecord convert`` does.

    The keywords are ``convert``'s options by their Python names, with the flags' defaults and checks
    (``docs/options.md`` says more of each):

    - ``image_size``: resize to N x N (``224``) or ``(width, height)``; None keeps each image's size.
    - ``resize``: ``"stretch"``, ``"fit"`` (keep aspect, pad) or ``"fill"`` (keep aspect, centre-crop).
    - ``resample``: ``"fast"`` (libjpeg-turbo + OpenCV for JPEGs) or ``"bicubic"`` (Pillow for every image).
    - ``channels``: 3 (RGB) or 1 (grayscale).
    - ``format``: the stored format, ``"keep"``, ``"jpeg"``, ``"png"`` or ``"raw"``; None: ``"keep"`` when
      nothing changes the pixels, else ``"jpeg"``.
    - ``sequence``: one ``tf.train.SequenceExample`` per clip folder.
    - ``task``: ``"classification"`` or ``"detection"``; None: detected from the input.
    - ``require_boxes``: detection: reject an image with no box instead of writing it.
    - ``dedupe``: convert files with identical bytes once.
    - ``quality``: JPEG quality, 1..100.
    - ``splits``: ``"train=0.8,validation=0.2"`` or ``{"train": 0.8, "validation": 0.2}``; None: all train,
      or the input's split folders.
    - ``seed``: the seed of every item's split, shard and place.
    - ``shard_size_mb``: target shard size (None: 128); ``num_shards``: exactly N shards per split instead.
    - ``compression``: ``"none"`` or ``"gzip"`` (TFRecord shards only).
    - ``file_format``: ``"tfrecord"``, ``"array_record"``, ``"webdataset"`` or ``"parquet"``.
    - ``overwrite`` / ``resume`` / ``append``: replace an earlier output / finish an interrupted run / add
      what is new since the last run; with ``append``: ``allow_new_classes``, ``retry_rejected`` (every earlier
      rejected input again) and ``accept_changes`` (withdraw the records of changed and removed inputs).
    - ``allow_unguarded_lock``: run on an object store that ignores conditional writes (its lock is then a
      check then a write).
    - ``max_pixels``, ``max_file_mb``, ``decode_timeout_s``: reject larger images, larger files, slower decoding.
    - ``max_error_rate``: fail past this rejected fraction (everything is still written); None: no limit.
    - ``processes``: local conversion processes; None: one per core, fewer for a small input (local runner).
    - A list of image URLs (``docs/inputs.md#url-lists``): ``url_column`` (None: ``url``), ``caption_column``
      (None: ``caption`` or ``text``), ``label_column`` (None: unlabeled); ``download_concurrency``,
      ``download_per_host``, ``download_timeout`` (seconds), ``download_retries``, ``opt_out`` (X-Robots-Tag
      directives, comma-separated, or ``"none"``); with ``append``, ``retry_failed`` downloads again the URLs
      whose last attempt failed for a transient reason.
    - ``analyze``: the tf.Transform analysis of the train split; ``exact_statistics``: its statistics of
      re-encoded JPEGs from their stored bytes.

    ``pipeline_options`` are Beam's (a ``PipelineOptions`` or a list of flags, e.g.
    ``["--runner=DataflowRunner", "--project=P"]``). ``progress`` logs the counts while it runs.

    Returns the written manifest (:class:`~img2tfrecord.schemas.dataset_json.DatasetManifest`), or None
    for a Dataflow ``--dry_run`` and with ``wait=False`` (the job was submitted and writes ``_SUCCESS`` itself).
    Raises :class:`~img2tfrecord.errors.UsageError` for a bad option, input or output before any work,
    :class:`~img2tfrecord.errors.ErrorBudgetExceeded` past ``max_error_rate`` (its ``result`` the finished
    manifest) or when no record was written (``result`` None: only ``errors.jsonl`` is published),
    :class:`~img2tfrecord.errors.ConversionFailed` when the pipeline fails, and KeyboardInterrupt when a stop
    signal (SIGINT, SIGTERM, SIGHUP, SIGQUIT) ends it (``resume=True`` goes on).
    """
    beam_args = beam_arguments(pipeline_options)
    config = config_of(input, output, _options_of(locals()))
    check_pipeline_args(beam_args, [option.flag for option in CONVERT_OPTIONS])
    return run_config(config, beam_args, wait=wait, show_progress=progress)


def plan(
    input: str,
    output: str,
    *,
    # convert()'s options, the same list.
    image_size: Optional[ImageSize] = None,
    resize: ResizeMode = "fill",
    resample: ResampleMode = "fast",
    channels: ChannelCount = 3,
    format: Optional[StoredFormat] = None,
    sequence: bool = False,
    task: Optional[TaskName] = None,
    require_boxes: bool = False,
    dedupe: bool = False,
    quality: int = DEFAULT_QUALITY,
    splits: Optional[SplitsGiven] = None,
    seed: int = 0,
    shard_size_mb: Optional[float] = None,
    num_shards: Optional[int] = None,
    compression: CompressionName = "none",
    file_format: FileFormatName = DEFAULT_FILE_FORMAT,
    overwrite: bool = False,
    allow_unguarded_lock: bool = False,
    resume: bool = False,
    append: bool = False,
    allow_new_classes: bool = False,
    retry_rejected: bool = False,
    accept_changes: bool = False,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_file_mb: float = DEFAULT_MAX_FILE_MB,
    decode_timeout_s: float = DEFAULT_DECODE_TIMEOUT_S,
    max_error_rate: Optional[float] = None,
    processes: Optional[int] = None,
    url_column: Optional[str] = None,
    caption_column: Optional[str] = None,
    label_column: Optional[str] = None,
    download_concurrency: Optional[int] = None,
    download_per_host: Optional[int] = None,
    download_timeout: Optional[float] = None,
    download_retries: Optional[int] = None,
    opt_out: Optional[str] = None,
    retry_failed: bool = False,
    analyze: bool = True,
    exact_statistics: bool = False,
    pipeline_options: BeamOptions = None,
) -> RunPlan:
    """What ``convert`` with these arguments would do, as ``convert --plan`` prints it; nothing is written.

    The keywords are :func:`convert`'s options (see there), ``pipeline_options`` Beam's.

    The plan lists and checks the input as the run does: layout, classes per split, junk, rejections
    known before converting, shards, output size and an estimated local run time (``.to_json()`` gives
    ``--plan --json``'s document). Raises :class:`~img2tfrecord.errors.UsageError` as :func:`convert` does.
    """
    from img2tfrecord.pipeline.plan_model import PlanError
    from img2tfrecord.pipeline.preview import plan_run

    storage.use_pipeline_options(beam_arguments(pipeline_options))
    config = config_of(input, output, _options_of(locals()))
    try:
        return plan_run(config)
    except PlanError as e:
        raise UsageError(str(e)) from None


__all__ = ["ConversionFailed", "ErrorBudgetExceeded", "UsageError", "convert", "plan"]
