"""What a process that owns its interpreter (the CLI) does to start a local run sooner; a library
caller's process is left as it is.

* Beam is imported without the optional modules a local run never uses (:func:`import_beam_lean`).
  Beam's package imports pandas, pyarrow and its BigQuery/Pub/Sub connectors at its own import,
  each inside ``try: ... except ImportError`` so that they stay optional: a third of its import
  (a run with the analysis leaves out the connectors only).
* The cyclic garbage collector is paused for the start-up (:func:`pause_collection`): the imports,
  the listing and Beam's graph leave a heap of long-lived objects that each full collection would
  scan again; :func:`resume_collection` freezes that heap, so the job's collections skip it.

performance.md has the figures.
"""

from __future__ import annotations

import gc
import sys
from typing import Sequence

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
