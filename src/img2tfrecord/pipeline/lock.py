"""One writer per output: the exclusive lock a ``convert`` run holds on its output while it writes.

The lock is the file ``output_files.LOCK_FILE`` in the output folder, a small
JSON document naming its holder (pid, host, start time) and a heartbeat
that a daemon thread rewrites every :data:`HEARTBEAT_S`. It is created only
if absent, before the run changes anything in the output, and removed
after ``_SUCCESS`` (or on failure or interruption):

* local paths: written whole under a temporary name, then hard-linked to
  its name, which fails when a lock exists (``O_CREAT | O_EXCL`` where a
  filesystem has no hard links); a write that fails leaves no lock;
* ``gs://``: an object written with ``if_generation_match=0`` (Cloud Storage
  answers 412 when it exists), rewritten and removed with
  ``if_generation_match=<the generation this run wrote>``; the client is
  Beam's (the pipeline's credentials; ``STORAGE_EMULATOR_HOST`` honoured);
* ``s3://`` and ``azfs://``: an object written with ``If-None-Match: *``,
  rewritten and removed with ``If-Match: <the ETag this run wrote>``, through
  Beam's clients (the pipeline's or the environment's settings); a store that
  ignores or refuses the condition is refused unless the run allows an
  unguarded lock (``lock_stores.UNGUARDED_FLAG``);
* other schemes (``hdfs://``, ...): Beam's FileSystems, check then create --
  best effort, not atomic.

A lock is stale when its heartbeat is older than :data:`STALE_AFTER_S`, or
at once when its holder ran on this host and that process is gone; only a
stale lock is ever taken over (``--resume``/``--overwrite``). A lock file that
cannot be parsed (empty, damaged) is judged by its age alone: every store
writes a lock whole and a live holder rewrites it every :data:`HEARTBEAT_S`,
so one older than :data:`UNPARSABLE_STALE_AFTER_S` protects no run.

A launcher that does not wait for its job (``--no-wait``, the Flex Template)
hands its lock to the job (:meth:`OutputLock.hand_over`): the file then names
the job, which removes it once ``_SUCCESS`` is written (:func:`release_handed`).
Such a lock has no heartbeat; it is stale only :data:`JOB_STALE_AFTER_S` after
the job was submitted (a job that failed leaves it).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import socket
import threading
import time
import uuid
from typing import Any, Optional

from img2tfrecord import faults
from img2tfrecord.pipeline.lock_stores import Found, LockStore, store_for
from img2tfrecord.pipeline.output_errors import OutputNotWritable, error_cause
from img2tfrecord.schemas import output_files

HEARTBEAT_S = 30.0  # how often the holder rewrites its heartbeat
STALE_AFTER_S = 600.0  # a lock whose heartbeat is older than this is stale
JOB_STALE_AFTER_S = 24 * 3600.0  # a lock handed to a submitted job is stale this long after the submission
UNPARSABLE_STALE_AFTER_S = 2 * HEARTBEAT_S  # a lock file that cannot be parsed is stale once this old
_PID_REUSE_SLACK_S = 5.0  # a process with the holder's pid that started this long after the lock is another one
HEARTBEAT_JOIN_S = 30.0  # how long stopping the heartbeat waits for a beat in flight
_ATTEMPTS = 5  # reads and creates when the lock changes in between (another run starting or leaving)
_UNREADABLE_WAIT_S = 0.2  # a lock file just created may not hold its text yet


class OutputLocked(ValueError):
    """The output is held by a live run (a usage error: nothing was changed)."""


@dataclasses.dataclass(frozen=True)
class Holder:
    """Who holds a lock, as its file says; ``pid`` 0 when the file cannot be parsed (then dated by the file, and
    ``unparsable`` says why)."""

    pid: int
    host: str
    started: float  # seconds since the epoch
    heartbeat: float
    token: str = ""  # unique per run: tells this run's lock from any other's
    job: bool = False  # handed to the job its launcher submitted without waiting (heartbeat: the submission)
    unparsable: str = ""  # why the file names no holder ("it is empty", ...); "" when it does

    def to_bytes(self) -> bytes:
        doc = {
            "tool": "img2tfrecord",
            "pid": self.pid,
            "host": self.host,
            "started": _iso(self.started),
            "heartbeat": _iso(self.heartbeat),
            "token": self.token,
            **({"job": True} if self.job else {}),
        }
        return (json.dumps(doc, indent=2) + "\n").encode("utf-8")

    @classmethod
    def parse(cls, data: bytes, modified: float) -> Holder:
        """The holder a lock file names; an unreadable file (being written, or damaged) is dated ``modified``."""
        try:
            doc = json.loads(data.decode("utf-8"))
            return cls(
                int(doc["pid"]),
                str(doc["host"]),
                _parse_iso(doc["started"]),
                _parse_iso(doc["heartbeat"]),
                str(doc.get("token", "")),
                doc.get("job") is True,
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            return cls(0, "", modified, modified, unparsable=_unparsable(data, e))

    def describe(self) -> str:
        """``pid 123 on host h, started 2026-11-27 05:40:12 UTC``."""
        if not self.pid:
            return (
                f"holder unknown: its {output_files.LOCK_FILE} cannot be parsed "
                f"({self.unparsable or 'no holder named'}), "
                f"last written {_readable(self.heartbeat)}; judged by its age, it is stale "
                f"{_duration(UNPARSABLE_STALE_AFTER_S)} after that"
            )
        if self.job:
            return (
                f"a job submitted {_readable(self.heartbeat)} by pid {self.pid} on host {self.host}, "
                "which removes the lock when it has written _SUCCESS"
            )
        return f"pid {self.pid} on host {self.host}, started {_readable(self.started)}"

    def stale_reason(self, now: float, stale_after_s: float = STALE_AFTER_S) -> Optional[str]:
        """Why this lock no longer protects a live run, or None while it does."""
        if self.job:  # its launcher is gone by design; the job's end is not seen from here
            age = now - self.heartbeat
            return f"its job was submitted {_duration(age)} ago and never finished" if age > JOB_STALE_AFTER_S else None
        if not self.pid:  # no holder to ask about: its age alone decides
            age = now - self.heartbeat
            if age > min(stale_after_s, UNPARSABLE_STALE_AFTER_S):
                return (
                    f"its {output_files.LOCK_FILE} cannot be parsed ({self.unparsable}) "
                    f"and was last written {_duration(age)} ago"
                )
            return None
        if self.host == socket.gethostname() and not _same_process_alive(self.pid, self.started):
            return "its process is gone"
        age = now - self.heartbeat
        if age > stale_after_s:
            return f"no heartbeat for {_duration(age)}"
        return None


def _unparsable(data: bytes, error: Exception) -> str:
    """Why a lock file's bytes name no holder, in a few words."""
    if not data.strip():
        return f"it is empty, {len(data)} bytes"
    if isinstance(error, (UnicodeDecodeError, json.JSONDecodeError)):
        return f"it is not JSON, {len(data)} bytes"
    return f"it names no holder: {type(error).__name__}: {error}"


