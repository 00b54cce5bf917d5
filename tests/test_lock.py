"""The output lock (``pipeline/lock.py``): one writer per output, locally and in Cloud Storage.

In-process against a local folder and against fake-gcs-server (which honours
generation preconditions, ``tests/fake_gcs.py``); the race for an output runs
as real processes, which race for a local output and then for a gs:// one. The CLI's answers to a held
output are in ``tests/test_first_hour_runs.py``.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import IN_MEMORY, ROOT, cli_env
from fake_gcs import fake_gcs_fixture  # noqa: F401 - the fake_gcs fixture

from img2tfrecord.pipeline import lock as lock_module
from img2tfrecord.pipeline.lock import Holder, OutputLock, OutputLocked, lock_output
from img2tfrecord.pipeline.lock_stores import GcsStore, LocalStore
from img2tfrecord.pipeline.outputs import list_output
from img2tfrecord.schemas import output_files


def _dead_pid() -> int:
    """The pid of a process of this host that has exited."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _planted(pid: int, host: str, age_s: float) -> bytes:
    then = time.time() - age_s
    return Holder(pid, host, then, then, "planted").to_bytes()


def test_a_lock_names_its_holder_and_refuses_a_second_run(tmp_path):
    out = str(tmp_path / "out")
    first = lock_output(out)
    first.acquire(take_over_stale=False)
    try:
        with open(os.path.join(out, output_files.LOCK_FILE), encoding="utf-8") as f:
            doc = json.load(f)
        assert doc["pid"] == os.getpid() and doc["host"] == socket.gethostname()
        assert {"started", "heartbeat", "token"} <= set(doc)
        # The lock never makes an output non-empty, and neither flag takes a live run's lock.
        assert list_output(out) == []
        for take_over in (False, True):
            with pytest.raises(OutputLocked, match=f"being written by another run \\(pid {os.getpid()} on host "):
                lock_output(out).acquire(take_over_stale=take_over)
    finally:
        first.release()
    assert not os.path.exists(os.path.join(out, output_files.LOCK_FILE))
    again = lock_output(out)
    again.acquire(take_over_stale=False)
    assert again.held
    again.release()


def test_the_heartbeat_rewrites_the_lock_and_notices_a_takeover(tmp_path, caplog):
    out = str(tmp_path / "out")
    store = LocalStore(os.path.join(out, output_files.LOCK_FILE))
    held = OutputLock(out, store, heartbeat_s=0.05)
    held.acquire(take_over_stale=False)
    first = Holder.parse(store.read().data, 0).heartbeat
    deadline = time.monotonic() + 10
    while Holder.parse(store.read().data, 0).heartbeat == first:
        assert time.monotonic() < deadline, "the heartbeat was never rewritten"
        time.sleep(0.05)
    held.ensure_held()
    # Another run replaces the lock (as a takeover of a stalled run would): this run stops holding it. A refresh
    # that read the lock just before the takeover may write over it once (one holder either way): written again.
    planted = _planted(os.getpid(), socket.gethostname(), 0)
    deadline = time.monotonic() + 10
    while held.held:
        assert time.monotonic() < deadline, "the heartbeat did not notice the takeover"
        found = store.read()
        if found is None or found.data != planted:
            with open(store.path, "wb") as f:
                f.write(planted)
        time.sleep(0.05)
    assert "another run took over the lock" in caplog.text
    with pytest.raises(OutputLocked, match="no longer holds its lock"):
        held.ensure_held()
    held.release()
    assert os.path.exists(store.path), "a run must not remove a lock that is no longer its own"


def test_the_heartbeat_notices_a_removed_lock(tmp_path, caplog):
    out = str(tmp_path / "out")
    store = LocalStore(os.path.join(out, output_files.LOCK_FILE))
    held = OutputLock(out, store, heartbeat_s=0.05)
    held.acquire(take_over_stale=False)
    os.remove(store.path)  # the output deleted under the run
    deadline = time.monotonic() + 10
    while held.held:
        assert time.monotonic() < deadline, "the heartbeat did not notice the lock was removed"
        time.sleep(0.05)
    assert f"the lock on {out} was removed while this run held it" in caplog.text
    held.release()
    assert not os.path.exists(store.path), "a run must not write back a lock it lost"


