"""A short seeded run of the fault soak (``benchmarks/fault_soak.py``): real CLI processes hit by a fault at a
seeded moment, then every invariant of the soak checked (exits bounded, no process or lock left, nothing
outside staging after a failure, ``_SUCCESS`` verified and equal to a clean build, ``--resume`` converging)."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import fault_soak  # noqa: E402

ROUNDS = [  # (round seed, run kind, fault): the ones a pool, a lock and the committed state are most exposed to
    (11, "convert", "SIGKILL:worker"),
    (12, "append_new", "SIGTERM:launcher"),
    (13, "verify", "SIGSTOP:launcher"),
]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return fault_soak.prepare(
        str(tmp_path_factory.mktemp("soak")), images=16, bound=60.0, appends=("new",), report=False
    )


@pytest.mark.parametrize("seed,kind,fault", ROUNDS)
def test_a_fault_at_a_seeded_moment_keeps_every_invariant(setup, tmp_path, seed, kind, fault):
    r = fault_soak.play(setup, seed, str(tmp_path), kind=kind, fault=fault)
    assert not r.violations, f"round seed {seed} ({kind}, {fault}; {'; '.join(r.notes)}): {r.violations}"
    assert all(p.code is not None and not p.hung for p in r.procs)
