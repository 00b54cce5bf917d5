"""Faults at moments no named cell picks: an append planned before another one committed, damage inside
staging before ``--resume``, a run that writes no record. Each keeps the invariants: a committed generation
is never touched, ``--resume`` converges byte for byte, nothing lands outside staging after a failure.
In this process: the library's own calls, real conversions of real image files."""

from __future__ import annotations

import contextlib
import os
import subprocess

import images as I
import pytest
from conftest import shard_digests
from helpers.datasets import make_images

from img2tfrecord import api
from img2tfrecord.errors import ConversionFailed, ErrorBudgetExceeded, UsageError
from img2tfrecord.failures import failure_of
from img2tfrecord.pipeline.fast_start import start
from img2tfrecord.pipeline.launch import launch
from img2tfrecord.pipeline.lock import lock_output
from img2tfrecord.pipeline.outputs import OutputChanged, prepare_append
from img2tfrecord.readers.records import read_manifest
from img2tfrecord.schemas import output_files
from img2tfrecord.transforms import done_files
from img2tfrecord.transforms.publish import write_atomically
from img2tfrecord.verification.output_checks import verify

BEAM = ["--runner=FnApiRunner", "--direct_running_mode=in_memory"]
OPTIONS = dict(splits={"train": 0.75, "test": 0.25}, seed=7, image_size=24, analyze=False, processes=1, num_shards=2)


def _convert(src, out, **extra):
    return api.convert(str(src), str(out), pipeline_options=BEAM, **{**OPTIONS, **extra})


def _add(src, tag: str, n: int) -> None:
    """``n`` new images in the existing class folders of ``src``, named after ``tag``."""
    for i in range(n):
        picture = I.noise(4, 3, seed=sum(map(ord, tag)) * 100 + i)
        (src / f"class{i % 2}" / f"{tag}_{i}.jpg").write_bytes(I.jpeg(40, 30, picture))


def _files(out) -> dict:
    found = {}
    for folder, _, names in os.walk(out):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, out)] = f.read()
    return found


@pytest.fixture
def appended_twice(tmp_path):
    """An output of generations 0 and 1, and an input with images that are new since."""
    src, out = tmp_path / "in", tmp_path / "out"
    make_images(str(src), classes=2, per_class=6, size=(40, 30))
    _convert(src, out)
    _add(src, "more1", 3)
    _convert(src, out, append=True)
    _add(src, "more2", 3)
    return src, out


def test_an_append_planned_before_another_committed_is_refused_and_the_generation_stays(appended_twice):
    src, out = appended_twice
    stalled = launch(api.config_of(str(src), str(out), {**OPTIONS, "append": True}))  # B plans, then stalls
    assert stalled.append is not None and stalled.plan.generation == 2
    _convert(src, out, append=True)  # A appends generation 2 meanwhile
    assert verify(str(out)).ok
    before = _files(out)

    changed = r"changed while this run was starting \(another run committed generation 2"
    with pytest.raises(OutputChanged, match=changed):
        start(stalled, BEAM)  # B goes on: refused under the lock, before it changes anything

    assert _files(out) == before
    assert not os.path.exists(os.path.join(out, output_files.LOCK_FILE))
    assert verify(str(out)).ok
    assert [g.number for g in read_manifest(str(out)).generations] == [0, 1, 2]
    assert _convert(src, out, append=True) is not None  # the advice works: nothing new, nothing changed
    assert _files(out) == before


def test_an_append_never_deletes_a_file_a_committed_manifest_lists(appended_twice):
    _, out = appended_twice
    before = _files(out)
    lock = lock_output(str(out))
    lock.acquire(take_over_stale=False)
    try:
        with pytest.raises(OutputChanged, match="already holds generation 1, committed by another run"):
            prepare_append(str(out), 1, None, lock)
    finally:
        lock.release()
    assert _files(out) == before and verify(str(out)).ok


