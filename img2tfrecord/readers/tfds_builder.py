"""A TFDS builder over every generation of an appended output: one split info per generation, merged.

TFDS lists a split's shards from one file name template, and an append names its shards
``<split>-g<N>-...``, so ``tfds.builder_from_directory`` refuses an appended output (its metadata says
why). :func:`tfds_builder` reads it anyway: each generation's shards of a split are one
``tfds.core.SplitInfo`` with its own template, merged into a ``MultiSplitInfo`` as
``tfds.builder_from_directories`` merges folders. Needs TensorFlow Datasets.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref

import tensorflow_datasets as tfds
from etils import epath
from tensorflow_datasets.core import naming, splits

from img2tfrecord.readers.read_errors import read_finished_manifest
from img2tfrecord.schemas import manifest, tfds_layout


def tfds_builder(path: str) -> tfds.core.DatasetBuilder:
    """A read-only TFDS builder of the output at ``path``, whose splits hold every generation's records.

    The same as ``tfds.builder_from_directory(path)`` for an output without appended generations.
    Raises :class:`tfds_layout.NotATfdsDatasetError` for an output TFDS cannot read (its reason),
    and what ``img2tfrecord.load`` raises for a missing or unfinished output.
    """
    doc = read_finished_manifest(path)
    reason = tfds_layout.unsupported_reason(doc, across_generations=True)
    if reason is not None:
        raise tfds_layout.NotATfdsDatasetError(reason)
    if len(doc.generations) <= 1:
        return tfds.builder_from_directory(path)
    # The metadata a builder starts from (features, names) in a private folder; the splits are set below.
    folder = tempfile.mkdtemp(prefix="img2tfrecord-tfds-")
    for name, text in tfds_layout.metadata_files(doc, across_generations=True).items():
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write(text)
    builder = tfds.builder_from_directory(folder)
    weakref.finalize(builder, shutil.rmtree, folder, True)
    infos = []
    for split in doc.splits:
        parts = [
            tfds.core.SplitInfo(
                name=split,
                shard_lengths=[s.num_records for s in shards],
                num_bytes=sum(s.num_bytes for s in shards),
                filename_template=naming.ShardedFileTemplate(
                    data_dir=epath.Path(path),
                    template=manifest.shard_prefix(split, generation) + "-{SHARD_X_OF_Y}.tfrecord",
                    dataset_name=tfds_layout.DATASET_NAME,
                    split=split,
                    filetype_suffix="tfrecord",
                ),
            )
            for generation, shards in tfds_layout.generation_shards(doc, split)
        ]
        infos.append(splits.MultiSplitInfo(name=split, split_infos=parts))
    builder.info.set_splits(splits.SplitDict(infos))
    return builder


__all__ = ["tfds_builder"]
