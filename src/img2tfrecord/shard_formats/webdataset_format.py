"""WebDataset shards (``tar_shards.py`` + ``webdataset_samples.py``): one tar sample of members per record."""

from __future__ import annotations

from typing import Any, Iterator, List

from img2tfrecord.shard_formats.base import IndexEntry, ShardContext, ShardFormat


class WebDatasetFormat(ShardFormat):
    name = "webdataset"
    title = "WebDataset tar"
    described = "webdataset tar shards"
    help_note = "tar shards train-000000.tar, for PyTorch"
    doc_note = "tar shards, for PyTorch"
    template_note = "tar shards for PyTorch"
    other_readers = "webdataset.WebDataset (PyTorch) or img2tfrecord.readers.datasource"
    suffix = ".tar"
    name_template = "-SSSSSS"  # WebDataset's convention: train-000000.tar, brace pattern train-{000000..000003}.tar
    name_re = r"-(?P<index>\d{6})"
    brace_patterns = True
    trailer = True
    reader_hint = (
        "read them with webdataset.WebDataset (the split's pattern in dataset.json) in a PyTorch DataLoader, "
        "or img2tfrecord.readers.datasource.SplitDataSource"
    )

    def file_name(self, prefix: str, index: int, count: int, suffix: str) -> str:
        return f"{prefix}-{index:06d}{suffix}"

    def open_writer(self, target: Any, context: ShardContext) -> Any:
        from img2tfrecord.shard_formats.tar_shards import TarShardWriter

        return TarShardWriter(target, context.shard_stem, context.sequence)

    def scan(self, path: str, compression: str, check_crc: bool, sequence: bool) -> Iterator[Any]:
        from img2tfrecord import storage
        from img2tfrecord.shard_formats import tar_shards

        with storage.open_binary(path) as raw:
            yield from tar_shards.read_records(raw, sequence)

    def walk_offsets(self, path: str, check_crc: bool) -> List[IndexEntry]:
        import tarfile

        from img2tfrecord import storage
        from img2tfrecord.shard_formats import tar_shards
        from img2tfrecord.tfrecord_codec import TruncatedRecordError

        with storage.open_binary(path) as raw:
            try:
                return tar_shards.walk_samples(raw)
            except (tarfile.TarError, EOFError, OSError) as e:
                raise TruncatedRecordError(-1, 0, f"broken tar: {e}") from None

    def read_indexed(self, f: Any, index: int, offset: int, length: int, sequence: bool) -> bytes:
        from img2tfrecord.shard_formats import tar_shards
        from img2tfrecord.tfrecord_codec import TruncatedRecordError

        chunk = f.read_at(offset, length)
        if len(chunk) < length:
            raise TruncatedRecordError(index, offset, f"truncated: {len(chunk)} of the sample's {length} bytes")
        return tar_shards.record_in_range(chunk, index, offset, sequence)


FORMAT = WebDatasetFormat()
