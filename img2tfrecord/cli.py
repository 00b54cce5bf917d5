"""Command line: ``img2tfrecord convert | inspect | verify | report | sample``.

Parses, dispatches to ``img2tfrecord/commands/``, and turns failures into
one line and an exit code: 0 success, 1 failure, 2 usage error, 3 error
budget exceeded (``commands/errors.py``).
"""

from __future__ import annotations

import argparse
import gc
import logging
import sys
from typing import List, Optional, Sequence, Tuple

from img2tfrecord.commands.errors import EXIT_FAILURE, EXIT_USAGE, UsageError


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line and exits 2."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> Tuple[argparse.ArgumentParser, List[str]]:
    """The program's parser, and the option strings of ``convert``."""
    from img2tfrecord import __version__
    from img2tfrecord.commands import convert, inspect, report, sample, verify

    parser = _Parser(
        prog="img2tfrecord",
        description="Convert image datasets into sharded TFRecord files with an Apache Beam pipeline.",
    )
    parser.add_argument("--version", action="version", version=f"img2tfrecord {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    convert_options = convert.add_parser(sub)
    sample.add_parser(sub)
    inspect.add_parser(sub)
    verify.add_parser(sub)
    report.add_parser(sub)
    return parser, convert_options


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, convert_options = build_parser()
    if argv and argv[0] == "convert":
        ns, rest = parser.parse_known_args(argv)
    else:
        ns, rest = parser.parse_args(argv), []
    try:
        if ns.command != "convert":
            return ns.func(ns)
        from img2tfrecord.commands import convert

        return convert.run(ns, rest, convert_options)
    except UsageError as e:
        print(f"img2tfrecord: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("img2tfrecord: interrupted", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as e:  # a pipeline failure: one clear line, details in the log above
        logging.getLogger(__name__).error("pipeline failure", exc_info=True)
        last_line = str(e).strip().splitlines()[-1] if str(e).strip() else ""
        print(f"img2tfrecord: pipeline failed: {type(e).__name__}: {last_line}", file=sys.stderr)
        return EXIT_FAILURE


def run(argv: Optional[Sequence[str]] = None) -> None:
    """The program: ``main(argv)``, then exit with its code.

    The objects TensorFlow and Beam leave behind are frozen first, so the
    interpreter's final garbage collection skips them: that collection
    alone took about 1 s after a run with tf.Transform. Everything is
    written and closed by then, and exit handlers still run.
    """
    code = main(argv)
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    run()
