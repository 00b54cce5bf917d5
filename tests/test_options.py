"""Every convert option is declared once (img2tfrecord/options.py); what is derived from it must agree."""

from __future__ import annotations

import argparse
import json
import os

from conftest import ROOT

from img2tfrecord import options
from img2tfrecord.cli import build_parser
from img2tfrecord.pipeline.config import ConvertConfig

MARKER = "<!-- generated from img2tfrecord/options.py: python -m img2tfrecord.options --options-table -->\n"


def test_flex_template_metadata_is_the_generated_one():
    with open(os.path.join(ROOT, "flex_template", "metadata.json"), encoding="utf-8") as f:
        assert f.read() == options.template_metadata(), "run: python -m img2tfrecord.options --flex-metadata"
    names = [p["name"] for p in json.loads(options.template_metadata())["parameters"]]
    assert {"input", "output", "resume", "image_size"} <= set(names)


def test_docs_options_table_is_the_generated_one():
    with open(os.path.join(ROOT, "docs", "options.md"), encoding="utf-8") as f:
        text = f.read()
    assert MARKER + options.options_table() in text, "run: python -m img2tfrecord.options --options-table"


def test_every_declared_option_reaches_the_parser_and_every_recorded_one_the_manifest():
    parser, own = build_parser()
    assert sorted(own) == sorted(s for o in options.CONVERT_OPTIONS for s in (o.short, o.flag) if s)
    ns, rest = parser.parse_known_args(["convert", "--input", "in", "--output", "out"])
    assert rest == []
    dests = {o.dest for o in options.CONVERT_OPTIONS}
    assert dests <= set(vars(ns))
    recorded = {o.recorded_as for o in options.CONVERT_OPTIONS if o.recorded_as}
    assert recorded == set(ConvertConfig(input="in", output="out").options_json())


def test_defaults_are_the_declared_ones():
    parser = argparse.ArgumentParser()
    options.add_convert_arguments(parser)
    ns = parser.parse_args(["--input", "in", "--output", "out"])
    for option in options.CONVERT_OPTIONS:
        if not (option.switch or option.negates or option.required):
            assert getattr(ns, option.dest) == option.default, option.flag
    assert ns.analyze is True and ns.resume is False
