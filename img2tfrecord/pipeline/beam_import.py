"""Importing Beam for a conversion on the local runner without the optional modules it never uses.

Beam's package imports pandas, pyarrow and its BigQuery/Pub/Sub connectors at its own import, each
inside ``try: ... except ImportError`` so that they stay optional; together they are about 40% of
its import time (performance.md). A process that owns its interpreter (the CLI) and converts on the
local runner uses none of them, so :func:`import_beam_lean` imports Beam with them absent, then
lets them be imported again. A library caller's process may use them with Beam, so it imports Beam
as is.
"""

from __future__ import annotations

import sys

# Each is imported by Beam's package inside a try/except ImportError (apache_beam/typehints/__init__.py,
# apache_beam/io/parquetio.py, apache_beam/io/__init__.py); none is on the local runner's path.
OPTIONAL_MODULES = ("pandas", "pyarrow", "apache_beam.io.gcp.bigquery")


def import_beam_lean() -> bool:
    """Import ``apache_beam`` with ``OPTIONAL_MODULES`` seen as absent while it imports; True if this call
    imported it so, False if it was imported already (then as it was). Afterwards each of them can be
    imported as usual: only Beam's own optional registrations for them are left out."""
    if "apache_beam" in sys.modules:
        return False
    blocked = [name for name in OPTIONAL_MODULES if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]  # makes "import name" raise ImportError
    try:
        import apache_beam  # noqa: F401  # pylint: disable=import-outside-toplevel,unused-import
    finally:
        for name in blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
    return True
