"""``img2tfrecord inspect DIR``: the summary of a converted output, and optional pictures of it."""

from __future__ import annotations

import argparse
import json
import sys

from img2tfrecord.commands.errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE

# inspection.MAX_RECORDS_PER_SPLIT (a test checks they agree): that module needs the
# record readers' packages, and the parser is built without any third-party package.
DEFAULT_MAX_RECORDS = 10_000


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``inspect`` on the CLI's subparsers; sets ``func=run``."""
    p = subparsers.add_parser(
        "inspect",
        help="summarise a converted output directory",
        description="Summarise a converted output directory: splits, classes, shards, image sizes and formats, "
        "rejected inputs. Optionally draw a contact sheet and a class chart.",
    )
    p.add_argument("directory", metavar="DIR", help="output directory of convert (local or gs://)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--all-classes",
        action="store_true",
        help="one row per class however many classes (over 20 they are summarised: min / median / max per split, "
        "smallest and largest classes, classes missing from a split)",
    )
    p.add_argument("--grid", metavar="FILE.png", help="write a contact sheet of sample images")
    p.add_argument("--n", type=int, default=64, help="images on the contact sheet (default 64)")
    p.add_argument("--split", default="train", help="split of the contact sheet images (default train)")
    p.add_argument("--class-chart", metavar="FILE.png", help="write a bar chart of examples per class and split")
    p.add_argument(
        "--max-records",
        type=int,
        default=DEFAULT_MAX_RECORDS,
        help=f"records read per split for the size/format statistics (default {DEFAULT_MAX_RECORDS})",
    )
    p.set_defaults(func=run)
    return p


def _error(message: str) -> int:
    print(f"img2tfrecord inspect: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def run(ns: argparse.Namespace) -> int:
    """Run ``inspect``; returns the exit code."""
    from img2tfrecord.drawing import draw_class_chart, draw_grid, sample_images
    from img2tfrecord.inspection import format_summary, summarise
    from img2tfrecord.readers import records

    if ns.n <= 0:
        return _error(f"--n must be positive, got {ns.n}")
    try:
        summary = summarise(ns.directory, max(0, ns.max_records))
    except (FileNotFoundError, ValueError) as e:
        return _error(str(e))
    if ns.grid and ns.split not in summary["splits"]:
        return _error(f"unknown split {ns.split!r}; available splits: {', '.join(summary['splits']) or 'none'}")
    outputs = {}
    if ns.grid:
        doc = records.read_manifest(ns.directory)
        samples = sample_images(ns.directory, doc, ns.split, ns.n)
        if not samples:
            return _error(f"split {ns.split!r} has no readable images for --grid")
        w, h = draw_grid(samples, ns.grid)
        outputs["grid"] = {"path": ns.grid, "images": len(samples), "width": w, "height": h}
    if ns.class_chart:
        w, h = draw_class_chart(records.read_manifest(ns.directory), ns.class_chart)
        outputs["class_chart"] = {"path": ns.class_chart, "width": w, "height": h}
    if ns.json:
        print(json.dumps(dict(summary, outputs=outputs), indent=2, ensure_ascii=False))
    else:
        print(format_summary(summary, ns.all_classes))
        for kind, info in outputs.items():
            print(f"wrote {kind.replace('_', ' ')}: {info['path']} ({info['width']}x{info['height']})")
    unreadable = any(info["images"]["problems"] for info in summary["splits"].values())
    return EXIT_FAILURE if unreadable else EXIT_OK
