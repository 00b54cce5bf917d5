"""Runs that several tests share: a conversion built once per session for the xdist workers, and commands run
one after the other in one fresh process, which starts once."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Callable, List, NamedTuple, Sequence, Union

from conftest import ROOT, SRC, built_once, cli_env, convert


class Converted(NamedTuple):
    """A shared conversion: what ``--input`` named, the output, and the command's exit code and output."""

    input: str
    output: str
    proc: subprocess.CompletedProcess


def converted_once(
    tmp_path_factory, name: str, source: Union[str, Callable[[str], str]], *args: str, **options
) -> Converted:
    """``conftest.convert(SOURCE, OUT, *args, **options)`` run once per session under ``name``
    (``conftest.built_once``, shared by the xdist workers), with the command's exit code, stdout and
    stderr as that run printed them. ``source`` is the input, or ``write(folder) -> input`` that first
    writes it inside the shared folder. Tests that change OUT work on a copy."""

    def build(folder: str) -> None:
        shutil.rmtree(folder, ignore_errors=True)  # what a build stopped in another test left
        os.makedirs(folder)
        given = source(folder) if callable(source) else source
        proc = convert(given, os.path.join(folder, "out"), *args, **options)
        with open(os.path.join(folder, "command.json"), "w", encoding="utf-8") as f:
            json.dump(
                {
                    "input": given,
                    "args": list(proc.args),
                    "returncode": proc.returncode,
                    "stdout": proc.stdout,
                    "stderr": proc.stderr,
                },
                f,
            )

    folder = built_once(tmp_path_factory, name, build)
    with open(os.path.join(folder, "command.json"), encoding="utf-8") as f:
        doc = json.load(f)
    given = doc.pop("input")
    return Converted(given, os.path.join(folder, "out"), subprocess.CompletedProcess(**doc))


_RUN_COMMANDS = """
import json, sys
from helpers.cli import run_in_process
done = [run_in_process(*args) for args in json.load(open(sys.argv[1]))]
json.dump([[p.returncode, p.stdout, p.stderr] for p in done], open(sys.argv[2], "w"))
"""


def run_unprivileged(folder: str, *commands: Sequence[str]) -> List[subprocess.CompletedProcess]:
    """Each ``img2tfrecord`` command through ``cli.main`` (``helpers/cli.run_in_process``), one after the other in
    one fresh process whose permission bits are in force: as root, without the capabilities that bypass them.
    ``folder`` holds the commands and their results on the way."""
    asked, results = os.path.join(folder, "commands.json"), os.path.join(folder, "results.json")
    with open(asked, "w", encoding="utf-8") as f:
        json.dump([list(args) for args in commands], f)
    argv = [sys.executable, "-c", _RUN_COMMANDS, asked, results]
    if os.geteuid() == 0:
        argv = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", *argv]
    env = dict(cli_env(), PYTHONPATH=os.pathsep.join([SRC, os.path.join(ROOT, "tests")]))
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(results, encoding="utf-8") as f:
        return [
            subprocess.CompletedProcess(["img2tfrecord", *args], *done) for args, done in zip(commands, json.load(f))
        ]
