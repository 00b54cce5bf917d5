"""ArrayRecord shards (``array_record``, the format grain and TFDS read with random access): write and read.

The writer holds one record per chunk (``group_size:1``, as TFDS writes them, so a random read
decodes one record) and leaves the chunks uncompressed: encoded images do not compress, and the
shard then costs no more to write than a TFRecord file. ArrayRecord's own footer indexes the
records, so these shards get no index file. Its C++ writer and reader open local paths only: a
remote shard is written to a local file and copied when done (``transforms/beam_tfrecord_sink.py``),
and read from a local copy (:func:`local_copy`). No Beam and no TensorFlow.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from typing import Any, BinaryIO, Callable, Iterator, List, Sequence

from img2tfrecord.tfrecord_codec import Record, RecordError, TruncatedRecordError

WRITER_OPTIONS = "group_size:1,uncompressed"
_COPY_CHUNK = 8 << 20
_READ_BATCH = 64  # records fetched per call while scanning


def _module() -> Any:
    from array_record.python import array_record_module  # deferred: a C++ extension, needed only here

    return array_record_module


class ArrayRecordShardWriter:
    """Records appended to a new ArrayRecord file at the local path ``path``."""

    def __init__(self, path: str):
        self.path = path
        self._writer = _module().ArrayRecordWriter(path, WRITER_OPTIONS)

    def write(self, record: bytes) -> None:
        self._writer.write(record)

    def close(self) -> None:
        self._writer.close()

    @property
    def bytes_written(self) -> int:
        """The bytes in the file so far (chunks reach it as they fill)."""
        try:
            return os.path.getsize(self.path)
        except OSError:
            return 0


def scratch_path(suffix: str) -> str:
    """A new local file for a shard on its way to a remote output (removed by its copier)."""
    fd, path = tempfile.mkstemp(prefix="img2tfrecord-", suffix=suffix)
    os.close(fd)
    return path


def copy_into(path: str, target: BinaryIO) -> None:
    """Stream the local file ``path`` into ``target`` (a remote file being written)."""
    with open(path, "rb") as source:
        shutil.copyfileobj(source, target, _COPY_CHUNK)


class ArrayRecordShard:
    """An open ArrayRecord shard: ``len()``, ``read(indices)``; :class:`RecordError` for a broken file."""

    def __init__(self, path: str):
        self.path = path
        try:
            self._reader = _module().ArrayRecordReader(path)
        except Exception as e:  # the extension raises RuntimeError/ValueError with riegeli's message
            raise RecordError(-1, 0, f"not an ArrayRecord file: {_first_line(e)}") from None
        if not self._reader.ok():  # its footer (the index of its records) does not read: cut short or not one
            raise TruncatedRecordError(-1, 0, "not an ArrayRecord file, or cut short: its footer does not read")
        self._size = int(self._reader.num_records())

    def __len__(self) -> int:
        return self._size

    def read(self, indices: Sequence[int]) -> List[bytes]:
        """The records at ``indices``; :class:`RecordError` naming the first that does not read."""
        try:
            return list(self._reader.read(list(indices)))
        except Exception as e:  # riegeli's RuntimeError: a chunk whose hash fails
            if len(indices) == 1:
                raise RecordError(indices[0], -1, f"corrupt record: {_first_line(e)}") from None
        return [self.read([i])[0] for i in indices]  # which one fails

    def close(self) -> None:
        if self._reader.ok():  # closing a reader that failed raises its failure again
            self._reader.close()

    def __enter__(self) -> ArrayRecordShard:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _first_line(e: Exception) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:300]


def read_records(path: str) -> Iterator[Record]:
    """Every record of the local ArrayRecord file ``path``, in order (``offset`` is the record's number)."""
    with ArrayRecordShard(path) as shard:
        for start in range(0, len(shard), _READ_BATCH):
            indices = list(range(start, min(start + _READ_BATCH, len(shard))))
            try:
                found = shard.read(indices)
            except RecordError:  # the records before the one that fails, then its error
                for i in indices:
                    yield Record(i, i, shard.read([i])[0])
                continue
            for i, data in zip(indices, found):
                yield Record(i, i, data)


@contextlib.contextmanager
def local_copy(path: str, is_remote: Callable[[str], bool], open_binary: Callable[[str], BinaryIO]) -> Iterator[str]:
    """A local path holding the shard at ``path``: itself when local, else a temporary copy."""
    if not is_remote(path):
        yield path
        return
    copy = scratch_path(".array_record")
    try:
        with open_binary(path) as source, open(copy, "wb") as target:
            shutil.copyfileobj(source, target, _COPY_CHUNK)
        yield copy
    finally:
        os.remove(copy)


__all__ = ["ArrayRecordShard", "ArrayRecordShardWriter", "WRITER_OPTIONS", "copy_into", "local_copy", "read_records"]
