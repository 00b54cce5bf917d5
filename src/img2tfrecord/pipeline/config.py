"""Everything a conversion run needs to know (:class:`ConvertConfig`), made from ``convert``'s option values
(:func:`config_from_options`: the command line's parsed flags and the Python API's keywords alike, as typed
keywords) and checked before any pipeline starts."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, Mapping, Optional

from img2tfrecord import shard_formats
from img2tfrecord.conversion.seeded_hashes import Splits, parse_splits, splits_of
from img2tfrecord.errors import UsageError
from img2tfrecord.images.options import (
    DEFAULT_DECODE_TIMEOUT_S,
    DEFAULT_MAX_FILE_MB,
    DEFAULT_MAX_PIXELS,
    ImageOptions,
)
from img2tfrecord.option_keywords import check_values
from img2tfrecord.option_values import (
    DEFAULT_QUALITY,
    DEFAULT_SHARD_SIZE_MB,
    TASK_CLASSIFICATION,
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
    parse_image_size,
)
from img2tfrecord.schemas.output_files import COMPRESSION_NONE, DEFAULT_FILE_FORMAT
from img2tfrecord.sources.input_paths import input_folder, listed_folder, output_inside_input
from img2tfrecord.sources.url_lists import UrlOptions, url_options

# The default runner: Beam's FnApiRunner (what the DirectRunner falls back to offline), in_memory: the
# job's DoFns run in the launching process, each shard's images converted by its pool (conversion/pool.py).
LOCAL_RUNNER = "FnApiRunner"
LOCAL_RUNNING_MODE = "in_memory"


@dataclasses.dataclass(frozen=True)
class ConvertConfig:
    """Everything a conversion run needs to know, checked: what ``config_from_options`` makes of ``convert``'s
    options (the command line and ``img2tfrecord.convert()`` alike) and what the launch and the pipeline read.
    A field's default is what the option gives when it is not given."""

    input: str
    output: str
    image: ImageOptions = ImageOptions()
    splits: Optional[Splits] = None  # None: split folders if present, else everything in "train"
    seed: int = 0
    shard_size_mb: float = DEFAULT_SHARD_SIZE_MB
    num_shards: Optional[int] = None  # fixed shards per split instead of --shard-size-mb
    compression: CompressionName = "none"
    file_format: FileFormatName = DEFAULT_FILE_FORMAT  # the shard container (shard_formats.FILE_FORMATS)
    overwrite: bool = False
    resume: bool = False  # keep the shards a killed run of the same fingerprint finished (plan.Plan.fingerprint)
    analyze: bool = True  # tf.Transform analysis of the train split (--no-analyze: skip)
    exact_statistics: bool = False  # re-encoded JPEGs' statistics from their stored bytes (image.pixel_sums)
    max_error_rate: Optional[float] = None  # the job fails (after writing everything) past this rejected fraction
    processes: Optional[int] = None  # local conversion processes; 1: in the runner's worker; None: the run picks
    sequence: bool = False  # SRC/<class>/<clip>/<frames> -> one tf.train.SequenceExample per clip
    task: Optional[TaskName] = None  # classification or detection; None: detected from the input's layout
    require_boxes: bool = False  # detection: reject an image left without boxes instead of writing it
    dedupe: bool = False  # files with identical bytes converted once (transforms/dedupe.py)
    append: bool = False  # convert only what is new since the output was written (pipeline/append.py)
    allow_new_classes: bool = False  # an append may add class folders, with the next ids
    retry_rejected: bool = False  # an append converts every earlier rejected input again, not only transient ones
    accept_changes: bool = False  # an append withdraws the records of changed and removed inputs
    allow_unguarded_lock: bool = False  # an object store without conditional writes: lock by check then write
    urls: UrlOptions = UrlOptions()  # a URL list's columns and downloads (sources/url_lists.py)

    def options_json(self) -> Dict[str, Any]:
        """The options as recorded in ``dataset.json``."""
        image = self.image
        return {
            "image_size": list(image.size) if image.size else None,
            "resize": image.resize,
            "resample": image.resample,
            "channels": image.channels,
            "format": image.format,
            "quality": image.quality,
            "max_pixels": image.max_pixels,
            "max_file_bytes": image.max_file_bytes,
            "decode_timeout_s": image.decode_timeout_s,
            "splits": {name: fraction for name, fraction in self.splits} if self.splits else None,
            "seed": self.seed,
            "shard_size_mb": None if self.num_shards else self.shard_size_mb,
            "num_shards": self.num_shards,
            "compression": self.compression,
            "file_format": self.file_format,
            "max_error_rate": self.max_error_rate,
            "analyze": self.analyze,
            "exact_statistics": self.exact_statistics,
            "sequence": self.sequence,
            "task": self.task,
            "require_boxes": self.require_boxes,
            "dedupe": self.dedupe,
            **(self.urls.recorded() if self.urls != UrlOptions() else {}),
        }


