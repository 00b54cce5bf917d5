"""A split's shards as ``dataset.json`` lists them, and each uncompressed shard's checked record offsets.

:func:`read_split` gives the plain, picklable :class:`SplitInfo` both
readers of :mod:`img2tfrecord.readers.datasource` start from;
:func:`shard_offsets` is where random access finds record ``i`` of a
shard. TensorFlow-free, like ``datasource``.
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import Any, FrozenSet, List, Mapping, Optional, Sequence, Tuple

from img2tfrecord import shard_formats, storage, tfrecord_codec
from img2tfrecord.readers import records
from img2tfrecord.readers.read_errors import (
    IndexMismatchError,
    ManifestMismatchError,
    TruncatedShardError,
    from_record_error,
    read_finished_manifest,
)
from img2tfrecord.schemas import dataset_json as manifest_model
from img2tfrecord.schemas import output_files

# ---------------------------------------------------------------------------
# What a reader needs from the manifest: plain, picklable data.


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """One shard as ``dataset.json`` lists it; ``index`` is the declared index file, if any.

    ``num_records`` counts the records in the file; ``withdrawn`` are those no reader returns
    (``convert --append --accept-changes``).
    """

    path: str
    num_records: int
    num_bytes: Optional[int]
    index: Optional[str]
    default_index: str  # where the index of this shard lives when written (output_files.index_file)
    withdrawn: FrozenSet[int] = frozenset()

    def index_file(self) -> Optional[str]:
        """The index file to read offsets from: the declared one, else ``index/<shard>.idx`` if it exists."""
        if self.index is not None:
            return self.index
        return self.default_index if storage.exists(self.default_index) else None

    @property
    def live_records(self) -> int:
        return self.num_records - len(self.withdrawn)

    def __post_init__(self) -> None:
        # withdrawn[i] - i for the sorted withdrawn indices: non-decreasing, so a bisect finds how many
        # withdrawn records come before a live one.
        gaps = tuple(index - i for i, index in enumerate(sorted(self.withdrawn)))
        object.__setattr__(self, "_gaps", gaps)

    def physical(self, live: int) -> int:
        """The index in the file of the shard's ``live``-th returned record (O(log withdrawn))."""
        return live + bisect.bisect_right(self._gaps, live)  # type: ignore[attr-defined]


@dataclasses.dataclass(frozen=True)
class SplitInfo:
    """A split of a finished output: its shards in order and how to parse and decode its records."""

    directory: str
    split: str
    compression: str
    shards: Tuple[ShardInfo, ...]
    spec: Mapping[str, Mapping[str, Any]]
    channels: int
    labels: Tuple[str, ...]
    detection: bool = False  # TF Object Detection API records: examples get ``boxes`` and ``num_boxes``
    file_format: str = output_files.DEFAULT_FILE_FORMAT  # the shards' container (--file-format)

    @property
    def num_records(self) -> int:
        """The records a reader returns."""
        return sum(s.live_records for s in self.shards)


def shard_info(directory: str, entry: manifest_model.ShardInfo, withdrawn: FrozenSet[int] = frozenset()) -> ShardInfo:
    """A reader's :class:`ShardInfo` of the shard ``dataset.json`` lists as ``entry`` in the output ``directory``."""
    return ShardInfo(
        path=storage.join(directory, entry.file),
        num_records=entry.num_records,
        num_bytes=entry.num_bytes,
        index=storage.join(directory, entry.index) if entry.index else None,
        default_index=storage.join(directory, output_files.index_file(entry.file)),
        withdrawn=withdrawn,
    )


