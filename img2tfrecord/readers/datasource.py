"""Read one split of an output directory without TensorFlow: random access by index, or a stream.

    source = SplitDataSource("out/", split="train")   # len(source); source[i] -> dict
    for example in iter_split("out/", "train", shard_index=rank, num_shards=world_size):
        ...

An example is a dict keyed like ``img2tfrecord.load(..., as_dict=True)``:
every feature of the record (``bytes`` or ``int``) plus, unless
``decode=False``, the image decoded by Pillow under
``schemas.features.DECODED_IMAGE`` as uint8 ``[H, W, C]``. A detection
record's object lists are Python lists, and ``boxes`` (float32 ``[N, 4]``,
rows ``(ymin, xmin, ymax, xmax)``) and ``num_boxes`` are added. Records are
CRC-checked; every problem raises a :class:`ReadError` naming the file and
the record. Neither TensorFlow nor Beam is imported for local paths.
"""

from __future__ import annotations

import bisect
import dataclasses
import io
import operator
import os
import threading
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from PIL import Image

from img2tfrecord.readers import records
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import manifest

# ---------------------------------------------------------------------------
# Errors.


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
    if not records.isdir(path):
        raise FileNotFoundError(f"no such directory: {path}")
    if records.is_complete(path):
        return
    names = records.listdir(path)
    if manifest.MANIFEST_FILE in names:
        missing = f"no {manifest.SUCCESS_FILE}"
    elif any(manifest.is_output_file(name) for name in names):
        missing = f"no {manifest.MANIFEST_FILE} and no {manifest.SUCCESS_FILE}"
    else:
        raise FileNotFoundError(
            f"{path} is not an img2tfrecord output directory: it has no {manifest.MANIFEST_FILE} "
            f"and no {manifest.SUCCESS_FILE}"
        )
    raise IncompleteOutputError(
        path,
        f"the conversion is incomplete, {missing} (still running, interrupted or failed); "
        "finish it with convert --resume, or start over with convert --overwrite",
    )


class CorruptRecordError(ReadError):
    """A record whose checksum fails, or that is not the Example the manifest declares."""


class TruncatedShardError(ReadError):
    """A shard cut short: it ends before the record named, or before ``dataset.json``'s size."""


class IndexMismatchError(ReadError):
    """An index file that disagrees with its shard or with ``dataset.json``."""


class ManifestMismatchError(ReadError):
    """A shard holding other records or bytes than ``dataset.json`` lists."""


# ---------------------------------------------------------------------------
# What a reader needs from the manifest: plain, picklable data.


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """One shard as ``dataset.json`` lists it; ``index`` is the declared index file, if any."""

    path: str
    num_records: int
    num_bytes: Optional[int]
    index: Optional[str]
    default_index: str  # where the index of this shard lives when written (manifest.index_file)


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

    @property
    def num_records(self) -> int:
        return sum(s.num_records for s in self.shards)


def read_split(path: str, split: str) -> SplitInfo:
    """The :class:`SplitInfo` of ``split`` of the finished ``tf.train.Example`` output at ``path``.

    Raises FileNotFoundError (no directory or manifest),
    :class:`IncompleteOutputError` (an unfinished conversion: :func:`check_finished`),
    ValueError (an unknown split, which the message lists, or SequenceExample records).
    """
    check_finished(path)
    doc = records.read_manifest(path)
    if doc.get("record_type", manifest.RECORD_TYPE) != manifest.RECORD_TYPE:
        raise ValueError(
            f"{path} holds {doc.get('record_type')} records; these readers read {manifest.RECORD_TYPE} outputs "
            f"(read clips with img2tfrecord.load(path, sequence=True))"
        )
    splits = doc.get("splits", {})
    if split not in splits:
        raise ValueError(f"unknown split {split!r} in {path}; available splits: {', '.join(sorted(splits)) or 'none'}")
    shards = tuple(
        ShardInfo(
            path=records.join(path, entry["file"]),
            num_records=int(entry["num_records"]),
            num_bytes=int(entry["num_bytes"]) if entry.get("num_bytes") is not None else None,
            index=records.join(path, entry["index"]) if entry.get("index") else None,
            default_index=records.join(path, manifest.index_file(entry["file"])),
        )
        for entry in splits[split].get("shards", [])
    )
    return SplitInfo(
        directory=path,
        split=split,
        compression=records.compression_of(doc),
        shards=shards,
        spec=dict(doc["feature_spec"]),
        channels=int(doc.get("options", {}).get("channels") or 3),
        labels=tuple(doc.get("labels", [])),
        detection=doc.get(manifest.TASK) == manifest.TASK_DETECTION,
    )


