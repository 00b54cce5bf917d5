"""Command line: ``img2tfrecord convert | sample``.

``convert`` splits its own options from Beam's: every standard Beam option
(``--runner``, ``--project``, ``--direct_num_workers``, ...) passes through
untouched, and anything neither side knows is a usage error.

Exit codes: 0 success, 1 pipeline failure, 2 usage error, 3 error budget exceeded.
"""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import gc
import logging
import os
import re
import sys
from typing import List, Optional, Sequence, Tuple

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_ERROR_BUDGET = 3


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag in one line and exits 2."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def parse_image_size(text: str) -> Tuple[int, int]:
    """``"224"`` -> (224, 224); ``"320x240"`` -> (320, 240) as (width, height)."""
    m = re.fullmatch(r"\s*(-?\d+)\s*(?:[xX]\s*(-?\d+)\s*)?", text)
    if not m:
        raise argparse.ArgumentTypeError(f"expected N or WxH, got {text!r}")
    w = int(m.group(1))
    h = int(m.group(2)) if m.group(2) is not None else w
    if w <= 0 or h <= 0:
        raise argparse.ArgumentTypeError(f"image size must be positive, got {text!r}")
    return w, h


def _positive(kind):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
        return value

    return parse


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text!r}")
    return value


def _quality(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer 1..100, got {text!r}") from None
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError(f"must be between 1 and 100, got {text!r}")
    return value


def _add_convert_args(p: argparse.ArgumentParser) -> None:
    from img2tfrecord.transforms.image import DEFAULT_MAX_FILE_MB, DEFAULT_MAX_PIXELS, FORMATS, RESIZE_MODES
    from img2tfrecord.transforms.image import DEFAULT_DECODE_TIMEOUT_S

    p.add_argument("--input", required=True, help="folder (SRC/<class>/<file> or SRC/<split>/<class>/<file>), glob, archive(s) (.zip, .tar, .tar.gz, .tgz; a glob of many) or manifest (.csv/.jsonl with path,label[,split]); local or gs://")
    p.add_argument("--output", required=True, help="output folder for shards, dataset.json, labels.txt, errors.jsonl")
    p.add_argument("--image-size", type=parse_image_size, default=None, metavar="N|WxH", help="resize to N×N or W×H (default: keep each image's size)")
    p.add_argument("--resize", choices=RESIZE_MODES, default="fill", help="stretch, fit (keep aspect, pad) or fill (keep aspect, centre-crop; default)")
    p.add_argument("--channels", type=int, choices=(1, 3), default=3, help="3 = RGB (default), 1 = grayscale")
    p.add_argument("--format", choices=FORMATS, default=None, help="stored image format; raw = uint8 pixels HxWxC (default: keep when no resize or channel change, else jpeg)")
    p.add_argument("--sequence", action="store_true", help="SRC/<class>/<clip>/<frames>: one tf.train.SequenceExample per clip, frames in natural name order")
    p.add_argument("--quality", type=_quality, default=90, help="JPEG quality (default 90)")
    p.add_argument("--splits", default=None, metavar="NAME=FRACTION,...", help="e.g. train=0.8,validation=0.1,test=0.1 (default: all train, or the input's split folders)")
    p.add_argument("--seed", type=int, default=0, help="seed of split assignment and shuffle (default 0)")
    shards = p.add_mutually_exclusive_group()
    shards.add_argument("--shard-size-mb", type=_positive(float), default=None, help="target shard size in MB (default 128)")
    shards.add_argument("--num-shards", type=_positive(int), default=None, help="fixed number of shards per split")
    p.add_argument("--compression", choices=("none", "gzip"), default="none", help="shard compression (default none)")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier conversion in --output")
    p.add_argument("--resume", action="store_true", help="finish an interrupted conversion of the same input, options and seed: shards it finished are kept, the rest converted")
    p.add_argument("--max-pixels", type=_positive(int), default=DEFAULT_MAX_PIXELS, help=f"reject images with more pixels (default {DEFAULT_MAX_PIXELS})")
    p.add_argument("--max-file-mb", type=_positive(float), default=DEFAULT_MAX_FILE_MB, help=f"reject files larger than this (default {DEFAULT_MAX_FILE_MB:g})")
    p.add_argument("--decode-timeout-s", type=_positive(float), default=DEFAULT_DECODE_TIMEOUT_S, metavar="S", help=f"reject an image whose decoding and resizing take longer (default {DEFAULT_DECODE_TIMEOUT_S:g})")
    p.add_argument("--max-error-rate", type=_fraction, default=None, metavar="F", help="exit 3 when more than this fraction of inputs is rejected (default: no limit)")
    p.add_argument("--processes", type=_positive(int), default=None, metavar="N", help="local processes converting images (default: one per core on the local runner; 1 on distributed runners, whose workers are the parallelism)")
    p.add_argument("--no-analyze", dest="analyze", action="store_false", help="skip the tf.Transform analysis of the train split (no transform_fn/, no statistics in dataset.json)")
    p.add_argument("--exact-statistics", action="store_true", help="compute the train statistics of images stored as re-encoded JPEG from their stored bytes, decoded as readers decode them, not from the pixels given to the JPEG encoder (about 9%% more conversion CPU at 224x224)")
    p.add_argument("--no-wait", action="store_true", help="submit the job and exit (remote runners); the job writes _SUCCESS when done")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the summary")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="img2tfrecord",
        description="Convert image datasets into sharded TFRecord files with an Apache Beam pipeline.",
    )
    from img2tfrecord import __version__

    parser.add_argument("--version", action="version", version=f"img2tfrecord {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    convert = sub.add_parser(
        "convert",
        help="convert images into TFRecord shards",
        description="Convert images into shuffled, split, sharded TFRecord files. "
        "Unrecognised --flags are passed to Apache Beam (e.g. --runner DataflowRunner --project P).",
    )
    _add_convert_args(convert)
    sample = sub.add_parser("sample", help="write the built-in sample dataset")
    sample.add_argument("directory")
    sample.add_argument("--images-per-class", type=_positive(int), default=None)
    sample.add_argument("--seed", type=int, default=0)
    from img2tfrecord import inspection, verification

    inspection.add_parser(sub)
    verification.add_parser(sub)
    from img2tfrecord.report import command as report_command

    report_command.add_parser(sub)
    return parser


