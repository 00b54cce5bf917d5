"""What a WebDataset reader needs of an output: a split's shard URLs and the keys of withdrawn samples.

    import webdataset as wds
    from img2tfrecord.readers.webdataset_split import split_urls, withdrawn_keys

    skip = withdrawn_keys("out/")
    ds = wds.WebDataset(split_urls("out/", "train"), shardshuffle=100).select(lambda s: s["__key__"] not in skip)

``webdataset.WebDataset`` reads every sample of the shards it is given; after ``convert --append
--accept-changes`` some samples are withdrawn (``dataset.json`` lists them), and only these keys
tell them apart. TensorFlow-free and Beam-free for local outputs.
"""

from __future__ import annotations

from typing import FrozenSet, List

from img2tfrecord import shard_formats, storage
from img2tfrecord.readers.read_errors import read_finished_manifest
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas.dataset_json import DatasetManifest
from img2tfrecord.shard_formats.tar_shards import sample_key


def _webdataset_manifest(path: str) -> DatasetManifest:
    doc = read_finished_manifest(path)
    own = shard_formats.adapter(doc.file_format)
    if not own.brace_patterns:
        wanted = next(a for a in shard_formats.ADAPTERS if a.brace_patterns)
        raise ValueError(
            f"{path} holds {own.name} shards, not {wanted.title} shards (convert --file-format {wanted.name})"
        )
    return doc


def split_urls(path: str, split: str = "train") -> List[str]:
    """The tar shards of ``split`` of the finished WebDataset output at ``path``, in order (every generation's)."""
    doc = _webdataset_manifest(path)
    if split not in doc.splits:
        raise ValueError(f"unknown split {split!r} in {path}; available splits: {', '.join(sorted(doc.splits))}")
    return [storage.join(path, shard.file) for shard in doc.splits[split].shards if shard.num_records]


def withdrawn_keys(path: str) -> FrozenSet[str]:
    """The ``__key__`` of every sample no reader should return (``convert --append --accept-changes``)."""
    doc = _webdataset_manifest(path)
    suffix = output_files.shard_suffix(output_files.COMPRESSION_NONE, doc.file_format)
    return frozenset(sample_key(w.file[: -len(suffix)], w.index) for w in doc.withdrawals)


__all__ = ["split_urls", "withdrawn_keys"]
