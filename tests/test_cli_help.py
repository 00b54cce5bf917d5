"""Every command's help, from the parser in this process and on each supported Python that is installed.

The parser is built before Beam or TensorFlow is imported, and imports no
third-party package at all: so ``--help`` answers at once, and works on a
Python that has none of the dependencies (checked on 3.10 and 3.12 with
``PYTHONPATH`` pointing at the project).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import textwrap
from typing import Optional

import pytest
from conftest import SRC

from img2tfrecord.cli import build_parser

COMMANDS = ("convert", "sample", "inspect", "verify", "report")


@pytest.mark.parametrize("flag", ["-h", "--help"])
@pytest.mark.parametrize("command", ("",) + COMMANDS)
def test_help_of_every_command(command, flag, capsys):
    parser, _ = build_parser()
    with pytest.raises(SystemExit) as raised:
        parser.parse_args([command, flag] if command else [flag])
    assert raised.value.code == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"usage: img2tfrecord {command}".rstrip() + " ") and err == ""


# Builds the parser, prints every command's help, and fails when a package from outside the
# standard library and the project was imported meanwhile (what site imported before is not counted).
_HELP_ON_ANOTHER_PYTHON = textwrap.dedent(
    """
    import contextlib, io, sys
    before = set(sys.modules)
    from img2tfrecord.cli import build_parser
    for command in {commands!r}:
        parser, _ = build_parser()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                parser.parse_args([command, "--help"] if command else ["--help"])
            except SystemExit as e:
                assert e.code == 0, (command, e.code)
        assert out.getvalue().startswith(("usage: img2tfrecord " + command).rstrip() + " "), out.getvalue()
    imported = {{name.split(".")[0] for name in set(sys.modules) - before}}
    foreign = sorted(imported - set(sys.stdlib_module_names) - {{"img2tfrecord"}})
    assert not foreign, foreign
    print("ok", sys.version_info[:2])
    """
)


def _interpreter(version: str) -> Optional[str]:
    """A ``python<version>`` that runs: on PATH, else in pyenv's versions (its shims answer only for a
    version selected in the current folder)."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", f"python{version}")))
    for path in filter(None, candidates):
        probe = subprocess.run(
            [path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True
        )
        if probe.returncode == 0 and probe.stdout.strip() == version:
            return path
    return None


@pytest.mark.parametrize("version", ["3.10", "3.11", "3.12"])
def test_help_on_every_supported_python_without_the_dependencies(version):
    python = sys.executable if sys.version_info[:2] == tuple(map(int, version.split("."))) else _interpreter(version)
    if python is None:
        pytest.skip(f"Python {version} is not installed here")
    proc = subprocess.run(
        [python, "-I", "-c", f"import sys; sys.path.insert(0, {SRC!r}); " + "exec(sys.stdin.read())"],
        input=_HELP_ON_ANOTHER_PYTHON.format(commands=("",) + COMMANDS),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("ok")
