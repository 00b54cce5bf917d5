"""What Beam's S3 and Azure filesystems get wrong, corrected once per process by :func:`apply`.

S3 (``apache_beam.io.aws``):

* Every file operation builds a new boto3 session and client, which loads
  botocore's service model again (about 0.7 s each): clients are shared per
  connection settings (the options and the ``AWS_*`` environment they are read with).
* An error raised before any request (no credentials at all) carries no HTTP
  code, which Beam's retry takes for a server error: retried for minutes.
  It gets a client error's code (401) and fails at once.
* A file closed with nothing written ends a multipart upload with no part,
  which S3 refuses (``MalformedXML``): the upload is aborted and an empty
  object put instead.

Azure Blob Storage (``apache_beam.io.azure``):

* ``exists`` of a missing blob raises instead of answering False (the 404
  reaches it as Beam's own ``BlobStorageError``, which it does not catch).
* Without a connection string or an endpoint, the Azure SDK's "Account URL must
  be a string" is all a user sees: it is said what to give instead.

Cloud Storage (``apache_beam.io.gcp``, through ``google-cloud-storage``):

* Each new client (Beam makes many) fetches its bucket's metadata again in a
  background thread, one more request for every bucket it touches, only to
  label OpenTelemetry traces. The fetch is turned off
  (``DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA``) unless the environment
  sets that variable itself.

Loading, in the command's processes (:func:`defer_object_stores`):

* Beam imports its S3, Azure and Cloud Storage filesystems with its other
  filesystems, and with them boto3, the Azure SDK and the Cloud Storage client:
  about 0.5 s of CPU at every start, for the runs that never touch ``s3://``,
  ``azfs://`` or ``gs://``. There they load when a path of theirs is first
  opened (:func:`object_store`); Cloud Storage's also when another of Beam's
  modules imports it (Dataflow's client does).

Imports Beam only when called; a Beam without the AWS or Azure extra is left alone.
"""

from __future__ import annotations

import importlib
import importlib.abc
import os
import sys
import threading
from typing import Any, Dict, Optional, Sequence, Set, Tuple

_lock = threading.RLock()
_applied = False
_clients: Dict[Tuple[Any, ...], Any] = {}
# scheme -> Beam's module that registers its filesystem
FILESYSTEM_MODULES = {
    "s3": "apache_beam.io.aws.s3filesystem",
    "azfs": "apache_beam.io.azure.blobstoragefilesystem",
    "gs": "apache_beam.io.gcp.gcsfilesystem",
}
# Deferred modules refused only while the module named loads (it skips them), as other modules of Beam import
# them by name (Dataflow's client imports Cloud Storage's filesystem).
_REFUSED_WHILE_LOADING = {"apache_beam.io.gcp.gcsfilesystem": "apache_beam.io.filesystems"}
_ready: Set[str] = set()  # schemes loaded and corrected
_deferred: Set[str] = set()  # modules refused while Beam's filesystems load


def _loading(name: str) -> bool:
    """Whether module ``name`` is being imported (its body runs)."""
    module = sys.modules.get(name)
    return bool(module is not None and getattr(getattr(module, "__spec__", None), "_initializing", False))


