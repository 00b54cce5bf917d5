"""Converters that misbehave on purpose, for the process-pool tests (imported by worker processes)."""
from __future__ import annotations

import os

from img2tfrecord.transforms.converter import ImageConverter


class CrashingConverter(ImageConverter):
    """Kills its own process (as a decoder crash would) on files whose name contains ``crash``."""

    def __call__(self, source, label_names):
        if "crash" in os.path.basename(source[1]):
            os._exit(70)
        return super().__call__(source, label_names)


class FlakyStorageConverter(ImageConverter):
    """Raises a transient storage error (never an error row) on files whose name contains ``flaky``."""

    def __call__(self, source, label_names):
        if "flaky" in os.path.basename(source[1]):
            raise ConnectionResetError("connection reset by peer (simulated)")
        return super().__call__(source, label_names)
