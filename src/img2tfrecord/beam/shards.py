"""Converted records -> sharded TFRecord files and their indexes, placed as ``convert`` places them."""

from __future__ import annotations

import hashlib
import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from img2tfrecord import api, shard_formats, tfrecord_codec
from img2tfrecord.beam.examples import REJECTED, ConvertedExample
from img2tfrecord.conversion.converter import Converter, Output
from img2tfrecord.conversion.record_sizes import shard_counts
from img2tfrecord.conversion.seeded_hashes import DEFAULT_SPLIT
from img2tfrecord.images.options import ImageOptions
from img2tfrecord.model import ERRORS, Record
from img2tfrecord.option_values import DEFAULT_SHARD_SIZE_MB
from img2tfrecord.schemas import output_files
from img2tfrecord.sources.layout import LAYOUT_MANIFEST
from img2tfrecord.transforms.beam_tfrecord_sink import ShardSinks
from img2tfrecord.transforms.count_shards import fixed_shard_counts
from img2tfrecord.transforms.finalize import remove_tree
from img2tfrecord.transforms.launch_values import launch_value
from img2tfrecord.transforms.write_shards import WriteShards


class _Written(Converter[ConvertedExample]):
    """The shard step's converter for records converted already: each is written as it is."""

    def __init__(self, seed: int):
        super().__init__(ImageOptions(), LAYOUT_MANIFEST, ((DEFAULT_SPLIT, 1.0),), seed)

    def relpath_of(self, item: ConvertedExample) -> str:
        return item.key

    def path_of(self, item: ConvertedExample) -> str:
        return item.key

    def split_of(self, item: ConvertedExample) -> str:
        return item.split

    def __call__(self, item: ConvertedExample, label_names: List[str]) -> Output:
        return None, Record(item.split, item.class_name, item.example)


def _framed_bytes(example: ConvertedExample) -> Tuple[str, int]:
    return example.split, tfrecord_codec.framed_length(len(example.example))


def _counts_from_bytes(unused_start, split_bytes: Dict[str, int], split_names: List[str], shard_size_mb: float):
    return shard_counts({name: split_bytes.get(name, 0) for name in split_names}, shard_size_mb)


def _remove_staging(unused_start, unused_shards, run_dir: str) -> None:
    remove_tree(run_dir)


class ExamplesToTFRecords(beam.PTransform):
    """:class:`ConvertedExample` elements -> each split's shards and index files in ``output``; returns a dict:
    ``shards``, the written shards (``CommittedShard``: split, file, records, bytes, sha256, index), and
    ``rejected``, an ``errors.jsonl`` row (``unknown_split``) per record of a split not in ``split_names``.

    A record's shard and its place in the shard are seeded hashes of its ``key``, as in ``convert``:
    with the same ``seed`` and shard counts, the shards of ``ImagesToExamples`` output are byte for
    byte those ``convert`` writes. ``split_names``: the splits to write (each gets its shards, empty
    ones too). Shard counts are ``num_shards``, or each split's
    exact bytes over ``shard_size_mb``. Names follow ``convert``'s (``train-00000-of-00004.tfrecord``,
    ``.tfrecord.gz`` with ``compression="gzip"``); ``file_format`` is ``--file-format``'s. Unlike
    ``ImagesToTFRecords``, the records cross a shuffle; ``dataset.json``, ``labels.txt`` and ``_SUCCESS``
    are yours to write (or use that).
    """

    def __init__(
        self,
        output: str,
        split_names: Sequence[str] = (DEFAULT_SPLIT,),
        *,
        seed: int = 0,
        num_shards: Optional[int] = None,
        shard_size_mb: float = DEFAULT_SHARD_SIZE_MB,
        compression: str = "none",
        file_format: str = output_files.DEFAULT_FILE_FORMAT,
    ):
        super().__init__()
        if compression not in ("none", "gzip"):
            raise api.UsageError(f"compression: {compression!r} is not 'none' or 'gzip'")
        if file_format not in output_files.FILE_FORMATS:
            raise api.UsageError(f"file_format: {file_format!r} is not one of {', '.join(output_files.FILE_FORMATS)}")
        if not shard_formats.adapter(file_format).compressible and compression != "none":
            raise api.UsageError(f"compression: {file_format} shards are written uncompressed, not {compression!r}")
        if num_shards is not None and (
            isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1
        ):
            raise api.UsageError(f"num_shards: {num_shards!r} is not a positive integer")
        if not split_names or any(not output_files.SPLIT_NAME_RE.match(name) for name in split_names):
            raise api.UsageError(f"split_names: {list(split_names)!r} are not split names (letters, digits, _)")
        self._output = output.rstrip("/") if "://" in output else os.path.abspath(output)
        self._split_names = list(split_names)
        self._seed = seed
        self._num_shards = num_shards
        self._shard_size_mb = shard_size_mb
        self._compression = compression
        self._file_format = file_format

    def expand(self, examples):
        fingerprint = hashlib.sha256(
            json.dumps([self._output, self._split_names, self._seed, self._compression, self._file_format]).encode(
                "utf-8"
            )
        ).hexdigest()[:16]
        run_dir = FileSystems.join(self._output, output_files.run_folder(fingerprint))
        start = launch_value(examples.pipeline, "Start", None)
        if self._num_shards:
            counts = fixed_shard_counts(examples.pipeline, self._split_names, self._num_shards)
        else:
            split_bytes = examples | "Bytes" >> beam.Map(_framed_bytes) | "PerSplit" >> beam.CombinePerKey(sum)
            counts = start | "Counts" >> beam.Map(
                _counts_from_bytes, beam.pvalue.AsDict(split_bytes), self._split_names, self._shard_size_mb
            )
        written = examples | "WriteShards" >> WriteShards(
            _Written(self._seed),
            ShardSinks(
                self._output,
                self._compression,
                FileSystems.join(run_dir, output_files.RUN_SHARDS_DIR),
                file_format=self._file_format,
            ),
            run_dir,
            1,
            beam.pvalue.AsSingleton(launch_value(examples.pipeline, "NoLabels", [])),
            beam.pvalue.AsSingleton(counts),
        )
        _ = start | "RemoveStaging" >> beam.Map(_remove_staging, beam.pvalue.AsList(written["shards"]), run_dir)
        return {"shards": written["shards"], REJECTED: written[ERRORS]}