class _Deferred(importlib.abc.MetaPathFinder):
    """Refuses the deferred filesystem modules as if not installed (Beam's filesystems skip those)."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]], target: Any = None) -> Any:
        if fullname in _deferred:
            loader = _REFUSED_WHILE_LOADING.get(fullname)
            if loader is None or _loading(loader):
                raise ModuleNotFoundError(f"{fullname} loads when it is used", name=fullname)
        return None


def defer_object_stores() -> None:
    """In a process that has not imported Beam yet: S3's, Azure's and Cloud Storage's filesystems load when a
    path of theirs is first used, not with Beam. For the command's processes, whose every filesystem call passes
    :func:`apply` first; a library user's process keeps Beam's own loading."""
    if "apache_beam.io.filesystems" in sys.modules:
        return
    with _lock:
        if not _deferred:
            _deferred.update(FILESYSTEM_MODULES.values(), _REFUSED_WHILE_LOADING)
            sys.meta_path.insert(0, _Deferred())


def object_store(scheme: str) -> None:
    """Load and correct the filesystem of ``scheme`` (``s3``, ``azfs`` or ``gs``) in this process, once; other
    schemes, and a Beam without that extra, are left alone."""
    if scheme in _ready or scheme not in FILESYSTEM_MODULES:
        return
    with _lock:
        if scheme in _ready:
            return
        module = FILESYSTEM_MODULES[scheme]
        _deferred.discard(module)
        try:
            importlib.import_module(module)
        except ImportError:  # Beam without that extra: its paths fail as Beam fails them
            pass
        else:
            if scheme == "s3":
                _fix_s3()
            elif scheme == "azfs":
                _fix_azure()
            else:
                _fix_gcs()
        _ready.add(scheme)


# botocore's errors raised before any request (no credentials anywhere): Beam would retry them for minutes as
# it retries a server's 5xx; they are given a client error's code, so they fail at once.
_NOT_RETRIED = ("NoCredentialsError", "PartialCredentialsError", "NoRegionError")

_SETTINGS = (
    "s3_access_key_id",
    "s3_secret_access_key",
    "s3_session_token",
    "s3_endpoint_url",
    "s3_disable_ssl",
    "s3_region_name",
    "s3_api_version",
    "s3_verify",
)


def apply() -> None:
    """Correct Beam's S3 client and uploader and Azure's ``exists`` in this process, loading a deferred one when
    its first path is used (idempotent)."""
    global _applied
    with _lock:
        if _applied:
            return
        _applied = True
        from apache_beam.io.filesystems import FileSystems

        original = FileSystems.get_filesystem

        def get_filesystem(path: str) -> Any:
            object_store(FileSystems.get_scheme(path) or "")
            return original(path)

        FileSystems.get_filesystem = staticmethod(get_filesystem)  # type: ignore[method-assign]
        for scheme, module in FILESYSTEM_MODULES.items():
            if module in sys.modules:  # loaded with Beam, not deferred
                object_store(scheme)


# google-cloud-storage's switch for its bucket metadata fetches (read at every request).
GCS_BUCKET_METADATA_OFF = "DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA"


def _fix_gcs() -> None:
    os.environ.setdefault(GCS_BUCKET_METADATA_OFF, "true")  # inherited by the workers this process starts


def _fix_azure() -> None:
    try:
        from apache_beam.io.azure import blobstorageio
    except ImportError:  # Beam without apache-beam[azure]
        return

    original_exists = blobstorageio.BlobStorageIO.exists

    def exists(self: Any, path: str) -> bool:
        try:
            return bool(original_exists(self, path))
        except blobstorageio.BlobStorageError as e:
            if e.code == 404:
                return False
            raise

    original_init = blobstorageio.BlobStorageIO.__init__

    def init(self: Any, client: Any = None, pipeline_options: Any = None) -> None:
        try:
            original_init(self, client, pipeline_options)
        except ValueError as e:
            if "Account URL" not in str(e):
                raise
            raise ValueError(
                "no Azure Blob Storage account given: set AZURE_STORAGE_CONNECTION_STRING, or give "
                "--azure_connection_string or --blob_service_endpoint"
            ) from None

    blobstorageio.BlobStorageIO.exists = exists  # type: ignore[method-assign]
    blobstorageio.BlobStorageIO.__init__ = init  # type: ignore[method-assign]


def _fix_s3() -> None:
    try:
        from apache_beam.io.aws import s3io
        from apache_beam.io.aws.clients.s3 import boto3_client
        from apache_beam.options.pipeline_options import PipelineOptions, S3Options
    except ImportError:  # Beam without apache-beam[aws]: no s3:// at all
        return
    if getattr(boto3_client, "boto3", None) is None:
        return

    original_init = boto3_client.Client.__init__

    def settings(options: Any) -> Tuple[Any, ...]:
        if isinstance(options, PipelineOptions):
            view = options.view_as(S3Options)
            values = tuple(getattr(view, name, None) for name in _SETTINGS)
        else:
            values = tuple(options.get(name) for name in _SETTINGS)
        environment = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
        return values + environment

    def shared_client_init(self: Any, options: Any) -> None:
        key = settings(options)
        with _lock:
            client = _clients.get(key)
        if client is None:
            original_init(self, options)
            with _lock:
                _clients.setdefault(key, self.client)
            return
        self.client = client
        self._download_request = None
        self._download_stream = None
        self._download_pos = 0

    original_finish = s3io.S3Uploader.finish

    def finish(self: Any) -> None:
        if self.parts or self.buffer or self.last_error is not None:
            original_finish(self)
            return
        raw = getattr(self._client, "client", None)
        if raw is None:  # not the boto3 client: Beam's own behaviour
            original_finish(self)
            return
        raw.abort_multipart_upload(Bucket=self._bucket, Key=self._name, UploadId=self.upload_id)
        raw.put_object(Bucket=self._bucket, Key=self._name, Body=b"", ContentType=self._mime_type)

    original_code = boto3_client.get_http_error_code

    def http_error_code(exc: Exception) -> Any:
        code = original_code(exc)
        if code is None and type(exc).__name__ in _NOT_RETRIED:  # botocore's: no answer, yet final
            return 401
        return code

    boto3_client.get_http_error_code = http_error_code
    boto3_client.Client.__init__ = shared_client_init  # type: ignore[method-assign]
    s3io.S3Uploader.finish = finish  # type: ignore[method-assign]
