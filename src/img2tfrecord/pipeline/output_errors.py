"""Why an output location cannot be used: the launcher's usage error and a filesystem error's cause in words."""

from __future__ import annotations


class OutputNotWritable(ValueError):
    """The output location cannot be written or cleared (a usage error, found before any pipeline starts)."""


def error_cause(e: Exception) -> str:
    """The cause of a filesystem error in a few words (``Permission denied``, ``Read-only file system``)."""
    for _ in range(2):  # Beam's BeamIOError holds the causes per path, sometimes one more BeamIOError
        details = getattr(e, "exception_details", None)
        if isinstance(details, dict) and details and isinstance(next(iter(details.values())), Exception):
            e = next(iter(details.values()))
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    if isinstance(e, OSError) and e.args and isinstance(e.args[0], OSError) and e.args[0].strerror:
        return e.args[0].strerror  # LocalFileSystem wraps the OSError in an IOError
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"
