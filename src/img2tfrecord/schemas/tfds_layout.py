"""How an output directory reads as a TensorFlow Datasets dataset: its metadata files, built from ``dataset.json``.

``tfds.builder_from_directory(<output dir>)`` reads ``dataset_info.json``
(splits, shard record counts, the file format and the file name template
``{SPLIT}-{SHARD_X_OF_Y}.tfrecord`` (``.array_record``) matching our shard names),
``features.json`` and ``image-class-label.labels.txt`` (the class names).
Feature keys nest on ``/``, as TFDS flattens nested features into record
keys: ``image/class/label`` is ``example["image"]["class"]["label"]``, a
``ClassLabel``; ``image/encoded`` an ``Image`` decoded to uint8.

Outputs TFDS cannot describe (raw pixels, SequenceExamples, gzip, WebDataset tar shards) get
metadata naming :class:`NotDescribable` of ``img2tfrecord.readers.tfds_features``,
which raises the reason when TFDS loads it. Nothing here does I/O or
imports TensorFlow Datasets.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional, Tuple

from img2tfrecord import shard_formats
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas.dataset_json import Compression, DatasetManifest, ShardInfo, TfdsStatus

DATASET_INFO_FILE = output_files.TFDS_DATASET_INFO_FILE
FEATURES_FILE = output_files.TFDS_FEATURES_FILE
# TFDS's name of each file format it reads (its FileFormat values), and the suffix of our shards in it.
TFDS_FILE_FORMATS = {a.name: a.tfds_name for a in shard_formats.ADAPTERS if a.tfds_name}
_TFDS_DEFAULT = TFDS_FILE_FORMATS[output_files.DEFAULT_FILE_FORMAT]
DATASET_NAME = "img2tfrecord"

_SEP = "/"


LABEL_NAMES_FILE = output_files.TFDS_LABEL_NAMES_FILE
FILE_NAMES = output_files.TFDS_FILE_NAMES  # what metadata_files may write

_TFDS = "tensorflow_datasets.core.features."
_NOT_DESCRIBABLE = "img2tfrecord.readers.tfds_features.NotDescribable"


class NotATfdsDatasetError(ValueError):
    """TFDS cannot read this output; the message says why and how to read it instead."""


def generation_shards(doc: DatasetManifest, split: str) -> List[Tuple[int, Tuple[ShardInfo, ...]]]:
    """``(generation, its shards)`` of ``split``, oldest first (one group for an output without generations)."""
    shards = doc.splits[split].shards
    if not doc.generations:
        return [(0, shards)]
    groups, start = [], 0
    for generation in doc.generations:
        n = generation.shards.get(split, 0)
        if n:
            groups.append((generation.number, shards[start : start + n]))
        start += n
    return groups


def file_template(doc: DatasetManifest, prefix: str = "{SPLIT}") -> str:
    """TFDS's file name template of shards named ``<prefix>-<index>-of-<count>`` in the output's file format."""
    return f"{prefix}-{{SHARD_X_OF_Y}}.{TFDS_FILE_FORMATS.get(doc.file_format, _TFDS_DEFAULT)}"


def unsupported_reason(doc: DatasetManifest, across_generations: bool = False) -> Optional[str]:
    """Why TFDS cannot read the output ``doc`` describes, or None when it can; ``across_generations``:
    read as :func:`img2tfrecord.readers.tfds_builder.tfds_builder` reads it, one template per generation."""
    if doc.file_format not in TFDS_FILE_FORMATS:
        own = shard_formats.adapter(doc.file_format)
        return (
            f"this img2tfrecord output holds {own.described}, which TFDS does not read; read it "
            f"with {own.other_readers}, or convert with "
            f"--file-format {' or '.join(TFDS_FILE_FORMATS)}"
        )
    if doc.is_sequence:
        return (
            "this img2tfrecord output holds tf.train.SequenceExample clips (convert --sequence), which TFDS "
            "cannot describe; read it with img2tfrecord.load(path, sequence=True)"
        )
    if doc.image_format == keys.FORMAT_RAW:
        return (
            "this img2tfrecord output stores raw pixels (convert --format raw), which no TFDS image feature "
            "decodes; read it with img2tfrecord.load or img2tfrecord.readers.datasource.SplitDataSource, or convert "
            "with --format jpeg, png or keep"
        )
    if doc.compression is not Compression.NONE:
        return (
            f"this img2tfrecord output is {doc.compression.value}-compressed and TFDS reads uncompressed "
            "TFRecord files only; read it with img2tfrecord.load or convert with --compression none"
        )
    if doc.withdrawals and not across_generations:
        return (
            "this img2tfrecord output has withdrawn records (convert --append --accept-changes), which TFDS "
            "cannot skip inside a shard; read it with img2tfrecord.readers.tfds_builder.tfds_builder(path), "
            "which reads those shards from a copy of their live records, or with img2tfrecord.load"
        )
    if len(doc.generations) > 1 and not across_generations:
        return (
            "this img2tfrecord output has appended generations (convert --append), whose shard names TFDS's one "
            "file name template per split cannot list; read it with "
            "img2tfrecord.readers.tfds_builder.tfds_builder(path), whose splits cover every generation, or with "
            "img2tfrecord.load"
        )
    for name in doc.splits:
        groups = generation_shards(doc, name)
        if sum(len(shards) for _, shards in groups) != len(doc.splits[name].shards):
            return f"the shards of split {name} are not those its generations list"
        for generation, shards in groups:
            for i, shard in enumerate(shards):
                expected = output_files.shard_file_name(
                    name, i, len(shards), generation=generation, file_format=doc.file_format
                )
                if shard.file != expected:
                    return f"shard {shard.file} of split {name} does not follow {file_template(doc)}"
    for key, entry in doc.spec.items():
        if (
            entry.get("kind") != keys.FIXED_LEN
            or entry.get("shape") != []
            or entry.get("dtype") not in ("string", "int64")
        ):
            return f"feature {key} is not a scalar string or int64 feature"
    return None


def status(doc: DatasetManifest) -> TfdsStatus:
    """``dataset.json``'s ``tfds``: whether TFDS reads the output, and if not why."""
    reason = unsupported_reason(doc)
    return TfdsStatus(readable=reason is None, reason=reason)


