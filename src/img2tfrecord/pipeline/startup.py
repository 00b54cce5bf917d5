"""A run's fixed start-up, measured for ``convert --plan``: its imports, its listing, its placement and
its Beam graph.

The imports are timed in a fresh interpreter (a run starts one; the planning process has imported
Beam already), started beside the plan's own work, once per environment (kept in
``~/.cache/img2tfrecord/import-seconds.json``, or ``$IMG2TFRECORD_CACHE_DIR``: a later plan does not import
Beam, nor TensorFlow for the analysis, a second time to learn the same figure); the listing is the plan's
own; the placement groups a sample of the plan's work items by shard as the launch does; the graph is
built, not run.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Any, Dict, Optional, Sequence, Tuple

from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.kinds.ledger import ListedItems
from img2tfrecord.pipeline.plan_model import Plan

# What a run imports: the launch, then Beam with the job's modules; the analysis adds TensorFlow and
# tf.Transform. An append that finds nothing new imports only the launch (no Beam).
_RUN_MODULES = ("img2tfrecord.pipeline.run",)
_ANALYSIS_MODULES = ("img2tfrecord.transforms.analyze",)
_LAUNCH_MODULES = ("img2tfrecord.pipeline.launch",)
_LEAN_IMPORT = "img2tfrecord.pipeline.fast_start"  # as the command line imports Beam for a local run
_IMPORT_TIMEOUT_S = 120.0
PLACEMENT_SAMPLE = 20_000  # work items the placement is timed on


@dataclasses.dataclass(frozen=True)
class Startup:
    """Seconds a local run spends before its first conversion, by part."""

    imports: float  # a fresh interpreter importing the run's modules (with the analysis: TensorFlow, tf.Transform)
    listing: float  # listing the input and reading what it names, as the plan did
    graph: float  # building the run's Beam graph (the analysis' graph is not built)
    placement: float = 0.0  # grouping the work items by shard at launch (folders and manifests)

    @property
    def seconds(self) -> float:
        return round(self.imports + self.listing + self.graph + self.placement, 1)

    def parts(self) -> Dict[str, float]:
        return {name: round(value, 2) for name, value in dataclasses.asdict(self).items()}


_MEASURED: Dict[Tuple[bool, bool], float] = {}  # (analysis, job) -> import seconds, once per process
CACHE_ENV = "IMG2TFRECORD_CACHE_DIR"  # where measured import times are kept (default ~/.cache/img2tfrecord)
_PACKAGES = ("apache-beam", "tensorflow", "tensorflow-transform", "pillow", "numpy")


class ImportTimer:
    """A fresh interpreter importing a run's modules, started at once beside the caller's own work;
    :meth:`seconds` is its wall time from start to the end of its imports (0.0 if it failed).

    A figure measured once is kept on disk for this Python and these package versions
    (:func:`cached_import_seconds`): a later plan reads it instead of importing Beam, and with the
    analysis TensorFlow, again in a second process beside its own work."""

    def __init__(self, analysis: bool, job: bool = True):
        self.analysis = analysis
        self._key = (analysis, job)  # job False: the launch alone, of a run that ends before any job
        self._proc: Optional[subprocess.Popen] = None
        if self._key not in _MEASURED:
            cached = cached_import_seconds(self._key)
            if cached is not None:
                _MEASURED[self._key] = cached
        if self._key in _MEASURED:
            return
        modules = (_RUN_MODULES + (_ANALYSIS_MODULES if analysis else ())) if job else _LAUNCH_MODULES
        code = "; ".join(f"import {m}" for m in modules) + "; import time; print(time.time())"
        if job:  # as the CLI imports Beam for a local run
            optional = "OPTIONAL_WITH_ANALYSIS" if analysis else "OPTIONAL_MODULES"
            code = f"from {_LEAN_IMPORT} import import_beam_lean, {optional}; import_beam_lean({optional}); {code}"
        self._started = time.time()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", code],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        except OSError:
            _MEASURED[self._key] = 0.0

    @property
    def measuring(self) -> bool:
        """Whether a fresh interpreter is timing the imports (no figure was measured or kept before)."""
        return self._proc is not None

    def close(self) -> None:
        """Stop the interpreter if it is still importing (the plan failed before it needed the figure)."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.communicate()
            self._proc = None

    def seconds(self) -> float:
        if self._proc is not None:
            try:
                out, _ = self._proc.communicate(timeout=_IMPORT_TIMEOUT_S)
                ended = float(out.split()[-1]) if self._proc.returncode == 0 else None
            except (subprocess.SubprocessError, ValueError, IndexError):
                self._proc.kill()
                self._proc.communicate()
                ended = None
            _MEASURED[self._key] = 0.0 if ended is None else max(0.0, ended - self._started)
            self._proc = None
            if ended is not None:
                keep_import_seconds(self._key, _MEASURED[self._key])
        return _MEASURED[self._key]


