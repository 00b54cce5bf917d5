"""A run's fixed start-up, measured for ``convert --plan``: its imports, its listing and its Beam graph.

The imports are timed in a fresh interpreter (a run starts one; the planning process has imported
Beam already), once per process; the listing is the plan's own; the graph is built, not run.
"""

from __future__ import annotations

import dataclasses
import functools
import subprocess
import sys
import time
from typing import Dict

from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.plan_model import Plan

# What a run's launcher imports before it lists anything; the analysis adds TensorFlow and tf.Transform.
_RUN_MODULES = ("img2tfrecord.pipeline.run",)
_ANALYSIS_MODULES = ("img2tfrecord.transforms.analyze",)
_IMPORT_TIMEOUT_S = 120.0


@dataclasses.dataclass(frozen=True)
class Startup:
    """Seconds a local run spends before its first conversion, by part."""

    imports: float  # a fresh interpreter importing the run's modules (with the analysis: TensorFlow, tf.Transform)
    listing: float  # listing the input and reading what it names, as the plan did
    graph: float  # building the run's Beam graph (the analysis' graph is not built)

    @property
    def seconds(self) -> float:
        return round(self.imports + self.listing + self.graph, 1)

    def parts(self) -> Dict[str, float]:
        return {name: round(value, 2) for name, value in dataclasses.asdict(self).items()}


@functools.cache
def import_seconds(analysis: bool) -> float:
    """Wall seconds of ``python -c "import <the run's modules>"``, interpreter start included; 0.0 if it fails."""
    modules = _RUN_MODULES + (_ANALYSIS_MODULES if analysis else ())
    started = time.perf_counter()
    try:
        subprocess.run(
            [sys.executable, "-c", "; ".join(f"import {m}" for m in modules)],
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=_IMPORT_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError):
        return 0.0
    return time.perf_counter() - started


def graph_seconds(config: ConvertConfig, plan: Plan) -> float:
    """Wall seconds of building (not running) the Beam graph of ``config`` without the analysis."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from img2tfrecord.pipeline.build import build_pipeline

    started = time.perf_counter()
    build_pipeline(beam.Pipeline(options=PipelineOptions([])), dataclasses.replace(config, analyze=False), plan)
    return time.perf_counter() - started


def measure(config: ConvertConfig, plan: Plan, listing_seconds: float, analysis: bool) -> Startup:
    """The start-up of running ``config`` as ``plan`` locally; ``listing_seconds``: what the plan's listing took."""
    return Startup(import_seconds(analysis), listing_seconds, graph_seconds(config, plan))
