"""The shard file formats behind ``--file-format``: one record writer each, and one record reader each.

Every format stores the same serialized ``tf.train.Example`` / ``SequenceExample`` records in the
same order; placement, splits and accounting never ask which format a shard is in. Writers:

* ``tfrecord``: framed records (``tfrecord_codec``) into a stream, gzip or not;
* ``array_record``: :class:`~img2tfrecord.shard_formats.array_records.ArrayRecordShardWriter`,
  to a local path (the Beam adapter copies it where the output is);
* ``webdataset``: :class:`~img2tfrecord.shard_formats.tar_shards.TarShardWriter`, samples into a stream.

:class:`StreamWriter` is what the stream formats share: ``write(record)`` returns the record's
``(offset, length)`` for the shard's index file. No Beam and no TensorFlow here; the readers of
these files are :mod:`img2tfrecord.readers.records`'s.
"""

from __future__ import annotations

from typing import BinaryIO, Protocol

from img2tfrecord import tfrecord_codec
from img2tfrecord.schemas import output_files
from img2tfrecord.shard_formats.tar_shards import TarShardWriter
from img2tfrecord.tfrecord_codec import IndexEntry

TFRECORD = output_files.FILE_FORMAT_TFRECORD
ARRAY_RECORD = output_files.FILE_FORMAT_ARRAY_RECORD
WEBDATASET = output_files.FILE_FORMAT_WEBDATASET
FILE_FORMATS = output_files.FILE_FORMATS


class StreamWriter(Protocol):
    """Records into one shard's byte stream."""

    def write(self, record: bytes) -> IndexEntry:
        """Write ``record``; -> where it lies in the stream: ``(offset, length)``."""
        ...

    def close(self) -> None:
        """Write what ends the shard (the stream itself stays open)."""
        ...


class TFRecordStreamWriter:
    """Records framed as TFRecord into ``stream`` (the file, or a gzip stream over it)."""

    def __init__(self, stream: BinaryIO):
        self._stream = stream
        self._offset = 0

    def write(self, record: bytes) -> IndexEntry:
        framed = tfrecord_codec.encode_record(record)
        self._stream.write(framed)
        entry = (self._offset, len(framed))
        self._offset += len(framed)
        return entry

    def close(self) -> None:
        pass


def stream_writer(file_format: str, stream: BinaryIO, shard_stem: str, sequence: bool) -> StreamWriter:
    """The writer of a stream format; ``shard_stem`` (the shard's file name without its suffix) keys the
    samples of a WebDataset shard, ``sequence`` says its records are SequenceExamples."""
    if file_format == TFRECORD:
        return TFRecordStreamWriter(stream)
    if file_format == WEBDATASET:
        return TarShardWriter(stream, shard_stem, sequence)
    raise ValueError(f"{file_format} is not written as a stream")


def has_index_files(file_format: str, compression: str) -> bool:
    """Whether a shard gets an index file: uncompressed TFRecord and tar shards; ArrayRecord has its own."""
    return file_format != ARRAY_RECORD and compression == output_files.COMPRESSION_NONE


__all__ = [
    "ARRAY_RECORD",
    "FILE_FORMATS",
    "TFRECORD",
    "WEBDATASET",
    "StreamWriter",
    "TFRecordStreamWriter",
    "has_index_files",
    "stream_writer",
]
