"""The output directory contract: file names, shard names and ``dataset.json``.

An output directory holds, per split, shards named by their file format's adapter
(``shard_formats/``): ``<split>-<index>-of-<count><suffix>`` (``train-00000-of-00004.tfrecord``),
or another name template where the format's readers expect one, plus:

* ``dataset.json`` -- the manifest (:mod:`img2tfrecord.schemas.dataset_json`);
* ``labels.txt``   -- line i is the class name of id i;
* ``errors.jsonl`` -- one JSON object per rejected input (``path``, ``reason``, ``error``);
* ``label_map.pbtxt`` -- detection only: the TF Object Detection API's label map (ids from 1);
* ``_SUCCESS``     -- written last: the directory is complete only when it exists;
* ``ledger/generation-<N>.jsonl.gz`` -- the inputs each generation converted (``schemas/ledger.py``),
  which ``convert --append`` compares a new listing with; a generation N > 0 adds shards named
  ``<split>-g<N>-<index>-of-<count>.tfrecord`` and its rejections in ``errors-g<N>.jsonl``;
* ``_LOCK``        -- only while a run writes the directory: who holds it (``pipeline/lock.py``);
* ``index/<shard file name>.idx`` -- for every uncompressed shard, one line
  ``offset length`` per record (the format of NVIDIA DALI's ``tfrecord2idx``
  and of the ``tfrecord`` package's ``create_index``; ``length`` counts the
  record's whole framing; a WebDataset shard's line spans one sample's tar
  members), listed in the manifest as each shard's ``index``; ArrayRecord
  shards carry their own index and get none;
* unless ``--no-analyze``, the tf.Transform output of the train split's analysis
  (``transform_fn/``, ``transformed_metadata/``, ``metadata/schema.pbtxt``,
  ``schema.pbtxt``; statistics in the manifest's ``statistics``), read with
  ``tft.TFTransformOutput(<output dir>)``.

The manifest is plain JSON so any language can read it. Nothing here does
I/O: callers read and write with their own filesystem layer (Beam's
``FileSystems`` in the pipeline, ``storage.py`` in the readers).
"""

from __future__ import annotations

import re
from typing import Any, Dict, Optional

from img2tfrecord import shard_formats
from img2tfrecord.schemas import features, labels

FORMAT_VERSION = 3  # the newest dataset.json this version reads
BASE_FORMAT_VERSION = 1  # written for TFRecord outputs without withdrawn records, which earlier versions read
WITHDRAWALS_FORMAT_VERSION = 2  # generations withdraw records
FILE_FORMATS_FORMAT_VERSION = 3  # shards in another file format than TFRecord (--file-format)
MANIFEST_FILE = "dataset.json"
LABELS_FILE = labels.LABELS_FILE
LABEL_MAP_FILE = labels.LABEL_MAP_FILE
TASK = "task"  # dataset.json: classification or detection
TASK_CLASSIFICATION = "classification"
TASK_DETECTION = "detection"
BOXES_PER_CLASS = "boxes_per_class"  # a detection split: boxes written per class
SHARD_PATTERN = "pattern"  # a webdataset split: its shards' brace pattern, "::" between generations
DROPPED_BOXES = "dropped_boxes"  # a detection split: boxes left out per reason, and clipped_to_image (kept)
ERRORS_FILE = "errors.jsonl"
SUCCESS_FILE = "_SUCCESS"
# The exclusive lock of the run writing an output (pipeline/lock.py): created before the run
# changes anything, removed after _SUCCESS. Not part of the dataset: readers never look at it.
LOCK_FILE = "_LOCK"
RECORD_TYPE = "tf.train.Example"
SEQUENCE_RECORD_TYPE = "tf.train.SequenceExample"  # convert --sequence: one record per clip
RECORD_TYPES = (RECORD_TYPE, SEQUENCE_RECORD_TYPE)

# --file-format: the container of the shards; every fact of a format is its adapter's (shard_formats/).
FILE_FORMATS = shard_formats.FILE_FORMATS
DEFAULT_FILE_FORMAT = shard_formats.DEFAULT_FORMAT