def _cache_file() -> str:
    folder = os.environ.get(CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "img2tfrecord"
    )
    return os.path.join(folder, "import-seconds.json")


def _cache_key(key: Tuple[bool, bool]) -> str:
    """What a measured import time holds for: the modules imported, this Python and the packages' versions."""
    import importlib.metadata

    import img2tfrecord

    versions = []
    for name in _PACKAGES:
        try:
            versions.append(f"{name}={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{name}=none")
    analysis, job = key
    modules = "launch" if not job else "run+analysis" if analysis else "run"
    return " ".join(
        [modules, sys.executable, sys.version.split()[0], f"img2tfrecord={img2tfrecord.__version__}", *versions]
    )


def cached_import_seconds(key: Tuple[bool, bool]) -> Optional[float]:
    """The import time kept for ``key`` (analysis, job) in this environment, or None."""
    try:
        with open(_cache_file(), encoding="utf-8") as f:
            found = json.load(f).get(_cache_key(key))
    except (OSError, ValueError, AttributeError):
        return None
    return float(found) if isinstance(found, (int, float)) and found > 0 else None


def keep_import_seconds(key: Tuple[bool, bool], seconds: float) -> None:
    """Keep a measured import time for later plans (written whole: temp name, then rename); a cache that
    cannot be written is left as it is."""
    path = _cache_file()
    try:
        with open(path, encoding="utf-8") as f:
            kept = json.load(f)
        if not isinstance(kept, dict):
            kept = {}
    except (OSError, ValueError):
        kept = {}
    kept[_cache_key(key)] = round(seconds, 3)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temp = f"{path}.tmp-{os.getpid()}"
        with open(temp, "w", encoding="utf-8") as f:
            json.dump(kept, f, indent=1, sort_keys=True)
        os.replace(temp, path)
    except OSError:
        pass


def graph_seconds(config: ConvertConfig, plan: Plan) -> float:
    """Wall seconds of building (not running) the Beam graph of ``config`` without the analysis."""
    import apache_beam as beam

    from img2tfrecord.pipeline.build import build_pipeline
    from img2tfrecord.pipeline.launch import launch_plan
    from img2tfrecord.pipeline.runner import RunOptions

    started = time.perf_counter()
    launched = launch_plan(plan, dataclasses.replace(config, analyze=False))
    pipeline = beam.Pipeline(options=RunOptions([]))
    try:
        build_pipeline(pipeline, launched, config.processes or 1)
    finally:
        shutil.rmtree(pipeline.local_tempdir, ignore_errors=True)  # Beam removes it in run() only
    return time.perf_counter() - started


def launch_only(listing_seconds: float) -> Startup:
    """The start-up of a run that ends at its launch (an append with nothing new): no Beam, no graph."""
    imports = ImportTimer(analysis=False, job=False)
    try:
        return Startup(imports.seconds(), listing_seconds, 0.0)
    finally:
        imports.close()


def measure(
    config: ConvertConfig, plan: Plan, listing_seconds: float, imports: ImportTimer, items: Sequence[Any] = ()
) -> Startup:
    """The start-up of running ``config`` as ``plan`` locally; ``listing_seconds``: what the plan's listing
    took; ``imports``: started with the plan, for the analysis the run does or not; ``items``: the work
    items the launch groups by shard (none: the pipeline groups them)."""
    return Startup(
        imports.seconds(), listing_seconds, graph_seconds(config, plan), placement_seconds(config, plan, items)
    )


def placement_seconds(config: ConvertConfig, plan: Plan, items: Sequence[Any]) -> float:
    """Seconds the launch takes to place ``items`` in their shards and encode the groups, as ``place_listing``
    does before it writes them: timed on up to ``PLACEMENT_SAMPLE`` of them, in proportion to all."""
    if not items:
        return 0.0
    from img2tfrecord.conversion import placed_items
    from img2tfrecord.conversion.placement import place_all
    from img2tfrecord.pipeline.launch import launch_plan
    from img2tfrecord.pipeline.sizing import evenly_spaced

    sample = evenly_spaced(items, PLACEMENT_SAMPLE)
    started = time.perf_counter()
    placement = place_all(launch_plan(plan, config).converter, ListedItems(sample), plan.sizing.num_shards)
    placed_items.write_blocks(io.BytesIO(), placement.streams())
    return (time.perf_counter() - started) * len(items) / len(sample)