# ---------------------------------------------------------------------------
# Records to examples.


def decode_image(values: Mapping[str, Any], channels: int) -> np.ndarray:
    """The stored image of a parsed record as uint8 ``[H, W, C]``: JPEG/PNG through Pillow, raw reshaped.

    Pixels equal those of ``img2tfrecord.load`` (its JPEG decode is libjpeg's
    accurate DCT, Pillow's); no EXIF rotation is applied, as the stored
    image is already upright.
    """
    encoded = values[keys.IMAGE_ENCODED]
    if values.get(keys.IMAGE_FORMAT) == keys.FORMAT_RAW.encode():
        shape = (values[keys.IMAGE_HEIGHT], values[keys.IMAGE_WIDTH], values[keys.IMAGE_CHANNELS])
        return np.frombuffer(encoded, np.uint8).reshape(shape)
    with Image.open(io.BytesIO(encoded)) as image:
        mode = "L" if channels == 1 else "RGB"
        pixels = np.asarray(image if image.mode == mode else image.convert(mode))
    return pixels[:, :, np.newaxis] if pixels.ndim == 2 else pixels


def boxes_array(values: Mapping[str, Any]) -> np.ndarray:
    """float32 ``[N, 4]`` of a parsed detection record, rows ``(ymin, xmin, ymax, xmax)``; ValueError if uneven."""
    coords = [values[k] for k in keys.BBOX_KEYS]
    if len({len(c) for c in coords}) != 1:
        lengths = ", ".join(f"{k} {len(values[k])}" for k in keys.BBOX_KEYS)
        raise ValueError(f"box lists of different lengths: {lengths}")
    return np.array(coords, dtype=np.float32).T.reshape(len(coords[0]), 4)


def to_example(data: bytes, info: SplitInfo, decode: bool, shard: str, record: int) -> Dict[str, Any]:
    """A serialized record as an example dict; :class:`CorruptRecordError` when it is not the declared Example."""
    try:
        values = records.parse_example(data, info.spec)
    except records.ExampleError as e:
        raise CorruptRecordError(shard, str(e), record) from None
    if info.detection:
        try:
            values[keys.DECODED_BOXES] = boxes_array(values)
        except ValueError as e:
            raise CorruptRecordError(shard, str(e), record) from None
        values[keys.DECODED_NUM_BOXES] = len(values[keys.DECODED_BOXES])
    if decode:
        try:
            values[keys.DECODED_IMAGE] = decode_image(values, info.channels)
        except Exception as e:  # Pillow's errors for undecodable bytes are of many types
            raise CorruptRecordError(shard, f"image does not decode: {e}", record) from None
    return values


def _read_error(shard: str, e: records.RecordError, index_path: Optional[str] = None) -> ReadError:
    if isinstance(e, records.TruncatedRecordError):
        return TruncatedShardError(shard, e.message, e.index, e.offset)
    if isinstance(e, records.MisframedRecordError) and index_path is not None:
        return IndexMismatchError(index_path, f"disagrees with {shard}: {e.message}", e.index, e.offset)
    return CorruptRecordError(shard, e.message, e.index, e.offset)


