"""Every option of ``convert``, declared once.

The CLI parser (:func:`add_convert_arguments`), the Flex Template's
parameters (:func:`template_options`; ``option_files.py`` writes
``flex_template/metadata.json`` and the options table of ``docs/options.md``
from them, each checked by a test) and the names ``dataset.json`` records
the options under (``Option.recorded_as``, checked against
``ConvertConfig.options_json``) all come from :data:`CONVERT_OPTIONS`.

How an option is declared and rendered is ``option_spec.py``; the defaults, bounds
and value checks the table uses are ``option_values.py`` (both imported back here).
No Beam and no TensorFlow: the parser is built before either is imported.
"""

from __future__ import annotations

import argparse
import collections.abc
from typing import Dict, List, Tuple

from img2tfrecord.images.options import (
    DEFAULT_DECODE_TIMEOUT_S,
    DEFAULT_MAX_FILE_MB,
    DEFAULT_MAX_PIXELS,
    FORMATS,
    RESAMPLE_FAST,
    RESAMPLE_MODES,
    RESIZE_MODES,
)
from img2tfrecord.option_spec import Option, Template, add_arguments
from img2tfrecord.option_values import (
    DEFAULT_QUALITY,
    DEFAULT_SHARD_SIZE_MB,
    MAX_FILE_MB_BOUND,
    MAX_IMAGE_SIDE,
    MAX_NUM_SHARDS,
    MAX_PIXELS_BOUND,
    MAX_SHARD_SIZE_MB,
    TASKS,
    fraction,
    parse_image_size,
    positive,
    quality,
)
from img2tfrecord.schemas.output_files import DEFAULT_FILE_FORMAT, FILE_FORMATS
from img2tfrecord.shard_formats import ADAPTERS

_BOOLEAN = r"^(true|false)$"


def _formats_text(where: str, quote: str = "") -> str:
    """The file formats as --file-format's ``help``, ``doc`` or ``template`` text lists them (the adapters' notes)."""
    parts = []
    for a in ADAPTERS:
        note = {"help": a.help_note, "doc": a.doc_note, "template": a.template_note}[where]
        if where == "template" and a.name == DEFAULT_FILE_FORMAT:
            note = "default"
        parts.append(f"{quote}{a.name}{quote}" + (f" ({note})" if note else ""))
    if where == "help":
        return "; ".join(parts)
    return ", ".join(parts[:-1]) + " or " + parts[-1]


