"""How a launched run starts (:func:`start`): its listed work items placed, then ``pipeline.run.run``; and what
a caller that owns its interpreter (the command line) does to start a local run sooner. A library caller's
process (``img2tfrecord.convert``, the PTransforms) runs plain Beam and is left as it is.

* The conversion pool starts before Beam is imported, while the launch places the work items, and
  converts the first shards' items ahead: the shard writer takes the started pool
  (``conversion.pool.take_started``).
* Beam is imported without the optional modules a local run never uses (:func:`import_beam_lean`), also
  when the command line first imports it to check Beam's own flags (:func:`import_beam_for_options`).
  Beam's package imports pandas, pyarrow and its BigQuery/Pub/Sub connectors at its own import,
  each inside ``try: ... except ImportError`` so that they stay optional: a third of its import
  (a run with the analysis leaves out the connectors only).
* S3's and Azure's filesystems (boto3, the Azure SDK) load with the first path of theirs, not with
  Beam (``beam_filesystem_fixes.defer_object_stores``, from ``cli.main``).
* numpy's OpenBLAS starts no threads of its own (:func:`one_blas_thread`): at numpy's import it
  starts one per core, which spin for a while; nothing the command does is linear algebra.
* The cyclic garbage collector is paused for the start-up (:func:`pause_collection`): the imports,
  the listing and Beam's graph leave a heap of long-lived objects that each full collection would
  scan again; :func:`resume_collection` freezes that heap, so the job's collections skip it.

performance.md has the figures.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
from typing import TYPE_CHECKING, Any, List, Optional, Sequence

from img2tfrecord.pipeline.config import LOCAL_RUNNER, LOCAL_RUNNING_MODE
from img2tfrecord.pipeline.launch import Launch, place
from img2tfrecord.pipeline.sizing import processes_for

if TYPE_CHECKING:
    from img2tfrecord.conversion.placement import Placement
    from img2tfrecord.conversion.pool import ConversionPool
    from img2tfrecord.schemas.dataset_json import DatasetManifest

# What the pool converts ahead is held until the shard writer takes it: a bound on that memory (its outputs
# are about as large as its inputs at most), and about what two to four processes convert while Beam starts.
PREFETCH_BYTES = 64 * 2**20
PREFETCH_ITEMS = 1024


def start(
    launched: Launch,
    pipeline_args: Sequence[str] = (),
    wait: bool = True,
    show_progress: bool = False,
    own_process: bool = False,
) -> Optional[DatasetManifest]:
    """Run ``launched`` (an append with something new, ``api.run_config`` ends the others): its listed work items
    placed in their shards (``launch.place``), then ``pipeline.run.run``. ``own_process``: the caller owns this
    interpreter (the command line): on the default local runner the pool starts and converts the first shards
    ahead while this process places the work items and imports Beam lean."""
    from img2tfrecord.conversion.pool import close_started

    pool = start_pool_early(launched, pipeline_args) if own_process else None
    try:
        placement = place(launched)  # the work items grouped by shard at launch (once), not in the job
        if pool is not None and placement is not None:
            prefetch_first_shards(launched, placement, pool)
        if own_process and converts_in_this_process(pipeline_args):
            import_beam_lean(OPTIONAL_WITH_ANALYSIS if launched.analysed else OPTIONAL_MODULES)
        from img2tfrecord.pipeline.run import run

        before_job = resume_collection if own_process else None
        return run(launched, placement, pipeline_args, wait=wait, show_progress=show_progress, before_job=before_job)
    finally:
        close_started()


def _arg_value(args: Sequence[str], flag: str) -> Optional[str]:
    """The value of ``--flag=V`` or ``--flag V`` in pass-through pipeline arguments (the last one), or None."""
    found = None
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            found = arg[len(flag) + 1 :]
        elif arg == flag and i + 1 < len(args):
            found = args[i + 1]
    return found


def converts_in_this_process(pipeline_args: Sequence[str]) -> bool:
    """Whether the job's shard writer runs in this process, read from the arguments without Beam: the local
    runner (``FnApiRunner``, the default) in its default ``in_memory`` mode."""
    runner = _arg_value(pipeline_args, "--runner")
    mode = _arg_value(pipeline_args, "--direct_running_mode")
    return (runner is None or runner.split(".")[-1] == LOCAL_RUNNER) and mode in (None, LOCAL_RUNNING_MODE)


def start_pool_early(launched: Launch, pipeline_args: Sequence[str]) -> Optional[ConversionPool]:
    """Start the conversion pool of a run on the default local runner before Beam is imported; the pool, or
    None. The shard writer takes it (``conversion.pool.take_started``), so its processes are ready when
    the first shard converts instead of starting then. Not for other runners (their workers convert),
    clips (one per batch), or a run of one conversion process."""
    if not converts_in_this_process(pipeline_args) or launched.kind.sequence:
        return None
    config, plan = launched.config, launched.plan
    processes = config.processes or processes_for(plan.sizing.num_files, plan.sizing.input_bytes)
    if processes < 2:
        return None
    from img2tfrecord.conversion.pool import start_early

    return start_early(launched.converter, processes, launched.kind.batch_size)  # as the shard writer's, or not taken


def prefetch_first_shards(launched: Launch, placement: Placement, pool: ConversionPool) -> int:
    """Have the early ``pool`` convert the first shards' items of ``placement`` now, in the order their writer
    will queue them, within ``PREFETCH_ITEMS`` and ``PREFETCH_BYTES``; the items it converts ahead (0: none).

    Only for a run whose classes are known at launch, and not ``--resume`` (its
    finished shards are replayed, not converted), nor a run with the analysis (it imports TensorFlow
    meanwhile, and converting ahead then delays its job by more than it saves: performance.md). The
    shards go in placement order, the order the local runner hands them to the writer; one it hands
    later is taken then, one it never asks for is dropped.
    """
    labels = launched.labels
    if launched.config.resume or labels is None or launched.analysed:
        return 0
    shards: List[List[Any]] = []
    count = size = 0
    for key, found in placement.streams():  # each shard's items made as they are taken
        shard: List[Any] = []
        for item in (i.item for i in found):
            size += getattr(item, "size", 0)
            if count == PREFETCH_ITEMS or size > PREFETCH_BYTES:
                break
            shard.append(item)
            count += 1
        if shard:
            shards.append(shard)
        if len(shard) < placement.count(key):
            break
    pool.prefetch(shards, labels)
    logging.debug("converting %d work item(s) of the first %d shard(s) ahead", count, len(shards))
    return count


# Each is imported by Beam's package inside a try/except ImportError (apache_beam/typehints/__init__.py,
# apache_beam/io/parquetio.py, apache_beam/io/__init__.py); none is on the local runner's path.
OPTIONAL_MODULES = ("pandas", "pyarrow", "apache_beam.io.gcp.bigquery")
# A run with the analysis keeps pandas and pyarrow: tf.Transform's libraries use them with Beam.
OPTIONAL_WITH_ANALYSIS = ("apache_beam.io.gcp.bigquery",)

_paused = [False]  # whether pause_collection disabled the collector (not the caller)


def import_beam_lean(optional: Sequence[str] = OPTIONAL_MODULES) -> bool:
    """Import ``apache_beam`` with the ``optional`` modules seen as absent while it imports; True if this
    call imported it so, False if it was imported already (then as it was). Afterwards each of them can
    be imported as usual: only Beam's own optional registrations for them are left out."""
    if "apache_beam" in sys.modules:
        return False
    blocked = [name for name in optional if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]  # makes "import name" raise ImportError
    try:
        import apache_beam  # noqa: F401  # pylint: disable=import-outside-toplevel,unused-import
    finally:
        for name in blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    return True


