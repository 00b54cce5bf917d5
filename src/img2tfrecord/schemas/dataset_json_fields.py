"""The field checks of ``dataset.json``'s parts: each reads one JSON value and names the field it rejects."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, TypeVar

from img2tfrecord.schemas import output_files

T = TypeVar("T")


class DatasetJsonError(ValueError):
    """``dataset.json`` is not a manifest this version reads; the message names the field."""


def fail(where: str, what: str) -> DatasetJsonError:
    return DatasetJsonError(f"{output_files.MANIFEST_FILE}: {where} {what}")


def count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise fail(where, f"is {value!r}, not a count")
    return value


def string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise fail(where, f"is {value!r}, not a string")
    return value


def opt_string(value: Any, where: str) -> Optional[str]:
    return None if value is None else string(value, where)


def obj(value: Any, where: str) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise fail(where, f"is {type(value).__name__}, not an object")
    return value


def counts(value: Any, where: str) -> Dict[str, int]:
    return {string(k, where): count(n, f"{where}.{k}") for k, n in obj(value, where).items()}


def enum_value(cls: Callable[[str], T], value: Any, where: str) -> T:
    try:
        return cls(value)
    except ValueError:
        allowed = ", ".join(m.value for m in cls)  # type: ignore[attr-defined]
        raise fail(where, f"is {value!r}; expected one of {allowed}") from None
