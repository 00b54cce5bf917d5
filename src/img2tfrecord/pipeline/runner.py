"""The runner a conversion uses: Beam's options as the command gives them, which runner they name, and
where a running job's progress counts come from."""

from __future__ import annotations

import functools
import inspect
import logging
import types
import urllib.parse
import weakref
from typing import Any, Callable, Dict, FrozenSet, MutableMapping, Optional, Sequence, Set, Tuple, Type, TypeVar

import apache_beam as beam
from apache_beam.options.pipeline_options import (
    DirectOptions,
    GoogleCloudOptions,
    PipelineOptions,
    PortableOptions,
    StandardOptions,
    TestOptions,
)

from img2tfrecord import progress
from img2tfrecord.conversion.pool import usable_cores
from img2tfrecord.pipeline.config import LOCAL_RUNNER
from img2tfrecord.pipeline.plan_model import Plan
from img2tfrecord.pipeline.sizing import processes_for
from img2tfrecord.transforms.counters import BYTES_WRITTEN, IMAGES_REJECTED, IMAGES_WRITTEN, NAMESPACE

_View = TypeVar("_View", bound=PipelineOptions)


class RunOptions(PipelineOptions):
    """Beam's options whose views are made once per options class.

    Beam asks for a view on every transform applied and every type check, and each new view parses every
    registered option again: about a quarter of a small local run's CPU. A view shares the options' values,
    so a kept one reads and writes what a new one would; the kept views are not pickled or copied.
    """

    def view_as(self, cls: Type[_View]) -> _View:
        views = self.__dict__.setdefault("_views", {})
        view = views.get(cls)
        if view is None:
            view = views[cls] = super().view_as(cls)
        return view

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(super().__getstate__())
        state.pop("_views", None)
        return state


def weigh_cached_values_without_a_module_scan() -> None:
    """In this process, Beam's SDK worker weighs what it caches (side inputs, state) without first listing
    the globals of every loaded module.

    objsize does that listing at every call to leave module globals out of a weight: tens of milliseconds a
    bundle once TensorFlow is loaded, a tenth of a small local run's CPU. Beam's own filter already stops at
    modules, classes and functions, the ways to those globals, so the weights stay those of the values.
    A Beam whose cache is laid out otherwise is left as it is.
    """
    try:
        import objsize
        from apache_beam.runners.worker import statecache

        settings = {
            "get_size_func": statecache._size_func,
            "get_referents_func": statecache._get_referents_func,
            "filter_func": statecache._filter_func,
        }
    except (ImportError, AttributeError):
        return
    if getattr(statecache.get_deep_size, "without_module_scan", False):
        return

    def get_deep_size(*objs: Any) -> int:
        return int(objsize.get_deep_size(*objs, exclude_modules_globals=False, **settings))

    get_deep_size.without_module_scan = True  # type: ignore[attr-defined]
    statecache.get_deep_size = get_deep_size


Specs = Tuple[Set[Any], Set[Any]]


def ask_dofn_specs_once() -> bool:
    """In this process, Beam's ``userstate.get_dofn_specs`` answers once per DoFn class and shape; True if
    this call made it so (False when done already, or when this Beam has no such function).

    Beam asks it about eight times per DoFn as it builds, translates and runs a graph, each time taking the
    signature of every bound method of the DoFn: a third of a small library run's CPU. Those methods are the
    class's, less the ones an instance shadows with a plain function (``beam.Map`` sets ``process`` so; Beam
    skips those), so the answer is kept per class and set of shadowed names. A DoFn that holds bound methods
    of its own, or whose class has Beam inspect a method through the instance (``_inspect_<name>``), is
    asked every time. Each caller gets its own copy of the sets.
    """
    from apache_beam.transforms import userstate

    ask: Optional[Callable[[Any], Specs]] = getattr(userstate, "get_dofn_specs", None)
    if ask is None or getattr(ask, "asked_once", False):
        return False
    # Per class: (its methods' names, the names it inspects through _inspect_<name>, answers per shadowed set).
    kept: MutableMapping[type, Tuple[FrozenSet[str], FrozenSet[str], Dict[FrozenSet[str], Specs]]]
    kept = weakref.WeakKeyDictionary()

    def answers_of(cls: type) -> Tuple[FrozenSet[str], FrozenSet[str], Dict[FrozenSet[str], Specs]]:
        found = kept.get(cls)
        if found is None:
            names = dir(cls)
            methods = frozenset(name for name in names if inspect.isfunction(getattr(cls, name, None)))
            inspected = frozenset(name[len("_inspect_") :] for name in names if name.startswith("_inspect_"))
            found = kept[cls] = (methods, inspected, {})
        return found

    @functools.wraps(ask)
    def once(dofn: Any) -> Specs:
        own = getattr(dofn, "__dict__", {})
        if any(isinstance(value, types.MethodType) for value in own.values()):
            return ask(dofn)
        methods, inspected, answers = answers_of(type(dofn))
        shadowed = frozenset(name for name in own if name in methods or name in inspected)
        if not inspected <= shadowed:
            return ask(dofn)
        found = answers.get(shadowed)
        if found is None:
            found = answers[shadowed] = ask(dofn)
        states, timers = found
        return set(states), set(timers)

    once.asked_once = True  # type: ignore[attr-defined]
    userstate.get_dofn_specs = once
    return True


