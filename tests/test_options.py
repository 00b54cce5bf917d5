"""Every convert option is declared once (img2tfrecord/options.py); what is derived from it must agree."""

from __future__ import annotations

import argparse
import json
import os

import pytest
from conftest import ROOT

from img2tfrecord import option_files, option_values, options
from img2tfrecord.cli import build_parser
from img2tfrecord.images import options as image_options
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.sources.url_lists import UrlOptions

MARKER = "<!-- generated from src/img2tfrecord/options.py: python -m img2tfrecord.option_files --options-table -->\n"


def test_flex_template_metadata_is_the_generated_one():
    with open(os.path.join(ROOT, "flex_template", "metadata.json"), encoding="utf-8") as f:
        assert f.read() == option_files.template_metadata(), "run: python -m img2tfrecord.option_files --flex-metadata"
    names = [p["name"] for p in json.loads(option_files.template_metadata())["parameters"]]
    assert {"input", "output", "resume", "image_size"} <= set(names)


def test_docs_options_table_is_the_generated_one():
    with open(os.path.join(ROOT, "docs", "options.md"), encoding="utf-8") as f:
        text = f.read()
    assert MARKER + option_files.options_table() in text, "run: python -m img2tfrecord.option_files --options-table"


def test_every_declared_option_reaches_the_parser_and_every_recorded_one_the_manifest():
    parser, own = build_parser()
    assert sorted(own) == sorted(s for o in options.CONVERT_OPTIONS for s in (o.short, o.flag) if s)
    ns, rest = parser.parse_known_args(["convert", "--input", "in", "--output", "out"])
    assert rest == []
    dests = {o.dest for o in options.CONVERT_OPTIONS}
    assert dests <= set(vars(ns))
    recorded = {o.recorded_as for o in options.CONVERT_OPTIONS if o.recorded_as}
    url_list = ConvertConfig(input="in", output="out", urls=UrlOptions(label_column="label"))
    assert recorded == set(url_list.options_json())  # a URL list's options are recorded for URL lists only


def test_defaults_are_the_declared_ones():
    parser = argparse.ArgumentParser()
    options.add_convert_arguments(parser)
    ns = parser.parse_args(["--input", "in", "--output", "out"])
    for option in options.CONVERT_OPTIONS:
        if not (option.switch or option.negates or option.required):
            assert getattr(ns, option.dest) == option.default, option.flag
    assert ns.analyze is True and ns.resume is False


BOUNDS = {  # flag -> (largest value accepted, smallest refused)
    "--image-size": (str(option_values.MAX_IMAGE_SIDE), str(option_values.MAX_IMAGE_SIDE + 1)),
    "--max-pixels": (str(option_values.MAX_PIXELS_BOUND), str(option_values.MAX_PIXELS_BOUND + 1)),
    "--max-file-mb": (str(option_values.MAX_FILE_MB_BOUND), f"{option_values.MAX_FILE_MB_BOUND}.5"),
    "--shard-size-mb": (str(option_values.MAX_SHARD_SIZE_MB), f"{option_values.MAX_SHARD_SIZE_MB + 1}"),
    "--num-shards": (str(option_values.MAX_NUM_SHARDS), str(option_values.MAX_NUM_SHARDS + 1)),
}


def _option(flag: str) -> options.Option:
    return next(o for o in options.CONVERT_OPTIONS if o.flag == flag)


def test_size_options_have_upper_bounds_checked_when_parsed():
    for flag, (largest, refused) in BOUNDS.items():
        parse = _option(flag).type
        assert parse is not None
        parse(largest)
        for text in (refused, "1e12", "inf", "nan"):
            with pytest.raises(argparse.ArgumentTypeError) as info:
                parse(text)
            message = str(info.value)
            assert "\n" not in message
            assert message.startswith("expected") or ("at most" in message and "docs/options.md#bounds" in message)
        assert "at most" in _message(parse, refused), flag
    assert _option("--image-size").type("320x16384") == (320, 16384)
    for text in ("16385x10", "10x16385", "100000"):
        assert f"at most {option_values.MAX_IMAGE_SIDE} pixels" in _message(option_values.parse_image_size, text)
    # The defaults are within the bounds.
    assert image_options.DEFAULT_MAX_PIXELS <= option_values.MAX_PIXELS_BOUND
    assert image_options.DEFAULT_MAX_FILE_MB <= option_values.MAX_FILE_MB_BOUND
    assert option_values.DEFAULT_SHARD_SIZE_MB <= option_values.MAX_SHARD_SIZE_MB


def _message(parse, text: str) -> str:
    with pytest.raises(argparse.ArgumentTypeError) as info:
        parse(text)
    return str(info.value)


def test_the_bounds_are_the_documented_ones():
    with open(os.path.join(ROOT, "docs", "options.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("\n## Bounds\n", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip(): line.split("|")[2] for line in section.splitlines() if line.startswith("| `")}
    assert set(rows) == {f"`{flag}`" for flag in BOUNDS}
    for flag, (largest, _) in BOUNDS.items():
        assert rows[f"`{flag}`"].split()[0] == largest, flag
