"""The command line's own lines, in this process: a command's failure, a stop, the command that finishes a
stopped run, a closed stdout; and the import finder that defers the object stores' filesystems.

The same paths run for real in the CLI processes of test_first_hour_*.py and test_fault_matrix.py; here
each branch is reached directly, the one line and exit code asserted."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from img2tfrecord import beam_filesystem_fixes, cli
from img2tfrecord.commands import inspect as inspect_command
from img2tfrecord.errors import Interrupted


def _namespace(argv):
    return cli.build_parser()[0].parse_known_args(argv)[0]


def test_a_commands_own_failure_is_one_line_naming_a_log_of_its_traceback(monkeypatch, capsys, tmp_path):
    def fails(ns):
        raise RuntimeError("the shard index is unreadable")

    monkeypatch.setattr(inspect_command, "run", fails)
    assert cli.main(["inspect", str(tmp_path)]) == cli.EXIT_FAILURE
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("img2tfrecord: inspect failed: RuntimeError: the shard index is unreadable (details: ")
    log = line.rsplit("(details: ", 1)[1].rstrip(")")
    try:
        with open(log, encoding="utf-8") as f:
            traceback = f.read()
        assert traceback.startswith("Traceback") and "RuntimeError: the shard index is unreadable" in traceback
    finally:
        os.remove(log)


def test_ctrl_c_in_a_command_is_one_line_and_exit_130(monkeypatch, capsys, tmp_path):
    def stopped(ns):
        raise KeyboardInterrupt

    monkeypatch.setattr(inspect_command, "run", stopped)
    assert cli.main(["inspect", str(tmp_path)]) == 128 + signal.SIGINT
    assert capsys.readouterr().err.strip() == "img2tfrecord: interrupted"


def test_the_line_of_a_stopped_run_says_what_it_kept_and_how_to_finish_it(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["img2tfrecord"])
    argv = ["convert", "--input", "in", "--output", "out", "--overwrite"]
    ns = _namespace(argv)
    term = Interrupted(signal.SIGTERM)
    assert cli._interrupted(term, ns, argv) == "interrupted by SIGTERM before anything was written"
    term.kept = "2 of 4 shards written"
    line = cli._interrupted(term, ns, argv)
    assert line == (
        "interrupted by SIGTERM: 2 of 4 shards written; to finish, run: "
        "img2tfrecord convert --input in --output out --resume"
    )
    inspect_ns = _namespace(["inspect", "out"])
    assert cli._interrupted(Interrupted(signal.SIGHUP), inspect_ns, ["inspect", "out"]) == "interrupted by SIGHUP"
    assert cli._interrupted(KeyboardInterrupt(), inspect_ns, ["inspect", "out"]) == "interrupted"


@pytest.mark.parametrize(
    "argv0, expected",
    [
        ("/opt/x/lib/python3.11/site-packages/img2tfrecord/__main__.py", "{python} -m img2tfrecord"),
        ("img2tfrecord", "img2tfrecord"),
        ("{cwd}/.venv/bin/img2tfrecord", ".venv/bin/img2tfrecord"),
        ("{cwd}/img2tfrecord", "./img2tfrecord"),
        ("/elsewhere/bin/img2tfrecord", "/elsewhere/bin/img2tfrecord"),
    ],
)
def test_the_finishing_command_starts_the_program_as_it_was_started(monkeypatch, tmp_path, argv0, expected):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [argv0.format(cwd=tmp_path)])
    python = cli._shortest(sys.executable)
    assert " ".join(cli.invoked_as()) == expected.format(python=python)


def test_a_closed_stdout_is_told_from_an_open_one_and_left_without_a_line(monkeypatch):
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "w") as stdout:
        monkeypatch.setattr(sys, "stdout", stdout)
        assert cli._stdout_closed() is False
        os.close(read_end)
        assert cli._stdout_closed() is True
        assert cli._leave_closed_stdout() == cli.EXIT_CLOSED_PIPE
        stdout.write("more than the reader wanted\n")
        assert cli._flushed_stdout() is True  # the null device took it


def test_the_deferred_filesystems_are_refused_only_while_deferred(monkeypatch):
    gcs = "apache_beam.io.gcp.gcsfilesystem"
    monkeypatch.setattr(beam_filesystem_fixes, "_deferred", {beam_filesystem_fixes.FILESYSTEM_MODULES["s3"], gcs})
    finder = beam_filesystem_fixes._Deferred()
    with pytest.raises(ModuleNotFoundError, match="loads when it is used"):
        finder.find_spec(beam_filesystem_fixes.FILESYSTEM_MODULES["s3"], None)
    assert finder.find_spec(gcs, None) is None  # Beam's filesystems module is not loading: imported by name
    assert finder.find_spec("json", None) is None
    assert beam_filesystem_fixes._loading("json") is False and beam_filesystem_fixes._loading("no.such") is False


def test_a_scheme_whose_beam_extra_is_missing_fails_as_beam_fails_it(monkeypatch):
    monkeypatch.setattr(beam_filesystem_fixes, "FILESYSTEM_MODULES", {"zz": "img2tfrecord_no_such_filesystem"})
    monkeypatch.setattr(beam_filesystem_fixes, "_ready", set())
    beam_filesystem_fixes.object_store("zz")
    assert beam_filesystem_fixes._ready == {"zz"}
    beam_filesystem_fixes.object_store("zz")  # once
    beam_filesystem_fixes.object_store("hdfs")  # not deferred: left to Beam
    assert beam_filesystem_fixes._ready == {"zz"}


def test_defer_object_stores_puts_its_finder_first_when_beam_is_not_loaded_yet(monkeypatch):
    monkeypatch.delitem(sys.modules, "apache_beam.io.filesystems", raising=False)
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setattr(beam_filesystem_fixes, "_deferred", set())
    finders = sum(isinstance(f, beam_filesystem_fixes._Deferred) for f in sys.meta_path)
    beam_filesystem_fixes.defer_object_stores()
    beam_filesystem_fixes.defer_object_stores()  # once
    assert isinstance(sys.meta_path[0], beam_filesystem_fixes._Deferred)
    assert sum(isinstance(f, beam_filesystem_fixes._Deferred) for f in sys.meta_path) == finders + 1
    assert set(beam_filesystem_fixes.FILESYSTEM_MODULES.values()) <= beam_filesystem_fixes._deferred


def test_a_shard_read_through_the_storage_facade_skips_withdrawn_records_and_names_a_broken_one(tmp_path):
    """``tfdata_storage.ShardReader``, which ``load`` hands to tf.data (its generator runs in TensorFlow's
    threads), called directly."""
    from img2tfrecord import tfrecord_codec
    from img2tfrecord.readers.read_errors import TruncatedShardError
    from img2tfrecord.readers.tfdata_storage import ShardReader

    shard = tmp_path / "train-00000-of-00001.tfrecord"
    shard.write_bytes(b"".join(tfrecord_codec.encode_record(b"record %d" % i) for i in range(4)))
    reader = ShardReader("", withdrawn=[f"{shard}#1", f"{shard}#3", "other.tfrecord#0"])
    assert list(reader.records(str(shard).encode())) == [b"record 0", b"record 2"]
    shard.write_bytes(shard.read_bytes()[:-3])
    with pytest.raises(TruncatedShardError):
        list(ShardReader("").records(str(shard).encode()))


def test_a_broken_or_short_webdataset_shard_is_a_truncated_record():
    from img2tfrecord.shard_formats.webdataset_format import WebDatasetFormat
    from img2tfrecord.tfrecord_codec import TruncatedRecordError

    class Short:
        def read_at(self, offset, length):
            return b"\0" * (length - 1)

    with pytest.raises(TruncatedRecordError, match="truncated: 9 of the sample's 10 bytes"):
        WebDatasetFormat().read_indexed(Short(), 0, 0, 10, False)


def test_a_tar_that_is_not_one_is_a_broken_webdataset_shard(tmp_path):
    from img2tfrecord.shard_formats.webdataset_format import WebDatasetFormat
    from img2tfrecord.tfrecord_codec import TruncatedRecordError

    path = tmp_path / "train-00000-of-00001.tar"
    path.write_bytes(b"not a tar archive" * 100)
    with pytest.raises(TruncatedRecordError, match="broken tar"):
        WebDatasetFormat().walk_offsets(str(path), check_crc=True)