def pipeline_options(pipeline_args: Sequence[str]) -> PipelineOptions:
    """Beam options from the pass-through args, with the local runner as the default runner."""
    weigh_cached_values_without_a_module_scan()
    ask_dofn_specs_once()
    options = RunOptions(list(pipeline_args))
    standard = options.view_as(StandardOptions)
    if not standard.runner:
        standard.runner = LOCAL_RUNNER
    return options


def is_local_runner(options: PipelineOptions) -> bool:
    runner = options.view_as(StandardOptions).runner or LOCAL_RUNNER
    return str(runner).split(".")[-1] in StandardOptions.LOCAL_RUNNERS


def is_dry_run(options: PipelineOptions) -> bool:
    """``--dry_run=True``: the job is built and translated, nothing runs (DataflowRunner)."""
    return str(options.view_as(TestOptions).dry_run).lower() in ("true", "1", "yes")


def default_processes(options: Optional[PipelineOptions] = None, plan: Optional[Plan] = None) -> int:
    """Conversion processes: locally one per usable core, fewer for a small ``plan``
    (``sizing.processes_for``); 1 (the worker itself) on distributed runners."""
    if options is not None and not is_local_runner(options):
        return 1
    return usable_cores() if plan is None else processes_for(plan.sizing.num_files, plan.sizing.input_bytes)


def is_dataflow(options: PipelineOptions) -> bool:
    return str(options.view_as(StandardOptions).runner or "").split(".")[-1] == "DataflowRunner"


def dataflow_console_url(project: str, region: str, job_id: str) -> str:
    """The Cloud Console page of a Dataflow job."""

    def part(text: str) -> str:
        return urllib.parse.quote(str(text), safe="")

    return f"https://console.cloud.google.com/dataflow/jobs/{part(region)}/{part(job_id)}?project={part(project)}"


COUNTS_HERE = "here"  # the steps run in this process: progress.TALLY
COUNTS_FROM_JOB = "job"  # the running job's metrics (Dataflow reports them while it runs)


def live_counts(options: PipelineOptions) -> Optional[str]:
    """Where a running job's counts can be read; None when the runner reports them only at its end.

    Beam's local runners run the steps in this process (not in
    ``multi_processing`` mode), so does a portable runner's ``LOOPBACK``
    environment; their metrics are queryable only after ``p.run()``.
    Portable job services (Beam's own, Flink's, Spark's) report metrics when
    the job ends.
    """
    if is_local_runner(options):
        return None if options.view_as(DirectOptions).direct_running_mode == "multi_processing" else COUNTS_HERE
    if is_dataflow(options):
        return COUNTS_FROM_JOB
    if str(options.view_as(PortableOptions).environment_type or "").upper() == "LOOPBACK":
        return COUNTS_HERE
    return None


def job_counts(result) -> progress.Counts:
    """A job's counts from its Beam metrics, summed over the steps that report them.

    Committed values where the runner has them, else attempted ones (a
    running Dataflow job's tentative counts).
    """
    query = beam.metrics.MetricsFilter().with_namespace(NAMESPACE)
    found: Dict[str, int] = {}
    for counter in result.metrics().query(query)["counters"]:
        value = counter.committed or counter.attempted or 0
        found[counter.key.metric.name] = found.get(counter.key.metric.name, 0) + int(value)
    return progress.Counts(found.get(IMAGES_WRITTEN, 0), found.get(IMAGES_REJECTED, 0), found.get(BYTES_WRITTEN, 0))


def log_dataflow_job(options: PipelineOptions, result) -> None:
    job_id: Callable[[], str] = getattr(result, "job_id", lambda: "")
    if not job_id():
        return
    cloud = options.view_as(GoogleCloudOptions)
    logging.info("Dataflow job %s: %s", job_id(), dataflow_console_url(cloud.project, cloud.region, job_id()))
