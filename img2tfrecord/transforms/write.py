"""Write one split with ``WriteToTFRecord`` and count what landed in each shard."""
from __future__ import annotations

import posixpath
import struct
from typing import Tuple

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
    (seeked over when uncompressed). Checksums are the job of ``verify``.
    """
    name = posixpath.basename(path)
    parsed = manifest.parse_shard_file_name(name)
    if parsed is None:
        raise ValueError(f"{path!r} is not a shard file name")
    gzip = name.endswith(".gz")
    count = 0
    with FileSystems.open(path, compression_type=CompressionTypes.GZIP if gzip else CompressionTypes.UNCOMPRESSED) as f:
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
        end = None if gzip else f.tell()
    size = FileSystems.match([path])[0].metadata_list[0].size_in_bytes
    if end is not None and end != size:
        raise IOError(f"{path}: last record runs past the end of the file ({end} > {size} bytes)")
    return parsed["split"], name, count, size
