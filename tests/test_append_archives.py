"""``convert --append`` over a glob of archives: new archives become a generation; a changed or removed
archive is refused, or with ``--accept-changes`` its records are withdrawn (located from what the
generation that converted it recorded of its members) and a changed one converted again."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import zipfile

import images as I
import pytest
from conftest import cli_env
from gcs_emulator import gcs_fixture  # noqa: F401 - the gcs fixture
from helpers.outputs import append_refusal, records_by_relpath

from img2tfrecord import api, storage
from img2tfrecord.errors import UsageError
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas.ledger import parse_ledger, parse_members
from img2tfrecord.verification.output_checks import verify

OPTIONS = dict(splits={"train": 0.7, "test": 0.3}, seed=5, image_size=32, analyze=False, processes=1)
BEAM = ["--runner=FnApiRunner", "--direct_running_mode=in_memory"]


def _zip(path: str, members) -> None:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members:
            z.writestr(name, data)


def _tgz(path: str, members) -> None:
    with tarfile.open(path, "w:gz") as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


def _photos(prefix: str, classes, count: int, seed: int):
    return [
        (f"{prefix}{c}/{seed}_{i}.jpg", I.jpeg(40 + i, 30, I.noise(4, 3, seed=seed * 100 + i).resize((40 + i, 30))))
        for c in classes
        for i in range(count)
    ]


@pytest.fixture(scope="module")
def days(tmp_path_factory):
    """Five nightly archives: zip and tar.gz, some wrapped in a folder, one with a bad member, one a new class."""
    root = str(tmp_path_factory.mktemp("archive-days"))
    _zip(os.path.join(root, "day1.zip"), _photos("export/", ("cat", "dog"), 6, 1))
    _tgz(os.path.join(root, "day2.tar.gz"), _photos("", ("cat", "dog"), 5, 2) + [("cat/broken.jpg", b"not a jpeg")])
    _zip(os.path.join(root, "day3.zip"), _photos("", ("cat", "dog"), 4, 3))
    _tgz(os.path.join(root, "day4.tgz"), _photos("wrap/", ("cat", "dog"), 4, 4))
    _zip(os.path.join(root, "day5.zip"), _photos("", ("owl",), 3, 5))
    return root


def _arrive(days: str, src: str, *names: str) -> None:
    for name in names:
        shutil.copy2(os.path.join(days, name), os.path.join(src, name))


def _convert(src: str, out: str, **extra):
    return api.convert(os.path.join(src, "*"), out, pipeline_options=BEAM, **{**OPTIONS, **extra})


@pytest.mark.e2e
def test_new_archives_give_the_records_of_one_run_over_all_of_them(days, tmp_path):
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    os.makedirs(src)
    _arrive(days, src, "day1.zip", "day2.tar.gz")
    first = _convert(src, out, append=True)  # the first night: everything, generation 0
    assert first.accounting.inputs == 23 and first.accounting.rejected == 1
    with open(os.path.join(out, output_files.ledger_file(0)), "rb") as f:
        assert [e.relpath for e in parse_ledger(f.read(), "ledger")] == ["day1.zip", "day2.tar.gz"]
    _arrive(days, src, "day3.zip", "day4.tgz")
    plan = api.plan(os.path.join(src, "*"), out, append=True, pipeline_options=BEAM, **OPTIONS)
    assert plan.append is not None and (plan.append.new, plan.append.unchanged) == (2, 2) and plan.inputs == 16
    second = _convert(src, out, append=True)
    assert (second.generations[-1].inputs, second.generations[-1].written) == (16, 16)
    again = _convert(src, out, append=True)  # nothing new
    assert again.generations == second.generations
    # A process of its own: a nightly glob of archives with nothing new loads no Beam either.
    loaded = "import sys; from img2tfrecord.cli import main; code = main(sys.argv[1:]); "
    loaded += "print('loaded', [m for m in ('apache_beam', 'tensorflow') if m in sys.modules]); sys.exit(code)"
    args = ["convert", "--input", os.path.join(src, "*"), "--output", out, "--append", "--no-analyze"]
    args += ["--splits", "train=0.7,test=0.3", "--seed", "5", "--image-size", "32"]
    proc = subprocess.run([sys.executable, "-c", loaded, *args], capture_output=True, text=True, env=cli_env())
    assert proc.returncode == 0 and "nothing new since generation 1" in proc.stderr, proc.stderr[-2000:]
    assert "loaded []" in proc.stdout, proc.stdout
    _arrive(days, src, "day5.zip")
    with pytest.raises(UsageError, match=r"1 new class folder\(s\) \('owl'\)"):
        _convert(src, out, append=True)
    third = _convert(src, out, append=True, allow_new_classes=True)
    assert third.labels == ("cat", "dog", "owl")
    full = str(tmp_path / "full")
    _convert(src, full)
    assert records_by_relpath(out) == records_by_relpath(full)
    acc = third.accounting
    assert acc.inputs == 42 == acc.written + acc.rejected and acc.rejected_by_reason == {"not_an_image": 1}
    report = verify(out)
    assert report.ok, report.text()


@pytest.mark.e2e
def test_a_changed_or_removed_archive_is_refused_then_withdrawn_as_a_full_run_over_what_is_left(days, tmp_path):
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    os.makedirs(src)
    _arrive(days, src, "day1.zip", "day2.tar.gz", "day3.zip")
    _convert(src, out)
    with open(os.path.join(out, output_files.members_file(0)), "rb") as f:
        held = parse_members(f.read(), "members")
    assert sorted(held) == ["day1.zip", "day2.tar.gz", "day3.zip"]
    assert len(held["day2.tar.gz"]) == 11 and ("cat/broken.jpg", "train") in held["day2.tar.gz"]
    # Re-exported: one member replaced, one gone, one new, the wrapping folder dropped.
    again = [(name.replace("export/", ""), data) for name, data in _photos("export/", ("cat", "dog"), 6, 1)[1:]]
    again[0] = (again[0][0], I.jpeg(33, 33))
    _zip(os.path.join(src, "day1.zip"), again + _photos("", ("dog",), 1, 7))
    os.remove(os.path.join(src, "day3.zip"))
    line = append_refusal(lambda: _convert(src, out, append=True))
    assert "1 archive(s) changed since they were converted (e.g. day1.zip)" in line
    assert "1 converted archive(s) removed (e.g. day3.zip)" in line
    doc = _convert(src, out, append=True, accept_changes=True)
    withdrawn = doc.generations[-1].withdrawn
    assert sorted({w.archive for w in withdrawn}) == ["day1.zip", "day3.zip"] and len(withdrawn) == 12 + 8
    assert {w.change for w in withdrawn if w.archive == "day3.zip"} == {"removed"}
    full = str(tmp_path / "full")
    _convert(src, full)
    assert records_by_relpath(out, with_image=True) == records_by_relpath(full, with_image=True)
    live = sum(len(rows) for rows in records_by_relpath(full).values())
    assert doc.accounting.written - doc.accounting.withdrawn == live == 22
    report = verify(out)
    assert report.ok, report.text()
    assert _convert(src, out, append=True).generations == doc.generations  # nothing new: day3.zip stays gone


@pytest.mark.e2e
def test_an_unreadable_archive_is_tried_again_when_replaced_and_not_missed_when_gone(days, tmp_path):
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    os.makedirs(src)
    _arrive(days, src, "day1.zip")
    with open(os.path.join(src, "day2.zip"), "wb") as f:
        f.write(b"PK\x03\x04 cut short")  # an upload that broke off: rejected whole
    first = _convert(src, out)
    assert first.accounting.rejected == 1
    _zip(os.path.join(src, "day2.zip"), _photos("", ("cat",), 2, 8))  # uploaded again, whole
    second = _convert(src, out, append=True)  # no record held it: converted, nothing withdrawn
    assert (second.generations[-1].written, second.generations[-1].withdrawn) == (2, ())
    os.remove(os.path.join(src, "day1.zip"))
    with open(os.path.join(src, "day3.zip"), "wb") as f:
        f.write(b"not an archive")
    _convert(src, out, append=True, accept_changes=True)  # day1.zip's records withdrawn; day3.zip rejected
    os.remove(os.path.join(src, "day3.zip"))
    doc = _convert(src, out, append=True)  # a rejected archive that is gone held no record: nothing to refuse
    assert len(doc.generations) == 3


@pytest.mark.e2e
def test_an_archive_output_that_does_not_record_its_members_refuses_to_withdraw(days, tmp_path):
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    os.makedirs(src)
    _arrive(days, src, "day1.zip", "day3.zip")
    _convert(src, out)
    os.remove(os.path.join(out, output_files.members_file(0)))  # as an output written before they were recorded
    os.remove(os.path.join(src, "day3.zip"))
    with pytest.raises(UsageError, match=r"--accept-changes: generation 0 does not record what its archives held"):
        _convert(src, out, append=True, accept_changes=True)


@pytest.mark.e2e
def test_a_glob_over_dated_folders_appends_the_archives_of_a_new_folder(days, tmp_path):
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    for folder, name in (("2026-11-01", "day1.zip"), ("2026-11-02", "day3.zip")):
        os.makedirs(os.path.join(src, folder))
        shutil.copy2(os.path.join(days, name), os.path.join(src, folder, name))
        doc = api.convert(os.path.join(src, "*", "*.zip"), out, append=True, pipeline_options=BEAM, **OPTIONS)
    assert [g.inputs for g in doc.generations] == [12, 8]
    with open(os.path.join(out, output_files.ledger_file(1)), "rb") as f:
        assert [e.relpath for e in parse_ledger(f.read(), "ledger")] == ["2026-11-02/day3.zip"]


@pytest.mark.e2e
def test_archives_on_cloud_storage_append_as_local_ones_and_translate_as_a_dataflow_job(gcs, days, tmp_path):
    """A glob of archives in a bucket: the same generations and shard bytes as a local folder of them, and
    the append's job (reading the new archive alone) builds and translates for Dataflow."""
    from conftest import DATAFLOW_DRY_RUN, shard_digests

    local = str(tmp_path / "in")
    os.makedirs(local)
    remote = gcs.url("archive-append", "in")
    outputs = {}
    for where, base in (("local", local), ("remote", remote)):
        out = str(tmp_path / f"out-{where}")
        for names in (("day1.zip", "day2.tar.gz"), ("day3.zip",)):
            for name in names:
                if where == "local":
                    _arrive(days, local, name)
                else:
                    storage.write_bytes(f"{remote}/{name}", open(os.path.join(days, name), "rb").read())
            doc = api.convert(f"{base}/*", out, append=True, pipeline_options=BEAM, **OPTIONS)
        outputs[where] = (out, doc)
    (local_out, local_doc), (remote_out, remote_doc) = outputs["local"], outputs["remote"]
    assert [g.inputs for g in remote_doc.generations] == [g.inputs for g in local_doc.generations] == [23, 8]
    assert shard_digests(remote_out) == shard_digests(local_out)
    storage.write_bytes(f"{remote}/day4.tgz", open(os.path.join(days, "day4.tgz"), "rb").read())
    dry = api.convert(f"{remote}/*", remote_out, append=True, pipeline_options=list(DATAFLOW_DRY_RUN), **OPTIONS)
    assert dry is None and len(records_by_relpath(remote_out)["train"]) == remote_doc.splits["train"].num_examples


