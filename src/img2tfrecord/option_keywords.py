"""``convert``'s options as the Python API takes them: keywords named after the flags' ``dest``, each value
checked as the flag's is (``convert()``, ``plan()``, ``ImagesToTFRecords``, ``ExamplesToTFRecords``)."""

from __future__ import annotations

import difflib
from typing import Any, Dict, Mapping, Optional, Sequence

from img2tfrecord.errors import UsageError
from img2tfrecord.option_spec import Option
from img2tfrecord.options import CONVERT_OPTIONS

# Command-line switches that are not conversion options: the Python API has plan() for --plan and --json,
# convert(wait=False) for --no-wait, and prints nothing (--quiet, --verbose, --all-classes are the command's).
_COMMAND_ONLY = ("input", "output", "plan", "json", "all_classes", "quiet", "verbose", "no_wait")
KEYWORD_OPTIONS: Dict[str, Option] = {o.dest: o for o in CONVERT_OPTIONS if o.dest not in _COMMAND_ONLY}


def unexpected_keyword(name: str, allowed: Sequence[str]) -> str:
    """``unexpected keyword argument 'fromat' (did you mean format?)``."""
    hint = difflib.get_close_matches(name, list(allowed), n=1)
    return f"unexpected keyword argument {name!r}" + (f" (did you mean {hint[0]}?)" if hint else "")


def keyword_values(given: Mapping[str, Any], allowed: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """``convert``'s options as the Python API takes them (keywords named after the flags' ``dest``), each
    checked as its flag is and every other option at its default: the values the command line's parser gives.
    ``allowed`` limits the keywords taken (a PTransform's). TypeError names an unknown keyword, UsageError
    a bad value with the line the command line would print."""
    names = list(KEYWORD_OPTIONS) if allowed is None else list(allowed)
    unknown = [name for name in given if name not in names]
    if unknown:
        takes = f"; takes {', '.join(names)}" if allowed is not None else ""
        raise TypeError(f"{unexpected_keyword(unknown[0], names)}{takes}")
    values = {name: option.default_value for name, option in KEYWORD_OPTIONS.items()}
    groups: Dict[str, Option] = {}
    for name, value in given.items():
        option = KEYWORD_OPTIONS[name]
        try:
            values[name] = option.value_of(value)
        except ValueError as e:
            raise UsageError(str(e)) from None
        if option.exclusive_group and value is not None:
            first = groups.setdefault(option.exclusive_group, option)
            if first is not option:
                raise UsageError(f"argument {option.flag}: not allowed with argument {first.flag}")
    return values
