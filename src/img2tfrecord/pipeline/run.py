"""Run a conversion: check the output, plan, build the graph, run it, read the result."""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import shutil
import signal
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
)

from img2tfrecord import progress, storage
from img2tfrecord.conversion.placement import Placement
from img2tfrecord.conversion.pool import close_open_pools
from img2tfrecord.errors import STOP_SIGNALS, Interrupted
from img2tfrecord.pipeline.append import write_ledger
from img2tfrecord.pipeline.build import build_pipeline
from img2tfrecord.pipeline.config import LOCAL_RUNNING_MODE, ConvertConfig
from img2tfrecord.pipeline.launch import Launch
from img2tfrecord.pipeline.lock import OutputLock, OutputLocked, lock_output, release_handed
from img2tfrecord.pipeline.output_errors import OutputNotWritable
from img2tfrecord.pipeline.outputs import (
    OutputChanged,
    OutputNotEmpty,
    check_unchanged,
    finished_shards,
    prepare_append,
    prepare_output,
    remove_staging,
    remove_write_staging,
)
from img2tfrecord.pipeline.runner import (
    COUNTS_FROM_JOB,
    COUNTS_HERE,
    default_processes,
    is_dataflow,
    is_dry_run,
    is_local_runner,
    job_counts,
    live_counts,
    log_dataflow_job,
    pipeline_options,
)
from img2tfrecord.pipeline.staged_files import LaunchFile
from img2tfrecord.pipeline.write_placed_items import place_listing
from img2tfrecord.readers.records import read_manifest
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas.dataset_json import DatasetManifest
from img2tfrecord.transforms.counters import SHARDS_RESUMED
from img2tfrecord.transforms.read_placed_shards import PlacedShards


def run(
    launched: Launch,
    placement: Optional[Placement] = None,
    pipeline_args: Sequence[str] = (),
    wait: bool = True,
    show_progress: bool = False,
    before_job: Optional[Callable[[], None]] = None,
) -> Optional[DatasetManifest]:
    """Run the conversion ``launched`` describes (``launch.launch``; an append with something new), its listed
    work items as ``placement`` places them (``launch.place``; None: the graph places them); returns the written
    ``dataset.json``.

    Returns None for a ``--dry_run`` (the job is built and translated, nothing
    runs) and when ``wait`` is False (the job is submitted; it writes
    ``_SUCCESS`` itself when it completes). Raises ``OutputNotEmpty``/
    ``OutputLocked`` (usage errors) before any pipeline starts; any pipeline failure propagates.
    ``show_progress``: report the counts on stderr while waiting (``progress.py``); ``before_job``: called
    once the job is built, just before it runs.

    The run holds the output's lock (``pipeline/lock.py``) from before it
    changes anything until after ``_SUCCESS``, whatever the outcome; with
    ``wait`` False, only until the job is submitted. SIGINT and SIGTERM
    (main thread only) end it with ``Interrupted``, Beam's write staging
    removed and its own staging folder kept for ``--resume``.
    """
    options = pipeline_options(pipeline_args)
    mode = options.view_as(DirectOptions).direct_running_mode
    if is_local_runner(options) and mode != LOCAL_RUNNING_MODE:
        logging.warning(
            "--direct_running_mode=%s: Beam's local runner can drop elements in this mode (every record is "
            "still accounted for: the run fails instead of writing an incomplete output); the default %s mode "
            "with --processes is safe and faster",
            mode,
            LOCAL_RUNNING_MODE,
        )
    config = launched.config
    processes = config.processes or default_processes(options, launched.plan)  # not given: as the input is worth
    placed_shards: Optional[PlacedShards] = None
    placed_data: Optional[LaunchFile] = None
    listing = launched.listing
    if placement is not None and listing is not None and listing.items is not None:
        placed_shards, placed_data = place_listing(
            placement, listing.items.rejected, launched.run_dir, spread=not is_local_runner(options)
        )
    job = _Job(launched, options, processes, placed_shards)
    if is_dry_run(options):  # built and translated, nothing runs: the output is neither touched nor locked
        _execute(job, resuming=False, wait=wait, show_progress=False)
        return None
    staging = output_files.run_folder(launched.fingerprint)
    lock = lock_output(config.output, options, config.allow_unguarded_lock)
    with _StopSignals() as stop:
        try:
            lock.acquire(take_over_stale=config.resume or config.overwrite)
            started = launched.plan.fingerprint_doc(config)
            planned_on = launched.append.previous if launched.append is not None else None
            resuming = _prepare(config, staging, lock, launched.plan.generation, started, planned_on)
            storage.write_bytes(
                storage.join(launched.run_dir, output_files.RUN_STARTED_FILE), json.dumps(started).encode("utf-8")
            )
            if listing is not None:
                write_ledger(launched.run_dir, listing.entries)
            if placed_shards is not None and placed_data is not None:
                placed_data.copy_to(placed_shards.path)
            _execute(job, resuming, wait, show_progress, lock, before_job)
        except BaseException:
            if stop.signum is None:
                raise
            stop.cleaning = True  # further signals are ignored until the lock is released
            raise _stopped(stop.signum, config, options, staging) from None
        finally:
            lock.release()  # with --no-wait the job holds it now, and removes it when it completes
    if not wait:
        return None
    return read_manifest(config.output)