@pytest.mark.parametrize(
    "holder, why",
    [
        (lambda: (_dead_pid(), socket.gethostname(), 1.0), "its process is gone"),
        (lambda: (1, "another-host", 2 * lock_module.STALE_AFTER_S), "no heartbeat for 20 min"),
    ],
    ids=["process-gone", "heartbeat-old"],
)
def test_a_stale_lock_is_named_and_taken_over_only_when_asked(tmp_path, holder, why):
    out = str(tmp_path / "out")
    os.makedirs(out)
    path = os.path.join(out, output_files.LOCK_FILE)
    planted = _planted(*holder())
    with open(path, "wb") as f:
        f.write(planted)

    left = lock_output(out)
    left.acquire(take_over_stale=False)
    assert not left.held and why in left.stale_note()
    assert open(path, "rb").read() == planted

    taker = lock_output(out)
    taker.acquire(take_over_stale=True)
    try:
        assert taker.held and why in taker.took_over()
        assert Holder.parse(open(path, "rb").read(), 0).pid == os.getpid()
    finally:
        taker.release(restore=True)  # a refused run puts the stale lock back as it found it
    assert open(path, "rb").read() == planted


def test_a_live_holder_on_another_host_is_not_stale(tmp_path):
    out = str(tmp_path / "out")
    os.makedirs(out)
    with open(os.path.join(out, output_files.LOCK_FILE), "wb") as f:
        f.write(_planted(1, "another-host", 60))
    with pytest.raises(OutputLocked, match="pid 1 on host another-host"):
        lock_output(out).acquire(take_over_stale=True)


@pytest.mark.parametrize("data, why", [(b"{not json", "it is not JSON, 9 bytes"), (b"", "it is empty, 0 bytes")])
def test_an_unparsable_lock_is_judged_by_its_age_alone(tmp_path, monkeypatch, data, why):
    out = str(tmp_path / "out")
    os.makedirs(out)
    path = os.path.join(out, output_files.LOCK_FILE)
    with open(path, "wb") as f:
        f.write(data)
    monkeypatch.setattr(lock_module, "_UNREADABLE_WAIT_S", 0.0)
    with pytest.raises(
        OutputLocked, match=f"holder unknown: its _LOCK cannot be parsed \\({why}\\).*stale 1 min after"
    ):
        lock_output(out).acquire(take_over_stale=True)
    # Every lock is written whole and a live holder rewrites it every 30 s: one that old protects no run,
    # whatever the heartbeat window.
    old = time.time() - 2 * lock_module.UNPARSABLE_STALE_AFTER_S
    os.utime(path, (old, old))
    left = lock_output(out)
    left.acquire(take_over_stale=False)
    assert not left.held and f"cannot be parsed ({why}) and was last written 2 min ago" in left.stale_note()
    taker = lock_output(out)
    taker.acquire(take_over_stale=True)
    assert taker.held and f"cannot be parsed ({why})" in taker.took_over()
    taker.release()
    assert not os.path.exists(path)


_FAILING_WRITE = textwrap.dedent(
    """
    import resource, signal, sys
    from img2tfrecord.pipeline.lock import lock_output
    from img2tfrecord.pipeline.output_errors import OutputNotWritable
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (16, 16))  # fewer bytes than any lock holds
    try:
        lock_output(sys.argv[1]).acquire(take_over_stale=False)
    except OutputNotWritable as e:
        print(e)
    """
)