def read_split(path: str, split: str) -> SplitInfo:
    """The :class:`SplitInfo` of ``split`` of the finished ``tf.train.Example`` output at ``path``.

    Raises FileNotFoundError (no directory or manifest),
    :class:`IncompleteOutputError` (an unfinished conversion: :func:`check_finished`),
    ValueError (an unknown split, which the message lists, or SequenceExample records).
    """
    doc = read_finished_manifest(path)
    if doc.is_sequence:
        raise ValueError(
            f"{path} holds {doc.record_type.value} records; these readers read {output_files.RECORD_TYPE} outputs "
            f"(read clips with img2tfrecord.load(path, sequence=True))"
        )
    splits = doc.splits
    if split not in splits:
        raise ValueError(f"unknown split {split!r} in {path}; available splits: {', '.join(sorted(splits)) or 'none'}")
    withdrawn = doc.withdrawn_by_file()
    shards = tuple(shard_info(path, entry, withdrawn.get(entry.file, frozenset())) for entry in splits[split].shards)
    return SplitInfo(
        directory=path,
        split=split,
        compression=doc.compression.value,
        shards=shards,
        spec=dict(doc.spec),
        channels=doc.channels or 3,
        labels=doc.labels,
        detection=doc.is_detection,
        file_format=doc.file_format,
    )


def _check_size(shard: ShardInfo, size: int, entries: Sequence[tfrecord_codec.IndexEntry]) -> None:
    """A shard shorter than ``dataset.json`` says is truncated; a longer one is not the one listed."""
    if shard.num_bytes is None or size == shard.num_bytes:
        return
    if size > shard.num_bytes:
        raise ManifestMismatchError(shard.path, f"{size} bytes where dataset.json lists {shard.num_bytes}")
    cut = next((i for i, (offset, length) in enumerate(entries) if offset + length > size), len(entries))
    offset = entries[cut][0] if cut < len(entries) else size
    raise TruncatedShardError(
        shard.path, f"the shard is cut short: {size} of the {shard.num_bytes} bytes dataset.json lists", cut, offset
    )


# ---------------------------------------------------------------------------
# Record offsets for random access.


def shard_offsets(
    shard: ShardInfo, file_format: str = output_files.DEFAULT_FILE_FORMAT
) -> List[tfrecord_codec.IndexEntry]:
    """``(offset, length)`` of each record of an uncompressed shard, checked against the shard.

    From the shard's index file (declared in ``dataset.json`` or at
    ``index/<shard>.idx``) when there is one, else from a walk of the
    record headers (a tar shard's member headers). Raises :class:`IndexMismatchError`,
    :class:`TruncatedShardError`, :class:`CorruptRecordError` or
    :class:`ManifestMismatchError`, each naming the file and the record.
    """
    index_path = shard.index_file()
    size = storage.file_size(shard.path)
    trailer = shard_formats.adapter(file_format).trailer  # bytes of the format's own after the last record
    if index_path is None:
        try:
            entries = records.walk_offsets(shard.path, file_format=file_format)
        except tfrecord_codec.TruncatedRecordError as e:
            if shard.num_bytes is not None and size > shard.num_bytes:
                message = f"{size} bytes where dataset.json lists {shard.num_bytes}"
                raise ManifestMismatchError(shard.path, message) from None
            raise TruncatedShardError(shard.path, e.message, e.index, e.offset) from None
        except tfrecord_codec.RecordError as e:
            raise from_record_error(shard.path, e) from None
        _check_size(shard, size, entries)
        if len(entries) != shard.num_records:
            raise ManifestMismatchError(
                shard.path, f"{len(entries)} records where dataset.json lists {shard.num_records}"
            )
        return entries
    if not storage.exists(index_path):
        raise IndexMismatchError(index_path, f"missing: dataset.json lists it as the index of {shard.path}")
    try:
        entries = tfrecord_codec.parse_index(storage.read_text(index_path), index_path)
    except ValueError as e:
        raise IndexMismatchError(index_path, str(e).removeprefix(f"{index_path}: ")) from None
    _check_size(shard, size, entries)
    end = 0
    for i, (offset, length) in enumerate(entries):
        if offset != end:
            raise IndexMismatchError(
                index_path, f"disagrees with {shard.path}: offset {offset}, where the previous record ends at {end}", i
            )
        end = offset + length
    if len(entries) != shard.num_records:
        raise IndexMismatchError(
            index_path, f"lists {len(entries)} records where dataset.json lists {shard.num_records} in {shard.path}"
        )
    if end != size and not (trailer and end < size):
        raise IndexMismatchError(index_path, f"covers {end} bytes of {shard.path}, which has {size}")
    return entries


__all__ = ["ShardInfo", "SplitInfo", "read_split", "shard_info", "shard_offsets"]
