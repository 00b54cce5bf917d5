"""A pool whose worker dies: the run goes on, and nothing of the broken pool outlives it (conversion/pool.py,
and the report's, report/workers.py). Its surviving workers may ignore SIGTERM and be blocked writing a result
no one reads; the interpreter joins every executor's manager thread at exit, so any survivor would hang the run."""

from __future__ import annotations

import os
import threading
import time

from crashing import BigOutputConverter, HalfResultConverter, square_dying_once_halfway

from img2tfrecord import worker_exit
from img2tfrecord.conversion.pool import CRASH_MESSAGE, ConversionPool
from img2tfrecord.images.options import ImageOptions
from img2tfrecord.model import WorkItem
from img2tfrecord.report.workers import Workers

LABELS = ["cat", "dog"]


def _manager_threads():
    return {t for t in threading.enumerate() if type(t).__name__ == "_ExecutorManagerThread" and t.is_alive()}


def _convert_all(converter, items, within_s: float = 60.0):
    """``items`` through a two-process pool, one item per batch, in a thread given ``within_s``: whether it
    finished, the outputs by relpath, and the first pool's worker processes."""
    seen = {}
    workers = []

    def convert_all():
        with ConversionPool(converter, 2, batch_size=1) as pool:
            workers.extend(pool._pool._processes.values())  # the first pool's, which a crash breaks
            pool.put(items, LABELS)
            for item, output in pool.outputs(drain=True):
                seen[item.relpath] = output

    thread = threading.Thread(target=convert_all, daemon=True)
    thread.start()
    thread.join(within_s)
    return not thread.is_alive(), seen, workers


def test_a_dead_worker_leaves_no_survivor_blocked_and_the_pool_closes_at_once(tmp_path):
    converter = BigOutputConverter(
        ImageOptions(size=(8, 8), format="jpeg"), "class", (("train", 1.0),), 1, delay_s=1.0, size=2 << 20
    )
    names = ["cat/a.jpg", "dog/crash.jpg", "cat/b.jpg", "dog/c.jpg"]
    items = [WorkItem(str(tmp_path / name), name, 1) for name in names]
    before = _manager_threads()
    finished, seen, workers = _convert_all(converter, items)
    assert finished, "the pool did not close after a worker died"
    assert set(seen) == set(names)
    assert seen["cat/a.jpg"] == (None, b"x" * (2 << 20))
    assert CRASH_MESSAGE in str(seen["dog/crash.jpg"])
    assert workers and not any(process.is_alive() for process in workers)
    for manager in _manager_threads() - before:
        manager.join(10)
        assert not manager.is_alive(), "an executor's manager thread outlived its pool"


def test_a_worker_dead_halfway_through_a_result_breaks_the_pool_instead_of_hanging_it(tmp_path, monkeypatch):
    """The executor reads a result whole before it looks at its workers again: one that died after writing
    the start of a result would keep it waiting for the rest for ever. The pool notices the dead worker
    when a batch is late, and the run goes on: the item that killed two workers is an error row."""
    monkeypatch.setattr(worker_exit, "STALL_CHECK_S", 0.5)
    converter = HalfResultConverter(ImageOptions(size=(8, 8), format="jpeg"), "class", (("train", 1.0),), 1)
    names = ["cat/a.jpg", "dog/crash.jpg", "cat/b.jpg"]
    items = [WorkItem(str(tmp_path / name), name, 1) for name in names]
    finished, seen, _ = _convert_all(converter, items)
    assert finished, "the pool waited for ever on a half-written result"
    assert set(seen) == set(names)
    assert CRASH_MESSAGE in str(seen["dog/crash.jpg"])
    assert CRASH_MESSAGE not in str(seen["cat/a.jpg"]) + str(seen["cat/b.jpg"])


def test_a_report_worker_dead_halfway_through_a_result_is_replaced_and_every_task_runs(tmp_path, monkeypatch):
    """The report's pool (report/workers.py) notices a worker that died halfway through a result as the
    conversion pool does, and runs the tasks from the one it was on again in a fresh pool."""
    monkeypatch.setattr(worker_exit, "STALL_CHECK_S", 0.5)
    warnings, results = [], []
    tasks = [(str(tmp_path / "died"), n) for n in range(6)]

    def square_all():
        with Workers(2, warn=warnings.append) as pool:
            results.extend(pool.map(square_dying_once_halfway, tasks))

    thread = threading.Thread(target=square_all, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the report's pool waited for ever on a half-written result"
    assert os.path.exists(tmp_path / "died")  # a worker died there
    assert results == [n * n for n in range(6)]
    assert len(warnings) == 1


def test_a_report_worker_killed_between_two_calls_is_replaced_on_the_next_one():
    warnings = []
    with Workers(2, warn=warnings.append) as pool:
        assert pool.map(abs, [-1, -2, -3]) == [1, 2, 3]
        executor = pool._pool
        victim = next(iter(executor._processes.values()))
        victim.kill()
        victim.join(10)
        deadline = time.monotonic() + 10
        while not executor._broken and time.monotonic() < deadline:  # its manager thread has seen the death
            time.sleep(0.01)
        assert executor._broken
        assert pool.map(abs, [-4, -5]) == [4, 5]
    assert len(warnings) == 1
