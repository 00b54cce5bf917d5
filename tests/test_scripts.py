"""The README's scripts, run as a user runs them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from conftest import ROOT

from img2tfrecord.readers.records import read_manifest
from img2tfrecord.schemas import output_files


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("PROJECT", "GOOGLE_CLOUD_PROJECT")}
    env.update(extra)
    return env


def test_run_local_converts_the_sample_dataset():
    proc = subprocess.run(["./run_local.sh"], cwd=ROOT, capture_output=True, text=True, timeout=900, env=_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = os.path.join(ROOT, "output")
    assert os.path.exists(os.path.join(out, output_files.SUCCESS_FILE))
    doc = read_manifest(out)
    assert doc.labels == ("circle", "square", "stripes", "triangle")
    acc = doc.accounting
    assert acc.inputs == 300 and acc.written == 300 and acc.rejected == 0
    assert set(doc.splits) == {"train", "validation", "test"}
    assert "300 inputs: 300 records written, 0 rejected" in proc.stdout


def test_run_local_passes_arguments_to_convert(tmp_path):
    proc = subprocess.run(
        ["./run_local.sh", "--input", str(tmp_path / "nothing"), "--output", str(tmp_path / "out")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(),
    )
    assert proc.returncode == 2 and "no such file or folder" in proc.stderr


def test_run_dataflow_needs_a_project():
    proc = subprocess.run(
        ["./run_dataflow.sh", "--input", "gs://b/in", "--output", "gs://b/out"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "run_dataflow.sh: set PROJECT (or GOOGLE_CLOUD_PROJECT) to your Google Cloud project id"
    ]


def test_the_sample_dataset_is_the_same_on_every_run(tmp_path):
    """`img2tfrecord sample` writes byte-identical files for a seed (tests and examples rely on it)."""
    import hashlib

    from img2tfrecord import sample

    def digest(directory):
        files = sorted(
            os.path.relpath(os.path.join(root, name), directory)
            for root, _, names in os.walk(directory)
            for name in names
        )
        return {name: hashlib.sha256(open(os.path.join(directory, name), "rb").read()).hexdigest() for name in files}

    first, second, other = (str(tmp_path / name) for name in ("a", "b", "c"))
    sample.generate(first, images_per_class=12, seed=5)
    sample.generate(second, images_per_class=12, seed=5)
    sample.generate(other, images_per_class=12, seed=6)
    assert len(digest(first)) == 48
    assert digest(first) == digest(second)
    assert digest(first) != digest(other)


# -- scripts/venv.sh: which Python makes ./.venv -------------------------------------------------

SUPPORTED = "Python 3.10, 3.11 or 3.12"


def _fake_python(path, version: str) -> None:
    """An executable that reports ``version`` for venv.sh's check, "creates" a venv holding a copy of
    itself for ``-m venv DIR``, and succeeds at anything else (pip) without doing it."""
    path.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "-c" ]; then echo {version}; exit 0; fi\n'
        f'if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then {shutil.which("mkdir")} -p "$3/bin" && '
        f'{shutil.which("cp")} "$0" "$3/bin/python"; fi\n'
        "exit 0\n"
    )
    path.chmod(0o755)


def _project(tmp_path, *scripts: str):
    """A copy of the project's scripts in ``tmp_path/proj`` (no .venv there), and a bin folder that is the
    whole PATH: the few commands venv.sh runs, and a pyenv shim of a version that is not installed."""
    proj, bin_dir = tmp_path / "proj", tmp_path / "bin"
    (proj / "scripts").mkdir(parents=True)
    bin_dir.mkdir()
    shutil.copy(os.path.join(ROOT, "scripts", "venv.sh"), proj / "scripts" / "venv.sh")
    for name in scripts:
        shutil.copy(os.path.join(ROOT, name), proj / name)
    (proj / "ready.sh").write_text('source scripts/venv.sh\necho "ready: $(command -v python)"\n')
    for tool in ("dirname", "basename", "touch"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    shim = bin_dir / "python3.12"
    shim.write_text('#!/bin/sh\necho "pyenv: python3.12: command not found" >&2\nexit 127\n')
    shim.chmod(0o755)
    return proj, bin_dir


def _run(proj, bin_dir, script: str, **env):
    return subprocess.run(
        ["/bin/bash", script],
        cwd=proj,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": str(bin_dir), "HOME": str(proj), **env},
    )


def test_venv_stops_in_one_line_without_a_supported_python(tmp_path):
    proj, bin_dir = _project(tmp_path, "run_local.sh")
    _fake_python(bin_dir / "python3", "3.13")
    proc = _run(proj, bin_dir, "./run_local.sh")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"img2tfrecord needs {SUPPORTED} (on PATH: python3 is 3.13): install one, or name it: "
        "PYTHON=/path/to/python3.11 ./run_local.sh"
    ]
    assert not (proj / ".venv").exists()

    proc = _run(proj, bin_dir, "./run_local.sh", PYTHON=str(bin_dir / "python3"))
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"PYTHON={bin_dir / 'python3'} is Python 3.13; img2tfrecord needs {SUPPORTED}: "
        "PYTHON=/path/to/python3.11 ./run_local.sh"
    ]
    assert not (proj / ".venv").exists()


def test_venv_takes_python_or_the_first_supported_version(tmp_path):
    proj, bin_dir = _project(tmp_path)
    _fake_python(bin_dir / "python3", "3.13")
    _fake_python(bin_dir / "python3.10", "3.10")
    proc = _run(proj, bin_dir, "ready.sh")
    assert proc.returncode == 0, proc.stderr
    assert f"creating {proj}/.venv with {bin_dir}/python3.10 (Python 3.10)" in proc.stderr
    assert proc.stdout.strip() == f"ready: {proj}/.venv/bin/python"

    chosen = tmp_path / "elsewhere" / "python"
    chosen.parent.mkdir()
    _fake_python(chosen, "3.12")
    shutil.rmtree(proj / ".venv")
    proc = _run(proj, bin_dir, "ready.sh", PYTHON=str(chosen))
    assert proc.returncode == 0, proc.stderr
    assert f"creating {proj}/.venv with {chosen} (Python 3.12)" in proc.stderr


def test_an_existing_venv_of_a_supported_python_is_kept(tmp_path):
    proj, bin_dir = _project(tmp_path)
    _fake_python(bin_dir / "python3", "3.13")  # what PATH offers does not matter any more
    (proj / ".venv" / "bin").mkdir(parents=True)
    _fake_python(proj / ".venv" / "bin" / "python", "3.11")
    (proj / ".venv" / ".img2tfrecord-installed").touch()
    proc = _run(proj, bin_dir, "ready.sh")
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.strip() == f"ready: {proj}/.venv/bin/python"


def test_venv_supports_the_pythons_setup_py_accepts():
    with open(os.path.join(ROOT, "setup.py")) as f:
        low, high = re.search(r'python_requires=">=3\.(\d+),<3\.(\d+)"', f.read()).groups()
    with open(os.path.join(ROOT, "scripts", "venv.sh")) as f:
        declared = re.search(r'^SUPPORTED_PYTHONS="([^"]*)"', f.read(), re.MULTILINE).group(1)
    assert declared.split() == [f"3.{minor}" for minor in range(int(low), int(high))]


def test_run_local_reads_relative_paths_from_where_it_is_called(tmp_path):
    (tmp_path / "photos").mkdir()
    proc = subprocess.run(
        [os.path.join(ROOT, "run_local.sh"), "--input", "photos", "--output", "records"],
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(),
    )
    # photos/ is found where the command was typed (and holds no images), not in the project folder.
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"no input files match {tmp_path}/photos/" in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "records").exists()