@pytest.mark.e2e
@pytest.mark.parametrize("phase", ["committing"])  # a kill at every phase of a run: test_fault_matrix
def test_a_killed_archive_append_leaves_the_output_readable_and_resume_finishes_it(days, tmp_path, phase):
    """The pipeline reads an append's new archives itself: killed at a phase, the last generation still
    verifies, and ``--append --resume`` gives the output an uninterrupted append gives."""
    from conftest import convert
    from helpers.processes import kill_when

    from img2tfrecord import faults

    src, out, reference = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "reference")
    os.makedirs(src)
    _arrive(days, src, "day1.zip", "day2.tar.gz")
    _convert(src, out)
    shutil.copytree(out, reference)
    _arrive(days, src, "day3.zip", "day4.tgz")
    args = ("--splits", "train=0.7,test=0.3", "--seed", "5", "--image-size", "32", "--no-analyze", "--processes", "1")
    marker = str(tmp_path / "paused")
    env = cli_env({faults.ENV: f"pause:{phase}", faults.MARKER_ENV: marker})
    command = ("convert", "--input", os.path.join(src, "*"), "--output", out, *args, "--append")
    assert kill_when(command, lambda: os.path.exists(marker), f"paused at {phase}", env=env) == -signal.SIGKILL
    report = verify(out)
    assert report.ok, report.text()
    resumed = convert(os.path.join(src, "*"), out, *args, "--append", "--resume", runner=())
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    _convert(src, reference, append=True)
    assert records_by_relpath(out) == records_by_relpath(reference)
    assert verify(out).ok
