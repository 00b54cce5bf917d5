"""Where an output lock lives: a local file, a Cloud Storage object, or a file on another Beam filesystem.

Each store changes the lock only as it was read (its *version*), so two runs
never both believe they created or took it over; see ``pipeline/lock.py``
for what the lock holds and when it is stale.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import posixpath
import time
import uuid
from typing import Any, Optional, Protocol

from img2tfrecord.schemas import output_files

# What os.link raises where a filesystem has no hard links (some FUSE and network mounts, FAT).
_NO_HARD_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS)


@dataclasses.dataclass(frozen=True)
class Found:
    data: bytes
    version: Any  # the bytes (local, best effort) or the object's generation (gs://)
    modified: float  # seconds since the epoch


class LockStore(Protocol):
    def create(self, data: bytes) -> Optional[Any]:
        """Write the lock if there is none; its version, or None when a lock exists."""

    def read(self) -> Optional[Found]:
        """The lock as it is now; None when there is none."""

    def refresh(self, version: Any, data: bytes) -> Optional[Any]:
        """Rewrite the lock if it is still ``version``, never leaving it absent; the new version, or None."""

    def take_over(self, version: Any, data: bytes) -> Optional[Any]:
        """Replace the lock if it is still ``version``, one taker winning; the new version, or None."""

    def delete(self, version: Any) -> None:
        """Remove the lock if it is still ``version``."""


class LocalStore:
    """A lock file on a local or mounted filesystem."""

    def __init__(self, path: str):
        self.path = path

    def _temp(self) -> str:
        return os.path.join(os.path.dirname(self.path), f"{output_files.TEMP_PREFIXES[1]}lock-{uuid.uuid4().hex}")

    def create(self, data: bytes) -> Optional[bytes]:
        """Written whole under a temporary name, then linked to the lock's name only if that is free: the lock
        is never seen empty or partial, and a write that fails (a full disk) leaves no lock behind."""
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        temp = self._temp()
        try:
            with open(temp, "wb") as f:
                f.write(data)
            try:
                os.link(temp, self.path)
            except FileExistsError:
                return None
            except OSError as e:
                if e.errno not in _NO_HARD_LINKS:
                    raise
                return self._create_in_place(data)
        finally:
            try:
                os.unlink(temp)
            except FileNotFoundError:
                pass
        return data

    def _create_in_place(self, data: bytes) -> Optional[bytes]:
        """A filesystem without hard links: create-if-absent, then write; a failed write removes the lock again."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return None
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        except BaseException:
            os.unlink(self.path)
            raise
        return data

    def read(self) -> Optional[Found]:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
                return Found(data, data, os.fstat(f.fileno()).st_mtime)
        except FileNotFoundError:
            return None

    def refresh(self, version: Any, data: bytes) -> Optional[bytes]:
        found = self.read()
        if found is None or found.version != version:
            return None
        temp = self._temp()
        with open(temp, "wb") as f:
            f.write(data)
        os.replace(temp, self.path)  # replaced, never absent: no other run can create it meanwhile
        return data

    def take_over(self, version: Any, data: bytes) -> Optional[bytes]:
        # One taker wins the rename; it then checks it moved the lock it judged stale, and creates its own.
        aside = self._temp()
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return None
        try:
            with open(aside, "rb") as f:
                moved = f.read()
            if moved != version:  # a fresh lock another run took meanwhile: put it back
                try:
                    os.link(aside, self.path)
                except FileExistsError:
                    pass
                return None
        finally:
            os.unlink(aside)
        return self.create(data)

    def delete(self, version: Any) -> None:
        found = self.read()
        if found is not None and found.version == version:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