def _check_size(shard: ShardInfo, size: int, entries: Sequence[records.IndexEntry]) -> None:
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
# Random access.


def shard_offsets(shard: ShardInfo) -> List[records.IndexEntry]:
    """``(offset, framed length)`` of each record of an uncompressed shard, checked against the shard.

    From the shard's index file (declared in ``dataset.json`` or at
    ``index/<shard>.idx``) when there is one, else from a walk of the
    record headers. Raises :class:`IndexMismatchError`,
    :class:`TruncatedShardError`, :class:`CorruptRecordError` or
    :class:`ManifestMismatchError`, each naming the file and the record.
    """
    index_path = shard.index
    if index_path is None and records.exists(shard.default_index):
        index_path = shard.default_index
    size = records.file_size(shard.path)
    if index_path is None:
        try:
            entries = records.walk_offsets(shard.path)
        except records.TruncatedRecordError as e:
            if shard.num_bytes is not None and size > shard.num_bytes:
                message = f"{size} bytes where dataset.json lists {shard.num_bytes}"
                raise ManifestMismatchError(shard.path, message) from None
            raise TruncatedShardError(shard.path, e.message, e.index, e.offset) from None
        except records.RecordError as e:
            raise _read_error(shard.path, e) from None
        _check_size(shard, size, entries)
        if len(entries) != shard.num_records:
            raise ManifestMismatchError(
                shard.path, f"{len(entries)} records where dataset.json lists {shard.num_records}"
            )
        return entries
    if not records.exists(index_path):
        raise IndexMismatchError(index_path, f"missing: dataset.json lists it as the index of {shard.path}")
    try:
        entries = records.parse_index(records.read_text(index_path), index_path)
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
    if end != size:
        raise IndexMismatchError(index_path, f"covers {end} bytes of {shard.path}, which has {size}")
    return entries


class SplitDataSource:
    """Random access to the examples of one split, without TensorFlow: ``len()`` and ``source[i]``.

    Record ``i`` is the ``i``-th of the split's shards read in order (the
    order of ``iter_split``). The source is picklable and holds no open file
    in its pickled state: each process (and a forked child) opens its own
    files on first use, and reads are safe from many threads, as ``grain``
    and PyTorch ``DataLoader`` workers need. Only uncompressed shards can be
    read at random (``--compression none``); read gzip outputs with
    :func:`iter_split`.
    """

    def __init__(self, path: str, split: str = "train", *, decode: bool = True):
        info = read_split(path, split)
        if info.compression != "none":
            raise ValueError(
                f"{path} is {info.compression}-compressed: random access needs uncompressed shards "
                f"(convert --compression none); read it sequentially with iter_split"
            )
        self.info = info
        self.decode = decode
        self._starts = [0]
        for shard in info.shards:
            self._starts.append(self._starts[-1] + shard.num_records)
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._files: Dict[int, records.RandomAccessFile] = {}
        self._offsets: Dict[int, List[records.IndexEntry]] = {}

    @property
    def labels(self) -> Tuple[str, ...]:
        """Class names; label id ``i`` is ``labels[i]`` (empty for an unlabeled dataset)."""
        return self.info.labels

    def __len__(self) -> int:
        return self._starts[-1]

    def __getitem__(self, index: int) -> Dict[str, Any]:
        index = operator.index(index)
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"record {index} out of range: split {self.info.split!r} has {n} records")
        shard_no = bisect.bisect_right(self._starts, index) - 1
        record = index - self._starts[shard_no]
        shard = self.info.shards[shard_no]
        file, entries = self._open(shard_no)
        offset, length = entries[record]
        try:
            data = records.read_record_at(file, record, offset, length)
        except records.RecordError as e:
            raise _read_error(shard.path, e, self._index_path(shard)) from None
        return to_example(data, self.info, self.decode, shard.path, record)

    def _index_path(self, shard: ShardInfo) -> Optional[str]:
        if shard.index is not None:
            return shard.index
        return shard.default_index if records.exists(shard.default_index) else None

    def _open(self, shard_no: int) -> Tuple[records.RandomAccessFile, List[records.IndexEntry]]:
        if self._pid != os.getpid():  # a forked child: the parent's descriptors are not this process's to use
            inherited = list(self._files.values())
            self._reset()
            for stale in inherited:
                stale.close()
        entries = self._offsets.get(shard_no)
        file = self._files.get(shard_no)
        if entries is not None and file is not None:
            return file, entries
        with self._lock:
            if shard_no not in self._offsets:
                self._offsets[shard_no] = shard_offsets(self.info.shards[shard_no])
            if shard_no not in self._files:
                self._files[shard_no] = records.RandomAccessFile(self.info.shards[shard_no].path)
            return self._files[shard_no], self._offsets[shard_no]

    def close(self) -> None:
        """Close the files this process opened (they reopen on the next read)."""
        with self._lock:
            files, self._files = self._files, {}
        for file in files.values():
            file.close()

    def __getstate__(self) -> Dict[str, Any]:
        return {"info": self.info, "decode": self.decode, "_starts": self._starts}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __repr__(self) -> str:
        return f"SplitDataSource({self.info.directory!r}, split={self.info.split!r}, records={len(self)})"


