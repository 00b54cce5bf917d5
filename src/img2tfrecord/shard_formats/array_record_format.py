"""ArrayRecord shards (``array_records.py``): random access by record number, their own index, local paths."""

from __future__ import annotations

from typing import Any, Iterator, Optional

from img2tfrecord.shard_formats.base import ShardContext, ShardFormat


class ArrayRecordFormat(ShardFormat):
    name = "array_record"
    title = "ArrayRecord"
    described = "array_record shards"
    help_note = "ArrayRecord, random access, for grain/JAX and TFDS"
    doc_note = "random access, for grain and TFDS"
    template_note = "for grain/JAX"
    suffix = ".array_record"
    streams = False  # its C++ writer opens local paths: a remote shard is written locally, then copied
    index_files = False  # its footer indexes the records
    random_access = "numbered"
    remote_random_access = False
    tfds_name = "array_record"
    reader_hint = (
        "read them with grain (grain.sources.ArrayRecordDataSource over the shards dataset.json lists), "
        "tfds.builder_from_directory(path).as_data_source(split), or "
        "img2tfrecord.readers.datasource.SplitDataSource"
    )

    def open_writer(self, target: Any, context: ShardContext) -> Any:
        from img2tfrecord.shard_formats import array_records

        return array_records.ArrayRecordShardWriter(target)

    def scan(self, path: str, compression: str, check_crc: bool, sequence: bool) -> Iterator[Any]:
        from img2tfrecord import storage
        from img2tfrecord.shard_formats import array_records

        with array_records.local_copy(path, storage.is_remote, storage.open_binary) as local:
            yield from array_records.read_records(local)

    def open_numbered(self, path: str) -> Any:
        from img2tfrecord.shard_formats import array_records

        return array_records.ArrayRecordShard(path)

    def verify_offset(self, offset: int) -> Optional[int]:
        return None


FORMAT = ArrayRecordFormat()