COMPRESSION_NONE = "none"
COMPRESSION_GZIP = "gzip"
COMPRESSIONS = (COMPRESSION_NONE, COMPRESSION_GZIP)
SHARD_NAME_TEMPLATE = "-SSSSS-of-NNNNN"  # Beam's shard template: train-00000-of-00004
SPLIT_NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")
_SHARD_FILE_RES = tuple(
    re.compile(r"^(?P<split>[A-Za-z0-9_]+)(?:-g(?P<generation>\d{5}))?" + a.name_re + a.suffix_re() + "$")
    for a in shard_formats.ADAPTERS
)
_ERRORS_FILE_RE = re.compile(r"^errors-g\d{5}\.jsonl$")
LEDGER_DIR = "ledger"  # the input ledger of each generation (schemas/ledger.py)

# The tf.Transform analysis of the train split (skipped with --no-analyze):
# ``tft.TFTransformOutput(<output dir>)`` reads the first three folders.
STATISTICS = "statistics"  # the tf.Transform analysis of the train split; absent without one
TRANSFORM_FN_DIR = "transform_fn"  # the exported transform (a SavedModel)
TRANSFORMED_METADATA_DIR = "transformed_metadata"  # schema of the transformed features
RAW_METADATA_DIR = "metadata"  # metadata/schema.pbtxt: the records' schema, for raw_feature_spec()
SCHEMA_FILE = "schema.pbtxt"  # the same records' schema (tensorflow_metadata Schema, text format)
TRANSFORM_STAGING_DIR = "transform_tmp"  # WriteTransformFn's staging folder, removed when it finishes
ANALYSIS_TEMP_DIR = ".tmp-tft"  # tf.Transform's temp dir when no --temp_location is given
ANALYSIS_FILE_NAMES = (
    TRANSFORM_FN_DIR,
    TRANSFORMED_METADATA_DIR,
    RAW_METADATA_DIR,
    SCHEMA_FILE,
    TRANSFORM_STAGING_DIR,
    ANALYSIS_TEMP_DIR,
)

# What makes the folder a TFDS dataset (schemas/tfds_layout.py writes them from the manifest):
# tfds.builder_from_directory reads dataset_info.json, features.json and the class names of
# image/class/label from the file TFDS names after the feature's path parts joined by "-".
TFDS_DATASET_INFO_FILE = "dataset_info.json"
TFDS_FEATURES_FILE = "features.json"
TFDS_LABEL_NAMES_FILE = "-".join(features.CLASS_LABEL.split("/")) + ".labels.txt"
TFDS_FILE_NAMES = (TFDS_DATASET_INFO_FILE, TFDS_FEATURES_FILE, TFDS_LABEL_NAMES_FILE)

INDEX_DIR = "index"  # per-shard record offsets of uncompressed outputs
INDEX_SUFFIX = ".idx"

# A run's staging folder, named after its fingerprint (options, seed, input listing):
# shards/<split>/ (Beam's temp shard files), done/ (one file per finished shard), index/.
# Removed before _SUCCESS is written; a --resume'd run of the same fingerprint picks it up.
RUN_FOLDER_PREFIX = ".tmp-run-"
RUN_SHARDS_DIR = "shards"
RUN_COMMITTED_DIR = "committed"  # a run's committed shards and indexes, moved into the output when it finalises
RUN_DONE_DIR = "done"
RUN_LEDGER_FILE = "ledger.jsonl.gz"  # the run's input ledger, moved to ledger/ when the run finalises
RUN_MEMBERS_FILE = "members.jsonl.gz"  # an archive run's items per archive, moved to ledger/ when the run finalises
RUN_STARTED_FILE = "run.json"  # what the run's fingerprint covers: a refused --resume names what differs
RUN_PLACED_FILE = (
    "placed-items.bin"  # a folder run's work items grouped by shard at launch (conversion/placed_items.py)
)

# Every name convert may leave in an output directory (beam-temp-* are Beam's
# write staging folders; they are removed when a write finalises).
OUTPUT_FILE_NAMES = (
    (
        MANIFEST_FILE,
        LABELS_FILE,
        LABEL_MAP_FILE,
        ERRORS_FILE,
        SUCCESS_FILE,
        LOCK_FILE,
        INDEX_DIR,
        LEDGER_DIR,
    )
    + ANALYSIS_FILE_NAMES
    + tuple(a.card_file for a in shard_formats.ADAPTERS if a.card_file)
)
TEMP_PREFIXES = ("beam-temp-", ".tmp-")


