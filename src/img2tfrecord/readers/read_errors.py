"""What can be wrong with an output directory a reader opens: the ReadError family and the finished-output check.

Every error names the file and, when the problem is one record's, the
record and its byte offset. TensorFlow-free: :mod:`img2tfrecord.readers.datasource`
imports it where TensorFlow cannot be imported, and ``tfdata.load``
checks an output with :func:`check_finished` before reading it.
"""

from __future__ import annotations

from typing import Optional

from img2tfrecord import storage, tfrecord_codec
from img2tfrecord.readers import records
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas.dataset_json import DatasetManifest


class ReadError(Exception):
    """A file of an output directory that is not what ``dataset.json`` promises.

    ``path`` names the file; ``record`` is the 0-based record number in that
    shard and ``offset`` the byte offset of its header, when the problem is
    one record's.
    """

    def __init__(self, path: str, message: str, record: Optional[int] = None, offset: Optional[int] = None):
        where = path if record is None else f"{path}: record {record}" + ("" if offset is None else f" (byte {offset})")
        super().__init__(f"{where}: {message}")
        self.path = path
        self.record = record
        self.offset = offset
        self.message = message


class IncompleteOutputError(ReadError, ValueError):
    """The output has no ``_SUCCESS``: its conversion is still running, was interrupted or failed."""


def check_finished(path: str) -> None:
    """Return when the folder ``path`` holds a finished conversion (its ``_SUCCESS``); raise otherwise.

    FileNotFoundError when there is no such folder, or nothing a conversion
    writes is in it; :class:`IncompleteOutputError` (a ValueError) naming the
    folder and what is missing when a conversion there has not finished,
    whether it got as far as ``dataset.json`` or left only its staging folder.
    """
    if not storage.isdir(path):
        raise FileNotFoundError(f"no such directory: {path}")
    if records.is_complete(path):
        return
    names = storage.listdir(path)
    if output_files.MANIFEST_FILE in names:
        missing = f"no {output_files.SUCCESS_FILE}"
    elif any(output_files.is_output_file(name) for name in names):
        missing = f"no {output_files.MANIFEST_FILE} and no {output_files.SUCCESS_FILE}"
    else:
        raise FileNotFoundError(
            f"{path} is not an img2tfrecord output directory: it has no {output_files.MANIFEST_FILE} "
            f"and no {output_files.SUCCESS_FILE}"
        )
    raise IncompleteOutputError(
        path,
        f"the conversion is incomplete, {missing} (still running, interrupted or failed); "
        "finish it with convert --resume, or start over with convert --overwrite",
    )


def read_finished_manifest(path: str) -> DatasetManifest:
    """The manifest of a finished output (local or ``gs://``): :func:`check_finished`, then
    ``records.read_manifest`` (a ``DatasetJsonError``, a ValueError naming the field, for a manifest this
    version does not read)."""
    check_finished(path)
    return records.read_manifest(path)


class CorruptRecordError(ReadError):
    """A record whose checksum fails, or that is not the Example the manifest declares."""


class TruncatedShardError(ReadError):
    """A shard cut short: it ends before the record named, or before ``dataset.json``'s size."""


class IndexMismatchError(ReadError):
    """An index file that disagrees with its shard or with ``dataset.json``."""


class ManifestMismatchError(ReadError):
    """A shard holding other records or bytes than ``dataset.json`` lists."""


def from_record_error(shard: str, e: tfrecord_codec.RecordError, index_path: Optional[str] = None) -> ReadError:
    """The :class:`ReadError` for a framing or CRC error in ``shard``; a misframed record blames ``index_path``."""
    if isinstance(e, tfrecord_codec.TruncatedRecordError):
        return TruncatedShardError(shard, e.message, e.index, e.offset)
    if isinstance(e, tfrecord_codec.MisframedRecordError) and index_path is not None:
        return IndexMismatchError(index_path, f"disagrees with {shard}: {e.message}", e.index, e.offset)
    return CorruptRecordError(shard, e.message, e.index, e.offset)


__all__ = [
    "CorruptRecordError",
    "IncompleteOutputError",
    "IndexMismatchError",
    "ManifestMismatchError",
    "ReadError",
    "TruncatedShardError",
    "check_finished",
    "read_finished_manifest",
    "from_record_error",
]
