"""Converters that misbehave on purpose or report on their process, for the process-pool tests (imported by
worker processes)."""

from __future__ import annotations

import os
import time

from img2tfrecord.conversion.converter import ImageConverter


class CrashingConverter(ImageConverter):
    """Kills its own process (as a decoder crash would) on files whose name contains ``crash``."""

    def __call__(self, source, label_names):
        if "crash" in os.path.basename(source.relpath):
            os._exit(70)
        return super().__call__(source, label_names)


class FlakyStorageConverter(ImageConverter):
    """Raises a transient storage error (never an error row) on files whose name contains ``flaky``."""

    def __call__(self, source, label_names):
        if "flaky" in os.path.basename(source.relpath):
            raise ConnectionResetError("connection reset by peer (simulated)")
        return super().__call__(source, label_names)


class CountingConverter(ImageConverter):
    """Appends the relpath of every item it converts to ``log_path``, one line each, from any process."""

    def __init__(self, *args, log_path: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.log_path = log_path

    def __call__(self, source, label_names):
        fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (source.relpath + "\n").encode("utf-8"))
        finally:
            os.close(fd)
        return super().__call__(source, label_names)


class EnvironmentConverter(ImageConverter):
    """Gives, for every item, the value of the environment variable ``name`` in the process converting it."""

    def __init__(self, *args, name: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.name = name

    def __call__(self, source, label_names):
        return None, os.environ.get(self.name)


class BigOutputConverter(ImageConverter):
    """Gives, after ``delay_s``, an output larger than a pipe's buffer for every item; dies (as a decoder crash
    would) half-way through that delay on files whose name contains ``crash``."""

    def __init__(self, *args, delay_s: float, size: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.delay_s, self.size = delay_s, size

    def __call__(self, source, label_names):
        if "crash" in os.path.basename(source.relpath):
            time.sleep(self.delay_s / 2)
            os._exit(70)
        time.sleep(self.delay_s)
        return None, b"x" * self.size


def die_halfway_through_a_result() -> None:
    """Write the start of a result into this pool worker's result pipe and die there, as a worker killed
    halfway through handing a result back would."""
    import gc
    import struct
    from multiprocessing.queues import SimpleQueue

    # The worker's queues: the calls it takes and the results it writes (the one written last).
    result_queue = [q for q in gc.get_objects() if isinstance(q, SimpleQueue)][-1]
    os.write(result_queue._writer.fileno(), struct.pack("!i", 1 << 20) + b"x")  # 1 MiB announced, 1 B sent
    os._exit(70)


class HalfResultConverter(ImageConverter):
    """Dies halfway through handing a result back on files whose name contains ``crash``."""

    def __call__(self, source, label_names):
        if "crash" in os.path.basename(source.relpath):
            die_halfway_through_a_result()
        return super().__call__(source, label_names)


def square_dying_once_halfway(task):
    """``task = (marker, n)`` -> n * n; the first worker to get n == 3 creates ``marker`` and dies halfway
    through handing its result back."""
    marker, n = task
    if n == 3 and not os.path.exists(marker):
        open(marker, "w").close()
        die_halfway_through_a_result()
    return n * n