# ---------------------------------------------------------------------------
# Streaming.


def iter_split(
    path: str, split: str = "train", *, shard_index: int = 0, num_shards: int = 1, decode: bool = True
) -> Iterator[Dict[str, Any]]:
    """The examples of one split in order, or worker ``shard_index``'s share of ``num_shards``.

    Reads ``.tfrecord`` and ``.tfrecord.gz`` shards sequentially, checking
    every record's CRC and each shard's record count against
    ``dataset.json``. The shares of all workers hold every record exactly
    once: with at least ``num_shards`` shard files, worker ``k`` reads files
    ``k, k + num_shards, ...``; with fewer, every worker reads the split and
    keeps records ``k, k + num_shards, ...``. Errors are the
    :class:`ReadError` subclasses, naming the shard and record.
    """
    if isinstance(num_shards, bool) or not isinstance(num_shards, int) or num_shards < 1:
        raise ValueError(f"num_shards must be a positive int, got {num_shards!r}")
    if isinstance(shard_index, bool) or not isinstance(shard_index, int) or not 0 <= shard_index < num_shards:
        raise ValueError(f"shard_index must be an int in [0, {num_shards}), got {shard_index!r}")
    info = read_split(path, split)
    shards = [s for s in info.shards if s.num_records > 0]
    by_file = len(shards) >= num_shards
    position = 0
    for shard in shards[shard_index::num_shards] if by_file else shards:
        count = 0
        try:
            for record, _, data in records.iter_records(shard.path, info.compression):
                count += 1
                mine = by_file or position % num_shards == shard_index
                position += 1
                if mine:
                    yield to_example(data, info, decode, shard.path, record)
        except records.RecordError as e:
            raise _read_error(shard.path, e) from None
        if count != shard.num_records:
            size = records.file_size(shard.path)
            if shard.num_bytes is not None and size < shard.num_bytes:
                raise TruncatedShardError(
                    shard.path,
                    f"the shard is cut short: {size} of the {shard.num_bytes} bytes dataset.json lists",
                    count,
                    None if info.compression != "none" else size,
                )
            raise ManifestMismatchError(shard.path, f"{count} records where dataset.json lists {shard.num_records}")


__all__ = [
    "CorruptRecordError",
    "IncompleteOutputError",
    "IndexMismatchError",
    "ManifestMismatchError",
    "ReadError",
    "ShardInfo",
    "SplitDataSource",
    "SplitInfo",
    "TruncatedShardError",
    "boxes_array",
    "decode_image",
    "iter_split",
    "read_split",
    "shard_offsets",
]