def check_file_format(file_format: str) -> str:
    return shard_formats.adapter(file_format).name


def shard_suffix(compression: str, file_format: str = DEFAULT_FILE_FORMAT) -> str:
    if compression not in COMPRESSIONS:
        raise ValueError(f"unknown compression {compression!r}; expected one of {', '.join(COMPRESSIONS)}")
    return shard_formats.adapter(file_format).shard_suffix(compression)


def shard_name_template(file_format: str = DEFAULT_FILE_FORMAT) -> str:
    """Beam's shard name template of a file format: ``-SSSSS-of-NNNNN``, or ``-SSSSSS`` for tar shards."""
    return shard_formats.adapter(file_format).name_template


def shard_prefix(split: str, generation: int = 0) -> str:
    """A split's shard names before ``-<index>-of-<count>``: the split, then ``-g<N>`` for an appended generation."""
    return split if not generation else f"{split}-g{generation:05d}"


def shard_file_name(
    split: str,
    index: int,
    count: int,
    compression: str = "none",
    generation: int = 0,
    file_format: str = DEFAULT_FILE_FORMAT,
) -> str:
    suffix = shard_suffix(compression, file_format)
    return shard_formats.adapter(file_format).file_name(shard_prefix(split, generation), index, count, suffix)


def shard_pattern(split: str, count: int, generation: int = 0, file_format: str = DEFAULT_FILE_FORMAT) -> str:
    """The brace pattern of one generation's shards of a split (``train-{000000..000003}.tar``), as
    ``webdataset.WebDataset`` and ``braceexpand`` expand it."""
    first = shard_file_name(split, 0, count, generation=generation, file_format=file_format)
    if count == 1:
        return first
    last = shard_file_name(split, count - 1, count, generation=generation, file_format=file_format)
    prefix = shard_prefix(split, generation)
    start, end = first[len(prefix) + 1 :].split(".", 1)[0], last[len(prefix) + 1 :].split(".", 1)[0]
    return f"{prefix}-{{{start}..{end}}}{shard_suffix(COMPRESSION_NONE, file_format)}"


def file_format_of(name: str) -> Optional[str]:
    """The file format of a shard file name (a final name or a staged temp name), or None."""
    found = shard_formats.adapter_of_file(name)
    return found.name if found is not None else None


def errors_file(generation: int = 0) -> str:
    """The error report of a generation: ``errors.jsonl`` for the first, ``errors-g<N>.jsonl`` for appends."""
    return ERRORS_FILE if not generation else f"errors-g{generation:05d}.jsonl"


def ledger_file(generation: int) -> str:
    """The input ledger of a generation, relative to the output directory."""
    return f"{LEDGER_DIR}/generation-{generation:05d}.jsonl.gz"


def members_file(generation: int) -> str:
    """What each archive of a generation gave (``ledger.members_bytes``), relative to the output directory."""
    return f"{LEDGER_DIR}/members-{generation:05d}.jsonl.gz"


def run_folder(fingerprint: str) -> str:
    """The base name of the staging folder of a run with this fingerprint."""
    return f"{RUN_FOLDER_PREFIX}{fingerprint}"


def index_file(shard_name: str) -> str:
    """The index of a shard, relative to the output directory: ``index/<shard file name>.idx``."""
    return f"{INDEX_DIR}/{shard_name}{INDEX_SUFFIX}"


def parse_shard_file_name(name: str) -> Optional[Dict[str, Any]]:
    """``{"split", "generation", "index", "count"}`` of a shard file name (``count`` None for a
    format whose names have none, as tar shards'), or None."""
    for pattern in _SHARD_FILE_RES:
        m = pattern.match(name)
        if m:
            count = m.groupdict().get("count")
            return {
                "split": m.group("split"),
                "generation": int(m.group("generation") or 0),
                "index": int(m.group("index")),
                "count": None if count is None else int(count),
            }
    return None


def is_output_file(name: str) -> bool:
    """True for a base name that ``convert`` writes (or stages) in an output directory."""
    return (
        name in OUTPUT_FILE_NAMES
        or name in TFDS_FILE_NAMES
        or parse_shard_file_name(name) is not None
        or _ERRORS_FILE_RE.match(name) is not None
        or any(name.startswith(p) for p in TEMP_PREFIXES)
    )
