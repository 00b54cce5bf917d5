"""TFRecord shards: framed records (``tfrecord_codec``), gzip-compressed as a whole or not."""

from __future__ import annotations

from typing import Any, BinaryIO, Iterator, List

from img2tfrecord.shard_formats.base import IndexEntry, ShardContext, ShardFormat


class TFRecordStreamWriter:
    """Records framed as TFRecord into ``stream`` (the file, or a gzip stream over it)."""

    def __init__(self, stream: BinaryIO):
        from img2tfrecord import tfrecord_codec

        self._encode = tfrecord_codec.encode_record
        self._stream = stream
        self._offset = 0

    def write(self, record: bytes) -> IndexEntry:
        framed = self._encode(record)
        self._stream.write(framed)
        entry = (self._offset, len(framed))
        self._offset += len(framed)
        return entry

    def close(self) -> None:
        pass


class TFRecordFormat(ShardFormat):
    name = "tfrecord"
    title = "TFRecord"
    suffix = ".tfrecord"
    compressible = True
    tfds_name = "tfrecord"
    tf_data_reads = True
    self_framed = True
    described = "tfrecord shards"

    def open_writer(self, target: Any, context: ShardContext) -> TFRecordStreamWriter:
        return TFRecordStreamWriter(target)

    def scan(self, path: str, compression: str, check_crc: bool, sequence: bool) -> Iterator[Any]:
        import gzip

        from img2tfrecord import storage, tfrecord_codec

        raw = storage.open_binary(path)
        stream: BinaryIO = raw
        size = None
        if compression == "gzip":
            stream = gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[assignment]
        elif compression == "none":
            size = storage.file_size(path)
        else:
            raw.close()
            raise ValueError(f"unknown compression {compression!r}; expected one of none, gzip")
        index = offset = 0  # where the next record starts
        try:
            with raw, stream:
                for record in tfrecord_codec.read_records(stream, check_crc, size):
                    yield record
                    index, offset = record.index + 1, record.offset + tfrecord_codec.framed_length(len(record.data))
        except OSError as e:  # closing a broken gzip stream
            raise tfrecord_codec.RecordError(index, offset, f"read error: {e}") from None

    def walk_offsets(self, path: str, check_crc: bool) -> List[IndexEntry]:
        from img2tfrecord import tfrecord_codec
        from img2tfrecord.readers.records import RandomAccessFile

        with RandomAccessFile(path) as f:
            return tfrecord_codec.walk_offsets(f, check_crc)

    def read_indexed(self, f: Any, index: int, offset: int, length: int, sequence: bool) -> bytes:
        from img2tfrecord import tfrecord_codec

        return tfrecord_codec.read_record_at(f, index, offset, length)


FORMAT = TFRecordFormat()