def _iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_iso(text: Any) -> float:
    return datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


def _readable(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{max(1, round(seconds / 60))} min"


def _same_process_alive(pid: int, started: float) -> bool:
    """True while process ``pid`` of this host exists and is the one that took a lock at ``started``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    begun = _process_start_time(pid)
    return begun is None or begun <= started + _PID_REUSE_SLACK_S


def _process_start_time(pid: int) -> Optional[float]:
    """When process ``pid`` started (seconds since the epoch), from Linux's /proc; None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()  # the command name, in parentheses, may hold spaces
        with open("/proc/stat", "rb") as f:
            boot = next(float(line.split()[1]) for line in f if line.startswith(b"btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


# ---------------------------------------------------------------------------
# The lock.


class OutputLock:
    """The exclusive lock of one run on ``output_dir``: :meth:`acquire`, then :meth:`release` in a ``finally``."""

    def __init__(
        self,
        output_dir: str,
        store: LockStore,
        heartbeat_s: float = HEARTBEAT_S,
        stale_after_s: float = STALE_AFTER_S,
    ):
        self.output_dir = output_dir
        self._store = store
        self._heartbeat_s = heartbeat_s
        self._stale_after_s = stale_after_s
        now = time.time()
        self._me = Holder(os.getpid(), socket.gethostname(), now, now, uuid.uuid4().hex)
        self._version: Any = None
        self._held = False
        self._mutex = threading.Lock()  # the heartbeat thread against release
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._replaced: Optional[Found] = None  # the stale lock taken over, put back by release(restore=True)
        self.stale: Optional[Holder] = None  # a stale lock found: taken over, or left in place
        self.stale_why = ""

    @property
    def held(self) -> bool:
        return self._held

    def acquire(self, take_over_stale: bool) -> None:
        """Hold the output, or raise ``OutputLocked`` when a live run holds it.

        A stale lock is taken over with ``take_over_stale``; without, it is
        left in place and named in :attr:`stale` (the lock is then not held).
        ``OutputNotWritable`` when the lock cannot be written at all.
        """
        for attempt in range(_ATTEMPTS):
            try:
                version = self._store.create(self._me.to_bytes())
                found = None if version is not None else self._store.read()
            except OutputNotWritable:  # said whole by the store (one that cannot lock atomically)
                raise
            except OSError as e:
                raise OutputNotWritable(f"output {self.output_dir} is not writable: {error_cause(e)}") from None
            except Exception as e:  # pylint: disable=broad-except  # a bucket that is missing or not ours
                raise OutputNotWritable(f"output {self.output_dir} is not writable: {error_cause(e)}") from None
            if version is not None:
                self._hold(version)
                return
            if found is None:  # released meanwhile
                continue
            holder = Holder.parse(found.data, found.modified)
            if holder.token == self._me.token:  # our own create, retried after its answer was lost
                self._hold(found.version)
                return
            why = holder.stale_reason(time.time(), self._stale_after_s)
            if why is None and not holder.pid and attempt < _ATTEMPTS - 1:
                time.sleep(_UNREADABLE_WAIT_S)  # perhaps just created, its text not written yet
                continue
            if why is None:
                raise OutputLocked(
                    f"output {self.output_dir} is being written by another run ({holder.describe()}); "
                    "wait for it to finish or stop it"
                )
            self.stale, self.stale_why = holder, why
            if not take_over_stale:
                return
            version = self._store.take_over(found.version, self._me.to_bytes())
            if version is not None:
                self._replaced = found
                self._hold(version)
                return
        raise OutputLocked(f"output {self.output_dir} is being locked and released by other runs; try again")

    def stale_note(self) -> str:
        """What a refusal says about the stale lock left in place ('' when there is none)."""
        if self.stale is None:
            return ""
        return f"the lock of the run that left it is stale ({self.stale.describe()}; {self.stale_why})"

    def took_over(self) -> Optional[str]:
        """The warning line for a stale lock this run took over; None when it took over none."""
        if self.stale is None or self._replaced is None:
            return None
        return (
            f"took over the stale lock on {self.output_dir} of an earlier run "
            f"({self.stale.describe()}; {self.stale_why})"
        )

    def ensure_held(self) -> None:
        """``OutputLocked`` unless the lock still names this run (checked before deleting anything)."""
        found = self._store.read() if self._held else None
        holder = Holder.parse(found.data, found.modified) if found is not None else None
        if holder is None or holder.token != self._me.token:
            held_by = f" ({holder.describe()})" if holder is not None else ""
            raise OutputLocked(f"output {self.output_dir}: this run no longer holds its lock{held_by}")

    def release(self, restore: bool = False) -> None:
        """Stop the heartbeat and remove the lock (put back the stale lock taken over, with ``restore``).

        Never raises: it runs in ``finally`` clauses, after the error that matters.
        """
        self._stop_heartbeat()
        if not self._mutex.acquire(timeout=HEARTBEAT_JOIN_S):  # a beat stuck in a store that does not answer
            logging.warning("could not remove the lock %s of this run: its store does not answer", self.output_dir)
            return
        try:
            if not self._held:
                return
            self._held = False
            if restore and self._replaced is not None:
                self._store.refresh(self._version, self._replaced.data)
            else:
                self._store.delete(self._version)
        except Exception as e:  # pylint: disable=broad-except
            logging.warning("could not remove the lock %s of this run: %s", self.output_dir, error_cause(e))
        finally:
            self._mutex.release()

    def hand_over(self) -> Any:
        """Hand the held lock to the job about to be submitted without waiting: the heartbeat stops, the
        file names the job, and this run no longer holds it; -> the version :func:`release_handed` removes.
        ``OutputLocked`` when the lock is no longer this run's."""
        self._stop_heartbeat()
        with self._mutex:
            handed = dataclasses.replace(self._me, heartbeat=time.time(), job=True)
            version = self._store.refresh(self._version, handed.to_bytes()) if self._held else None
            self._held = False
            if version is None:
                raise OutputLocked(f"output {self.output_dir}: this run no longer holds its lock")
            self._version = version
            return version

    def take_back(self, version: Any) -> None:
        """Remove a lock handed over for a job that was never submitted. Never raises."""
        try:
            self._store.delete(version)
        except Exception as e:  # pylint: disable=broad-except
            logging.warning("could not remove the lock %s of this run: %s", self.output_dir, error_cause(e))

    def _stop_heartbeat(self) -> None:
        """Stop the heartbeat thread, waiting at most :data:`HEARTBEAT_JOIN_S` for a beat in flight (a store
        that does not answer): the daemon thread is then left behind."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(HEARTBEAT_JOIN_S)
            if self._thread.is_alive():
                logging.warning(
                    "the lock heartbeat of %s did not stop within %d s (its store does not answer); going on",
                    self.output_dir,
                    HEARTBEAT_JOIN_S,
                )
            self._thread = None

    def _hold(self, version: Any) -> None:
        self._version = version
        self._held = True
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="img2tfrecord-lock-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        failing = False
        while not self._stop.wait(self._heartbeat_s):
            with self._mutex:
                if not self._held:
                    return
                beat = dataclasses.replace(self._me, heartbeat=time.time())
                try:
                    faults.fail_at("heartbeat", self.output_dir)  # test-only: none unless IMG2TFRECORD_FAULT is set
                    version = self._store.refresh(self._version, beat.to_bytes())
                except Exception as e:  # pylint: disable=broad-except  # a network hiccup: the next beat retries
                    if not failing:  # once per streak of failed beats
                        logging.warning("could not refresh the lock on %s: %s", self.output_dir, error_cause(e))
                    failing = True
                    continue
                failing = False
                if version is None:  # said before ``held`` turns False, which callers may be waiting for
                    try:
                        removed = self._store.read() is None
                    except Exception:  # pylint: disable=broad-except  # unreadable now: say it was taken over
                        removed = False
                    if removed:
                        logging.error(
                            "the lock on %s was removed while this run held it (was the output deleted?); "
                            "check the output with img2tfrecord verify when the run ends",
                            self.output_dir,
                        )
                    else:
                        logging.error(
                            "another run took over the lock on %s while this run was stalled; "
                            "the output may mix both runs",
                            self.output_dir,
                        )
                    self._held = False
                    return
                self._version = version


def lock_output(output_dir: str, pipeline_options: Any = None, unguarded: bool = False) -> OutputLock:
    """The (not yet acquired) lock of ``output_dir``; ``unguarded`` accepts a store without conditional writes."""
    return OutputLock(
        output_dir, store_for(output_dir, pipeline_options, unguarded), faults.heartbeat_seconds(HEARTBEAT_S)
    )


def release_handed(output_dir: str, version: Any) -> None:
    """Remove the lock a launcher handed to this job (``OutputLock.hand_over``), unless another run holds it
    now; called by the job once it has written ``_SUCCESS``."""
    try:
        store_for(output_dir).delete(version)
    except Exception as e:  # pylint: disable=broad-except  # the output is complete; the lock goes stale
        logging.warning("could not remove the lock of %s: %s", output_dir, error_cause(e))
