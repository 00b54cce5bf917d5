"""Progress of a running conversion: images done / total, images/s, ETA, rejected so far, bytes written.

The counts come from one callable: the process-local :data:`TALLY` that the
shard step adds to (``transforms/counters.py``: ``OutputCounter`` feeds it and
the Beam counters together) when the runner runs the steps in this process,
or a running job's metrics polled by ``pipeline/run.py`` (Dataflow).

:class:`ProgressReporter` samples them in a thread and shows them: on a
terminal as one line redrawn in place (``rich``), elsewhere (CI, scheduled
jobs) as a plain log line every :data:`DEFAULT_LOG_INTERVAL_S` seconds,
none when the run is shorter.

No Beam and no TensorFlow here.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import threading
import time
from typing import Any, Callable, Deque, List, Optional, Tuple

INTERVAL_ENV = "IMG2TFRECORD_PROGRESS_INTERVAL_S"  # the log line's interval, for tests and debugging
DEFAULT_LOG_INTERVAL_S = 10.0
LIVE_REFRESH_S = 0.5  # how often the terminal line is redrawn
RATE_WINDOW_S = 30.0  # images/s is measured over this much recent time
POLL_PERIOD_S = 5.0  # a remote job's metrics are asked for at most this often

_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Counts:
    """What the shard step has reported: records written, inputs rejected, bytes written to shard files."""

    written: int = 0
    rejected: int = 0
    bytes_written: int = 0

    @property
    def done(self) -> int:
        return self.written + self.rejected

    def __sub__(self, other: Counts) -> Counts:
        return Counts(
            self.written - other.written, self.rejected - other.rejected, self.bytes_written - other.bytes_written
        )


class Tally:
    """Counts added to by the steps running in this process; thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._counts = Counts()

    def add(self, written: int = 0, rejected: int = 0, bytes_written: int = 0) -> None:
        with self._lock:
            c = self._counts
            self._counts = Counts(c.written + written, c.rejected + rejected, c.bytes_written + bytes_written)

    def read(self) -> Counts:
        with self._lock:
            return self._counts


TALLY = Tally()


def tally_since_now(tally: Tally = TALLY) -> Callable[[], Counts]:
    """A reader of ``tally`` that counts from now (an earlier run in this process is not this one)."""
    start = tally.read()
    return lambda: tally.read() - start


class Polled:
    """``fetch()`` called at most every ``period_s``; the last answer in between, or None before any."""

    def __init__(self, fetch: Callable[[], Counts], period_s: float = POLL_PERIOD_S, clock=time.monotonic):
        self._fetch = fetch
        self._period_s = period_s
        self._clock = clock
        self._last: Optional[Counts] = None
        self._at = float("-inf")

    def __call__(self) -> Optional[Counts]:
        now = self._clock()
        if now - self._at >= self._period_s:
            self._at = now
            try:
                self._last = self._fetch()
            except Exception as e:  # a failed poll (network, job not started) keeps the last counts
                _LOG.debug("could not read the job's metrics: %s", e)
        return self._last


class RateMeter:
    """Units per second over the last ``window_s`` seconds of ``(time, done)`` samples."""

    def __init__(self, window_s: float = RATE_WINDOW_S, min_span_s: float = 1.0):
        self._window_s = window_s
        self._min_span_s = min_span_s
        self._samples: Deque[Tuple[float, int]] = collections.deque()

    def add(self, t: float, done: int) -> None:
        self._samples.append((t, done))
        while len(self._samples) > 2 and t - self._samples[1][0] >= self._window_s:
            self._samples.popleft()
        # A wait before the window's first unit (the run's start-up) is not part of the rate.
        while len(self._samples) > 1 and self._samples[0][1] == self._samples[1][1]:
            self._samples.popleft()

    def rate(self) -> Optional[float]:
        """None until the samples span ``min_span_s`` and the first unit is done."""
        if len(self._samples) < 2:
            return None
        (t0, d0), (t1, d1) = self._samples[0], self._samples[-1]
        if t1 - t0 < self._min_span_s or d1 <= 0:
            return None
        return (d1 - d0) / (t1 - t0)


def eta_s(done: int, total: Optional[int], rate: Optional[float]) -> Optional[float]:
    """Seconds left at ``rate``; None when the total or the rate is unknown, or nothing is left."""
    if total is None or not rate or rate <= 0 or done >= total:
        return None
    return (total - done) / rate


def format_duration(seconds: float) -> str:
    """``35 s``, ``4 min 05 s``, ``2 h 03 min``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def format_bytes(n: int) -> str:
    """Decimal units, as the summary prints them: ``812 B``, ``34.5 kB``, ``120.4 MB``, ``3.21 GB``."""
    if n < 1000:
        return f"{n} B"
    if n < 1e6:
        return f"{n / 1e3:.1f} kB"
    if n < 1e9:
        return f"{n / 1e6:.1f} MB"
    return f"{n / 1e9:.2f} GB"


def format_rate(rate: float) -> str:
    return f"{rate:.0f}" if rate >= 10 else f"{rate:.1f}"


def progress_line(counts: Counts, total: Optional[int], unit: str, rate: Optional[float]) -> str:
    """``1200/12000 images (10%), 310 images/s, ETA 35 s, 3 rejected, 120.4 MB written``.

    An unknown total shows as ``?`` (no percentage, no ETA); an unknown rate is left out; once every
    input is done the line says ``finishing`` instead of a rate.
    """
    done = counts.done
    finished = total is not None and done >= total
    parts = [f"{done}/{total} {unit} ({100 * done // total}%)" if total else f"{done}/? {unit}"]
    if rate is not None and not finished:
        parts.append(f"{format_rate(rate)} {unit}/s")
    eta = eta_s(done, total, rate)
    if eta is not None:
        parts.append(f"ETA {format_duration(eta)}")
    parts.append(f"{counts.rejected} rejected")
    parts.append(f"{format_bytes(counts.bytes_written)} written")
    if finished:
        parts.append("finishing")  # the commit, the analysis and dataset.json come after the last input
    return ", ".join(parts)


def log_interval_s() -> float:
    """The log line's interval: :data:`INTERVAL_ENV` if set to a positive number, else the default."""
    text = os.environ.get(INTERVAL_ENV, "")
    try:
        value = float(text)
    except ValueError:
        return DEFAULT_LOG_INTERVAL_S
    return value if value > 0 else DEFAULT_LOG_INTERVAL_S


