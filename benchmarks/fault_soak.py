"""Randomized fault soak: real CLI runs hit by a fault at a random moment, then the invariants checked.

Each round picks (from its own seed, printed) a run kind, a moment uniform over that kind's wall time
(measured once at the start) and a fault, runs ``python -m img2tfrecord`` on a small input (real files,
nothing mocked), then checks: every process exits within a bound and leaves no process behind; an output
with ``_SUCCESS`` passes ``verify`` and equals a clean build of the same generations; a failed run changed
nothing outside its staging folder; no lock outlives its run; exit codes and stderr lines as documented;
the command a failure line advises (or the same command with ``--resume``) finishes within two tries.

    python benchmarks/fault_soak.py --rounds 50 --seed 1
    python benchmarks/fault_soak.py --round-seed 123456789   # re-run one round

Run as root to get the full-disk fault (a small tmpfs is mounted per round); elsewhere it is skipped.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import hashlib
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
MARKER_ENV = "IMG2TFRECORD_SOAK_MARKER"  # every process of a round carries it, so leftovers are found
OPTIONS = ("--image-size", "32", "--num-shards", "3", "--no-analyze", "--processes", "2", "--seed", "3", "-q")
KINDS = ("convert", "resume", "append_new", "append_changed", "append_removed", "append_overlap", "report", "verify")
TARGETED = ("SIGKILL", "SIGTERM", "SIGHUP", "SIGSTOP")  # SIGSTOP: then SIGCONT after a pause
FAULTS = tuple(f"{sig}:{who}" for sig in TARGETED for who in ("launcher", "worker")) + (
    "disk_full",
    "truncate_staged",
    "delete_staged",
    "second_run",
)
STAGING = ".tmp-run-"
LOCK = "_LOCK"
SUCCESS = "_SUCCESS"
CLASSES = 4


# ----------------------------------------------------------------------------------------------- inputs


def _image(rng, path: str) -> None:
    import numpy as np
    from PIL import Image

    pixels = (rng.random((24 + int(rng.integers(0, 24)), 32 + int(rng.integers(0, 32)), 3)) * 255).astype(np.uint8)
    Image.fromarray(pixels).save(path)


def make_states(root: str, images: int) -> Dict[str, str]:
    """The input trees the rounds convert: ``base``, and ``new`` / ``changed`` / ``removed`` from it."""
    import numpy as np

    rng = np.random.default_rng(12345)
    base = os.path.join(root, "base")
    for i in range(images):
        folder = os.path.join(base, f"class{i % CLASSES}")
        os.makedirs(folder, exist_ok=True)
        _image(rng, os.path.join(folder, f"img_{i:03d}.{'png' if i % 3 == 0 else 'jpg'}"))
    states = {"base": base}
    for name in ("new", "changed", "removed"):
        states[name] = os.path.join(root, name)
        shutil.copytree(base, states[name])
    for i in range(8):
        _image(rng, os.path.join(states["new"], f"class{i % CLASSES}", f"new_{i:03d}.jpg"))
    for i in (1, 2):
        _image(rng, os.path.join(states["changed"], f"class{i % CLASSES}", f"img_{i:03d}.jpg"))
    for i in (4, 5):
        os.remove(os.path.join(states["removed"], f"class{i % CLASSES}", f"img_{i:03d}.jpg"))
    return states


def set_input(target: str, tree: str) -> None:
    """``target`` holds ``tree``'s files with their times (an append compares sizes and times)."""
    if os.path.exists(target):
        shutil.rmtree(target)
    shutil.copytree(tree, target, copy_function=shutil.copy2)


# ---------------------------------------------------------------------------------------------- outputs


def _strip_times(doc):
    if isinstance(doc, dict):
        return {k: _strip_times(v) for k, v in doc.items() if k != "created"}
    if isinstance(doc, list):
        return [_strip_times(v) for v in doc]
    return doc


