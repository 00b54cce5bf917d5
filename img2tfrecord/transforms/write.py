"""Write one split with ``WriteToTFRecord`` and count what landed in each shard."""
from __future__ import annotations

import gzip as gzip_format
import posixpath
import struct
import zlib
from typing import Optional, Tuple

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from img2tfrecord.schemas import manifest

_HEADER = struct.Struct("<QI")  # record length, masked CRC32C of the length
_FOOTER_SIZE = 4  # masked CRC32C of the data


def split_prefix(output_dir: str, split: str) -> str:
    return FileSystems.join(output_dir, split)


class WriteSplit(beam.PTransform):
    """PCollection of serialized examples -> PCollection of the shard paths written."""

    def __init__(self, output_dir: str, split: str, num_shards: int, compression: str):
        super().__init__()
        self._prefix = split_prefix(output_dir, split)
        self._num_shards = num_shards
        self._compression = compression

    def expand(self, examples):
        return examples | "WriteToTFRecord" >> beam.io.WriteToTFRecord(
            self._prefix,
            file_name_suffix=manifest.shard_suffix(self._compression),
            num_shards=self._num_shards,
            shard_name_template=manifest.SHARD_NAME_TEMPLATE,
            compression_type=CompressionTypes.GZIP if self._compression == "gzip" else CompressionTypes.UNCOMPRESSED,
        )


def count_records(path: str) -> Tuple[str, str, int, int]:
    """``(split, file name, records, bytes)`` of a finished shard, by walking its length headers.

    Only the 12-byte header of each record is read; the payload is skipped
    (seeked over when uncompressed). Record checksums are the job of
    ``verify``, but a gzip shard is read to the end of its stream, so one cut
    short (even at a record boundary, or with only the gzip trailer missing)
    is an error, like an uncompressed shard whose last record is cut.
    """
    name = posixpath.basename(path)
    parsed = manifest.parse_shard_file_name(name)
    if parsed is None:
        raise ValueError(f"{path!r} is not a shard file name")
    gzip = name.endswith(".gz")
    # Gzip is decoded with Python's gzip module, which (unlike Beam's reader) raises
    # EOFError when the stream ends before its end-of-stream marker and checks the
    # trailer's CRC and length.
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as raw:
        f = gzip_format.GzipFile(fileobj=raw, mode="rb") if gzip else raw
        try:
            count, end = _walk_records(path, f, gzip)
        except (EOFError, zlib.error, gzip_format.BadGzipFile) as e:
            raise IOError(f"{path}: damaged gzip stream: {e}") from e
    size = FileSystems.match([path])[0].metadata_list[0].size_in_bytes
    if gzip and size == 0:
        raise IOError(f"{path}: empty file, not a gzip stream")
    if end is not None and end != size:
        raise IOError(f"{path}: last record runs past the end of the file ({end} > {size} bytes)")
    return parsed["split"], name, count, size


def _walk_records(path: str, f, gzip: bool) -> Tuple[int, Optional[int]]:
    """``(records, end offset or None)`` of an open shard, reading only the record headers."""
    count = 0
    while True:
        header = f.read(_HEADER.size)
        if not header:
            break
        if len(header) < _HEADER.size:
            raise IOError(f"{path}: truncated record header after {count} records")
        length, _ = _HEADER.unpack(header)
        skip = length + _FOOTER_SIZE
        if gzip:
            while skip:
                chunk = f.read(min(skip, 1 << 20))
                if not chunk:
                    raise IOError(f"{path}: truncated record {count}")
                skip -= len(chunk)
        else:
            f.seek(skip, 1)
        count += 1
    return count, None if gzip else f.tell()
