"""``convert``'s options as the Python API takes them: keywords named after the flags' ``dest``, each value
checked as the flag's is (``convert()``, ``plan()``, ``ImagesToTFRecords``, ``ImagesToExamples``)."""

from __future__ import annotations

import argparse
from typing import Any, Dict, Mapping

from img2tfrecord.errors import UsageError
from img2tfrecord.option_spec import Option
from img2tfrecord.options import CONVERT_OPTIONS

# Command-line switches that are not conversion options: the Python API has plan() for --plan and --json,
# convert(wait=False) for --no-wait, and prints nothing (--quiet, --verbose, --all-classes are the command's).
_COMMAND_ONLY = ("input", "output", "plan", "json", "all_classes", "quiet", "verbose", "no_wait")
KEYWORD_OPTIONS: Dict[str, Option] = {o.dest: o for o in CONVERT_OPTIONS if o.dest not in _COMMAND_ONLY}


def check_values(given: Mapping[str, Any]) -> None:
    """UsageError, with the line the command line would print, for a keyword option's value its flag would refuse
    or two options of one exclusive group (each given, i.e. not None); names that are not options are left alone."""
    groups: Dict[str, Option] = {}
    for name, option in KEYWORD_OPTIONS.items():
        if name not in given:
            continue
        value = given[name]
        try:
            option.value_of(value)
        except ValueError as e:
            raise UsageError(str(e)) from None
        if option.exclusive_group and value is not None:
            first = groups.setdefault(option.exclusive_group, option)
            if first is not option:
                raise UsageError(f"argument {option.flag}: not allowed with argument {first.flag}")


def option_arguments(ns: argparse.Namespace) -> Dict[str, Any]:
    """The keyword options of the command line's parsed flags, for ``pipeline.config.config_from_options``."""
    return {name: getattr(ns, name) for name in KEYWORD_OPTIONS}
