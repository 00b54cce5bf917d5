"""How an output directory reads as a TensorFlow Datasets dataset: its metadata files, built from ``dataset.json``.

``tfds.builder_from_directory(<output dir>)`` reads ``dataset_info.json``
(splits, shard record counts, the file name template
``{SPLIT}-{SHARD_X_OF_Y}.tfrecord`` matching our shard names),
``features.json`` and ``image-class-label.labels.txt`` (the class names).
Feature keys nest on ``/``, as TFDS flattens nested features into record
keys: ``image/class/label`` is ``example["image"]["class"]["label"]``, a
``ClassLabel``; ``image/encoded`` an ``Image`` decoded to uint8.

Outputs TFDS cannot describe (raw pixels, SequenceExamples, gzip) get
metadata naming :class:`NotDescribable` of ``img2tfrecord.readers.tfds_features``,
which raises the reason when TFDS loads it. Nothing here does I/O or
imports TensorFlow Datasets.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional

from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import manifest

DATASET_INFO_FILE = "dataset_info.json"
FEATURES_FILE = "features.json"
SPLIT_FILE_TEMPLATE = "{SPLIT}-{SHARD_X_OF_Y}.tfrecord"  # TFDS' spelling of manifest.shard_file_name
DATASET_NAME = "img2tfrecord"
MANIFEST_KEY = "tfds"  # dataset.json: {"readable": bool, "reason": str when not}
_SEP = "/"


def label_names_file() -> str:
    """The file TFDS reads ``image/class/label``'s names from (its rule: path parts joined by ``-``)."""
    return "-".join(keys.CLASS_LABEL.split(_SEP)) + ".labels.txt"


FILE_NAMES = (DATASET_INFO_FILE, FEATURES_FILE, label_names_file())  # what write_tfds_metadata may write

_TFDS = "tensorflow_datasets.core.features."
_NOT_DESCRIBABLE = "img2tfrecord.readers.tfds_features.NotDescribable"


class NotATfdsDatasetError(ValueError):
    """TFDS cannot read this output; the message says why and how to read it instead."""


def unsupported_reason(doc: Mapping[str, Any]) -> Optional[str]:
    """Why TFDS cannot read the output of ``doc`` (a ``dataset.json``), or None when it can."""
    if doc.get("record_type", manifest.RECORD_TYPE) != manifest.RECORD_TYPE:
        return (
            "this img2tfrecord output holds tf.train.SequenceExample clips (convert --sequence), which TFDS "
            "cannot describe; read it with img2tfrecord.load(path, sequence=True)"
        )
    if doc.get("options", {}).get("format") == keys.FORMAT_RAW:
        return (
            "this img2tfrecord output stores raw pixels (convert --format raw), which no TFDS image feature "
            "decodes; read it with img2tfrecord.load or img2tfrecord.readers.datasource.SplitDataSource, or convert "
            "with --format jpeg, png or keep"
        )
    if doc.get("compression", "none") != "none":
        return (
            f"this img2tfrecord output is {doc.get('compression')}-compressed and TFDS reads uncompressed "
            "TFRecord files only; read it with img2tfrecord.load or convert with --compression none"
        )
    for name, info in doc.get("splits", {}).items():
        shards = info.get("shards", [])
        for i, shard in enumerate(shards):
            if shard["file"] != manifest.shard_file_name(name, i, len(shards)):
                return f"shard {shard['file']} of split {name} does not follow {SPLIT_FILE_TEMPLATE}"
    for key, entry in doc.get("feature_spec", {}).items():
        if (
            entry.get("kind") != keys.FIXED_LEN
            or entry.get("shape") != []
            or entry.get("dtype") not in ("string", "int64")
        ):
            return f"feature {key} is not a scalar string or int64 feature"
    return None


def manifest_entry(doc: Mapping[str, Any]) -> Dict[str, Any]:
    """The value of ``dataset.json``'s :data:`MANIFEST_KEY`: whether TFDS reads the output, and if not why."""
    reason = unsupported_reason(doc)
    return {"readable": True} if reason is None else {"readable": False, "reason": reason}