def import_beam_for_options(pipeline_args: Sequence[str], analyse: bool) -> None:
    """Before the command line asks Beam about its pass-through ``pipeline_args`` (Beam itself parses them):
    Beam imported lean, as the run would import it, when the run converts in this process; ``analyse``: the
    run may be analysed (then pandas and pyarrow load with Beam). Nothing without arguments: nothing asks."""
    if pipeline_args and converts_in_this_process(pipeline_args):
        import_beam_lean(OPTIONAL_WITH_ANALYSIS if analyse else OPTIONAL_MODULES)


def one_blas_thread() -> None:
    """numpy's OpenBLAS, once imported here, keeps to the calling thread, unless the environment says
    otherwise; the conversion processes this one starts inherit it."""
    from img2tfrecord.conversion.pool import BLAS_THREADS_ENV  # pylint: disable=import-outside-toplevel

    os.environ.setdefault(BLAS_THREADS_ENV, "1")


def pause_collection() -> None:
    """Disable the cyclic garbage collector until :func:`resume_collection` (no-op if it is disabled)."""
    if gc.isenabled():
        gc.disable()
        _paused[0] = True


def resume_collection() -> None:
    """Enable the collector again, with what the start-up left frozen (never scanned again: it lives for
    the run); once, and only after :func:`pause_collection` disabled the collector."""
    if _paused[0]:
        _paused[0] = False
        gc.freeze()
        gc.enable()