@pytest.mark.parametrize("damage", ["truncated", "same_size", "deleted_index", "truncated_index"])
def test_resume_converts_a_damaged_kept_shard_again_and_finishes_byte_identical(tmp_path, monkeypatch, damage):
    src = tmp_path / "in"
    make_images(str(src), classes=2, per_class=8, size=(40, 30))
    clean = tmp_path / "clean"
    _convert(src, clean)
    out = tmp_path / "out"
    monkeypatch.setenv("IMG2TFRECORD_FAULT", "fail:finalizing:error")  # every shard finished and committed
    with pytest.raises(ConversionFailed):
        _convert(src, out)
    monkeypatch.delenv("IMG2TFRECORD_FAULT")
    (run_dir,) = [p for p in out.iterdir() if p.name.startswith(output_files.RUN_FOLDER_PREFIX)]
    committed = run_dir / output_files.RUN_COMMITTED_DIR
    shard = sorted(p for p in committed.iterdir() if output_files.parse_shard_file_name(p.name))[0]
    data = shard.read_bytes()
    if damage == "truncated":
        shard.write_bytes(data[: len(data) // 2])
    elif damage == "same_size":
        shard.write_bytes(data[:-10] + bytes(b ^ 0xFF for b in data[-10:]))
    elif damage == "truncated_index":
        index = committed / output_files.index_file(shard.name)
        index.write_bytes(index.read_bytes()[:-3])
    else:
        (committed / output_files.index_file(shard.name)).unlink()

    doc = _convert(src, out, resume=True)  # one --resume finishes it

    assert doc is not None and verify(str(out)).ok
    assert shard_digests(str(out)) == shard_digests(str(clean))
    assert not [p for p in out.iterdir() if p.name.startswith(output_files.TEMP_PREFIXES)]


def test_a_staged_index_damaged_before_its_commit_fails_the_run_and_resume_writes_it_again(tmp_path, monkeypatch):
    """An index changed in the staging folder is never committed: the commit checks it against the digest its
    writer recorded, and ``--resume`` converts its shard again."""
    src, clean, out = tmp_path / "in", tmp_path / "clean", tmp_path / "out"
    make_images(str(src), classes=2, per_class=8, size=(40, 30))
    _convert(src, clean)
    monkeypatch.setenv("IMG2TFRECORD_FAULT", "fail:committing:error")  # the first split committed, then a stop
    with pytest.raises(ConversionFailed):
        _convert(src, out)
    monkeypatch.delenv("IMG2TFRECORD_FAULT")
    (run_dir,) = [p for p in out.iterdir() if p.name.startswith(output_files.RUN_FOLDER_PREFIX)]
    staged = sorted((run_dir / output_files.INDEX_DIR).iterdir())
    assert staged, "no index waits for its commit"
    staged[0].write_bytes(staged[0].read_bytes()[:-3])
    result = done_files.parse_done(
        done_files.read_whole(str(run_dir / output_files.RUN_DONE_DIR / f"{staged[0].stem}.json"))
    )[0]
    assert done_files.index_damage(str(staged[0]), result) == "its index file differs from the one its writer wrote"

    doc = _convert(src, out, resume=True)  # one --resume finishes it

    assert doc is not None and verify(str(out)).ok
    assert shard_digests(str(out)) == shard_digests(str(clean))


def test_a_committed_shard_changed_before_its_publication_is_never_published(tmp_path):
    from img2tfrecord.model import CommittedShard
    from img2tfrecord.transforms.finalize import _check_committed_sizes

    def shard(name: str, size: int) -> CommittedShard:
        return CommittedShard("train", name, 1, size, "", None, ())

    (tmp_path / "a.tfrecord").write_bytes(b"x" * 12)
    (tmp_path / "b.tfrecord").write_bytes(b"x" * 5)  # cut short after its commit
    _check_committed_sizes(str(tmp_path), [shard("a.tfrecord", 12), shard("gone.tfrecord", 9)])
    with pytest.raises(OSError, match=r"b.tfrecord: 5 bytes, but its writer wrote 8 \(changed in the staging folder\)"):
        _check_committed_sizes(str(tmp_path), [shard("a.tfrecord", 12), shard("b.tfrecord", 8)])


def test_a_run_that_writes_no_record_publishes_only_its_error_report_and_the_next_run_goes_on(tmp_path):
    src, out = tmp_path / "in", tmp_path / "out"
    for name in ("a/one.jpg", "b/two.jpg"):
        os.makedirs(src / os.path.dirname(name), exist_ok=True)
        (src / name).write_bytes(b"not an image")
    with pytest.raises(ErrorBudgetExceeded, match="no records written"):
        _convert(src, out)
    assert sorted(_files(out)) == [output_files.ERRORS_FILE]  # why it failed, and nothing else
    make_images(str(src), classes=2, per_class=4, size=(40, 30))  # the user fixes the input and runs again
    doc = _convert(src, out)
    assert doc is not None and doc.num_examples == 8 and verify(str(out)).ok


def test_zero_records_is_not_a_usage_error_and_says_where_the_report_is(tmp_path):
    src, out = tmp_path / "empty.zip", tmp_path / "out"
    src.write_bytes(b"")
    with pytest.raises((ErrorBudgetExceeded, UsageError)) as caught:
        _convert(src, out)
    if isinstance(caught.value, ErrorBudgetExceeded):
        assert sorted(_files(out)) in ([], [output_files.ERRORS_FILE])
    else:
        assert not out.exists() or not os.listdir(out)


def test_a_full_disk_worded_without_its_number_is_still_a_full_disk():
    worded = RuntimeError(
        "write() failed: No space left on device; writing /o/.tmp-run-1/shards/train/00000-x.array_record; "
        "at byte 3125248; Failed to close chunk_writer"
    )
    found = failure_of(worded, "/o", "converting and writing shards")
    assert (found.cause, found.fix) == ("No space left on device (/o)", "free space where the output is")


@pytest.fixture
def full_disk(tmp_path):
    """A real tmpfs of 64 KiB, filled to the last byte (skipped where this user cannot mount one)."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
        with contextlib.suppress(OSError):
            while os.write(fd, b"\0" * 4096):
                pass
        os.close(fd)
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_file_written_whole_on_a_full_disk_leaves_no_temporary_file(full_disk):
    with pytest.raises(OSError):
        write_atomically(str(full_disk / output_files.LABELS_FILE), "cat\n" * 10000)
    assert sorted(os.listdir(full_disk)) == ["filler"]


def test_a_stop_inside_a_publication_write_leaves_no_temporary_file_and_is_undone(tmp_path, monkeypatch):
    """A stop signal (KeyboardInterrupt) between removing the old file and renaming the new one into place:
    neither the temporary file nor a missing file is left once the publication is undone."""
    from apache_beam.io.filesystems import FileSystems

    from img2tfrecord.transforms.publish import Publication

    out = tmp_path / "out"
    out.mkdir()
    (out / output_files.LABELS_FILE).write_text("cat\n")

    def stopped(sources, targets):
        raise KeyboardInterrupt

    monkeypatch.setattr(FileSystems, "rename", stopped)
    publication = Publication(str(tmp_path / "run"), str(out))
    with pytest.raises(KeyboardInterrupt):
        publication.write(output_files.LABELS_FILE, "cat\ndog\n")
    assert sorted(os.listdir(out)) == []  # the old file went, and no temporary file stayed
    monkeypatch.undo()
    publication.undo({output_files.LABELS_FILE: "cat\n"})
    assert sorted(os.listdir(out)) == [output_files.LABELS_FILE]
    assert (out / output_files.LABELS_FILE).read_text() == "cat\n"


def test_a_stop_signal_after_the_command_finished_exits_with_the_commands_code(monkeypatch):
    import signal

    from img2tfrecord import cli
    from img2tfrecord.errors import STOP_SIGNALS

    exits = []

    def record_exit(code):
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(cli.os, "_exit", record_exit)
    saved = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    try:
        cli.exit_on_stop_signals(0)  # a finished run tearing the interpreter down
        with pytest.raises(SystemExit):
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0.1)  # let the handler run
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
    assert exits == [0]  # not -15: the output was published and the summary printed


def test_a_staged_ledger_damaged_during_the_run_is_never_published(tmp_path):
    from img2tfrecord.pipeline.append import write_ledger
    from img2tfrecord.schemas.ledger import LedgerEntry
    from img2tfrecord.transforms.finalize import _check_staged_ledger

    path = write_ledger(str(tmp_path), [LedgerEntry(f"c/{i:04d}.jpg", 100 + i, 1.5, "") for i in range(200)])
    _check_staged_ledger(path)  # whole: published
    data = open(path, "rb").read()
    for damaged in (data[: len(data) // 2], data[:-12] + bytes(b ^ 0x55 for b in data[-12:])):
        with open(path, "wb") as f:
            f.write(damaged)
        with pytest.raises(ValueError, match="ledger was damaged in its staging folder"):
            _check_staged_ledger(path)


def test_a_report_stopped_by_a_full_disk_leaves_no_file_and_raises_once(full_disk):
    from img2tfrecord.report.outputs import ReportFiles, report_paths

    (full_disk / "filler").unlink()  # room for the open files, not for what is written into them
    with open(full_disk / "filler", "wb") as f:
        f.write(b"\0" * (60 << 10))
    with pytest.raises(OSError):
        with ReportFiles(report_paths(str(full_disk / "report") + "/")) as files:
            files.open_lines()
            kind = next(iter(files.paths.lines))
            for i in range(5000):  # buffered: the disk fills on a flush, or at the close
                files.line(kind, {"i": i, "pad": "x" * 64})
            raise OSError("the report's own write failed first")
    assert sorted(os.listdir(full_disk / "report")) == []
