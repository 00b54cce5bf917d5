"""The output directory contract: file names, shard names and ``dataset.json``.

An output directory holds, per split, shards named
``<split>-<index>-of-<count>.tfrecord`` (``.tfrecord.gz`` when gzip
compressed), plus:

* ``dataset.json`` -- this module's manifest (:func:`build_manifest`);
* ``labels.txt``   -- line i is the class name of id i;
* ``errors.jsonl`` -- one JSON object per rejected input (``path``, ``reason``, ``error``);
* ``_SUCCESS``     -- written last: the directory is complete only when it exists.

The manifest is plain JSON so any language can read it; the helpers here do
no I/O, callers read and write with their own filesystem layer (Beam's
``FileSystems`` in the pipeline, ``tf.io.gfile`` in the reader).
"""
from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Mapping, Optional

from img2tfrecord.schemas import features, labels

FORMAT_VERSION = 1
MANIFEST_FILE = "dataset.json"
LABELS_FILE = labels.LABELS_FILE
ERRORS_FILE = "errors.jsonl"
SUCCESS_FILE = "_SUCCESS"
RECORD_TYPE = "tf.train.Example"

COMPRESSIONS = ("none", "gzip")
SHARD_NAME_TEMPLATE = "-SSSSS-of-NNNNN"  # Beam's shard template: train-00000-of-00004
SPLIT_NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")
_SHARD_FILE_RE = re.compile(r"^(?P<split>[A-Za-z0-9_]+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.tfrecord(\.gz)?$")

# Every name convert may leave in an output directory (beam-temp-* are Beam's
# write staging folders; they are removed when a write finalises).
OUTPUT_FILE_NAMES = (MANIFEST_FILE, LABELS_FILE, ERRORS_FILE, SUCCESS_FILE)
TEMP_PREFIXES = ("beam-temp-", ".tmp-")


def shard_suffix(compression: str) -> str:
    if compression not in COMPRESSIONS:
        raise ValueError(f"unknown compression {compression!r}; expected one of {', '.join(COMPRESSIONS)}")
    return ".tfrecord.gz" if compression == "gzip" else ".tfrecord"


def shard_file_name(split: str, index: int, count: int, compression: str = "none") -> str:
    return f"{split}-{index:05d}-of-{count:05d}{shard_suffix(compression)}"


def parse_shard_file_name(name: str) -> Optional[Dict[str, Any]]:
    """``{'split', 'index', 'count'}`` for a shard file name, else None."""
    m = _SHARD_FILE_RE.match(name)
    if not m:
        return None
    return {"split": m.group("split"), "index": int(m.group("index")), "count": int(m.group("count"))}


def is_output_file(name: str) -> bool:
    """True for a base name that ``convert`` writes (or stages) in an output directory."""
    return (
        name in OUTPUT_FILE_NAMES
        or parse_shard_file_name(name) is not None
        or any(name.startswith(p) for p in TEMP_PREFIXES)
    )


def build_manifest(
    *,
    tool_version: str,
    created: str,
    input_path: str,
    options: Mapping[str, Any],
    compression: str,
    label_names: List[str],
    splits: Mapping[str, Mapping[str, Any]],
    accounting: Mapping[str, Any],
) -> Dict[str, Any]:
    """The ``dataset.json`` document.

    ``splits`` maps split name to ``{"num_examples", "examples_per_class",
    "shards": [{"file", "num_records", "num_bytes"}]}``; ``accounting`` holds
    ``inputs``, ``written``, ``rejected``, ``skipped`` and ``rejected_by_reason``.
    """
    return {
        "format_version": FORMAT_VERSION,
        "tool": "img2tfrecord",
        "tool_version": tool_version,
        "created": created,
        "input": input_path,
        "options": dict(options),
        "record_type": RECORD_TYPE,
        "compression": compression,
        "labels": list(label_names),
        "num_classes": len(label_names),
        "feature_spec": features.feature_spec_json(),
        "splits": {name: dict(info) for name, info in sorted(splits.items())},
        "accounting": dict(accounting),
        "files": {"labels": LABELS_FILE, "errors": ERRORS_FILE, "success": SUCCESS_FILE},
    }


def dumps(manifest: Mapping[str, Any]) -> str:
    return json.dumps(manifest, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def loads(text: str) -> Dict[str, Any]:
    """Parse ``dataset.json``, checking that it is a manifest this version understands."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{MANIFEST_FILE} is not valid JSON: {e}") from e
    if not isinstance(doc, dict) or doc.get("tool") != "img2tfrecord":
        raise ValueError(f"{MANIFEST_FILE} was not written by img2tfrecord")
    version = doc.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ValueError(
            f"{MANIFEST_FILE} has format_version {version!r}; this img2tfrecord reads up to {FORMAT_VERSION}"
        )
    return doc