def _image_feature(doc: Mapping[str, Any], description: str) -> Dict[str, Any]:
    options = doc.get("options", {})
    channels = int(options.get("channels") or 3)
    size = options.get("image_size")  # [width, height]
    dims = [int(size[1]), int(size[0]), channels] if size else [-1, -1, channels]
    image: Dict[str, Any] = {"shape": {"dimensions": [str(d) for d in dims]}, "dtype": "uint8"}
    if options.get("format") in (keys.FORMAT_JPEG, keys.FORMAT_PNG):
        image["encodingFormat"] = options["format"]
    return {"pythonClassName": _TFDS + "image_feature.Image", "image": image, "description": description}


def _leaf(doc: Mapping[str, Any], key: str, entry: Mapping[str, Any]) -> Dict[str, Any]:
    description = entry.get("description", "")
    if key == keys.IMAGE_ENCODED:
        return _image_feature(doc, description)
    if key == keys.CLASS_LABEL:
        return {
            "pythonClassName": _TFDS + "class_label_feature.ClassLabel",
            "classLabel": {"numClasses": str(len(doc.get("labels", [])))},
            "description": description,
        }
    if entry["dtype"] == "int64":
        return {
            "pythonClassName": _TFDS + "scalar.Scalar",
            "tensor": {"shape": {}, "dtype": "int64", "encoding": "none"},
            "description": description,
        }
    return {"pythonClassName": _TFDS + "text_feature.Text", "text": {}, "description": description}


def _features_dict(children: Mapping[str, Any]) -> Dict[str, Any]:
    return {"pythonClassName": _TFDS + "features_dict.FeaturesDict", "featuresDict": {"features": dict(children)}}


def features_json(doc: Mapping[str, Any]) -> Dict[str, Any]:
    """``features.json`` of a readable output: the record's features nested on ``/``."""
    tree: Dict[str, Any] = {}
    for key, entry in sorted(doc["feature_spec"].items()):
        *parents, name = key.split(_SEP)
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
            if "pythonClassName" in node:
                raise ValueError(f"feature {key} nests under another feature")
        if name in node:
            raise ValueError(f"feature {key} is both a feature and a group of features")
        node[name] = _leaf(doc, key, entry)

    def build(node: Mapping[str, Any]) -> Dict[str, Any]:
        return _features_dict({k: v if "pythonClassName" in v else build(v) for k, v in node.items()})

    return build(tree)


def dataset_info_json(doc: Mapping[str, Any], reason: Optional[str] = None) -> Dict[str, Any]:
    """``dataset_info.json``: name, version, description and per split the shard record counts."""
    splits: List[Dict[str, Any]] = []
    for name, info in sorted(doc.get("splits", {}).items()):
        shards = info.get("shards", [])
        splits.append(
            {
                "name": name,
                "numBytes": str(sum(int(s.get("num_bytes") or 0) for s in shards)),
                "shardLengths": [str(int(s["num_records"])) for s in shards],
                "filepathTemplate": SPLIT_FILE_TEMPLATE,
            }
        )
    description = (
        f"Images converted by img2tfrecord {doc.get('tool_version', '')} from {doc.get('input', '')}; "
        f"dataset.json describes the conversion."
    )
    if reason is not None:
        description = f"{description} TFDS cannot read it: {reason}"
    return {
        "name": DATASET_NAME,
        "version": f"{int(doc.get('format_version', manifest.FORMAT_VERSION))}.0.0",
        "description": description,
        "fileFormat": "tfrecord",
        "splits": splits,
    }


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def metadata_files(doc: Mapping[str, Any]) -> Dict[str, str]:
    """File name (relative to the output directory) -> content, for the output described by ``doc``.

    For an output TFDS cannot read, ``features.json`` names
    ``img2tfrecord.readers.tfds_features.NotDescribable``: loading it with TFDS
    raises :class:`NotATfdsDatasetError` with :func:`unsupported_reason`.
    """
    reason = unsupported_reason(doc)
    files = {DATASET_INFO_FILE: _dumps(dataset_info_json(doc, reason))}
    if reason is not None:
        files[FEATURES_FILE] = _dumps({"type": _NOT_DESCRIBABLE, "content": {"reason": reason}})
        return files
    files[FEATURES_FILE] = _dumps(features_json(doc))
    if keys.CLASS_LABEL in doc["feature_spec"]:
        files[label_names_file()] = "".join(f"{name}\n" for name in doc.get("labels", []))
    return files
