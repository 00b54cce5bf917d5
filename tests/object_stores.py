"""S3 (``moto`` in server mode) and Azure Blob Storage (Azurite) on 127.0.0.1 for the session.

Each server runs as a process on a free port with one bucket (container);
its variables (``AWS_*`` with ``AWS_ENDPOINT_URL``, ``AZURE_STORAGE_CONNECTION_STRING``
with Azurite's well-known development account key) are set in this process
while the session lasts, so Beam's filesystems, the lock and the readers reach
it through the standard environment, as a user's would. Azurite comes from npm:
``run_tests.sh`` installs it under ``.test-tools/``; the Azure tests are skipped,
saying why, where neither it nor Node can be had.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional

import pytest
from gcs_emulator import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUCKET = "img2tfrecord-test"
AZURE_ACCOUNT = "devstoreaccount1"
# Azurite's published development key (https://learn.microsoft.com/azure/storage/common/storage-use-azurite).
AZURE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@dataclass(frozen=True)
class Store:
    """A running server: its scheme's root for one bucket, and the environment that points clients at it."""

    name: str  # "s3" or "azure"
    root: str  # s3://bucket or azfs://account/container
    env: Dict[str, str]
    endpoint: str

    def url(self, *parts: str) -> str:
        return "/".join([self.root, *parts])


def _wait(proc: subprocess.Popen, url: str, log: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:  # it answers: up
            return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            raise RuntimeError(f"{url} did not start (log in {log})")
        time.sleep(0.1)


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def _environment(env: Dict[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _serve(command: List[str], directory: str, probe: str, timeout: float = 60.0) -> subprocess.Popen:
    log = os.path.join(directory, "server.log")
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=directory)
    _wait(proc, probe, log, timeout)
    return proc


def azurite_command() -> Optional[List[str]]:
    """How to start ``azurite-blob``: the project's copy under .test-tools/, or one on the PATH; None without."""
    local = os.path.join(ROOT, ".test-tools", "node_modules", ".bin", "azurite-blob")
    if os.path.exists(local) and shutil.which("node"):
        return [local]
    found = shutil.which("azurite-blob")
    return [found] if found else None


@contextlib.contextmanager
def s3_server(directory: str) -> Iterator[Store]:
    """``moto_server`` on a free port with the bucket :data:`BUCKET`, its variables set in this process."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    proc = _serve([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], directory, endpoint)
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_CONFIG_FILE": os.path.join(directory, "no-config"),
        "AWS_SHARED_CREDENTIALS_FILE": os.path.join(directory, "no-credentials"),
    }
    try:
        with _environment(env):
            import boto3

            boto3.client("s3").create_bucket(Bucket=BUCKET)
            yield Store("s3", f"s3://{BUCKET}", env, endpoint)
    finally:
        _stop(proc)


@contextlib.contextmanager
def azure_server(directory: str) -> Iterator[Store]:
    """Azurite's blob service on a free port, in memory, with the container :data:`BUCKET`."""
    command = azurite_command()
    if command is None:
        pytest.skip("Azurite is not installed (run_tests.sh installs it with npm into .test-tools/; Node is needed)")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}/{AZURE_ACCOUNT}"
    proc = _serve(
        command
        + ["--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence", "--silent"]
        + ["--disableTelemetry", "--skipApiVersionCheck"],
        directory,
        f"http://127.0.0.1:{port}/",
    )
    env = {
        "AZURE_STORAGE_CONNECTION_STRING": (
            f"DefaultEndpointsProtocol=http;AccountName={AZURE_ACCOUNT};AccountKey={AZURE_KEY};BlobEndpoint={endpoint};"
        )
    }
    try:
        with _environment(env):
            from azure.storage.blob import BlobServiceClient

            BlobServiceClient.from_connection_string(env["AZURE_STORAGE_CONNECTION_STRING"]).create_container(BUCKET)
            yield Store("azure", f"azfs://{AZURE_ACCOUNT}/{BUCKET}", env, endpoint)
    finally:
        _stop(proc)


@pytest.fixture(scope="session", name="s3_store")
def s3_fixture(tmp_path_factory) -> Iterator[Store]:
    with s3_server(str(tmp_path_factory.mktemp("s3"))) as store:
        yield store


@pytest.fixture(scope="session", name="azure_store")
def azure_fixture(tmp_path_factory) -> Iterator[Store]:
    with azure_server(str(tmp_path_factory.mktemp("azure"))) as store:
        yield store


@pytest.fixture(scope="session", params=["s3", "azure"], name="store")
def store_fixture(request) -> Store:
    """Each object store in turn (S3 on moto, Azure Blob on Azurite)."""
    return request.getfixturevalue(f"{request.param}_store")
