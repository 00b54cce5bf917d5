"""Parquet shards (``parquet_shards.py``): rows for Hugging Face ``datasets``, pyarrow, DuckDB and Polars."""

from __future__ import annotations

import json
from typing import Any, Iterator, Optional, Tuple

from img2tfrecord.shard_formats.base import ShardContext, ShardFormat

CARD_FILE = "README.md"  # the dataset card load_dataset(<output>) reads: its configs name every split's files


class ParquetFormat(ShardFormat):
    name = "parquet"
    title = "Parquet"
    suffix = ".parquet"
    index_files = False  # the footer indexes the row groups
    random_access = "numbered"
    described = "parquet shards"
    other_readers = 'datasets.load_dataset(<output>) or load_dataset("parquet", data_files=...), pyarrow, DuckDB'
    reader_hint = (
        "read them with datasets.load_dataset(path) (Hugging Face), pyarrow.parquet, DuckDB or Polars, "
        "or img2tfrecord.readers.datasource.SplitDataSource"
    )
    help_note = "rows with an image column, for Hugging Face datasets"
    doc_note = "rows for Hugging Face `datasets`, DuckDB and Polars"
    template_note = "for Hugging Face datasets"
    card_file = CARD_FILE
    unsupported = (
        ("detection", "writes classification records; --task detection is not supported in Parquet yet"),
        ("sequence", "writes one image per row; --sequence clips are not supported in Parquet yet"),
    )

    def open_writer(self, target: Any, context: ShardContext) -> Any:
        from img2tfrecord.shard_formats.parquet_shards import ParquetShardWriter

        return ParquetShardWriter(target, context.class_names)

    def scan(self, path: str, compression: str, check_crc: bool, sequence: bool) -> Iterator[Any]:
        from img2tfrecord import storage
        from img2tfrecord.shard_formats import parquet_shards

        with storage.open_binary(path) as raw:
            yield from parquet_shards.read_records(raw)

    def open_numbered(self, path: str) -> Any:
        from img2tfrecord import storage
        from img2tfrecord.shard_formats.parquet_shards import ParquetShard

        return ParquetShard(storage.open_binary(path) if "://" in path else path)

    def verify_offset(self, offset: int) -> Optional[int]:
        return None

    def dataset_card(self, doc: Any) -> Optional[Tuple[str, str]]:
        """A dataset card whose ``configs`` list each split's files (every generation's: ``<split>-*``) and
        whose ``dataset_info`` declares the features, so ``datasets.load_dataset(<output>)`` finds them."""
        from img2tfrecord.shard_formats.parquet_shards import hf_features

        lines = ["---", "configs:", "- config_name: default", "  data_files:"]
        for split in sorted(doc.splits):
            if doc.splits[split].shards:
                lines += [f"  - split: {split}", f"    path: {json.dumps(split + '-*' + self.suffix)}"]
        lines += ["dataset_info:", "  features:"]
        for column, described in hf_features(doc.labels).items():
            lines.append(f"  - name: {column}")
            if described["_type"] == "Image":
                lines.append("    dtype: image")
            elif described["_type"] == "ClassLabel":
                lines += ["    dtype:", "      class_label:", "        names:"]
                lines += [f"          {json.dumps(str(i))}: {json.dumps(n)}" for i, n in enumerate(described["names"])]
            else:
                lines.append(f"    dtype: {described['dtype']}")
        lines += ["---", "", f"# {doc.input}", ""]
        lines.append(
            f"Images converted by img2tfrecord {doc.tool_version}: one row per image, with its `image` "
            "(`{bytes, path}`), `label`, `label_name`, input `path` and `sha256`; `dataset.json` describes the "
            "conversion (splits, seed, options, rejected inputs in `errors.jsonl`)."
        )
        if doc.withdrawals:
            lines += [
                "",
                "Some rows were withdrawn by a later append (`dataset.json`'s `withdrawals`); readers of the "
                "Parquet files see them: read with `img2tfrecord.readers.datasource` to leave them out.",
            ]
        return self.card_file, "\n".join(lines) + "\n"


FORMAT = ParquetFormat()
