"""A Cloud Storage emulator (``gcp-storage-emulator``) on 127.0.0.1 for the session, and helpers around it.

Beam's GCS client talks to it when ``STORAGE_EMULATOR_HOST`` is set. Beam
first looks for Google credentials (``google.auth.default``) and retries for
about 30 s before it connects anonymously; a credentials file holding an
already issued, never expiring token makes that lookup succeed at once
without any network call (the emulator ignores the token).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from typing import Dict, Iterator, Optional

import pytest

BUCKET = "img2tfrecord-test"


@dataclass(frozen=True)
class Emulator:
    """A running emulator: its endpoint, one bucket, and the environment that points Beam at it."""

    endpoint: str
    bucket: str
    env: Dict[str, str]

    def url(self, *parts: str) -> str:
        """``gs://<bucket>/<parts...>``."""
        return "/".join([f"gs://{self.bucket}", *parts])


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def emulator_env(endpoint: str, credentials_file: str) -> Dict[str, str]:
    """The variables that make Beam's GCS filesystem use the emulator at ``endpoint`` without waiting."""
    return {
        "STORAGE_EMULATOR_HOST": endpoint,
        "GOOGLE_APPLICATION_CREDENTIALS": credentials_file,
        "GOOGLE_CLOUD_PROJECT": "img2tfrecord-emulated",
    }


def write_credentials(path: str) -> str:
    """Write an ``authorized_user`` credentials file with a pre-issued token (never refreshed) to ``path``."""
    doc = {
        "type": "authorized_user",
        "client_id": "emulator",
        "client_secret": "emulator",
        "refresh_token": "emulator",
        "token": "emulator",
        "expiry": "2999-01-01T00:00:00Z",
    }
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    return path


def start(
    directory: str, bucket: str = BUCKET, timeout: float = 30.0, data_dir: Optional[str] = None
) -> tuple[subprocess.Popen, Emulator]:
    """Start ``gcp-storage-emulator`` on a free 127.0.0.1 port with ``bucket``; wait until it answers.

    It keeps objects in memory, or in ``data_dir`` (its on-disk store, which may be seeded beforehand).
    """
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = open(os.path.join(directory, "emulator.log"), "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [sys.executable, "-m", "gcp_storage_emulator"]
        + (["--data-dir", data_dir, "start"] if data_dir else ["start", "--in-memory"])
        + ["--host", "127.0.0.1", "--port", str(port), "--default-bucket", bucket, "--quiet"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{endpoint}/storage/v1/b/{bucket}", timeout=2) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the storage emulator did not start on {endpoint} (log in {directory})")
        time.sleep(0.1)
    env = emulator_env(endpoint, write_credentials(os.path.join(directory, "credentials.json")))
    return proc, Emulator(endpoint, bucket, env)


def stop(proc: subprocess.Popen) -> None:
    """Stop an emulator started by :func:`start`."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def serving(proc: subprocess.Popen, emulator: Emulator) -> Iterator[Emulator]:
    """``emulator``'s variables set in this process (Beam's FileSystems in tests) until the block ends,
    then put back, and ``proc`` stopped."""
    saved = {key: os.environ.get(key) for key in emulator.env}
    os.environ.update(emulator.env)
    try:
        yield emulator
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        stop(proc)


@pytest.fixture(scope="session", name="gcs")
def gcs_fixture(tmp_path_factory) -> Iterator[Emulator]:
    """The session's emulator, its variables set in this process."""
    with serving(*start(str(tmp_path_factory.mktemp("gcs")))) as emulator:
        yield emulator


def upload_tree(local_dir: str, destination: str) -> int:
    """Copy every file under ``local_dir`` to ``destination`` (a ``gs://`` prefix); returns the count."""
    from img2tfrecord import storage

    return len(storage.copy_tree(local_dir, destination))


def upload_file(local_path: str, destination: str) -> None:
    """Copy one local file to the object ``destination``."""
    from img2tfrecord import storage

    with open(local_path, "rb") as f:
        storage.write_bytes(destination, f.read())