class ProgressReporter:
    """Shows ``read()``'s counts while a run goes on, from a thread, until :meth:`stop`.

    ``read`` returns the counts so far, or None while there are none to
    show (a remote job not polled yet); ``read=None`` means the runner
    reports counts only when the job ends, and then only the elapsed time is
    shown. ``total`` is the launch's count of inputs (None: unknown); once
    more than that are done it is taken as unknown. ``live`` draws one line
    on ``console`` (a ``rich`` Console) redrawn in place; otherwise a log
    line every ``interval_s``, and one more at :meth:`stop` if any was
    logged.
    """

    def __init__(
        self,
        read: Optional[Callable[[], Optional[Counts]]],
        total: Optional[int],
        unit: str = "images",
        live: bool = False,
        interval_s: Optional[float] = None,
        console: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._read = read
        self._total = total
        self._unit = unit
        self._live = live
        self._interval_s = interval_s if interval_s is not None else log_interval_s()
        self._console = console
        self._clock = clock
        self._rate = RateMeter()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._started = 0.0
        self._last_log = 0.0
        self._logged = 0
        self._progress: Any = None
        self._task: Any = None
        self._swapped: List[Tuple[logging.StreamHandler, Any]] = []
        self._lock = threading.Lock()

    def use(self, read: Optional[Callable[[], Optional[Counts]]]) -> None:
        """Read the counts from ``read`` from now on (a remote job's, once it is submitted)."""
        with self._lock:
            self._read = read

    def start(self) -> ProgressReporter:
        self._started = self._last_log = self._clock()
        if self._live:
            self._start_live()
        elif self._read is None:
            _LOG.info("progress: this runner reports its counts when the job ends")
        tick = min(LIVE_REFRESH_S, self._interval_s)
        self._thread = threading.Thread(target=self._loop, args=(tick,), name="img2tfrecord-progress", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Show the last counts and stop; safe to call twice, and raises nothing (it runs as a run fails)."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        try:
            sample = self._sample()
            if not self._live and self._logged and sample is not None:
                _LOG.info("progress: %s", sample[1])
        except Exception:
            sample = None
            _LOG.debug("progress display failed", exc_info=True)
        if self._live:
            self._stop_live(sample)

    def __enter__(self) -> ProgressReporter:
        return self.start()

    def __exit__(self, *unused) -> None:
        self.stop()

    # -- sampling -------------------------------------------------------------------------------------

    def _loop(self, tick: float) -> None:
        while not self._stop.wait(tick):
            try:
                sample = self._sample()
                now = self._clock()
                if self._live:
                    self._draw(sample)
                elif sample is not None and now - self._last_log >= self._interval_s:
                    self._last_log = now
                    self._logged += 1
                    _LOG.info("progress: %s", sample[1])
            except Exception:  # the display must never stop the run
                _LOG.debug("progress display failed", exc_info=True)

    def _sample(self) -> Optional[Tuple[Counts, str]]:
        """The current counts and their line; None when there are none."""
        with self._lock:
            read = self._read
        counts = read() if read is not None else None
        if counts is None:
            return None
        now = self._clock()
        self._rate.add(now, counts.done)
        if self._total is not None and counts.done > self._total:
            self._total = None  # the launch saw fewer inputs than there are
        return counts, progress_line(counts, self._total, self._unit, self._rate.rate())

    # -- the terminal line ----------------------------------------------------------------------------

    def _start_live(self) -> None:
        import sys

        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn

        console = self._console or Console(stderr=True)
        before = sys.stderr
        self._progress = Progress(
            BarColumn(bar_width=20),
            TextColumn("{task.description}"),
            console=console,
            auto_refresh=False,
            redirect_stdout=False,  # stdout may be a file or pipe while stderr is the terminal
            redirect_stderr=True,
        )
        self._progress.start()
        self._task = self._progress.add_task(self._waiting_text(), total=self._total)
        # Log lines go above the live line, through rich, instead of through it.
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream is before:
                self._swapped.append((handler, handler.setStream(sys.stderr)))
        self._progress.refresh()

    def _waiting_text(self) -> str:
        elapsed = format_duration(self._clock() - self._started)
        if self._read is None:
            return f"running, {elapsed} (this runner reports its counts when the job ends)"
        return f"starting, {elapsed}"

    def _draw(self, sample: Optional[Tuple[Counts, str]]) -> None:
        if self._progress is None:
            return
        counts, line = sample if sample is not None else (Counts(), self._waiting_text())
        self._progress.update(self._task, description=line, total=self._total, completed=counts.done)
        self._progress.refresh()

    def _stop_live(self, sample: Optional[Tuple[Counts, str]]) -> None:
        if self._progress is None:
            return
        try:
            self._draw(sample)
            self._progress.stop()
        except Exception:
            _LOG.debug("progress display failed", exc_info=True)
        finally:
            for handler, stream in self._swapped:
                handler.setStream(stream)
            self._swapped = []
            self._progress = None