def test_a_lock_that_cannot_be_written_whole_is_not_left_behind(tmp_path):
    """A write of the lock that fails (a full disk; here the file size limit) leaves neither an empty lock,
    which every later run would take for a live one, nor its temporary file."""
    out = str(tmp_path / "out")
    proc = subprocess.run(
        [sys.executable, "-c", _FAILING_WRITE, out], capture_output=True, text=True, env=cli_env(), timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == f"output {out} is not writable: File too large", proc.stdout
    assert os.listdir(out) == []
    held = lock_output(out)
    held.acquire(take_over_stale=False)
    assert held.held
    held.release()


# Each process takes the races the test gives it on stdin, one after the other: at the start time given with
# an output, it tries to take that output's lock; the one that holds it keeps it until every process has
# tried (each leaves a file in the race's tally folder), and each answers with one line once it let go.
_RACE = textwrap.dedent(
    """
    import os, sys, time
    from img2tfrecord.pipeline.lock import OutputLocked, lock_output
    runs = int(sys.argv[1])
    print("ready", flush=True)
    for line in sys.stdin:
        output, start, tally = line.rstrip("\\n").split("\\t")
        held = lock_output(output)
        time.sleep(max(0.0, float(start) - time.time()))
        try:
            held.acquire(take_over_stale=True)
        except OutputLocked as e:
            result = "refused " + " ".join(str(e).split())
        else:
            result = "held"
        open(os.path.join(tally, str(os.getpid())), "w").close()
        deadline = time.monotonic() + 120
        while held.held and len(os.listdir(tally)) < runs and time.monotonic() < deadline:
            time.sleep(0.05)
        held.release()
        print(result, flush=True)
    """
)


def _answer(proc: subprocess.Popen, deadline: float) -> str:
    """The next line a racing process prints (it prints one, then waits for the test)."""
    while not select.select([proc.stdout], [], [], 1.0)[0]:
        assert proc.poll() is None, proc.stderr.read()[-2000:]
        assert time.monotonic() < deadline, "a racing process never answered"
    line = proc.stdout.readline()
    assert line, proc.stderr.read()[-2000:]
    return line.strip()


def _race(outputs: list, folder: str, env=None, runs: int = 4) -> dict:
    """``runs`` processes race for the lock of each output in turn, started together once all have imported
    img2tfrecord (the imports are most of a process's time); -> output -> what each process got."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _RACE, str(runs)],
            cwd=ROOT,
            env=cli_env(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(runs)
    ]
    deadline = time.monotonic() + 120
    try:
        assert [_answer(proc, deadline) for proc in procs] == ["ready"] * runs
        results = {}
        for i, output in enumerate(outputs):
            tally = os.path.join(folder, f"tally-{i}")
            os.makedirs(tally)
            start = time.time() + 1
            for proc in procs:
                proc.stdin.write(f"{output}\t{start}\t{tally}\n")
                proc.stdin.flush()
            results[output] = [_answer(proc, deadline) for proc in procs]
        for proc in procs:
            _, stderr = proc.communicate(timeout=60)  # closes stdin: the process ends
            assert proc.returncode == 0, stderr[-2000:]
        return results
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def _one_winner(results: list) -> None:
    assert sum(r == "held" for r in results) == 1, results
    assert all(r.startswith("refused output ") and "being written by another run" in r for r in results if r != "held")


# -- gs:// on fake-gcs-server --------------------------------------------------------------------------


def test_a_gs_lock_is_created_only_if_absent_and_taken_over_when_stale(fake_gcs):
    out = fake_gcs.url("held")
    first = lock_output(out)
    first.acquire(take_over_stale=False)
    try:
        with pytest.raises(OutputLocked, match=f"pid {os.getpid()} on host"):
            lock_output(out).acquire(take_over_stale=True)
    finally:
        first.release()
    assert lock_output(out)._store.read() is None  # pylint: disable=protected-access

    stale_out = fake_gcs.url("stale")
    store = lock_output(stale_out)._store  # pylint: disable=protected-access
    assert isinstance(store, GcsStore)
    assert store.create(_planted(1, "another-host", 2 * lock_module.STALE_AFTER_S)) is not None
    assert store.create(b"a second create-if-absent") is None  # the precondition: 412
    taker = lock_output(stale_out)
    taker.acquire(take_over_stale=True)
    assert taker.held and "no heartbeat for 20 min" in taker.took_over()
    assert Holder.parse(store.read().data, 0).pid == os.getpid()
    # A take-over of a version that changed meanwhile loses.
    assert store.take_over(1, b"late") is None
    taker.release()
    assert store.read() is None


def test_the_gs_heartbeat_rewrites_the_lock_under_its_generation(fake_gcs):
    out = fake_gcs.url("beating")
    store = lock_output(out)._store  # pylint: disable=protected-access
    held = OutputLock(out, store, heartbeat_s=0.1)
    held.acquire(take_over_stale=False)
    first = store.read()
    deadline = time.monotonic() + 20
    while store.read().version == first.version:
        assert time.monotonic() < deadline, "the heartbeat was never rewritten"
        time.sleep(0.1)
    assert held.held
    held.ensure_held()
    held.release()
    assert store.read() is None


def test_runs_racing_for_a_local_and_a_gs_output_one_wins_each(request, tmp_path):
    """The same processes race for a local output, then for one on fake-gcs-server (one start-up of each process
    for both races); without fake-gcs-server, for the local output only, and the test is then skipped."""
    out = str(tmp_path / "out")
    try:
        fake_gcs = request.getfixturevalue("fake_gcs")
    except pytest.skip.Exception as e:
        fake_gcs, why = None, str(e)
    gs_out = fake_gcs.url("race") if fake_gcs else None
    results = _race([out] + ([gs_out] if gs_out else []), str(tmp_path), env=fake_gcs.env if fake_gcs else None)
    _one_winner(results[out])
    assert not os.path.exists(os.path.join(out, output_files.LOCK_FILE))
    if gs_out is None:
        pytest.skip(f"the local race passed; the gs:// one needs fake-gcs-server: {why}")
    _one_winner(results[gs_out])
    assert lock_output(gs_out)._store.read() is None  # pylint: disable=protected-access


# -- a job submitted without waiting holds the output -------------------------------------------


def test_a_lock_handed_to_a_submitted_job_refuses_other_runs_until_the_job_removes_it(tmp_path):
    out = str(tmp_path / "out")
    launcher = lock_output(out)
    launcher.acquire(take_over_stale=False)
    version = launcher.hand_over()
    launcher.release()  # the launcher leaves; the lock stays with the job
    path = os.path.join(out, output_files.LOCK_FILE)
    with open(path, encoding="utf-8") as f:
        assert json.load(f)["job"] is True
    # The launcher's process being gone does not make it stale, nor does --resume/--overwrite take it.
    for take_over in (False, True):
        with pytest.raises(
            OutputLocked, match="a job submitted .* which removes the lock when it has written _SUCCESS"
        ):
            lock_output(out).acquire(take_over_stale=take_over)
    lock_module.release_handed(out, b"another run's lock")  # only the version handed over is removed
    assert os.path.exists(path)
    lock_module.release_handed(out, version)
    assert not os.path.exists(path)


def test_a_handed_lock_goes_stale_a_day_after_its_job_was_submitted(tmp_path):
    then = time.time() - lock_module.JOB_STALE_AFTER_S - 60
    holder = Holder(_dead_pid(), socket.gethostname(), then, then, "job", job=True)
    assert "never finished" in holder.stale_reason(time.time())
    recent = Holder(_dead_pid(), socket.gethostname(), time.time(), time.time(), "job", job=True)
    assert recent.stale_reason(time.time()) is None
    assert Holder.parse(recent.to_bytes(), 0).job  # the file says so


def test_a_run_into_an_output_a_submitted_job_holds_exits_2_and_changes_nothing(tmp_path):
    from helpers.cli import run_in_process
    from helpers.datasets import make_images

    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    make_images(src, classes=2, per_class=3, size=(24, 20))
    first = run_in_process("convert", "--input", src, "--output", out, "--no-analyze", "--no-wait", *IN_MEMORY)
    assert first.returncode == 0, first.stderr
    assert not os.path.exists(os.path.join(out, output_files.LOCK_FILE))  # the job removed it with _SUCCESS
    launcher = lock_output(out)
    launcher.acquire(take_over_stale=False)
    launcher.hand_over()
    launcher.release()
    before = sorted(os.listdir(out))
    with open(os.path.join(src, "class0", "late.jpg"), "wb") as f:
        f.write(open(os.path.join(src, "class0", "img_0000.jpg"), "rb").read())
    second = run_in_process("convert", "--input", src, "--output", out, "--no-analyze", "--append", *IN_MEMORY)
    assert second.returncode == 2
    assert "is being written by another run (a job submitted" in second.stderr.strip().splitlines()[-1]
    assert sorted(os.listdir(out)) == before


def test_a_gs_lock_handed_to_a_job_names_it_and_the_job_removes_it(fake_gcs):
    out = fake_gcs.url("handed")
    launcher = lock_output(out)
    launcher.acquire(take_over_stale=False)
    version = launcher.hand_over()
    launcher.release()
    store = lock_output(out)._store  # pylint: disable=protected-access
    found = store.read()
    assert found is not None and Holder.parse(found.data, 0).job and found.version == version
    with pytest.raises(OutputLocked, match="a job submitted"):
        lock_output(out).acquire(take_over_stale=True)
    # The job removes it under the generation handed to it (fake-gcs-server ignores preconditions on
    # delete, so the refusal of another generation is tested on the local store above).
    lock_module.release_handed(out, version)
    assert store.read() is None
