"""What a process that owns its interpreter (the CLI) does to start a local run sooner; a library
caller's process is left as it is.

* Beam is imported without the optional modules a local run never uses (:func:`import_beam_lean`).
  Beam's package imports pandas, pyarrow and its BigQuery/Pub/Sub connectors at its own import,
  each inside ``try: ... except ImportError`` so that they stay optional: a third of its import
  (a run with the analysis leaves out the connectors only).
* Beam's answer to "which state and timer specs does this DoFn use" is kept per DoFn class
  (:func:`cache_dofn_specs`): Beam asks it several times per transform as it builds, translates and
  runs the graph, each time taking the signature of every method of the DoFn.
* numpy's OpenBLAS starts no threads of its own (:func:`one_blas_thread`): at numpy's import it
  starts one per core, which spin for a while; nothing the command does is linear algebra.
* The cyclic garbage collector is paused for the start-up (:func:`pause_collection`): the imports,
  the listing and Beam's graph leave a heap of long-lived objects that each full collection would
  scan again; :func:`resume_collection` freezes that heap, so the job's collections skip it.

performance.md has the figures.
"""

from __future__ import annotations

import functools
import gc
import os
import sys
import types
from typing import Any, Callable, Dict, Optional, Sequence, Set, Tuple

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


Specs = Tuple[Set[Any], Set[Any]]


def cache_dofn_specs() -> bool:
    """Make Beam's ``userstate.get_dofn_specs`` answer once per DoFn class; True if this call did (False
    when done already, or when this Beam has no such function).

    The specs come from the defaults of the DoFn's bound methods, which belong to its class, so the
    answer is the class's unless an instance holds bound methods of its own (``beam.FlatMap`` over a bound
    method does): those are asked every time. Each caller gets its own copy of the sets.
    """
    from apache_beam.transforms import userstate  # pylint: disable=import-outside-toplevel

    ask: Optional[Callable[[Any], Specs]] = getattr(userstate, "get_dofn_specs", None)
    if ask is None or getattr(ask, "_per_class", False):
        return False
    answers: Dict[type, Specs] = {}

    @functools.wraps(ask)
    def per_class(dofn: Any) -> Specs:
        if any(isinstance(value, types.MethodType) for value in getattr(dofn, "__dict__", {}).values()):
            return ask(dofn)
        key = type(dofn)
        if key not in answers:
            answers[key] = ask(dofn)
        states, timers = answers[key]
        return set(states), set(timers)

    per_class._per_class = True  # type: ignore[attr-defined]
    userstate.get_dofn_specs = per_class
    return True


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