def check_pipeline_args(args: Sequence[str], own_options: Sequence[str]) -> None:
    """UsageError for an argument that neither convert nor Beam knows."""
    from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

    class _BeamOptionsParser(_BeamArgumentParser):
        def error(self, message):
            raise UsageError(f"invalid pipeline option: {message}")

    parser = _BeamOptionsParser(allow_abbrev=False)
    seen = set()
    for cls in PipelineOptions.__subclasses__():
        if str(cls) not in seen:
            seen.add(str(cls))
            cls._add_argparse_args(parser)  # pylint: disable=protected-access
    _, unknown = parser.parse_known_args(list(args))
    if unknown:
        arg = unknown[0]
        known = list(own_options) + [o for a in parser._actions for o in a.option_strings]
        hint = difflib.get_close_matches(arg.split("=", 1)[0], known, n=1)
        raise UsageError(f"unrecognized argument {arg}" + (f" (did you mean {hint[0]}?)" if hint else ""))


def config_from_args(ns: argparse.Namespace):
    from img2tfrecord.pipeline.config import DEFAULT_SHARD_SIZE_MB, ConvertConfig
    from img2tfrecord.transforms.image import ImageOptions
    from img2tfrecord.transforms.split import parse_splits

    try:
        splits = parse_splits(ns.splits) if ns.splits is not None else None
    except ValueError as e:
        raise UsageError(f"--splits: {e}") from None
    fmt = ns.format
    if fmt is None:
        fmt = "keep" if ns.image_size is None and ns.channels == 3 else "jpeg"
    if ns.input.rstrip("/") == ns.output.rstrip("/"):
        raise UsageError("--output must differ from --input")
    if ns.resume and ns.overwrite:
        raise UsageError("--resume keeps what an interrupted run finished, --overwrite replaces it: give one")
    if ns.exact_statistics and not ns.analyze:
        raise UsageError("--exact-statistics applies to the analysis, which --no-analyze skips")
    if ns.exact_statistics and ns.sequence:
        raise UsageError("--exact-statistics applies to the analysis, and --sequence records are not analysed")
    image = ImageOptions(
        size=ns.image_size,
        resize=ns.resize,
        channels=ns.channels,
        format=fmt,
        quality=ns.quality,
        max_pixels=ns.max_pixels,
        max_file_bytes=int(ns.max_file_mb * 1024 * 1024),
        decode_timeout_s=ns.decode_timeout_s,
    )
    return ConvertConfig(
        input=ns.input,
        output=ns.output.rstrip("/") if "://" in ns.output else _local_abs(ns.output),
        image=image,
        splits=splits,
        seed=ns.seed,
        shard_size_mb=ns.shard_size_mb or DEFAULT_SHARD_SIZE_MB,
        num_shards=ns.num_shards,
        compression=ns.compression,
        overwrite=ns.overwrite,
        resume=ns.resume,
        analyze=ns.analyze,
        exact_statistics=ns.exact_statistics,
        sequence=ns.sequence,
    )


def _local_abs(path: str) -> str:
    import os

    return os.path.abspath(path)