class GcsStore:
    """A lock object in Cloud Storage, changed only under a generation precondition.

    A server that reports no generations (some emulators) gets the same
    calls without a precondition on the version: best effort, as elsewhere.
    """

    def __init__(self, path: str, client: Any):
        bucket, _, name = path[len("gs://") :].partition("/")
        self._bucket = client.bucket(bucket)
        self._name = name

    def _upload(self, data: bytes, generation: Optional[int]) -> Optional[Any]:
        from google.api_core import exceptions

        blob = self._bucket.blob(self._name)
        try:
            blob.upload_from_string(data, content_type="application/json", if_generation_match=generation)
        except (exceptions.PreconditionFailed, exceptions.NotFound):
            return None
        return _generation(blob, data)

    def create(self, data: bytes) -> Optional[int]:
        return self._upload(data, 0)

    def read(self) -> Optional[Found]:
        from google.api_core import exceptions

        blob = self._bucket.get_blob(self._name)
        if blob is None:
            return None
        try:
            data = blob.download_as_bytes(if_generation_match=blob.generation)
        except (exceptions.PreconditionFailed, exceptions.NotFound):  # changed since: seen as being written
            data = b""
        return Found(data, _generation(blob, data), blob.updated.timestamp() if blob.updated else time.time())

    def _current(self, version: Any) -> Optional[int]:
        """The precondition for changing ``version``; None (checked by reading) without generations."""
        if isinstance(version, int):
            return version
        found = self.read()
        return -1 if found is None or found.version != version else None

    def refresh(self, version: Any, data: bytes) -> Optional[Any]:
        generation = self._current(version)
        return None if generation == -1 else self._upload(data, generation)

    take_over = refresh

    def delete(self, version: Any) -> None:
        from google.api_core import exceptions

        generation = self._current(version)
        if generation == -1:
            return
        try:
            self._bucket.blob(self._name).delete(if_generation_match=generation)
        except (exceptions.PreconditionFailed, exceptions.NotFound):
            pass


def _generation(blob: Any, data: bytes) -> Any:
    """The object's generation, or its bytes where the server reports none."""
    return int(blob.generation) if blob.generation is not None else data


class FileSystemsStore:
    """A lock file through Beam's FileSystems (``s3://``, ``hdfs://``, ...): check then write, not atomic."""

    def __init__(self, path: str):
        self.path = path

    def _write(self, data: bytes) -> bytes:
        from apache_beam.io.filesystems import FileSystems

        with FileSystems.create(self.path) as f:
            f.write(data)
        return data

    def create(self, data: bytes) -> Optional[bytes]:
        return None if self.read() is not None else self._write(data)

    def read(self) -> Optional[Found]:
        from apache_beam.io.filesystems import FileSystems

        if not FileSystems.exists(self.path):
            return None
        try:
            with FileSystems.open(self.path) as f:
                data = f.read()
        except Exception:  # pylint: disable=broad-except  # removed meanwhile
            return None
        return Found(data, data, FileSystems.last_updated(self.path) if FileSystems.exists(self.path) else time.time())

    def refresh(self, version: Any, data: bytes) -> Optional[bytes]:
        found = self.read()
        return self._write(data) if found is not None and found.version == version else None

    take_over = refresh

    def delete(self, version: Any) -> None:
        from apache_beam.io.filesystems import FileSystems

        found = self.read()
        if found is not None and found.version == version:
            FileSystems.delete([self.path])


def store_for(output_dir: str, pipeline_options: Any = None) -> LockStore:
    """Where the lock of ``output_dir`` lives; ``pipeline_options`` give the Cloud Storage credentials."""
    if output_dir.startswith("gs://"):
        from apache_beam.io.gcp.gcsio import create_storage_client
        from apache_beam.options.pipeline_options import PipelineOptions

        client = create_storage_client(pipeline_options or PipelineOptions([]))
        return GcsStore(posixpath.join(output_dir, output_files.LOCK_FILE), client)
    if "://" in output_dir:
        return FileSystemsStore(posixpath.join(output_dir, output_files.LOCK_FILE))
    return LocalStore(os.path.join(output_dir, output_files.LOCK_FILE))
