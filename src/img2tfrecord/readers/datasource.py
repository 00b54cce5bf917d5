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

The split's shards and their record offsets come from
:mod:`img2tfrecord.readers.split_shards`, the errors from
:mod:`img2tfrecord.readers.read_errors`; both are re-exported here.
"""

from __future__ import annotations

import bisect
import io
import operator
import os
import threading
from typing import Any, Dict, Iterator, List, Mapping, Tuple

import numpy as np
from PIL import Image

from img2tfrecord import shard_formats, storage, tfrecord_codec
from img2tfrecord.readers import records
from img2tfrecord.readers.read_errors import (
    CorruptRecordError,
    IncompleteOutputError,
    IndexMismatchError,
    ManifestMismatchError,
    ReadError,
    TruncatedShardError,
    check_finished,  # noqa: F401  (re-exported: datasource.check_finished)
    from_record_error,
)
from img2tfrecord.readers.split_shards import ShardInfo, SplitInfo, read_split, shard_offsets
from img2tfrecord.schemas import features as keys

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


# ---------------------------------------------------------------------------
# Random access.


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
        own = shard_formats.adapter(info.file_format)
        if own.random_access == "numbered" and not own.remote_random_access and storage.is_remote(path):
            raise ValueError(
                f"{path} holds {own.title} shards, whose reader opens local files only: copy the output to a local "
                "folder for random access, or read it sequentially with iter_split"
            )
        self._own = own
        self.info = info
        self.decode = decode
        self._starts = [0]
        for shard in info.shards:
            self._starts.append(self._starts[-1] + shard.live_records)
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._files: Dict[int, records.RandomAccessFile] = {}
        self._offsets: Dict[int, List[tfrecord_codec.IndexEntry]] = {}
        self._readers: Dict[int, shard_formats.NumberedShard] = {}  # shards read by number: their own index

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
        shard = self.info.shards[shard_no]
        record = shard.physical(index - self._starts[shard_no])
        try:
            if self._own.random_access == "numbered":
                data = self._numbered(shard_no).read([record])[0]
            else:
                file, entries = self._open(shard_no)
                offset, length = entries[record]
                data = records.read_record(file, record, offset, length, self.info.file_format)
        except tfrecord_codec.RecordError as e:
            raise from_record_error(shard.path, e, shard.index_file()) from None
        return to_example(data, self.info, self.decode, shard.path, record)

    def _numbered(self, shard_no: int) -> shard_formats.NumberedShard:
        self._check_process()
        reader = self._readers.get(shard_no)
        if reader is not None:
            return reader
        with self._lock:
            if shard_no not in self._readers:
                shard = self.info.shards[shard_no]
                try:
                    opened = self._own.open_numbered(shard.path)
                except tfrecord_codec.RecordError as e:
                    raise from_record_error(shard.path, e) from None
                if len(opened) != shard.num_records:
                    opened.close()
                    raise ManifestMismatchError(
                        shard.path, f"{len(opened)} records where dataset.json lists {shard.num_records}"
                    )
                self._readers[shard_no] = opened
            return self._readers[shard_no]

    def _check_process(self) -> None:
        if self._pid != os.getpid():  # a forked child: the parent's descriptors are not this process's to use
            inherited = list(self._files.values())
            self._reset()
            for stale in inherited:
                stale.close()

    def _open(self, shard_no: int) -> Tuple[records.RandomAccessFile, List[tfrecord_codec.IndexEntry]]:
        self._check_process()
        entries = self._offsets.get(shard_no)
        file = self._files.get(shard_no)
        if entries is not None and file is not None:
            return file, entries
        with self._lock:
            if shard_no not in self._offsets:
                self._offsets[shard_no] = shard_offsets(self.info.shards[shard_no], self.info.file_format)
            if shard_no not in self._files:
                self._files[shard_no] = records.RandomAccessFile(self.info.shards[shard_no].path)
            return self._files[shard_no], self._offsets[shard_no]

    def close(self) -> None:
        """Close the files this process opened (they reopen on the next read)."""
        with self._lock:
            files, self._files = self._files, {}
            readers, self._readers = self._readers, {}
        for file in files.values():
            file.close()
        for reader in readers.values():
            reader.close()

    def __getstate__(self) -> Dict[str, Any]:
        return {"info": self.info, "decode": self.decode, "_starts": self._starts}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._own = shard_formats.adapter(self.info.file_format)  # the table's, by name: not pickled
        self._reset()

    def __repr__(self) -> str:
        return f"SplitDataSource({self.info.directory!r}, split={self.info.split!r}, records={len(self)})"


# ---------------------------------------------------------------------------
# Streaming.


def iter_split(
    path: str, split: str = "train", *, shard_index: int = 0, num_shards: int = 1, decode: bool = True
) -> Iterator[Dict[str, Any]]:
    """The examples of one split in order, or worker ``shard_index``'s share of ``num_shards``.

    Reads the shards sequentially, in any file format (``.tfrecord``, ``.tfrecord.gz``, ``.array_record``,
    ``.tar``), checking
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
            for record, _, data in records.iter_records(shard.path, info.compression, file_format=info.file_format):
                count += 1
                if record in shard.withdrawn:
                    continue
                mine = by_file or position % num_shards == shard_index
                position += 1
                if mine:
                    yield to_example(data, info, decode, shard.path, record)
        except tfrecord_codec.RecordError as e:
            raise from_record_error(shard.path, e) from None
        if count != shard.num_records:
            size = storage.file_size(shard.path)
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
