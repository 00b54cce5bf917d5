"""Where an output lock lives: a local file, a Cloud Storage, S3 or Azure Blob object, or a file on another
Beam filesystem.

Each store changes the lock only as it was read (its *version*), so two runs
never both believe they created or took it over; see ``pipeline/lock.py``
for what the lock holds and when it is stale. An object store that does not
honour conditional writes is refused (:class:`LockNotAtomic`) unless the run
accepts an unguarded lock, a check then a write.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import posixpath
import time
import uuid
from typing import Any, Optional, Protocol

from img2tfrecord.pipeline.output_errors import OutputNotWritable
from img2tfrecord.schemas import output_files

UNGUARDED_FLAG = "--allow-unguarded-lock"


class LockNotAtomic(OutputNotWritable):
    """The output's store cannot create the lock only if absent (a usage error, before anything is written)."""


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


def _temp_name(lock_path: str) -> str:
    """A name beside the lock that a cleaning run knows as one of its temporary files."""
    return posixpath.join(posixpath.dirname(lock_path), f"{output_files.TEMP_PREFIXES[1]}lock-{uuid.uuid4().hex}")


def _not_atomic(path: str, why: str) -> LockNotAtomic:
    return LockNotAtomic(
        f"the store of {posixpath.dirname(path)} {why}, so its lock could not keep a second run out; "
        f"give {UNGUARDED_FLAG} to run with a lock that is a check then a write"
    )


class S3Store:
    """A lock object on S3: created with ``If-None-Match: *``, rewritten and removed with ``If-Match: <ETag>``.

    Stores that ignore the condition (some S3-compatible servers) are found by a
    probe before the first create: two conditional creates of a temporary object,
    the second of which must fail. Without conditions (``unguarded``) the same
    calls check, then write.
    """

    def __init__(self, path: str, client: Any, unguarded: bool = False):
        self.path = path
        self._bucket, _, self._key = path[len("s3://") :].partition("/")
        self._client = client
        self._unguarded = unguarded
        self._guarded: Optional[bool] = None  # probed on the first create

    @staticmethod
    def _code(e: Exception) -> tuple:
        response = getattr(e, "response", None) or {}
        return (
            str(response.get("Error", {}).get("Code", "")),
            int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0),
        )

    def _refused(self, e: Exception) -> bool:
        """The condition did not hold (or the object is gone)."""
        code, status = self._code(e)
        return status in (404, 409, 412) or code in (
            "PreconditionFailed",
            "ConditionalRequestConflict",
            "NoSuchKey",
            "NotFound",
        )

    def _unsupported(self, e: Exception) -> bool:
        code, status = self._code(e)
        return status == 501 or code in ("NotImplemented", "InvalidArgument")

    def _put(self, key: str, data: bytes, **condition: str) -> Optional[str]:
        from botocore.exceptions import ClientError

        try:
            answer = self._client.put_object(
                Bucket=self._bucket, Key=key, Body=data, ContentType="application/json", **condition
            )
        except ClientError as e:
            if self._unsupported(e) and condition:
                raise _not_atomic(self.path, f"refuses conditional writes ({self._code(e)[0]})") from None
            if self._refused(e):
                return None
            raise
        return str(answer["ETag"])

    def _probe(self) -> bool:
        """True when the store refuses a second create-if-absent of one object, as S3 does."""
        probe = posixpath.relpath(_temp_name(self.path), "s3://" + self._bucket)
        try:
            first = self._put(probe, b"{}", IfNoneMatch="*")
            second = self._put(probe, b"{}", IfNoneMatch="*") if first is not None else None
        finally:
            self._client.delete_object(Bucket=self._bucket, Key=probe)
        return first is not None and second is None

    def _conditions(self) -> bool:
        if self._guarded is None:
            try:
                guarded = self._probe()
            except LockNotAtomic:
                if not self._unguarded:
                    raise
                guarded = False
            if not guarded and not self._unguarded:
                raise _not_atomic(self.path, "ignores conditional writes (If-None-Match)")
            if not guarded:
                logging.warning(
                    "the store of %s ignores conditional writes: its lock is a check then a write (%s)",
                    posixpath.dirname(self.path),
                    UNGUARDED_FLAG,
                )
            self._guarded = guarded
        return self._guarded

    def create(self, data: bytes) -> Optional[str]:
        if self._conditions():
            return self._put(self._key, data, IfNoneMatch="*")
        return None if self.read() is not None else self._put(self._key, data)

    def read(self) -> Optional[Found]:
        from botocore.exceptions import ClientError

        try:
            answer = self._client.get_object(Bucket=self._bucket, Key=self._key)
            data = answer["Body"].read()
        except ClientError as e:
            if self._refused(e):
                return None
            raise
        return Found(data, str(answer["ETag"]), answer["LastModified"].timestamp())

    def _still(self, version: Any) -> bool:
        found = self.read()
        return found is not None and found.version == version

    def refresh(self, version: Any, data: bytes) -> Optional[str]:
        if self._guarded is not False:
            return self._put(self._key, data, IfMatch=str(version))
        return self._put(self._key, data) if self._still(version) else None

    take_over = refresh

    def delete(self, version: Any) -> None:
        from botocore.exceptions import ClientError

        if self._guarded is False:
            if self._still(version):
                self._client.delete_object(Bucket=self._bucket, Key=self._key)
            return
        try:
            self._client.delete_object(Bucket=self._bucket, Key=self._key, IfMatch=str(version))
        except ClientError as e:
            if self._unsupported(e) and self._still(version):  # a store without conditional deletes
                self._client.delete_object(Bucket=self._bucket, Key=self._key)
            elif not self._refused(e) and not self._unsupported(e):
                raise