def format_summary(doc) -> str:
    from img2tfrecord import inspection
    from img2tfrecord.schemas import manifest

    lines = []
    acc = doc["accounting"]
    lines.append(
        f"{acc['inputs']} inputs: {acc['written']} records written, {acc['rejected']} rejected"
        + (f", {acc['skipped']} junk files skipped" if acc.get("skipped") else "")
    )
    for split, info in doc["splits"].items():
        lines.append(f"  {split}: {info['num_examples']} records in {len(info['shards'])} shard(s), {info['num_bytes'] / 1e6:.1f} MB")
        for class_name, n in info["examples_per_class"].items():
            lines.append(f"    {class_name}: {n}")
    if acc["rejected_by_reason"]:
        lines.append("rejected by reason (details in errors.jsonl):")
        for reason, n in acc["rejected_by_reason"].items():
            lines.append(f"  {reason}: {n}")
    stats = doc.get(manifest.STATISTICS)
    if stats:
        lines.append(f"{inspection.statistics_line(stats)} (tf.Transform output: {stats['files']['transform_fn']}/)")
    return "\n".join(lines)


def _convert(ns: argparse.Namespace, pipeline_args: List[str], own_options: Sequence[str]) -> int:
    from img2tfrecord.pipeline import OutputNotEmpty, PlanError
    from img2tfrecord.pipeline.outputs import AlreadyComplete, OutputNotWritable
    from img2tfrecord.pipeline.run import default_processes, is_dry_run, read_manifest
    from img2tfrecord.pipeline.run import run as run_pipeline
    from img2tfrecord.schemas import manifest
    from img2tfrecord.transforms.report import ErrorBudgetExceeded

    check_pipeline_args(pipeline_args, own_options)
    config = config_from_args(ns)
    config = dataclasses.replace(
        config, processes=ns.processes or default_processes(pipeline_args), max_error_rate=ns.max_error_rate
    )
    logging.basicConfig(level=logging.WARNING if ns.quiet else logging.INFO, format="%(levelname)s %(message)s")
    # Beam's own INFO lines (worker start-up, bundle progress) drown the useful ones.
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    # So do those of tf.Transform's libraries (the analysis, transforms/analyze.py).
    for name in ("absl", "tensorflow"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # TensorFlow's C++ start-up lines (no GPU found, cuInit failed) say nothing about the run.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # tf.Transform runs on Keras 2 and sets this itself, but only after TensorFlow is
    # imported, which then has loaded Keras 3 as well (~0.5 s); set before the import.
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    # The job itself enforces --max-error-rate: it writes everything, then fails.
    budget_exceeded = None
    try:
        doc = run_pipeline(config, pipeline_args, wait=not ns.no_wait)
    except AlreadyComplete as e:
        logging.info("%s", e)
        doc = read_manifest(config.output)
    except (PlanError, OutputNotEmpty, OutputNotWritable) as e:
        raise UsageError(str(e)) from None
    except Exception as e:
        # Runners re-raise the job's exception as it was or wrapped in their own.
        if not isinstance(e, ErrorBudgetExceeded) and ErrorBudgetExceeded.__name__ not in str(e):
            raise
        budget_exceeded = next(
            (line for line in str(e).splitlines() if line.startswith("error budget exceeded")), str(e)
        ).split(" [while running")[0]
        doc = read_manifest(config.output)
    if doc is None:
        if is_dry_run(pipeline_args):
            print("dry run: the job was built and translated; nothing ran and nothing was written")
        else:
            print(f"submitted: {config.output}/{manifest.SUCCESS_FILE} appears when the job completes")
        return EXIT_OK
    print(format_summary(doc))
    print(f"output: {config.output}")
    if budget_exceeded:
        print(f"img2tfrecord: {budget_exceeded}", file=sys.stderr)
        return EXIT_ERROR_BUDGET
    return EXIT_OK


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv and argv[0] == "convert":
        ns, rest = parser.parse_known_args(argv)
    else:
        ns, rest = parser.parse_args(argv), []
    try:
        if ns.command == "sample":
            from img2tfrecord import sample

            counts = sample.generate(ns.directory, ns.images_per_class or sample.DEFAULT_IMAGES_PER_CLASS, ns.seed)
            print(f"wrote {sum(counts.values())} images in {len(counts)} classes to {ns.directory}")
            return EXIT_OK
        if ns.command in ("inspect", "verify", "report"):
            return ns.func(ns)
        convert_parser = parser._subparsers._group_actions[0].choices["convert"]
        own = [o for a in convert_parser._actions for o in a.option_strings]
        return _convert(ns, rest, own)
    except UsageError as e:
        print(f"img2tfrecord: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("img2tfrecord: interrupted", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as e:  # a pipeline failure: one clear line, details in the log above
        logging.getLogger(__name__).error("pipeline failure", exc_info=True)
        print(f"img2tfrecord: pipeline failed: {type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}", file=sys.stderr)
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
