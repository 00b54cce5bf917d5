"""``img2tfrecord sample DIR``: write the built-in sample dataset."""

from __future__ import annotations

import argparse

from img2tfrecord.commands.errors import EXIT_OK
from img2tfrecord.option_values import positive


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("sample", help="write the built-in sample dataset")
    p.add_argument("directory")
    p.add_argument("--images-per-class", type=positive(int), default=None)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)


def run(ns: argparse.Namespace) -> int:
    from img2tfrecord import sample

    counts = sample.generate(ns.directory, ns.images_per_class or sample.DEFAULT_IMAGES_PER_CLASS, ns.seed)
    print(f"wrote {sum(counts.values())} images in {len(counts)} classes to {ns.directory}")
    return EXIT_OK