class AzureBlobStore:
    """A lock blob in Azure Blob Storage: created with ``If-None-Match: *`` (``overwrite=False``), rewritten and
    removed with ``If-Match: <ETag>``."""

    def __init__(self, path: str, client: Any):
        self.path = path
        _account, container, name = path[len("azfs://") :].split("/", 2)
        self._blob = client.get_blob_client(container, name)

    def _unsupported(self, e: Exception) -> bool:
        return getattr(e, "status_code", 0) == 501 or getattr(e, "error_code", "") in ("NotImplemented",)

    def _upload(self, data: bytes, version: Optional[str]) -> Optional[str]:
        from azure.core import MatchConditions
        from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
        from azure.storage.blob import ContentSettings

        condition: dict = (
            {"overwrite": False}
            if version is None
            else {"overwrite": True, "etag": version, "match_condition": MatchConditions.IfNotModified}
        )
        try:
            answer = self._blob.upload_blob(
                data, content_settings=ContentSettings(content_type="application/json"), **condition
            )
        except (ResourceExistsError, ResourceNotFoundError):
            return None
        except HttpResponseError as e:
            if self._unsupported(e):
                raise _not_atomic(self.path, "refuses conditional writes") from None
            if getattr(e, "status_code", 0) in (409, 412):
                return None
            raise
        return str(answer["etag"])

    def create(self, data: bytes) -> Optional[str]:
        return self._upload(data, None)

    def read(self) -> Optional[Found]:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            download = self._blob.download_blob()
            data = download.readall()
        except ResourceNotFoundError:
            return None
        props = download.properties
        modified = props.last_modified.timestamp() if props.last_modified else time.time()
        return Found(data, str(props.etag), modified)

    def refresh(self, version: Any, data: bytes) -> Optional[str]:
        return self._upload(data, str(version))

    take_over = refresh

    def delete(self, version: Any) -> None:
        from azure.core import MatchConditions
        from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

        try:
            self._blob.delete_blob(etag=str(version), match_condition=MatchConditions.IfNotModified)
        except ResourceNotFoundError:
            pass
        except HttpResponseError as e:
            if getattr(e, "status_code", 0) != 412:
                raise


def store_for(output_dir: str, pipeline_options: Any = None, unguarded: bool = False) -> LockStore:
    """Where the lock of ``output_dir`` lives; ``pipeline_options`` give the store's credentials and endpoint
    (by default those of Beam's FileSystems here, ``storage.pipeline_options``); ``unguarded`` accepts an
    object store that ignores conditional writes."""
    lock_path = posixpath.join(output_dir, output_files.LOCK_FILE)
    if "://" in output_dir and pipeline_options is None:
        from img2tfrecord import storage

        pipeline_options = storage.pipeline_options()
    if output_dir.startswith("gs://"):
        from apache_beam.io.gcp.gcsio import create_storage_client

        return GcsStore(lock_path, create_storage_client(pipeline_options))
    if output_dir.startswith("s3://"):
        from apache_beam.io.aws.clients.s3 import boto3_client

        from img2tfrecord import beam_filesystem_fixes

        beam_filesystem_fixes.object_store("s3")
        return S3Store(lock_path, boto3_client.Client(pipeline_options).client, unguarded)
    if output_dir.startswith("azfs://"):
        from apache_beam.io.azure.blobstorageio import BlobStorageIO

        return AzureBlobStore(lock_path, BlobStorageIO(pipeline_options=pipeline_options).client)
    if "://" in output_dir:
        return FileSystemsStore(lock_path)
    return LocalStore(os.path.join(output_dir, output_files.LOCK_FILE))
