"""The brace patterns of a format's shards whose readers expand them (WebDataset), as ``dataset.json`` lists them.

``webdataset.WebDataset(<output>/<pattern>)`` reads a split: one brace pattern per generation
(``train-{000000..000003}.tar``), joined by ``::`` (WebDataset's separator of several patterns)
when an append added generations. Nothing here does I/O.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from img2tfrecord import shard_formats
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas.dataset_json import DatasetManifest
from img2tfrecord.schemas.tfds_layout import generation_shards

PATTERN_SEPARATOR = "::"


def split_pattern(doc: DatasetManifest, split: str) -> Optional[str]:
    """The pattern(s) of ``split``'s shards (None for another file format, or a split without shards)."""
    if not shard_formats.adapter(doc.file_format).brace_patterns:
        return None
    patterns = [
        output_files.shard_pattern(split, len(shards), generation, doc.file_format)
        for generation, shards in generation_shards(doc, split)
        if shards
    ]
    return PATTERN_SEPARATOR.join(patterns) or None


def with_patterns(doc: DatasetManifest) -> DatasetManifest:
    """``doc`` with each split's ``pattern`` set (WebDataset outputs; others are returned as they are)."""
    if not shard_formats.adapter(doc.file_format).brace_patterns:
        return doc
    splits = {name: dataclasses.replace(info, pattern=split_pattern(doc, name)) for name, info in doc.splits.items()}
    return doc.replace(splits=splits)
