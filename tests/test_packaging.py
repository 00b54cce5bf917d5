"""The package as others build it: the src/ layout, the sdist Dataflow stages from ``--setup_file`` and the
Flex Template's build context."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile

from conftest import ROOT, SRC


def _modules(names) -> set:
    """``img2tfrecord/...py`` of every module among archive member ``names`` (any prefix before the package)."""
    found = set()
    for name in names:
        match = re.search(r"(?:^|/)(img2tfrecord/.*\.py)$", name)
        if match:
            found.add(match.group(1))
    return found


def _source_modules() -> set:
    return {
        os.path.relpath(os.path.join(folder, name), SRC)
        for folder, _, names in os.walk(os.path.join(SRC, "img2tfrecord"))
        for name in names
        if name.endswith(".py")
    }


def test_a_clone_named_like_the_package_does_not_shadow_it(tmp_path):
    # The folder that holds a clone called img2tfrecord/ (a namespace package to Python) is where a user
    # types `img2tfrecord/.venv/bin/python -m img2tfrecord`; the installed package must win.
    (tmp_path / "img2tfrecord" / "docs").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-m", "img2tfrecord", "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("img2tfrecord ")


def test_the_sdist_dataflow_stages_holds_and_installs_every_module(tmp_path):
    from apache_beam.runners.portability.stager import Stager

    # What DataflowRunner does with --setup_file: build an sdist of the project, which workers install.
    sdist = Stager._build_setup_package(os.path.join(ROOT, "setup.py"), str(tmp_path / "dist"))
    with tarfile.open(sdist) as tar:
        assert _modules(tar.getnames()) == _source_modules()
        assert any(name.endswith("src/img2tfrecord/py.typed") for name in tar.getnames())  # PEP 561
    target = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index"]
        + ["--target", str(target), sdist],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (target / "img2tfrecord" / "py.typed").is_file()
    code = "import img2tfrecord, img2tfrecord.cli; print(img2tfrecord.__file__)"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(target)),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().startswith(str(target))


def test_the_flex_template_build_context_builds_the_package(tmp_path):
    # Copy what the Dockerfile copies, where it copies it, and build the package there as its pip does.
    with open(os.path.join(ROOT, "flex_template", "Dockerfile"), encoding="utf-8") as f:
        copies = [line.split()[1:] for line in f if line.startswith("COPY ")]
    context = tmp_path / "template"
    context.mkdir()
    for *sources, destination in copies:
        for source in sources:
            origin = os.path.join(ROOT, source)
            assert os.path.exists(origin), f"the Dockerfile copies {source}, which the repository does not hold"
            target = context / (os.path.basename(source) if destination.endswith("/") else destination)
            if os.path.isdir(origin):
                shutil.copytree(origin, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(origin, target)
    assert (context / "main.py").exists() and (context / "setup.py").exists()
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index"]
        + ["--wheel-dir", str(tmp_path / "wheels"), str(context)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp_path / "wheels").iterdir()
    with zipfile.ZipFile(wheel) as built:
        assert _modules(built.namelist()) == _source_modules()
        assert "img2tfrecord/py.typed" in built.namelist()  # PEP 561
