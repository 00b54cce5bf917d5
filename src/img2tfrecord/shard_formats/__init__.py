"""The shard file formats behind ``--file-format``: one adapter per format, in one table.

:data:`ADAPTER_FOR_FORMAT` maps each flag value to its :class:`~img2tfrecord.shard_formats.base.ShardFormat`,
the only code that knows that format (names, index files, writer, readers, what other libraries read;
see ``base.py``). Everything else asks :func:`adapter` (by ``--file-format`` / ``dataset.json``'s
``file_format``) or :func:`adapter_of_file` (by a shard's name). A new format is one module here and
one line in the table. Every format stores the same serialized records in the same order.

Import-light: the adapters import their implementation and its library when first used.
"""

from __future__ import annotations

from typing import Dict, Literal, Optional, Tuple, cast

from img2tfrecord.shard_formats.array_record_format import FORMAT as _ARRAY_RECORD
from img2tfrecord.shard_formats.base import NumberedShard, RecordWriter, ShardContext, ShardFormat
from img2tfrecord.shard_formats.parquet_format import FORMAT as _PARQUET
from img2tfrecord.shard_formats.tfrecord_format import FORMAT as _TFRECORD
from img2tfrecord.shard_formats.webdataset_format import FORMAT as _WEBDATASET

ADAPTERS: Tuple[ShardFormat, ...] = (_TFRECORD, _ARRAY_RECORD, _WEBDATASET, _PARQUET)
ADAPTER_FOR_FORMAT: Dict[str, ShardFormat] = {a.name: a for a in ADAPTERS}
FILE_FORMATS: Tuple[str, ...] = tuple(ADAPTER_FOR_FORMAT)
# The flag values as a type, for convert()'s signature (tests/test_typed_api.py holds it equal to the table).
FileFormatName = Literal["tfrecord", "array_record", "webdataset", "parquet"]
DEFAULT_FORMAT: FileFormatName = cast(FileFormatName, _TFRECORD.name)


def adapter(file_format: str) -> ShardFormat:
    """The adapter of ``file_format``; ValueError naming the choices for an unknown one."""
    found = ADAPTER_FOR_FORMAT.get(file_format)
    if found is None:
        raise ValueError(f"unknown file format {file_format!r}; expected one of {', '.join(FILE_FORMATS)}")
    return found


def adapter_of_file(name: str) -> Optional[ShardFormat]:
    """The adapter whose shards are named like ``name`` (a final or a staged temp name), or None."""
    for candidate in ADAPTERS:
        if name.endswith(candidate.suffix) or (candidate.compressible and name.endswith(candidate.suffix + ".gz")):
            return candidate
    return None


__all__ = [
    "ADAPTERS",
    "ADAPTER_FOR_FORMAT",
    "DEFAULT_FORMAT",
    "FILE_FORMATS",
    "FileFormatName",
    "NumberedShard",
    "RecordWriter",
    "ShardContext",
    "ShardFormat",
    "adapter",
    "adapter_of_file",
]
