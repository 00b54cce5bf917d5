"""Files a launch writes into the run's staging folder, streamed rather than built in memory.

The ledger and the placed work items of a listing of a million inputs are tens of MB: they are written
a piece at a time. What the launch must write before the staging folder exists (the placed items,
whose block offsets the graph needs) goes to a local temporary file first (:class:`LaunchFile`) and is
copied into the staging folder once the run holds its output.
"""

from __future__ import annotations

import os
import tempfile
from typing import BinaryIO, Callable, Iterable, TypeVar

from img2tfrecord import storage

T = TypeVar("T")
_CHUNK = 1 << 20


def write_chunks(path: str, chunks: Iterable[bytes]) -> None:
    """Write ``chunks`` to ``path`` one after the other; locally through a temporary file renamed into place
    (as ``storage.write_bytes`` writes)."""
    if storage.is_remote(path):
        with storage.create_binary(path) as f:
            for chunk in chunks:
                f.write(chunk)
        return
    temp = f"{path}.tmp-{os.getpid()}"
    with storage.create_binary(temp) as f:
        for chunk in chunks:
            f.write(chunk)
    os.replace(temp, path)


class LaunchFile:
    """A local temporary file the launch writes (``write``), copied to the run's staging folder later
    (``copy_to``, which also removes it); removed when closed or collected otherwise."""

    def __init__(self) -> None:
        self._file: BinaryIO = tempfile.TemporaryFile(prefix="img2tfrecord-launch-")

    def write(self, fill: Callable[[BinaryIO], T]) -> T:
        """``fill(the open file)``'s result, once it wrote the file's bytes."""
        found = fill(self._file)
        self._file.flush()
        return found

    def copy_to(self, path: str) -> None:
        self._file.seek(0)
        write_chunks(path, iter(lambda: self._file.read(_CHUNK), b""))
        self.close()

    def read(self) -> bytes:
        self._file.seek(0)
        return self._file.read()

    def close(self) -> None:
        self._file.close()
