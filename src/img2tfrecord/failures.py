"""The failure boundary of a run (``convert`` and ``img2tfrecord.convert``): what failed, why and what to do
next, in one line (:func:`failure_of`), with every detail in the run's log file (:class:`RunLog`).

A failure inside the job reaches the launcher as the runner's exception: the original one, or a runner's
wrapper whose message carries it as text (``OSError: [Errno 28] No space left on device ... [while
running 'WriteShards/WriteShard']``). The step names the stage; the innermost cause says why. Standard
library only.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import re
import shutil
import tempfile
import traceback
from typing import Iterator, List, Optional, Tuple

# Steps of the graph (``pipeline/build.py``, ``transforms/``), by prefix, and the stage each is.
_STAGES: Tuple[Tuple[str, str], ...] = (
    ("WriteShards/CommitSplit", "committing a split's shards"),
    ("WriteShards/WriteShard", "converting and writing shards"),
    ("WriteShards/PlacedShards", "reading the placed work items"),
    ("WriteShards", "placing the work items in their shards"),
    ("FinishOutput/AnalyzeTrainSplit", "analysing the train split"),
    ("FinishOutput/FinalizeOutput", "finishing the output (dataset.json)"),
    ("ArchiveMembers", "recording what each archive held"),
    ("Dedupe", "comparing the inputs' bytes (--dedupe)"),
    ("Discover", "listing the input"),
    ("GroupClips", "grouping frames into clips"),
)
_STEP = re.compile(r"\[while running '([^']+)'\]")
_ERRNO = re.compile(r"\[Errno (\d+)\] ([^:\]\n']+?)(?::\s*'([^'\n]*)')?(?=$|[\]\s,;'\n])")
_FIXES = {
    errno.ENOSPC: "free space where the output is",
    errno.EDQUOT: "free space where the output is (a disk quota is full)",
    errno.EACCES: "give this user access to it",
    errno.EPERM: "give this user access to it",
    errno.EROFS: "make that filesystem writable (a read-only mount)",
    errno.EFBIG: "give a smaller --shard-size-mb (the filesystem limits the size of a file)",
    errno.ENOENT: "check that the path exists and was not removed while the run went on",
}
LOG_FILE = "run.log"  # in the run's staging folder


@dataclasses.dataclass(frozen=True)
class Failure:
    """A failed run in words: ``stage`` (while ...), ``cause`` (why, with the path when known), ``fix``
    (what to do before resuming)."""

    stage: str
    cause: str
    fix: str

    def line(self, again: str, log: Optional[str] = None) -> str:
        """One line: what failed and why, what to do, ``again`` (how to resume), and where the details are."""
        details = f" (details: {log})" if log else ""
        return f"the run failed while {self.stage}: {self.cause}; {self.fix}, then {again}{details}"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and its causes, outermost first; a worker process's traceback text (concurrent.futures'
    ``_RemoteTraceback``, the cause of the exception it re-raises) is not one."""
    seen: List[int] = []
    found: Optional[BaseException] = exc
    while found is not None and id(found) not in seen:
        seen.append(id(found))
        if type(found).__name__ != "_RemoteTraceback":
            yield found
        found = found.__cause__ or found.__context__


def failure_of(exc: BaseException, where: Optional[str] = None, stage: str = "running") -> Failure:
    """The stage, cause and fix of a run's exception (a runner's wrapper included); ``where`` (the output) is
    named when the cause names no path; ``stage``: the stage when no step of the graph names it."""
    texts = [str(e) for e in _chain(exc)]
    steps = [m.group(1) for text in texts for m in _STEP.finditer(text)]
    stage = next((words for step in steps for prefix, words in _STAGES if step.startswith(prefix)), stage)
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in _FIXES:
            return Failure(stage, _os_cause(e.errno, e.strerror or "", e.filename or where), _FIXES[e.errno])
    for text in texts:
        m = _ERRNO.search(text)
        if m and int(m.group(1)) in _FIXES:
            code = int(m.group(1))
            return Failure(stage, _os_cause(code, m.group(2), m.group(3) or where), _FIXES[code])
    for text in texts:  # a library that words the error without its number (ArrayRecord's writer)
        for code, fix in _FIXES.items():
            if code != errno.ENOENT and os.strerror(code) in text:
                return Failure(stage, _os_cause(code, os.strerror(code), where), fix)
    innermost = list(_chain(exc))[-1]
    return Failure(stage, _described(innermost), "fix the cause the details name")


def _os_cause(code: int, strerror: str, filename: Optional[str]) -> str:
    words = strerror.strip() or os.strerror(code)
    return f"{words} ({filename})" if filename else words


def _described(exc: BaseException) -> str:
    """``Type: first line`` of an exception, without a runner's step suffix."""
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    text = _STEP.sub("", lines[-1] if lines else "").strip()
    name = type(exc).__name__
    return f"{name}: {text}" if text and not text.startswith(name) else (text or name)


class RunLog:
    """Every log line of a run, and the traceback of its failure, in a file.

    The file is written in a local temporary folder while the run goes on (the output's own disk may be
    the one that is full), and :meth:`keep` copies it into the run's staging folder when the run fails;
    it is removed when the run ends otherwise. ``quiet_libraries``: for a caller that did not configure
    logging, Beam's and TensorFlow's records above WARNING go to the file only (else Python prints them).
    """

    _LIBRARIES = ("apache_beam", "tensorflow", "absl", "tensorflow_transform")

    def __init__(self, quiet_libraries: bool = False):
        handle, self.path = tempfile.mkstemp(prefix="img2tfrecord-run-", suffix=".log")
        os.close(handle)
        self._handler = logging.FileHandler(self.path, encoding="utf-8", delay=True)
        self._handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        self._quiet = quiet_libraries
        self._saved: List[Tuple[logging.Logger, bool]] = []
        self._kept: Optional[str] = None

    def __enter__(self) -> RunLog:
        logging.getLogger().addHandler(self._handler)
        if self._quiet:  # the file has them; Python's last-resort handler would print them
            for name in self._LIBRARIES:
                logger = logging.getLogger(name)
                self._saved.append((logger, logger.propagate))
                logger.addHandler(self._handler)
                logger.propagate = False
        return self

    def __exit__(self, *exc_info) -> None:
        logging.getLogger().removeHandler(self._handler)
        for logger, propagate in self._saved:
            logger.removeHandler(self._handler)
            logger.propagate = propagate
        self._handler.close()
        if self._kept != self.path:
            try:
                os.remove(self.path)
            except OSError:
                pass

    def keep(self, exc: BaseException, staging: Optional[str]) -> str:
        """Write ``exc``'s traceback into the log and keep it, in ``staging`` when it can be copied there
        (a local folder); -> where it is."""
        self._handler.flush()
        with open(self.path, "a", encoding="utf-8") as f:
            f.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))
        self._kept = self.path
        if staging and "://" not in staging and os.path.isdir(staging):
            try:
                target = os.path.join(staging, LOG_FILE)
                shutil.copyfile(self.path, target)
                os.remove(self.path)
                self._kept = target
            except OSError:  # the output's disk is full or not writable: the temporary copy stays
                pass
        return self._kept