def config_from_options(
    input: str,
    output: Optional[str],
    *,
    # convert()'s options, in options.py's order, each with the declared default (tests/test_typed_api.py).
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
) -> ConvertConfig:
    """The run's configuration from ``convert``'s options (the Python API's keywords, or the command line's parsed
    flags: ``option_keywords.option_arguments``); UsageError for a value its flag would refuse or a combination
    that cannot run. ``output`` None: records handed on, no output folder (``beam.examples.ImagesToExamples``)."""
    check_values(locals())
    run_splits = run_splits_of(splits)
    if output is not None and input.rstrip("/") == output.rstrip("/"):
        raise UsageError("--output must differ from --input")
    if resume and overwrite:
        raise UsageError("--resume keeps what an interrupted run finished, --overwrite replaces it: give one")
    if append and overwrite:
        raise UsageError("--append adds to a finished output, --overwrite replaces it: give one")
    for flag, given in (
        ("--allow-new-classes", allow_new_classes),
        ("--retry-rejected", retry_rejected),
        ("--accept-changes", accept_changes),
        ("--retry-failed", retry_failed),
    ):
        if given and not append:
            raise UsageError(f"{flag} applies to --append")
    check_analysis_options(analyze=analyze, exact_statistics=exact_statistics, sequence=sequence)
    if task == TASK_DETECTION and sequence:
        raise UsageError("--sequence makes one record per clip; detection records are one per image")
    if require_boxes and task == TASK_CLASSIFICATION:
        raise UsageError("--require-boxes applies to detection, not to --task classification")
    if dedupe and sequence:
        raise UsageError("--dedupe compares single files; a --sequence clip is many frames: give one of them")
    own = shard_formats.adapter(file_format)
    if not own.compressible and compression != COMPRESSION_NONE:
        raise UsageError(f"--compression {compression} compresses TFRecord shards, not {file_format} ones")
    refusal = own.refusal(task == TASK_DETECTION, bool(sequence))
    if refusal is not None:
        raise UsageError(f"--file-format {own.name} {refusal}")
    urls = url_options(
        url_column=url_column,
        caption_column=caption_column,
        label_column=label_column,
        download_concurrency=download_concurrency,
        download_per_host=download_per_host,
        download_timeout=download_timeout,
        download_retries=download_retries,
        opt_out=opt_out,
        retry_failed=retry_failed,
    )
    if output is None:
        output = ""
    elif "://" not in output and os.path.exists(output) and not os.path.isdir(output):
        raise UsageError(f"--output {output} is a file: give a folder (it is created if missing)")
    if output and output_inside_input(input, output):
        raise UsageError(
            f"--output {output} is inside --input {input}: a later run over the input would read the "
            f"output as a class; give an --output outside the input, e.g. {_sibling_output(input)}"
        )
    return ConvertConfig(
        input=input,
        output=output.rstrip("/") if "://" in output else os.path.abspath(output) if output else "",
        image=image_options(
            image_size=image_size,
            resize=resize,
            resample=resample,
            channels=channels,
            format=format,
            quality=quality,
            max_pixels=max_pixels,
            max_file_mb=max_file_mb,
            decode_timeout_s=decode_timeout_s,
        ),
        splits=run_splits,
        seed=seed,
        shard_size_mb=float(shard_size_mb or DEFAULT_SHARD_SIZE_MB),
        num_shards=num_shards,
        compression=compression,
        file_format=file_format,
        overwrite=overwrite,
        resume=resume,
        analyze=analyze,
        exact_statistics=exact_statistics,
        sequence=sequence,
        task=task,
        require_boxes=require_boxes,
        dedupe=dedupe,
        append=append,
        allow_new_classes=allow_new_classes,
        retry_rejected=retry_rejected,
        accept_changes=accept_changes,
        allow_unguarded_lock=allow_unguarded_lock,
        processes=processes,
        max_error_rate=urls.error_budget(input) if max_error_rate is None else float(max_error_rate),
        urls=urls,
    )


def check_analysis_options(*, analyze: bool, exact_statistics: bool, sequence: bool) -> None:
    """UsageError for analysis options that contradict the others."""
    if exact_statistics and not analyze:
        raise UsageError("--exact-statistics applies to the analysis, which --no-analyze skips")
    if exact_statistics and sequence:
        raise UsageError("--exact-statistics applies to the analysis, and --sequence records are not analysed")


def run_splits_of(given: Any) -> Optional[Splits]:
    """``--splits``: its text (``train=0.8,validation=0.2``) or the Python API's mapping of split -> fraction;
    None when not given; UsageError naming what is wrong."""
    if given is None:
        return None
    try:
        if isinstance(given, str):
            return parse_splits(given)
        if isinstance(given, Mapping):
            return splits_of(list(given.items()))
    except ValueError as e:
        raise UsageError(f"--splits: {e}") from None
    raise UsageError(f"splits: {given!r} is not a splits (--splits)")


def image_options(
    *,
    image_size: Optional[ImageSize],
    resize: str,
    resample: str,
    channels: int,
    format: Optional[str],
    quality: int,
    max_pixels: int,
    max_file_mb: float,
    decode_timeout_s: float,
) -> ImageOptions:
    """The image options of ``convert``'s checked option values; ``--format`` by default keeps the stored bytes
    when nothing changes the pixels, else JPEG."""
    if format is None:
        format = "keep" if image_size is None and channels == 3 else "jpeg"
    return ImageOptions(
        size=None if image_size is None else parse_image_size(image_size),
        resize=resize,
        resample=resample,
        channels=channels,
        format=format,
        quality=quality,
        max_pixels=max_pixels,
        max_file_bytes=int(max_file_mb * 1024 * 1024),
        decode_timeout_s=float(decode_timeout_s),
    )


def _sibling_output(input_path: str) -> str:
    """An output folder beside the folder ``input_path`` lists: ``photos/`` -> ``photos-tfrecords``."""
    folder = (listed_folder(input_path) or input_path).rstrip("/")
    if os.path.basename(folder) in ("", ".", ".."):  # name it: "./-tfrecords" would be inside
        folder = input_folder(input_path) or folder
    return f"{folder}-tfrecords"
