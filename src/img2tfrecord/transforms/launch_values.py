"""Values a run knows when its graph is built (its class list, shard counts, rows rejected at launch, the
one element that starts a finishing step), as PCollections that all come from one ``Impulse`` per pipeline.

A ``Create`` is a root of its own, and the local runner runs each root as a stage of its own, at a fixed
cost per stage; consumers of one root's output fuse into its stage, so these values cost one stage.
"""

from __future__ import annotations

import weakref
from typing import Any, Sequence

import apache_beam as beam

_ROOTS: weakref.WeakKeyDictionary[beam.Pipeline, beam.PCollection] = weakref.WeakKeyDictionary()


def launch_value(pipeline: beam.Pipeline, label: str, value: Any) -> beam.PCollection:
    """A PCollection of one element, ``value``."""
    return _root(pipeline) | label >> beam.Map(_Constant(value))


def launch_values(pipeline: beam.Pipeline, label: str, values: Sequence[Any]) -> beam.PCollection:
    """A PCollection of ``values``."""
    return _root(pipeline) | label >> beam.FlatMap(_Constant(list(values)))


def _root(pipeline: beam.Pipeline) -> beam.PCollection:
    root = _ROOTS.get(pipeline)
    if root is None:
        root = _ROOTS[pipeline] = pipeline | "LaunchValues" >> beam.Impulse()
    return root


class _Constant:
    """``impulse -> value`` (picklable, unlike a closure over a local)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __call__(self, _impulse: bytes) -> Any:
        return self.value