def _image_feature(doc: DatasetManifest, description: str) -> Dict[str, Any]:
    channels = doc.channels or 3
    size = doc.image_size  # (width, height)
    dims = [size[1], size[0], channels] if size else [-1, -1, channels]
    image: Dict[str, Any] = {"shape": {"dimensions": [str(d) for d in dims]}, "dtype": "uint8"}
    if doc.image_format in (keys.FORMAT_JPEG, keys.FORMAT_PNG):
        image["encodingFormat"] = doc.image_format
    return {"pythonClassName": _TFDS + "image_feature.Image", "image": image, "description": description}


def _leaf(doc: DatasetManifest, key: str, entry: Mapping[str, Any]) -> Dict[str, Any]:
    description = entry.get("description", "")
    if key == keys.IMAGE_ENCODED:
        return _image_feature(doc, description)
    if key == keys.CLASS_LABEL:
        return {
            "pythonClassName": _TFDS + "class_label_feature.ClassLabel",
            "classLabel": {"numClasses": str(doc.num_classes)},
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


def features_json(doc: DatasetManifest) -> Dict[str, Any]:
    """``features.json`` of a readable output: the record's features nested on ``/``."""
    tree: Dict[str, Any] = {}
    for key, entry in sorted(doc.spec.items()):
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


def dataset_info_json(doc: DatasetManifest, reason: Optional[str] = None) -> Dict[str, Any]:
    """``dataset_info.json``: name, version, description and per split the shard record counts."""
    splits: List[Dict[str, Any]] = []
    for name, info in sorted(doc.splits.items()):
        splits.append(
            {
                "name": name,
                "numBytes": str(sum(s.num_bytes for s in info.shards)),
                "shardLengths": [str(s.num_records) for s in info.shards],
                "filepathTemplate": file_template(doc),
            }
        )
    description = (
        f"Images converted by img2tfrecord {doc.tool_version} from {doc.input}; dataset.json describes the conversion."
    )
    if reason is not None:
        description = f"{description} TFDS cannot read it: {reason}"
    return {
        "name": DATASET_NAME,
        "version": f"{doc.format_version}.0.0",
        "description": description,
        "fileFormat": TFDS_FILE_FORMATS.get(doc.file_format, _TFDS_DEFAULT),
        "splits": splits,
    }


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def metadata_files(doc: DatasetManifest, across_generations: bool = False) -> Dict[str, str]:
    """File name (relative to the output directory) -> content, for the output described by ``doc``.

    For an output TFDS cannot read, ``features.json`` names
    ``img2tfrecord.readers.tfds_features.NotDescribable``: loading it with TFDS
    raises :class:`NotATfdsDatasetError` with :func:`unsupported_reason`.
    ``across_generations``: the features of an appended output, whose splits the reader sets itself.
    """
    reason = unsupported_reason(doc, across_generations)
    files = {DATASET_INFO_FILE: _dumps(dataset_info_json(doc, reason))}
    if reason is not None:
        files[FEATURES_FILE] = _dumps({"type": _NOT_DESCRIBABLE, "content": {"reason": reason}})
        return files
    files[FEATURES_FILE] = _dumps(features_json(doc))
    if keys.CLASS_LABEL in doc.spec:
        files[LABEL_NAMES_FILE] = "".join(f"{name}\n" for name in doc.labels)
    return files