def remove_append_staging(config: ConvertConfig, pipeline_args: Sequence[str] = ()) -> None:
    """Remove what an append that published its generation but was stopped before cleaning up left (an append
    that finds nothing new, not with ``--dry_run``), under the output's lock."""
    options = pipeline_options(pipeline_args)
    if is_dry_run(options):
        return
    lock = lock_output(config.output, options, config.allow_unguarded_lock)
    lock.acquire(take_over_stale=config.resume)
    try:
        remove_staging(config.output, lock)
        logging.info("removed the staging folder a stopped append left in %s", config.output)
    finally:
        lock.release()


def _prepare(
    config: ConvertConfig,
    staging: str,
    lock: OutputLock,
    generation: int = 0,
    started: Optional[Dict[str, Any]] = None,
    planned_on: Optional[DatasetManifest] = None,
) -> bool:
    """``prepare_output`` (an append: ``prepare_append``) under the lock; True when the run resumes ``staging``
    (``started``: what its fingerprint covers, to name what differs from an earlier run's). An append first
    checks that the output still holds ``planned_on``, the finished output its launch planned on (None: none).

    A refused run leaves the output as it found it: a stale lock it took
    over is put back.
    """
    try:
        if config.append:
            check_unchanged(config.output, planned_on)
        if generation:
            resuming = prepare_append(config.output, generation, staging if config.resume else None, lock)
        else:
            resuming = prepare_output(
                config.output, config.overwrite, staging if config.resume else None, lock, run_doc=started
            )
    except (OutputNotEmpty, OutputNotWritable, OutputLocked, OutputChanged):
        lock.release(restore=True)
        raise
    took_over = lock.took_over()
    if took_over:
        logging.warning("%s", took_over)
    if config.resume:
        logging.info(
            "resuming %s: finished shards are kept" if resuming else "nothing to resume in %s: converting everything",
            config.output,
        )
    return resuming


@dataclasses.dataclass(frozen=True)
class _Job:
    """What the job is built from: the launch, Beam's options, the conversion processes (resolved for the
    runner), the work items placed at launch (None: the graph places them)."""

    launched: Launch
    options: PipelineOptions
    processes: int
    placed: Optional[PlacedShards]


def _execute(
    job: _Job,
    resuming: bool,
    wait: bool,
    show_progress: bool,
    lock: Optional[OutputLock] = None,
    before_job: Optional[Callable[[], None]] = None,
) -> None:
    """Build the pipeline and run it (only submit it when ``wait`` is False: the job is then handed the
    output's ``lock``, which it removes once ``_SUCCESS`` is written)."""
    launched, options = job.launched, job.options
    config, plan = launched.config, launched.plan
    dry_run = is_dry_run(options)
    logging.info(
        "input: %d files, %.1f MB, layout %s; shards per split: %s; %d conversion process(es)",
        plan.sizing.num_files,
        plan.sizing.input_bytes / 1e6,
        plan.input.layout,
        plan.sizing.num_shards,
        job.processes,
    )
    p = beam.Pipeline(options=options)
    handed = lock.hand_over() if lock is not None and not wait and not dry_run else None
    after_success = functools.partial(release_handed, config.output, handed) if handed is not None else None
    try:
        build_pipeline(p, launched, job.processes, resume=resuming, after_success=after_success, placed=job.placed)
        _run(p, launched, options, resuming, wait, show_progress, before_job)
    except BaseException:
        if lock is not None and handed is not None:  # no job was submitted (or the local one failed)
            lock.take_back(handed)
        raise
    finally:
        shutil.rmtree(p.local_tempdir, ignore_errors=True)  # Beam removes it in run(), not when the build fails


