"""A TFDS builder over every generation of an appended output: one split info per generation, merged.

TFDS lists a split's shards from one file name template, and an append names its shards
``<split>-g<N>-...``, so ``tfds.builder_from_directory`` refuses an appended output (its metadata says
why). :func:`tfds_builder` reads it anyway: each generation's shards of a split are one
``tfds.core.SplitInfo`` with its own template, merged into a ``MultiSplitInfo`` as
``tfds.builder_from_directories`` merges folders. TFDS reads whole shards only, so a shard holding
withdrawn records (``convert --append --accept-changes``) is read from a private copy of its live
records, made when the builder is; its place among the shards is kept. Needs TensorFlow Datasets.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from typing import FrozenSet, List, Sequence

import tensorflow_datasets as tfds
from etils import epath
from tensorflow_datasets.core import naming, splits

from img2tfrecord import shard_formats, storage
from img2tfrecord.readers import records
from img2tfrecord.readers.read_errors import read_finished_manifest
from img2tfrecord.schemas import output_files, tfds_layout
from img2tfrecord.schemas.dataset_json import DatasetManifest, ShardInfo


def tfds_builder(path: str) -> tfds.core.DatasetBuilder:
    """A read-only TFDS builder of the output at ``path``, whose splits hold every generation's records.

    The same as ``tfds.builder_from_directory(path)`` for an output without appended generations or
    withdrawn records; no withdrawn record is read.
    Raises :class:`tfds_layout.NotATfdsDatasetError` for an output TFDS cannot read (its reason),
    and what ``img2tfrecord.load`` raises for a missing or unfinished output.
    """
    doc = read_finished_manifest(path)
    reason = tfds_layout.unsupported_reason(doc, across_generations=True)
    if reason is not None:
        raise tfds_layout.NotATfdsDatasetError(reason)
    if len(doc.generations) <= 1 and not doc.withdrawals:
        return tfds.builder_from_directory(path)
    # The metadata a builder starts from (features, names) in a private folder; the splits are set below.
    folder = tempfile.mkdtemp(prefix="img2tfrecord-tfds-")
    for name, text in tfds_layout.metadata_files(doc, across_generations=True).items():
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write(text)
    builder = tfds.builder_from_directory(folder)
    weakref.finalize(builder, shutil.rmtree, folder, True)
    withdrawn = doc.withdrawn_by_file()
    infos = []
    for split in doc.splits:
        parts: List[splits.SplitInfo] = []
        for generation, shards in tfds_layout.generation_shards(doc, split):
            template = tfds_layout.file_template(doc, output_files.shard_prefix(split, generation))
            start = 0
            for i, shard in enumerate(shards):
                if shard.file in withdrawn:
                    if i > start:
                        parts.append(_shards(doc, path, split, template, shards, start, i))
                    copy = f"{split}-live-{len(parts):05d}"
                    count = _copy_live(doc, storage.join(path, shard.file), folder, copy, withdrawn[shard.file])
                    parts.append(_split_info(doc, folder, split, tfds_layout.file_template(doc, copy), [count], 0))
                    start = i + 1
            if start < len(shards):
                parts.append(_shards(doc, path, split, template, shards, start, len(shards)))
        infos.append(splits.MultiSplitInfo(name=split, split_infos=parts))
    builder.info.set_splits(splits.SplitDict(infos))
    return builder


def _shards(
    doc: DatasetManifest, path: str, split: str, template: str, shards: Sequence[ShardInfo], start: int, end: int
) -> splits.SplitInfo:
    """The split info of one generation's ``shards[start:end]``: the others count 0 records, so TFDS skips them."""
    lengths = [s.num_records if start <= i < end else 0 for i, s in enumerate(shards)]
    return _split_info(doc, path, split, template, lengths, sum(s.num_bytes for s in shards[start:end]))


def _split_info(
    doc: DatasetManifest, folder: str, split: str, template: str, lengths: List[int], num_bytes: int
) -> splits.SplitInfo:
    return tfds.core.SplitInfo(
        name=split,
        shard_lengths=lengths,
        num_bytes=num_bytes,
        filename_template=naming.ShardedFileTemplate(
            data_dir=epath.Path(folder),
            template=template,
            dataset_name=tfds_layout.DATASET_NAME,
            split=split,
            filetype_suffix=tfds_layout.TFDS_FILE_FORMATS[doc.file_format],
        ),
    )


def _copy_live(doc: DatasetManifest, shard: str, folder: str, prefix: str, withdrawn: FrozenSet[int]) -> int:
    """Write the records of ``shard`` but the ``withdrawn`` ones to a one-shard file of ``prefix`` in ``folder``,
    in the output's file format; -> how many."""
    file_format = doc.file_format
    target = os.path.join(folder, output_files.shard_file_name(prefix, 0, 1, file_format=file_format))
    live = (data for index, _, data in records.iter_records(shard, file_format=file_format) if index not in withdrawn)
    context = shard_formats.ShardContext(os.path.basename(target).split(".", 1)[0], doc.is_sequence, doc.labels)
    return shard_formats.adapter(file_format).write_file(target, live, context)


__all__ = ["tfds_builder"]
