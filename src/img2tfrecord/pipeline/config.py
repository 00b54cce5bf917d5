"""Everything a conversion run needs to know (:class:`ConvertConfig`), made from ``convert``'s option values
(:func:`config_from_options`: the command line's parsed flags and the Python API's keywords alike) and
checked before any pipeline starts."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, Mapping, Optional

from img2tfrecord.conversion.seeded_hashes import Splits, parse_splits, splits_of
from img2tfrecord.errors import UsageError
from img2tfrecord.images import ImageOptions
from img2tfrecord.option_values import DEFAULT_SHARD_SIZE_MB, TASK_CLASSIFICATION, TASK_DETECTION
from img2tfrecord.schemas.output_files import COMPRESSION_NONE, FILE_FORMAT_TFRECORD
from img2tfrecord.sources.input_paths import input_folder, listed_folder, output_inside_input
from img2tfrecord.sources.url_lists import UrlOptions, url_options

# The default runner: Beam's FnApiRunner (what the DirectRunner falls back to offline), in_memory: the
# job's DoFns run in the launching process, each shard's images converted by its pool (conversion/pool.py).
LOCAL_RUNNER = "FnApiRunner"
LOCAL_RUNNING_MODE = "in_memory"


@dataclasses.dataclass(frozen=True)
class ConvertConfig:
    input: str
    output: str
    image: ImageOptions = ImageOptions()
    splits: Optional[Splits] = None  # None: split folders if present, else everything in "train"
    seed: int = 0
    shard_size_mb: float = DEFAULT_SHARD_SIZE_MB
    num_shards: Optional[int] = None  # fixed shards per split instead of --shard-size-mb
    compression: str = "none"
    file_format: str = "tfrecord"  # the shard container (schemas/output_files.FILE_FORMATS); the records are the same
    overwrite: bool = False
    resume: bool = False  # keep the shards a killed run of the same fingerprint finished (plan.Plan.fingerprint)
    analyze: bool = True  # tf.Transform analysis of the train split (--no-analyze: skip)
    exact_statistics: bool = False  # re-encoded JPEGs' statistics from their stored bytes (image.pixel_sums)
    max_error_rate: Optional[float] = None  # the job fails (after writing everything) past this rejected fraction
    processes: int = 1  # local conversion processes; 1: in the runner's worker; 0: as many as the input is worth
    sequence: bool = False  # SRC/<class>/<clip>/<frames> -> one tf.train.SequenceExample per clip
    task: Optional[str] = None  # classification or detection; None: detected from the input's layout
    require_boxes: bool = False  # detection: reject an image left without boxes instead of writing it
    dedupe: bool = False  # files with identical bytes converted once (transforms/dedupe.py)
    append: bool = False  # convert only what is new since the output was written (pipeline/append.py)
    allow_new_classes: bool = False  # an append may add class folders, with the next ids
    retry_rejected: bool = False  # an append converts every earlier rejected input again, not only transient ones
    accept_changes: bool = False  # an append withdraws the records of changed and removed inputs
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


def config_from_options(input: str, output: str, values: Mapping[str, Any]) -> ConvertConfig:
    """The run's configuration from ``convert``'s option values (``option_keywords.keyword_values``, or the parsed
    flags); UsageError for a combination that cannot run."""
    v = values
    splits = run_splits_of(v.get("splits"))
    if input.rstrip("/") == output.rstrip("/"):
        raise UsageError("--output must differ from --input")
    if v["resume"] and v["overwrite"]:
        raise UsageError("--resume keeps what an interrupted run finished, --overwrite replaces it: give one")
    if v["append"] and v["overwrite"]:
        raise UsageError("--append adds to a finished output, --overwrite replaces it: give one")
    for flag, given in (
        ("--allow-new-classes", v["allow_new_classes"]),
        ("--retry-rejected", v["retry_rejected"]),
        ("--accept-changes", v["accept_changes"]),
        ("--retry-failed", v.get("retry_failed", False)),
    ):
        if given and not v["append"]:
            raise UsageError(f"{flag} applies to --append")
    if v.get("json") and not v.get("plan"):
        raise UsageError("--json prints the plan as JSON: give it with --plan")
    check_analysis_options(v)
    if v["task"] == TASK_DETECTION and v["sequence"]:
        raise UsageError("--sequence makes one record per clip; detection records are one per image")
    if v["require_boxes"] and v["task"] == TASK_CLASSIFICATION:
        raise UsageError("--require-boxes applies to detection, not to --task classification")
    if v["dedupe"] and v["sequence"]:
        raise UsageError("--dedupe compares single files; a --sequence clip is many frames: give one of them")
    if v["file_format"] != FILE_FORMAT_TFRECORD and v["compression"] != COMPRESSION_NONE:
        raise UsageError(f"--compression {v['compression']} compresses TFRecord shards, not {v['file_format']} ones")
    urls = url_options(v)
    if "://" not in output and os.path.exists(output) and not os.path.isdir(output):
        raise UsageError(f"--output {output} is a file: give a folder (it is created if missing)")
    if output_inside_input(input, output):
        raise UsageError(
            f"--output {output} is inside --input {input}: a later run over the input would read the "
            f"output as a class; give an --output outside the input, e.g. {_sibling_output(input)}"
        )
    return ConvertConfig(
        input=input,
        output=output.rstrip("/") if "://" in output else os.path.abspath(output),
        image=image_options(v),
        splits=splits,
        seed=v["seed"],
        shard_size_mb=v["shard_size_mb"] or DEFAULT_SHARD_SIZE_MB,
        num_shards=v["num_shards"],
        compression=v["compression"],
        file_format=v["file_format"],
        overwrite=v["overwrite"],
        resume=v["resume"],
        analyze=v["analyze"],
        exact_statistics=v["exact_statistics"],
        sequence=v["sequence"],
        task=v["task"],
        require_boxes=v["require_boxes"],
        dedupe=v["dedupe"],
        append=v["append"],
        allow_new_classes=v["allow_new_classes"],
        retry_rejected=v["retry_rejected"],
        accept_changes=v["accept_changes"],
        processes=v["processes"] or 0,  # 0: the run picks (pipeline/runner.default_processes)
        max_error_rate=v["max_error_rate"] if v["max_error_rate"] is not None else urls.error_budget(input),
        urls=urls,
    )


def check_analysis_options(values: Mapping[str, Any]) -> None:
    """UsageError for analysis options that contradict the others (also ``ImagesToTFRecords``' check)."""
    if values.get("exact_statistics") and not values.get("analyze", True):
        raise UsageError("--exact-statistics applies to the analysis, which --no-analyze skips")
    if values.get("exact_statistics") and values.get("sequence"):
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


def image_options(values: Mapping[str, Any]) -> ImageOptions:
    """The image options of ``convert``'s option values; ``--format`` by default keeps the stored bytes when
    nothing changes the pixels, else JPEG."""
    fmt = values["format"]
    if fmt is None:
        fmt = "keep" if values["image_size"] is None and values["channels"] == 3 else "jpeg"
    return ImageOptions(
        size=values["image_size"],
        resize=values["resize"],
        resample=values["resample"],
        channels=values["channels"],
        format=fmt,
        quality=values["quality"],
        max_pixels=values["max_pixels"],
        max_file_bytes=int(values["max_file_mb"] * 1024 * 1024),
        decode_timeout_s=values["decode_timeout_s"],
    )


def _sibling_output(input_path: str) -> str:
    """An output folder beside the folder ``input_path`` lists: ``photos/`` -> ``photos-tfrecords``."""
    folder = (listed_folder(input_path) or input_path).rstrip("/")
    if os.path.basename(folder) in ("", ".", ".."):  # name it: "./-tfrecords" would be inside
        folder = input_folder(input_path) or folder
    return f"{folder}-tfrecords"