def _run(
    p: beam.Pipeline,
    launched: Launch,
    options: PipelineOptions,
    resuming: bool,
    wait: bool,
    show_progress: bool,
    before_job: Optional[Callable[[], None]],
) -> None:
    """Run the built pipeline ``p``: in this process, or submitted (``wait`` False), with its progress."""
    dry_run = is_dry_run(options)
    source = live_counts(options)
    reporter = None
    if show_progress and wait and not dry_run:
        total, unit = launched.kind.progress_total(launched.plan)
        read = progress.tally_since_now() if source == COUNTS_HERE else None
        reporter = progress.ProgressReporter(read, total, unit, live=sys.stderr.isatty())
    try:
        if reporter is not None and source == COUNTS_HERE:
            reporter.start()  # p.run() runs the whole job in this process
        if before_job is not None:
            before_job()
        result = p.run()
        if is_dataflow(options) and not dry_run:
            log_dataflow_job(options, result)
        if not wait and not dry_run:
            job_id = getattr(result, "job_id", None)
            logging.info(
                "submitted%s; %s appears in %s when it completes",
                f" job {job_id()}" if callable(job_id) else "",
                output_files.SUCCESS_FILE,
                launched.config.output,
            )
            return
        if reporter is not None and source != COUNTS_HERE:
            if source == COUNTS_FROM_JOB:
                reporter.use(progress.Polled(functools.partial(job_counts, result)))
            reporter.start()
        result.wait_until_finish()
    finally:
        if reporter is not None:
            reporter.stop()
    if resuming:
        resumed = result.metrics().query(beam.metrics.MetricsFilter().with_name(SHARDS_RESUMED))["counters"]
        logging.info("%d finished shard(s) kept from the interrupted run", sum(c.committed or 0 for c in resumed))


class _StopSignals:
    """While a run holds its output, the stop signals (``errors.STOP_SIGNALS``) raise KeyboardInterrupt in the
    main thread.

    The first signal's number is kept in ``signum``: Beam's runners re-raise
    the interrupt wrapped in their own exceptions (``RuntimeError:
    KeyboardInterrupt [while running ...]``), so the run tells an interrupt
    by the signal it received, not by the exception it got back. Once
    ``cleaning`` is set, signals are ignored. Off the main thread Python
    cannot handle signals: nothing is installed there.

    The runner's own reports of the interrupt it re-raises (Beam logs each
    step's exception with its traceback) are left out of the log: the run
    ends with one line saying what it kept.
    """

    # Not SIGPIPE: Python ignores it so that a write to a closed pipe or socket (a download) fails with EPIPE, which
    # its writer handles; a closed terminal's pipe then costs the run nothing (commands/quiet.py drops the lines).
    _SIGNALS = STOP_SIGNALS

    def __init__(self) -> None:
        self.signum: Optional[int] = None
        self.cleaning = False
        self._previous: Dict[int, Any] = {}
        self._handlers: List[logging.Handler] = []

    def __enter__(self) -> _StopSignals:
        if threading.current_thread() is threading.main_thread():
            for signum in self._SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
            self._handlers = list(logging.getLogger().handlers)
            for handler in self._handlers:
                handler.addFilter(self._not_the_interrupt)
        return self

    def __exit__(self, *unused) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        for log_handler in self._handlers:
            log_handler.removeFilter(self._not_the_interrupt)

    def _not_the_interrupt(self, record: logging.LogRecord) -> bool:
        if self.signum is None:
            return True
        about = record.exc_info[0] if record.exc_info else None
        return not (about is not None and issubclass(about, KeyboardInterrupt)) and (
            "KeyboardInterrupt" not in record.getMessage()
        )

    def _handle(self, signum: int, frame) -> None:
        if self.signum is None:
            self.signum = signum
        if not self.cleaning:
            raise KeyboardInterrupt


def _stopped(signum: int, config: ConvertConfig, options: PipelineOptions, staging: str) -> Interrupted:
    """Leave a stopped run's output for ``--resume``: the pool closed, Beam's write staging gone."""
    close_open_pools()
    try:
        remove_write_staging(config.output)
    except OutputNotWritable as e:
        logging.warning("%s", e)
    if not is_local_runner(options):
        return Interrupted(signum, "stopped waiting for the job, which may still run on its runner (stop it there)")
    done = finished_shards(config.output, staging)
    where = FileSystems.join(config.output, staging)
    return Interrupted(signum, f"{done} finished shard(s) kept in {where}" if done else "no shard finished yet")
