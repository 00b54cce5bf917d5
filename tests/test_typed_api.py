"""The typed Python API: convert()'s, plan()'s and the Beam transforms' keywords are options.py's options, each
typed and defaulted as declared, and a type checker holds a caller to them."""

from __future__ import annotations

import collections.abc
import inspect
import os
import typing

import pytest

import img2tfrecord
from img2tfrecord import api
from img2tfrecord.option_keywords import KEYWORD_OPTIONS
from img2tfrecord.option_spec import Option
from img2tfrecord.pipeline.config import ConvertConfig, config_from_options

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where each parameter list lives, and which options it takes (all of them unless named).
NOT_OPTIONS = {"self", "input", "output", "root", "labeled", "pipeline_options", "wait", "progress"}
# Names the annotations use that their modules import only for type checkers.
TYPE_CHECKING_NAMES = {"PipelineOptions": object, "DatasetManifest": object, "RunPlan": object, "ConvertConfig": object}


def _parameter_lists():
    from img2tfrecord.beam.examples import OPTIONS, ImagesToExamples
    from img2tfrecord.beam.folders import OUTPUT_OPTIONS, ImagesToTFRecords

    every = tuple(KEYWORD_OPTIONS)
    return [
        ("img2tfrecord.api.convert", api.convert, every),
        ("img2tfrecord.api.plan", api.plan, every),
        ("img2tfrecord.pipeline.config.config_from_options", config_from_options, every),
        ("img2tfrecord.beam.examples.ImagesToExamples.__init__", ImagesToExamples.__init__, OPTIONS),
        ("img2tfrecord.beam.folders.ImagesToTFRecords.__init__", ImagesToTFRecords.__init__, OPTIONS + OUTPUT_OPTIONS),
    ]


def _accepts(hint, value) -> bool:
    """Whether ``value`` is of the annotation ``hint`` (the forms the option annotations use)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any or hint is object:
        return True
    if origin is typing.Union:
        return any(_accepts(arg, value) for arg in args)
    if origin is typing.Literal:
        return value in args and not (isinstance(value, bool) and True not in args and False not in args)
    if hint is type(None):
        return value is None
    if origin is tuple:
        return isinstance(value, tuple) and len(value) == len(args) and all(map(_accepts, args, value))
    if origin is not None and isinstance(origin, type) and issubclass(origin, collections.abc.Mapping):
        return isinstance(value, collections.abc.Mapping)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _literals(hint) -> set:
    """The values of the Literals in ``hint`` (through Optional)."""
    if typing.get_origin(hint) is typing.Literal:
        return set(typing.get_args(hint))
    return set().union(*(_literals(arg) for arg in typing.get_args(hint))) if typing.get_args(hint) else set()


def _sample_values(option: Option) -> list:
    """Values the option's flag takes, as the Python API takes them."""
    if option.switch or option.negates:
        return [True, False]
    if option.choices is not None:
        return list(option.choices)
    samples = {"image_size": [224, (320, 240)], "splits": ["train=0.5,test=0.5", {"train": 1.0}]}
    if option.dest in samples:
        return samples[option.dest]
    return [option.type("1")] if option.type is not None else []


@pytest.mark.parametrize("where, function, names", _parameter_lists(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_option_is_a_typed_keyword_with_its_declared_default(where, function, names):
    parameters = inspect.signature(function).parameters
    hints = typing.get_type_hints(function, localns=TYPE_CHECKING_NAMES)
    for name in names:
        option = KEYWORD_OPTIONS[name]
        assert name in parameters, (
            f"{where} has no parameter {name!r} for {option.flag} (options.py): add "
            f"`{name}: <type> = {option.default_value!r}` to its keyword-only parameters, in options.py's order"
        )
        parameter = parameters[name]
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY, f"{where}: {name} must be keyword-only"
        assert parameter.default == option.default_value and type(parameter.default) is type(option.default_value), (
            f"{where}: {name} defaults to {parameter.default!r}; {option.flag}'s default is {option.default_value!r}"
        )
        hint = hints.get(name)
        assert hint is not None, f"{where}: {name} has no type annotation"
        for value in [option.default_value, *_sample_values(option)]:
            assert _accepts(hint, value), f"{where}: {name}: {hint} does not take {value!r}, which {option.flag} takes"
        if option.choices is not None:
            assert _literals(hint) == set(option.choices), (
                f"{where}: {name}'s Literal {sorted(map(str, _literals(hint)))} differs from {option.flag}'s choices "
                f"{list(option.choices)} (option_values.py holds the Literal types)"
            )
    extra = [p for p in parameters if p not in names and p not in NOT_OPTIONS]
    assert not extra, f"{where} takes {extra}, which are not convert options of options.py"


def test_the_options_and_the_config_agree_on_every_default(tmp_path):
    # The command line's parser, convert()'s keywords and the ConvertConfig dataclass: one default per option.
    out = str(tmp_path / "out")
    assert config_from_options("in", out) == ConvertConfig(input="in", output=out)
    assert img2tfrecord.ConvertConfig is ConvertConfig


def test_a_type_checker_refuses_a_wrong_option_type(tmp_path):
    from mypy import api as mypy

    caller = tmp_path / "caller.py"
    caller.write_text(
        "import img2tfrecord\n"
        "img2tfrecord.convert('in', 'out', image_size=224, splits={'train': 1.0}, resize='fit')\n"
        "img2tfrecord.convert('in', 'out', image_size='big')\n"
        "img2tfrecord.plan('in', 'out', resize='squash')\n"
        "config: img2tfrecord.ConvertConfig = img2tfrecord.ConvertConfig('in', 'out', processes=2)\n"
    )
    # Only the API's own modules are read: the package's annotations, not its whole import graph.
    ini = tmp_path / "mypy.ini"
    ini.write_text(
        "[mypy]\nfollow_imports = skip\nignore_missing_imports = True\n"
        "[mypy-img2tfrecord,img2tfrecord.api,img2tfrecord.option_values,img2tfrecord.pipeline.config]\n"
        "follow_imports = normal\n"
    )
    stdout, stderr, status = mypy.run(
        ["--config-file", str(ini), "--no-incremental", "--no-error-summary", "--hide-error-context", str(caller)]
        + ["--python-version", "3.11", "--cache-dir", os.devnull]
    )
    errors = [line for line in stdout.splitlines() if f"{caller.name}:" in line and ": error:" in line]
    lines = sorted({int(line.split(":")[1]) for line in errors})
    assert lines == [3, 4], stdout + stderr
    assert '"image_size"' in errors[0] and '"str"' in errors[0], errors[0]
