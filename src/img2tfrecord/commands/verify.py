"""``img2tfrecord verify DIR``: read every record and check everything ``dataset.json`` promises."""

from __future__ import annotations

import argparse
import json
import sys

from img2tfrecord.commands.errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``verify`` on the CLI's subparsers; sets ``func=run``."""
    p = subparsers.add_parser(
        "verify",
        help="check every record of a converted output directory",
        description="Read every record of every shard: framing and CRC32C checksums, record counts, "
        "schema, image decoding, labels and sha256 keys; and the tf.Transform output (transform_fn/, "
        "schema files, label vocabulary, statistics) when the conversion analysed the train split. "
        "Exit 0 when all hold, 1 otherwise.",
    )
    p.add_argument("directory", metavar="DIR", help="output directory of convert (local or gs://)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)
    return p


def run(ns: argparse.Namespace) -> int:
    """Run ``verify``; returns the exit code."""
    from img2tfrecord.verification.output_checks import verify

    try:
        report = verify(ns.directory)
    except FileNotFoundError as e:
        print(f"img2tfrecord verify: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if ns.json:
        print(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
    else:
        print(report.text())
    return EXIT_OK if report.ok else EXIT_FAILURE