CONVERT_OPTIONS: Tuple[Option, ...] = (
    Option(
        "--input",
        doc="folder, glob, archive(s) or manifest, local, `gs://`, `s3://` or `azfs://` ([inputs](inputs.md))",
        required=True,
        doc_default="required",
        help="folder (SRC/<class>/<file> or SRC/<split>/<class>/<file>), glob, archive(s) (.zip, .tar, .tar.gz, .tgz; "
        "a glob of many) or manifest (.csv/.jsonl with path,label[,split]); local, gs://, s3:// or azfs://",
        template=Template("Input images", "gs:// folder (SRC/<class>/<file> or SRC/<split>/<class>/<file>) or glob."),
    ),
    Option(
        "--output",
        required=True,
        doc_default="required",
        help="output folder for shards, dataset.json, labels.txt, errors.jsonl; "
        "must be empty (or --overwrite / --resume)",
        template=Template(
            "Output folder", "gs:// folder for the shards and dataset.json; must be empty unless overwrite is true."
        ),
    ),
    Option(
        "--image-size",
        type=parse_image_size,
        metavar="N|WxH",
        doc_default="keep each image's size",
        help=f"resize to N×N or W×H (224 = 224×224; 320x240 = 320 wide, 240 high); each side at most {MAX_IMAGE_SIDE}",
        recorded_as="image_size",
        template=Template(
            "Image size", "N or WxH, e.g. 224 or 320x240. Empty keeps each image's size.", r"^[0-9]+([xX][0-9]+)?$"
        ),
    ),
    Option(
        "--resize",
        choices=RESIZE_MODES,
        default="fill",
        doc_default="fill",
        recorded_as="resize",
        help="stretch ignores aspect; fit keeps aspect and pads with black; fill keeps aspect and centre-crops",
        template=Template(
            "Resize mode",
            "stretch, fit (keep aspect, pad) or fill (keep aspect, centre-crop; default).",
            r"^(stretch|fit|fill)$",
        ),
    ),
    Option(
        "--resample",
        choices=RESAMPLE_MODES,
        default=RESAMPLE_FAST,
        doc_default=RESAMPLE_FAST,
        recorded_as="resample",
        help="fast: JPEGs decoded at reduced scale by libjpeg-turbo and resized by OpenCV (antialiased); "
        "bicubic: Pillow's bicubic filter for every image (slower, the highest fidelity)",
        template=Template(
            "Resample filter",
            "fast (libjpeg-turbo + OpenCV for JPEG input; default) or bicubic (Pillow, highest fidelity).",
            r"^(fast|bicubic)$",
        ),
    ),
    Option(
        "--channels",
        type=int,
        choices=(1, 3),
        default=3,
        doc_default="3",
        recorded_as="channels",
        help="3 = RGB, 1 = grayscale",
    ),
    Option(
        "--format",
        doc="stored image format ([what happens to each image](inputs.md#what-happens-to-each-image), "
        "[raw pixels](inputs.md#raw-pixels-and-sequences))",
        choices=FORMATS,
        doc_default="`keep` without `--image-size`/`--channels 1`, else `jpeg`",
        recorded_as="format",
        help="stored image format; raw = uint8 pixels HxWxC",
        template=Template(
            "Stored format", "keep, jpeg or png (default: keep without resizing, else jpeg).", r"^(keep|jpeg|png)$"
        ),
    ),
    Option(
        "--sequence",
        doc="one `tf.train.SequenceExample` per clip folder ([sequences](inputs.md#raw-pixels-and-sequences))",
        switch=True,
        doc_default="off",
        recorded_as="sequence",
        help="SRC/<class>/<clip>/<frames>: one tf.train.SequenceExample per clip, frames in natural name order",
    ),
    Option(
        "--task",
        doc="`detection`: Pascal VOC, COCO or a manifest of boxes in, TF Object Detection API records out "
        "([detection](inputs.md#object-detection))",
        choices=TASKS,
        doc_default="detected from the input",
        recorded_as="task",
        help="classification or detection (Pascal VOC, COCO or a CSV/JSONL of boxes in, TF Object Detection API "
        "records out); detected from the input's layout when not given",
        template=Template(
            "Task", "classification or detection (default: detected from the input).", r"^(classification|detection)$"
        ),
    ),
    Option(
        "--require-boxes",
        switch=True,
        doc_default="off",
        recorded_as="require_boxes",
        help="detection: reject an image with no box (errors.jsonl, reason no_boxes) instead of writing it boxless",
    ),
    Option(
        "--dedupe",
        doc="convert files with identical bytes once: the copy whose relative path sorts first is kept, the "
        "others are `errors.jsonl` rows, reason `duplicate` ([exact duplicates](inputs.md#exact-duplicates))",
        switch=True,
        doc_default="off",
        recorded_as="dedupe",
        help="convert files with identical bytes once: the copy whose relative path sorts first is kept, the others "
        "become errors.jsonl rows with reason duplicate naming it (not with --sequence)",
        template=Template(
            "Deduplicate",
            "true to convert files with identical bytes once (the first relative path is kept; the other copies "
            "are listed in errors.jsonl with reason duplicate).",
            _BOOLEAN,
        ),
    ),
    Option(
        "--quality",
        type=quality,
        default=DEFAULT_QUALITY,
        doc_default=str(DEFAULT_QUALITY),
        recorded_as="quality",
        help="JPEG quality",
        template=Template("JPEG quality", "1-100 (default 90).", r"^[0-9]{1,3}$"),
    ),
    Option(
        "--splits",
        metavar="NAME=FRACTION,...",
        doc_default="all train, or the input's split folders",
        recorded_as="splits",
        python_types=(str, collections.abc.Mapping),  # the Python API also takes {"train": 0.8, ...}
        help="e.g. train=0.8,validation=0.1,test=0.1; fractions must sum to 1; val means validation",
        template=Template("Splits", "NAME=FRACTION,... summing to 1, e.g. train=0.8,validation=0.1,test=0.1."),
    ),
    Option(
        "--seed",
        type=int,
        default=0,
        doc_default="0",
        recorded_as="seed",
        help="seed of the split, shard and order of every work item",
        template=Template("Seed", "Seed of the split assignment and the shuffle (default 0).", r"^-?[0-9]+$"),
    ),
    Option(
        "--shard-size-mb",
        type=positive(float, MAX_SHARD_SIZE_MB, "a shard is read by one reader; --num-shards 1 for one per split"),
        exclusive_group="shards",
        doc_default=f"{DEFAULT_SHARD_SIZE_MB:g}",
        recorded_as="shard_size_mb",
        help=f"shards per split = ceil(estimated split bytes / M), at least 1; M at most {MAX_SHARD_SIZE_MB}",
        metavar="M",
        template=Template("Shard size (MB)", "Target shard size (default 128).", r"^[0-9]+(\.[0-9]+)?$"),
    ),
    Option(
        "--num-shards",
        type=positive(int, MAX_NUM_SHARDS, "each shard is a file, a task and an index file"),
        exclusive_group="shards",
        recorded_as="num_shards",
        metavar="N",
        help=f"exactly N shards per split instead of --shard-size-mb; at most {MAX_NUM_SHARDS}",
        template=Template("Shards per split", "Fixed number of shards per split instead of a shard size.", r"^[0-9]+$"),
    ),
    Option(
        "--compression",
        choices=("none", "gzip"),
        default="none",
        doc_default="none",
        recorded_as="compression",
        help="gzip writes .tfrecord.gz (no index files)",
        template=Template("Compression", "none (default) or gzip.", r"^(none|gzip)$"),
    ),
    Option(
        "--file-format",
        doc=f"the shard container: {_formats_text('doc', '`')}; the records, splits and placement are the same "
        "([file formats](file-formats.md))",
        choices=FILE_FORMATS,
        default=DEFAULT_FILE_FORMAT,
        doc_default=DEFAULT_FILE_FORMAT,
        recorded_as="file_format",
        help=f"{_formats_text('help')}; the same records, splits and shards in each",
        template=Template(
            "File format",
            f"{_formats_text('template')}.",
            f"^({'|'.join(FILE_FORMATS)})$",
        ),
    ),
    Option(
        "--overwrite",
        switch=True,
        doc_default="off",
        help="replace an earlier conversion in --output",
        template=Template("Overwrite", "true to replace an earlier conversion in the output folder.", _BOOLEAN),
    ),
    Option(
        "--allow-unguarded-lock",
        doc="run on an object store that ignores conditional writes (some S3-compatible servers), whose lock is "
        "then a check then a write ([cloud storage](cloud-storage.md#the-output-lock))",
        switch=True,
        doc_default="off",
        help="run even where the output's store cannot create the lock only if absent (it ignores conditional "
        "writes): two runs started at once could then both write the output",
        template=Template(
            "Allow an unguarded lock",
            "true to run on a store without conditional writes, where two runs could both write the output.",
            _BOOLEAN,
        ),
    ),
    Option(
        "--resume",
        doc="finish an interrupted conversion: shards it finished are kept, the rest converted "
        "([resuming](output-format.md#resuming-an-interrupted-run))",
        switch=True,
        doc_default="off",
        help="finish an interrupted conversion of the same input, options and seed: shards it finished are kept, "
        "the rest converted",
        template=Template(
            "Resume",
            "true to finish an interrupted conversion of the same input, options and seed, keeping the "
            "shards it finished.",
            _BOOLEAN,
        ),
    ),
    Option(
        "--append",
        doc="add the inputs that are new since the last run to a finished output, as a new generation of shards; "
        "give the options the output was made with: they are checked against it, not inherited "
        "([appending](scheduled-jobs.md#appending-what-is-new))",
        switch=True,
        doc_default="off",
        help="add what is new in the input to a finished output of the same input, options and seed (given "
        "again: they are checked, not inherited), as new shards; earlier shards are kept as they are",
        template=Template(
            "Append",
            "true to convert only the inputs that are new since the output was written, into new shards.",
            _BOOLEAN,
        ),
    ),
    Option(
        "--allow-new-classes",
        switch=True,
        doc_default="off",
        help="with --append: add new classes (class folders, manifest labels, classes of objects) with the next "
        "ids (existing ids never change)",
        template=Template("Allow new classes", "true to let --append add new class folders.", _BOOLEAN),
    ),
    Option(
        "--retry-rejected",
        switch=True,
        doc_default="off",
        help="with --append: convert again every input rejected before (by default only those rejected for a "
        "transient reason: unreadable, not_found, decode_timeout, worker_crashed)",
        template=Template("Retry rejected", "true to let --append try every earlier rejected input again.", _BOOLEAN),
    ),
    Option(
        "--accept-changes",
        switch=True,
        doc_default="off",
        help="with --append: withdraw the records of inputs changed or removed since they were converted (every "
        "reader skips them) and convert the changed ones again, instead of refusing",
        template=Template(
            "Accept changes",
            "true to let --append withdraw the records of changed and removed inputs, converting the changed again.",
            _BOOLEAN,
        ),
    ),
    Option(
        "--max-pixels",
        doc=f"reject images with more pixels (decompression bombs; [limits](bad-input.md#limits)); "
        f"at most {MAX_PIXELS_BOUND}",
        type=positive(int, MAX_PIXELS_BOUND, "a decoded image of that many pixels takes 3 GiB"),
        default=DEFAULT_MAX_PIXELS,
        doc_default=str(DEFAULT_MAX_PIXELS),
        metavar="P",
        recorded_as="max_pixels",
        help=f"reject images with more pixels (decompression bombs); at most {MAX_PIXELS_BOUND}",
    ),
    Option(
        "--max-file-mb",
        type=positive(float, MAX_FILE_MB_BOUND, "a record is a protocol buffer, which holds less than 2 GiB"),
        default=DEFAULT_MAX_FILE_MB,
        doc_default=f"{DEFAULT_MAX_FILE_MB:g}",
        metavar="M",
        recorded_as="max_file_bytes",
        help=f"reject larger files; at most {MAX_FILE_MB_BOUND}",
    ),
    Option(
        "--decode-timeout-s",
        type=positive(float),
        default=DEFAULT_DECODE_TIMEOUT_S,
        doc_default=f"{DEFAULT_DECODE_TIMEOUT_S:g}",
        metavar="S",
        recorded_as="decode_timeout_s",
        help="reject an image whose decoding and resizing take longer",
    ),
    Option(
        "--max-error-rate",
        doc="exit 3 when more than this fraction of inputs is rejected ([scheduled jobs](scheduled-jobs.md))",
        type=fraction,
        metavar="F",
        doc_default="no limit",
        recorded_as="max_error_rate",
        help="exit 3 when more than this fraction of inputs is rejected (everything is still written)",
        template=Template("Error budget", "Fraction of inputs that may be rejected before the job reports failure."),
    ),
    Option(
        "--processes",
        doc="local processes converting images ([choosing a runner](runners.md#choosing-a-runner))",
        type=positive(int),
        metavar="N",
        doc_default="one per core, fewer for a small input (local runner); 1 (others)",
        help="local processes converting images; on distributed runners the workers are the parallelism",
    ),
    Option(
        "--url-column",
        doc="a URL list's column of URLs ([URL lists](inputs.md#url-lists))",
        metavar="NAME",
        doc_default="`url`",
        recorded_as="url_column",
        help="a URL list (.parquet, .csv, .tsv, .jsonl, .txt of URLs): the column holding the image URLs",
        template=Template("URL column", "A URL list's column of image URLs (default url)."),
    ),
    Option(
        "--caption-column",
        doc="a URL list's column of captions, stored as `image/text` ([URL lists](inputs.md#url-lists))",
        metavar="NAME",
        doc_default="`caption` or `text` when present",
        recorded_as="caption_column",
        help="a URL list's column of captions, stored in each record as image/text (default: caption or text)",
        template=Template("Caption column", "A URL list's column of captions (default caption or text)."),
    ),
    Option(
        "--label-column",
        doc="a URL list's column of class labels, classes as for manifests ([URL lists](inputs.md#url-lists))",
        metavar="NAME",
        doc_default="none: unlabeled",
        recorded_as="label_column",
        help="a URL list's column of class labels (classes as for a manifest); without it the records are unlabeled",
        template=Template("Label column", "A URL list's column of class labels."),
    ),
    Option(
        "--download-concurrency",
        doc="URL lists: requests in flight at once per conversion process ([politeness](url-datasets.md#politeness))",
        type=positive(int),
        metavar="N",
        doc_default="64",
        help="URL lists: requests in flight at once per conversion process",
        template=Template("Download concurrency", "URL lists: requests in flight at once per worker process."),
    ),
    Option(
        "--download-per-host",
        doc="URL lists: requests in flight at once to one host, per conversion process "
        "([politeness](url-datasets.md#politeness))",
        type=positive(int),
        metavar="N",
        doc_default="32",
        help="URL lists: requests in flight at once to one host, per conversion process",
        template=Template("Downloads per host", "URL lists: requests in flight at once to one host per process."),
    ),
    Option(
        "--download-timeout",
        doc="URL lists: seconds to wait for a server's answer (connecting: at most 10 of them); a body "
        "taking twice as long is a `timeout` too",
        type=positive(float),
        metavar="S",
        doc_default="20",
        help="URL lists: seconds to wait for a server's answer (connecting: at most 10 of them)",
        template=Template("Download timeout", "URL lists: seconds to wait for a server's answer."),
    ),
    Option(
        "--download-retries",
        doc="URL lists: tries after the first for a transient failure (429, honouring `Retry-After` up to "
        "30 s; 5xx; time-out; dropped connection), with a backoff of 1 s doubled each time; none for other 4xx",
        type=int,
        metavar="N",
        doc_default="2",
        help="URL lists: tries after the first for 429, 5xx, time-outs and dropped connections (none for other 4xx)",
        template=Template("Download retries", "URL lists: tries after the first for a transient failure."),
    ),
    Option(
        "--opt-out",
        doc="URL lists: the `X-Robots-Tag` directives that refuse an image (`opted_out`), comma-separated, "
        "or `none` to honour none ([politeness](url-datasets.md#politeness))",
        metavar="LIST",
        doc_default="`noai,noimageai,noindex,noimageindex`",
        recorded_as="opt_out",
        help="URL lists: X-Robots-Tag directives that refuse an image, comma-separated, or none "
        "(default noai,noimageai,noindex,noimageindex)",
        template=Template("Opt-out directives", "URL lists: X-Robots-Tag directives honoured (or none)."),
    ),
    Option(
        "--retry-failed",
        doc="with `--append` on a URL list: download again the URLs whose last attempt failed for a transient "
        "reason (`timeout`, `connection`, `server_error`, `rate_limited`); their records land in the new generation",
        switch=True,
        doc_default="off",
        help="with --append on a URL list: download again the URLs whose last attempt failed for a transient reason",
        template=Template(
            "Retry failed", "true to let --append download again URLs that failed transiently.", _BOOLEAN
        ),
    ),
    Option(
        "--no-analyze",
        doc="skip the tf.Transform analysis of the train split ([tf.Transform](tf-transform.md))",
        negates="analyze",
        doc_default="off",
        recorded_as="analyze",
        help="skip the tf.Transform analysis of the train split (no transform_fn/, no statistics in dataset.json)",
    ),
    Option(
        "--exact-statistics",
        doc="train statistics of re-encoded JPEGs from their stored bytes, not the encoder's input "
        "([how the statistics are computed](tf-transform.md#how-the-statistics-are-computed))",
        switch=True,
        doc_default="off",
        recorded_as="exact_statistics",
        help="compute the train statistics of images stored as re-encoded JPEG from their stored bytes, decoded as "
        "readers decode them, not from the pixels given to the JPEG encoder (about 9% more conversion CPU at 224x224)",
        template=Template(
            "Exact statistics",
            "true to compute the train statistics of images re-encoded as JPEG from their stored "
            "bytes (about 9% more conversion CPU) instead of the pixels given to the encoder.",
            _BOOLEAN,
        ),
    ),
    Option(
        "--no-wait",
        switch=True,
        doc_default="off",
        help="submit the job and exit (remote runners); the job writes _SUCCESS when done",
    ),
    Option(
        "--plan",
        doc="list and check the input as a run would and print the plan: layout, classes per split, junk, "
        "shards, output size and an estimated run time; nothing is converted or written "
        "([plan a run](inputs.md#plan-a-run))",
        switch=True,
        doc_default="off",
        help="list and check the input as a run would and print the plan (layout, classes per split, junk, "
        "shards, output size, estimated local run time); nothing is converted or written",
    ),
    Option(
        "--json",
        switch=True,
        doc_default="off",
        help="with --plan: print the plan as one JSON document",
    ),
    Option(
        "--all-classes",
        doc="print one row per class in the plan and the summary even when there are more than 20 classes, "
        "instead of their spread (min / median / max per split, the smallest and largest classes, the classes "
        "a split lacks); the JSON plan and `dataset.json` always hold every count",
        switch=True,
        doc_default="off",
        help="print one row per class in the plan and the summary, however many classes (over 20 they are "
        "summarised: min / median / max per split, smallest and largest classes, classes missing from a split)",
    ),
    Option(
        "--quiet",
        short="-q",
        switch=True,
        exclusive_group="verbosity",
        doc_default="off",
        help="print only the summary, warnings and errors (no progress)",
    ),
    Option(
        "--verbose",
        doc="also print every library's log lines: Beam's INFO lines, TensorFlow's and absl's C++ start-up "
        "lines, Cloud Storage credential warnings ([logs](troubleshooting.md#what-a-run-prints))",
        switch=True,
        exclusive_group="verbosity",
        doc_default="off",
        help="also print every library's log lines (Beam's INFO, TensorFlow's C++ start-up lines); "
        "without it stderr carries only img2tfrecord's own lines",
    ),
)


def add_convert_arguments(parser: argparse.ArgumentParser) -> List[str]:
    """Add every option to ``parser``; -> the option strings, for "did you mean" hints."""
    return add_arguments(parser, CONVERT_OPTIONS)


def recorded_flag(recorded: str) -> str:
    """The flag of the option ``dataset.json`` records as ``recorded`` (``max_file_bytes`` -> ``--max-file-mb``)."""
    for option in CONVERT_OPTIONS:
        if option.recorded_as == recorded:
            return option.flag
    return "--" + recorded.replace("_", "-")


def template_options() -> Dict[str, Option]:
    """Flex Template parameter name -> option."""
    return {option.dest: option for option in CONVERT_OPTIONS if option.template}