def outside_staging(out: str) -> Dict[str, bytes]:
    """relpath -> bytes of every file of ``out`` outside its staging folders, the lock left out."""
    found: Dict[str, bytes] = {}
    if not os.path.isdir(out):
        return found
    for folder, dirs, names in os.walk(out):
        dirs[:] = [d for d in dirs if not d.startswith(STAGING)]
        for name in names:
            if name == LOCK and folder == out:
                continue
            path = os.path.join(folder, name)
            try:
                with open(path, "rb") as f:
                    found[os.path.relpath(path, out)] = f.read()
            except OSError:
                pass
    return found


def fingerprint(out: str) -> Dict[str, str]:
    """What a clean build of the same generations gives byte for byte: every published file's sha256,
    ``dataset.json`` without its times."""
    prints = {}
    for rel, data in outside_staging(out).items():
        if rel == "dataset.json":
            try:
                data = json.dumps(_strip_times(json.loads(data)), sort_keys=True).encode()
            except ValueError:
                pass
        prints[rel] = hashlib.sha256(data).hexdigest()
    return prints


def _disk_use(out: str) -> int:
    """Bytes ``out`` takes on a tmpfs (whole pages)."""
    total = 0
    for folder, _, names in os.walk(out):
        total += 4096
        for name in names:
            try:
                total += -(-os.path.getsize(os.path.join(folder, name)) // 4096) * 4096
            except OSError:
                pass
    return total


# -------------------------------------------------------------------------------------------- processes


def cli(*args: str) -> List[str]:
    return [sys.executable, "-m", "img2tfrecord", *args]


def env_for(marker: str) -> dict:
    return dict(os.environ, PYTHONPATH=SRC, TF_CPP_MIN_LOG_LEVEL="2", **{MARKER_ENV: marker})


def children(pid: int) -> List[Tuple[int, str]]:
    """(pid, command line) of the processes whose parent is ``pid``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    found.append((int(name), f.read().replace(b"\0", b" ").decode(errors="replace")))
        except (OSError, ValueError, IndexError):
            pass
    return found


def marked(marker: str) -> List[int]:
    """Processes that carry ``marker`` in their environment (zombies left out)."""
    needle = f"{MARKER_ENV}={marker}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(name))
        except (OSError, IndexError):
            pass
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@dataclasses.dataclass
class Proc:
    name: str
    argv: List[str]
    popen: subprocess.Popen
    started: float
    err_path: str
    code: Optional[int] = None
    seconds: float = 0.0
    hung: bool = False
    stderr: str = ""


def start(name: str, argv: Sequence[str], marker: str, logs: str) -> Proc:
    err_path = os.path.join(logs, f"{name}.err")
    with open(err_path, "wb") as err:
        popen = subprocess.Popen(
            list(argv), cwd=ROOT, env=env_for(marker), stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
        )
    return Proc(name, list(argv), popen, time.monotonic(), err_path)


def finish(proc: Proc, bound: float) -> Proc:
    """Wait for ``proc`` at most ``bound`` s after its start; a process still running then is a hang (killed)."""
    left = proc.started + bound - time.monotonic()
    try:
        proc.code = proc.popen.wait(timeout=max(0.1, left))
    except subprocess.TimeoutExpired:
        proc.hung = True
        try:
            os.killpg(proc.popen.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.code = proc.popen.wait()
    proc.seconds = time.monotonic() - proc.started
    with open(proc.err_path, encoding="utf-8", errors="replace") as f:
        proc.stderr = f.read()
    return proc


# ----------------------------------------------------------------------------------------------- rounds


@dataclasses.dataclass
class Setup:
    work: str
    states: Dict[str, str]
    input_dir: str
    refs: Dict[str, Dict[str, str]]  # state -> fingerprint of a clean build (base: one convert; else base + append)
    ref_dirs: Dict[str, str]
    wall: Dict[str, float]  # run kind -> seconds of an undisturbed run
    can_mount: bool
    bound: float
    startup: float = 0.0  # seconds until a command has its stop handlers (a whole ``--version``: an upper bound)


def convert_args(input_dir: str, out: str, kind: str) -> List[str]:
    args = ["convert", "--input", input_dir, "--output", out, *OPTIONS]
    if kind.startswith("append"):
        args.append("--append")
        if kind in ("append_changed", "append_removed"):
            args.append("--accept-changes")
    if kind == "resume":
        args.append("--resume")
    return args


def _timed(argv: Sequence[str]) -> float:
    started = time.monotonic()
    done = subprocess.run(list(argv), cwd=ROOT, env=env_for("setup"), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"setup failed: {shlex.join(argv)}: {done.stderr[-2000:]}")
    return time.monotonic() - started


def _try_mount(path: str) -> bool:
    os.makedirs(path, exist_ok=True)
    ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", path], capture_output=True).returncode == 0
    if ok:
        subprocess.run(["umount", path], capture_output=True)
    return ok


def prepare(
    work: str, images: int, bound: float, appends: Sequence[str] = ("new", "changed", "removed"), report: bool = True
) -> Setup:
    """The input states, a clean build of each (``base``, and ``base`` + an append of each of ``appends``) and
    the wall time of each run kind."""
    states = make_states(os.path.join(work, "states"), images)
    input_dir = os.path.join(work, "input")
    refs, ref_dirs, wall = {}, {}, {}
    set_input(input_dir, states["base"])
    base_out = ref_dirs["base"] = os.path.join(work, "refs", "base")
    wall["convert"] = wall["resume"] = _timed(cli(*convert_args(input_dir, base_out, "convert")))
    refs["base"] = fingerprint(base_out)
    append_s = []
    for state in appends:
        set_input(input_dir, states[state])
        out = ref_dirs[state] = os.path.join(work, "refs", state)
        shutil.copytree(base_out, out)
        append_s.append(_timed(cli(*convert_args(input_dir, out, f"append_{state}"))))
        refs[state] = fingerprint(out)
    for kind, state in STATE_OF.items():
        if state in refs:
            wall[kind] = max(append_s)
    wall["verify"] = _timed(cli("verify", base_out))
    if report:
        wall["report"] = _timed(cli("report", base_out, "--output", os.path.join(work, "refs", "report") + "/"))
    startup = sorted(_timed(cli("--version")) for _ in range(3))[1]
    can_mount = _try_mount(os.path.join(work, "mount-test"))
    return Setup(work, states, input_dir, refs, ref_dirs, wall, can_mount, bound, startup)


STATE_OF = {"append_new": "new", "append_changed": "changed", "append_removed": "removed", "append_overlap": "new"}


@dataclasses.dataclass
class Round:
    seed: int
    name: str = ""
    kind: str = ""
    fault: str = ""
    moment: float = 0.0
    notes: List[str] = dataclasses.field(default_factory=list)
    violations: List[Tuple[str, str]] = dataclasses.field(default_factory=list)
    procs: List[Proc] = dataclasses.field(default_factory=list)
    prep: List[Proc] = dataclasses.field(default_factory=list)  # the run a --resume round resumes

    def violate(self, invariant: str, detail: str) -> None:
        self.violations.append((invariant, detail))


def _staged_files(out: str) -> List[str]:
    found = []
    for entry in os.listdir(out) if os.path.isdir(out) else ():
        if entry.startswith(STAGING):
            for folder, _, names in os.walk(os.path.join(out, entry)):
                found += [os.path.join(folder, n) for n in names if n != "run.log"]
    return found


def _signal(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except OSError:
        return False


def _strike(r: Round, rng: random.Random, main: Proc, out: str, second: Optional[List[str]], logs: str) -> None:
    """Wait until the round's moment, then do its fault to ``main`` (or beside it)."""
    deadline = main.started + r.moment
    while time.monotonic() < deadline and main.popen.poll() is None:
        time.sleep(0.01)
    ended = main.popen.poll() is not None
    if ended:
        r.notes.append(f"the run ended ({main.popen.returncode}) before the moment")
    if r.fault == "second_run" or r.kind == "append_overlap":
        r.procs.append(start("second", second or main.argv, r.name, logs))
    if ended or r.fault == "second_run":
        return
    if ":" in r.fault:
        sig_name, who = r.fault.split(":")
        pid = main.popen.pid
        if who == "worker":
            kids = children(pid)
            if not kids:
                r.notes.append("no child process at the moment")
                return
            pid, cmdline = rng.choice(kids)
            words = cmdline.split() or ["(exited)"]  # a child that exits as it is picked has no command line
            what = "filter" if "quiet" in cmdline or "stderr" in cmdline else words[-1][:40]
            r.notes.append(f"child {pid} ({what})")
        if sig_name == "SIGSTOP":
            if _signal(pid, signal.SIGSTOP):
                time.sleep(rng.uniform(0.5, 5.0))
                _signal(pid, signal.SIGCONT)
        else:
            _signal(pid, getattr(signal, sig_name))
    elif r.fault in ("truncate_staged", "delete_staged"):
        files = _staged_files(out)
        if not files:
            r.notes.append("no staged file at the moment")
            return
        path = rng.choice(sorted(files))
        r.notes.append(f"{r.fault.split('_')[0]} {os.path.relpath(path, out)}")
        try:
            if r.fault == "delete_staged":
                os.remove(path)
            else:
                size = os.path.getsize(path)
                with open(path, "r+b") as f:
                    f.truncate(rng.randint(0, max(0, size - 1)))
        except OSError as e:
            r.notes.append(f"({e.strerror})")


def _advised(stderr: str) -> Optional[List[str]]:
    """The command a failure line names (``... run: CMD`` to its end or `` (details``), as argv."""
    for line in reversed(stderr.splitlines()):
        if "run: " in line:
            text = line.rsplit("run: ", 1)[1].split(" (details:")[0]
            try:
                argv = shlex.split(text)
            except ValueError:
                return None
            if "img2tfrecord" in " ".join(argv[:3]):
                while argv and argv[0] != "-m" and not argv[0].endswith("img2tfrecord"):
                    argv.pop(0)
                return [sys.executable, *argv] if argv[:1] == ["-m"] else cli(*argv[1:])
    return None


def _allowed_codes(r: Round, proc: Proc, startup: float) -> set:
    """The exit codes ``proc`` may end with. A stop signal sent to the launcher gives 128 + its number; sent
    within the interpreter's own start-up (before ``startup`` s, and the process printed nothing), the
    signal's default action, as for any program that has not run its first line yet."""
    codes = {0, 1, 2, 3}
    if proc.name == "main" and ":" in r.fault and r.fault.endswith("launcher"):
        sig = getattr(signal, r.fault.split(":")[0])
        if sig != signal.SIGSTOP:
            codes |= {128 + sig} if sig != signal.SIGKILL else {-signal.SIGKILL}
        if sig not in (signal.SIGSTOP, signal.SIGKILL) and r.moment <= startup and not proc.stderr.strip():
            codes.add(-sig)
    return codes


DOCUMENTED_WARNINGS = ("a conversion worker process died",)


def _check_process(r: Round, proc: Proc, startup: float) -> None:
    if proc.hung:
        r.violate("exits within the bound", f"{proc.name} still running after {proc.seconds:.0f} s (killed)")
    if proc.code not in _allowed_codes(r, proc, startup):
        r.violate("documented exit code", f"{proc.name} exited {proc.code}: {proc.stderr.strip()[-300:]!r}")
    lines = [
        line for line in proc.stderr.splitlines() if line.strip() and not any(w in line for w in DOCUMENTED_WARNINGS)
    ]
    if "Traceback" in proc.stderr or len(lines) > 1:
        r.violate("one line on stderr", f"{proc.name} (exit {proc.code}) printed {len(lines)} lines: {lines[:6]!r}")


def _leftovers(r: Round) -> None:
    deadline = time.monotonic() + 10
    while marked(r.name) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = marked(r.name)
    if left:
        described = []
        for pid in left:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
                described.append(f"{pid} {cmdline[:80]}")
            except OSError:
                pass
            _signal(pid, signal.SIGKILL)
        r.violate("no process left", "; ".join(described))


def _check_lock(r: Round, out: str, procs: Sequence[Proc]) -> None:
    path = os.path.join(out, LOCK)
    if not os.path.exists(path):
        return
    try:
        with open(path, encoding="utf-8") as f:
            pid = int(json.load(f)["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        r.violate("no lock outlives its run", "a lock file that names no holder")
        return
    if alive(pid):
        r.violate("no lock outlives its run", f"its holder {pid} still runs")
        return
    holder = [p for p in procs if p.popen.pid == pid]
    if not holder:
        r.violate("no lock outlives its run", f"a lock of pid {pid}, no process of this round")
    elif holder[0].code != -signal.SIGKILL:
        r.violate("no lock outlives its run", f"{holder[0].name} exited {holder[0].code} and left its lock")


def _check_output(
    r: Round,
    s: Setup,
    out: str,
    expected: Sequence[str],
    before: Dict[str, bytes],
    failed: bool,
    killed: bool,
    logs: str,
) -> None:
    """An output with ``_SUCCESS`` verifies and is one of the ``expected`` clean builds; a failed run changed
    nothing outside staging."""
    if r.kind in ("report", "verify"):
        if outside_staging(out) != before:
            r.violate("a finished output is never touched", f"{r.kind} changed {out}")
        return
    if os.path.exists(os.path.join(out, SUCCESS)):
        done = subprocess.run(cli("verify", out), cwd=ROOT, env=env_for("check"), capture_output=True, text=True)
        if done.returncode != 0:
            r.violate("_SUCCESS passes verify", done.stdout.strip()[-400:] + done.stderr.strip()[-400:])
        prints = fingerprint(out)
        if not any(prints == s.refs[state] for state in expected):
            ref = s.refs[expected[-1]]
            differ = sorted(k for k in set(prints) | set(ref) if prints.get(k) != ref.get(k))
            r.violate("_SUCCESS equals a clean build", f"differs from the clean {expected[-1]} in {differ[:6]}")
    elif failed and not killed:
        after = outside_staging(out)
        added = sorted(set(after) - set(before))
        changed = sorted(k for k in set(after) & set(before) if after[k] != before[k])
        if added or changed:
            r.violate("nothing outside staging after a failure", f"added {added[:6]}, changed {changed[:6]}")


def play(s: Setup, seed: int, logs_root: str, kind: Optional[str] = None, fault: Optional[str] = None) -> Round:
    """One round: its kind, moment and fault from ``seed`` (``kind``/``fault`` given: those); -> its findings."""
    r = Round(seed)
    rng = random.Random(seed)
    r.kind = rng.choice([k for k in KINDS if k in s.wall])
    faults = [f for f in FAULTS if not (r.kind in ("report", "verify") and f.endswith("_staged"))]
    if r.kind == "verify" or not s.can_mount:
        faults.remove("disk_full")
    if r.kind in ("report", "verify") and "second_run" in faults:
        faults.remove("second_run")
    r.fault = rng.choice(faults)
    r.kind, r.fault = kind or r.kind, fault or r.fault
    r.moment = rng.uniform(0.0, s.wall[r.kind])
    r.name = f"r{seed}"
    base = os.path.join(s.work, "round")
    logs = os.path.join(logs_root, r.name)
    os.makedirs(logs, exist_ok=True)
    if os.path.ismount(base):
        subprocess.run(["umount", "-l", base])
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    mounted = False
    try:
        state = STATE_OF.get(r.kind, "base")
        expected = ["base"] if state == "base" else ["base", state]
        out = os.path.join(base, "out")
        set_input(s.input_dir, s.states["base"])
        pre_size = 0
        if r.kind in ("append_new", "append_changed", "append_removed", "append_overlap", "report", "verify"):
            shutil.copytree(s.ref_dirs["base"], os.path.join(logs, "pre"))
            pre_size = _disk_use(os.path.join(logs, "pre"))
        if r.fault == "disk_full":
            post = _disk_use(s.ref_dirs[state]) + 64 * 1024
            size = -(-int(pre_size + 8192 + rng.uniform(0, 1.3) * max(0, post - pre_size)) // 4096) * 4096
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", base], check=True)
            mounted = True
            r.notes.append(f"tmpfs of {size // 1024} KB")
        if os.path.isdir(os.path.join(logs, "pre")):
            shutil.copytree(os.path.join(logs, "pre"), out)
            shutil.rmtree(os.path.join(logs, "pre"))
        if r.kind == "resume":  # an unfinished conversion to resume: a convert killed at a random moment
            pre = start("pre", cli(*convert_args(s.input_dir, out, "convert")), r.name, logs)
            time.sleep(rng.uniform(0.5, s.wall["convert"]))
            _signal(pre.popen.pid, rng.choice((signal.SIGKILL, signal.SIGTERM)))
            finish(pre, s.bound)
            r.prep.append(pre)
            r.notes.append(f"resumes a run that exited {pre.code}")
            _leftovers(r)
            r.violations.clear()  # the preparation is not the round
        set_input(s.input_dir, s.states[state])
        before = outside_staging(out)
        if r.kind in ("report", "verify"):
            argv = (
                cli("report", out, "--output", os.path.join(base, "report") + "/")
                if r.kind == "report"
                else cli("verify", out)
            )
        else:
            argv = cli(*convert_args(s.input_dir, out, r.kind))
        second = None
        if r.fault == "second_run" and r.kind == "convert":
            second = argv
        main = start("main", argv, r.name, logs)
        r.procs.append(main)
        _strike(r, rng, main, out, second, logs)
        for proc in r.procs:
            finish(proc, s.bound)
        _leftovers(r)
        for proc in r.procs:
            _check_process(r, proc, s.startup)
        _check_lock(r, out, r.procs + r.prep)
        if main.code == 0 and r.kind not in ("report", "verify") and not os.path.exists(os.path.join(out, SUCCESS)):
            r.violate("exit 0 publishes _SUCCESS", "main exited 0 and the output has no _SUCCESS")
        failed = any(p.code != 0 for p in r.procs if p.name == "main")
        killed = main.code == -signal.SIGKILL
        _check_output(r, s, out, expected, before, failed, killed, logs)

        # finish it: the command a failure line advises, else the same with --resume; at most two tries
        if mounted:
            subprocess.run(["mount", "-o", "remount,size=64m", base], check=True)
        target = s.refs[expected[-1]]
        if r.kind in ("report", "verify"):
            if main.code != 0:
                again = finish(start("again", argv, r.name, logs), s.bound)
                r.procs.append(again)
                if again.code != 0:
                    r.violate(
                        "the run finishes when run again", f"{r.kind} exited {again.code}: {again.stderr[-300:]!r}"
                    )
        elif not (os.path.exists(os.path.join(out, SUCCESS)) and fingerprint(out) == target):
            tries = []
            for attempt in (1, 2):
                stderr = "\n".join(p.stderr for p in r.procs)
                advised = _advised(stderr) if attempt == 1 else None
                if advised is None:
                    advised = argv if "--resume" in argv else [*argv, "--resume"]
                proc = finish(start(f"resume{attempt}", advised, r.name, logs), s.bound)
                r.procs.append(proc)
                tries.append(proc)
                if proc.hung:
                    r.violate("exits within the bound", f"{proc.name} still running after {proc.seconds:.0f} s")
                if proc.code == 0:
                    break
            _leftovers(r)
            last = tries[-1]
            if last.code != 0 or not os.path.exists(os.path.join(out, SUCCESS)):
                r.violate(
                    "--resume finishes within two tries",
                    " / ".join(
                        f"{shlex.join(p.argv[2:])[:200]} -> {p.code} {p.stderr.strip()[-300:]!r}" for p in tries
                    ),
                )
            elif fingerprint(out) != target:
                prints = fingerprint(out)
                differ = sorted(k for k in set(prints) | set(target) if prints.get(k) != target.get(k))
                r.violate("--resume gives the clean build", f"differs in {differ[:6]}")
            else:
                done = subprocess.run(
                    cli("verify", out), cwd=ROOT, env=env_for("check"), capture_output=True, text=True
                )
                if done.returncode != 0:
                    r.violate("_SUCCESS passes verify", done.stdout[-400:])
            _check_lock(r, out, r.procs + r.prep)
    finally:
        for pid in marked(r.name):
            _signal(pid, signal.SIGKILL)
        if mounted:
            subprocess.run(["umount", "-l", base])
        shutil.rmtree(base, ignore_errors=True)
    return r


# ------------------------------------------------------------------------------------------------- main


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=50)
    p.add_argument("--seed", type=int, default=0, help="seed of the rounds' seeds")
    p.add_argument("--round-seed", type=int, action="append", default=[], help="run only this round (repeatable)")
    p.add_argument("--images", type=int, default=60, help="images of the input, in 4 classes")
    p.add_argument("--bound", type=float, default=120.0, help="seconds any process may take")
    p.add_argument("--work", help="working folder (default: a new temporary one, removed at the end)")
    p.add_argument("--json", help="also write the figures here")
    p.add_argument("--minutes", type=float, help="start no round after this long (the figures cover those played)")
    ns = p.parse_args(argv)

    work = ns.work or tempfile.mkdtemp(prefix="fault-soak-")
    os.makedirs(work, exist_ok=True)
    started = time.monotonic()
    s = prepare(work, ns.images, ns.bound)
    print(
        "wall time of an undisturbed run: " + ", ".join(f"{k} {v:.1f} s" for k, v in sorted(s.wall.items())),
        flush=True,
    )
    if not s.can_mount:
        print("note: cannot mount a tmpfs here (not root?): the disk_full fault is skipped", flush=True)
    seeds = ns.round_seed or [random.Random(ns.seed).randrange(2**31) for _ in range(ns.rounds)]
    if not ns.round_seed:
        rng = random.Random(ns.seed)
        seeds = [rng.randrange(2**31) for _ in range(ns.rounds)]
    faults, kinds, violations = collections.Counter(), collections.Counter(), collections.Counter()
    landed: collections.Counter = collections.Counter()  # the fault struck (the run had not ended, ...)
    failing: List[Round] = []
    longest = (0.0, "")
    played = 0
    for i, seed in enumerate(seeds):
        if ns.minutes and (time.monotonic() - started) / 60 > ns.minutes:
            break
        played += 1
        r = play(s, seed, os.path.join(work, "logs"))
        faults[r.fault] += 1
        missed = any(n.startswith(("the run ended", "no child", "no staged")) for n in r.notes)
        landed[r.fault] += not missed
        kinds[r.kind] += 1
        for proc in r.procs:
            if proc.seconds > longest[0]:
                longest = (proc.seconds, f"{r.kind}/{r.fault} {proc.name} (round seed {seed})")
        codes = " ".join(f"{p.name}={p.code}" for p in r.procs)
        status = "ok" if not r.violations else f"{len(r.violations)} VIOLATION(S)"
        print(
            f"[{i + 1}/{len(seeds)}] round seed {seed}: {r.kind}, {r.fault} at {r.moment:.2f} s; {codes}; "
            f"{'; '.join(r.notes)}: {status}",
            flush=True,
        )
        for invariant, detail in r.violations:
            violations[invariant] += 1
            print(f"    VIOLATION {invariant}: {detail}", flush=True)
        if r.violations:
            failing.append(r)
            print(f"    re-run: python benchmarks/fault_soak.py --round-seed {seed}", flush=True)
    minutes = (time.monotonic() - started) / 60
    print(f"\nrounds: {played} of {len(seeds)} in {minutes:.1f} min")
    print("run kinds: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    print("faults (struck/drawn): " + ", ".join(f"{k} {landed[k]}/{n}" for k, n in sorted(faults.items())))
    print(f"invariant violations: {sum(violations.values())}")
    for invariant, n in sorted(violations.items()):
        print(f"  {invariant}: {n}")
    print(f"longest exit: {longest[0]:.1f} s ({longest[1]})")
    for r in failing:
        print(f"re-run: python benchmarks/fault_soak.py --round-seed {r.seed}  # {r.kind}, {r.fault}")
    if ns.json:
        with open(ns.json, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "rounds": played,
                    "kinds": kinds,
                    "faults": faults,
                    "faults_struck": landed,
                    "violations": violations,
                    "failing_seeds": [r.seed for r in failing],
                    "longest_exit_s": longest[0],
                },
                f,
                indent=2,
            )
    if not ns.work:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
