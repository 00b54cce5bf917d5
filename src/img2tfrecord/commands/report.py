"""``img2tfrecord report OUT``: read every record of a converted dataset once, write report.html and report.json.

Shards are read in parallel, one shard per task in a pool of spawned
processes (``--processes``, default one per core). The HTML page goes to
``--output`` (default ``./report.html``) and the JSON document beside it
with the suffix ``.json``; a folder (``DIR/`` or an existing folder, created
when missing) gets ``report.html`` and ``report.json``. The command prints
the page's path.

Exit codes: 0 the report covers every record; 1 it was written but something
could not be read (a damaged or missing shard, undecodable images, no
``_SUCCESS``: the page and a one-line warning say what); 2 usage errors (no
such directory or ``dataset.json``, a ``--sequence`` dataset, a bad option,
an output that cannot be written).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Sequence, Tuple

from img2tfrecord.commands.errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from img2tfrecord.report import perceptual_hash
from img2tfrecord.schemas import manifest

if TYPE_CHECKING:  # imported where used: the parser is built without any third-party package
    from img2tfrecord.report import duplicates as dup
    from img2tfrecord.report import html_page, shard_scan
    from img2tfrecord.schemas.dataset_manifest import DatasetManifest

EXIT_INCOMPLETE = EXIT_FAILURE  # the report was written, but something could not be read
DEFAULT_OUTPUT = "report.html"
DEFAULT_JSON_OUTPUT = "report.json"
DEFAULT_THUMBNAILS_PER_CLASS = 8
_PROG = "img2tfrecord report"


class ReportUsageError(Exception):
    """A problem with the command's arguments or the dataset's kind: nothing was read."""


def _count(low: int, high: int | None = None):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be in {low}..{high if high is not None else ''}, got {text!r}")
        return value

    return parse


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``report`` on the CLI's subparsers; sets ``func=run``."""
    p = subparsers.add_parser(
        "report",
        help="write an HTML and a JSON report: balance, sizes, samples, rejects, duplicates and split leakage",
        description="Read every record of a converted output once and write a self-contained report.html "
        "(class balance, image sizes, samples per class, rejected inputs, exact and near duplicates across "
        "splits, shards) and report.json with the same facts. Prints the path of report.html.",
    )
    p.add_argument("directory", metavar="OUT", help="output directory of convert (local or gs://)")
    p.add_argument(
        "--output",
        metavar="PATH",
        default=DEFAULT_OUTPUT,
        help="where to write the HTML page (default ./report.html), the JSON beside it with the suffix .json; "
        "a folder (a path ending in / or an existing folder, created when missing) gets report.html and "
        "report.json",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the thumbnail sample (default 0)")
    p.add_argument(
        "--thumbnails-per-class",
        type=_count(0),
        default=DEFAULT_THUMBNAILS_PER_CLASS,
        metavar="N",
        help=f"sample thumbnails per class (default {DEFAULT_THUMBNAILS_PER_CLASS}; 0 for none)",
    )
    p.add_argument(
        "--near-duplicate-distance",
        type=_count(0, perceptual_hash.MAX_NEAR_DUPLICATE_DISTANCE),
        default=perceptual_hash.DEFAULT_NEAR_DUPLICATE_DISTANCE,
        metavar="D",
        help="images whose 64-bit difference hashes differ in at most D bits are near duplicates "
        f"(default {perceptual_hash.DEFAULT_NEAR_DUPLICATE_DISTANCE}, "
        f"at most {perceptual_hash.MAX_NEAR_DUPLICATE_DISTANCE})",
    )
    p.add_argument(
        "--processes",
        type=_count(1),
        default=None,
        metavar="N",
        help="processes reading shards (default: one per core)",
    )
    p.set_defaults(func=run)
    return p


def is_folder_output(output: str) -> bool:
    """``--output`` names a folder: it ends with a slash, or is an existing folder."""
    return output.endswith(("/", os.sep)) or os.path.isdir(output)


def output_paths(output: str) -> Tuple[str, str]:
    """``(report.html path, report.json path)`` for ``--output``.

    A folder (:func:`is_folder_output`) gets ``report.html`` and ``report.json``;
    any other path is the page, with the JSON beside it under the suffix ``.json``.
    """
    if is_folder_output(output):
        folder = os.path.abspath(output)
        return os.path.join(folder, DEFAULT_OUTPUT), os.path.join(folder, DEFAULT_JSON_OUTPUT)
    html_path = os.path.abspath(output)
    stem, ext = os.path.splitext(html_path)
    return html_path, (stem if ext.lower() in (".html", ".htm") else html_path) + ".json"


def _tasks(directory: str, doc: DatasetManifest, ns: argparse.Namespace) -> List[shard_scan.ShardTask]:
    """One scan task per listed shard, split by split (:func:`duplicates.split_order`)."""
    from img2tfrecord.report import duplicates as dup
    from img2tfrecord.report import shard_scan

    compression = doc.compression.value
    spec = shard_scan.scalar_spec(doc.spec)
    withdrawn = doc.withdrawn_by_file()
    tasks = []
    for split in dup.split_order(doc.splits):
        for shard in doc.splits[split].shards:
            tasks.append(
                shard_scan.ShardTask(
                    directory,
                    shard.file,
                    split,
                    compression,
                    spec,
                    ns.seed,
                    ns.thumbnails_per_class,
                    draw_samples=compression != "none",
                    withdrawn=withdrawn.get(shard.file, frozenset()),
                )
            )
    return tasks


def _read_all(
    tasks: Sequence[shard_scan.ShardTask], sizes: Mapping[str, int], workers: shard_scan.Workers
) -> List[shard_scan.ShardScan]:
    """Every shard scanned once, largest first so the pool ends together; results in task order."""
    from img2tfrecord.report import shard_scan

    order = sorted(range(len(tasks)), key=lambda i: -int(sizes.get(tasks[i].file) or 0))
    results = workers.map(shard_scan.scan_shard, [tasks[i] for i in order])
    by_position = dict(zip(order, results))
    return [by_position[i] for i in range(len(tasks))]


def _draw(
    directory: str, doc: DatasetManifest, wanted: Mapping[str, Mapping[int, int]], workers: shard_scan.Workers
) -> Dict[Tuple[str, int], str]:
    """``{(shard, index): data URI}`` of the wanted records (shard -> index -> offset), read at their offsets."""
    from img2tfrecord.report import shard_scan

    spec = shard_scan.scalar_spec(doc.spec)
    compression = doc.compression.value
    tasks = [
        shard_scan.FetchTask(directory, shard, compression, spec, tuple(sorted(items.items())))
        for shard, items in sorted(wanted.items())
        if items
    ]
    drawn = workers.map(shard_scan.fetch_thumbnails, tasks)
    return {(task.file, index): uri for task, uris in zip(tasks, drawn) for index, uri in uris.items()}


def _pictures(
    directory: str,
    doc: DatasetManifest,
    found: dup.Duplicates,
    samples: Mapping[str, Sequence[shard_scan.Thumbnail]],
    workers: shard_scan.Workers,
) -> html_page.Pictures:
    """The page's thumbnails: the class samples, and one record per content of the groups the page shows."""
    from img2tfrecord.report import html_page

    wanted: Dict[str, Dict[int, int]] = {}
    for items in samples.values():
        for t in items:
            if not t.data_uri:
                wanted.setdefault(t.shard, {})[t.record_index] = t.offset
    for group in found.groups[: html_page.MAX_GROUPS_SHOWN]:
        for content in group.contents:
            first = content.records[0]
            wanted.setdefault(first.shard, {})[first.index] = first.offset
    drawn = _draw(directory, doc, wanted, workers)
    pictures = html_page.Pictures()
    for items in samples.values():
        for t in items:
            uri = t.data_uri or drawn.get((t.shard, t.record_index))
            if uri:
                pictures.samples[(t.split, t.filename)] = uri
    for group in found.groups[: html_page.MAX_GROUPS_SHOWN]:
        for content in group.contents:
            uri = drawn.get((content.records[0].shard, content.records[0].index))
            if uri:
                pictures.contents[content.sha256] = uri
    return pictures


def _write(path: str, text: str) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def build(directory: str, ns: argparse.Namespace) -> Tuple[Dict[str, Any], html_page.Pictures]:
    """The report document and its pictures.

    Raises ReportUsageError before reading anything when the dataset is not one to report on.
    """
    from img2tfrecord.conversion.pool import usable_cores
    from img2tfrecord.readers import records
    from img2tfrecord.report import duplicates as dup
    from img2tfrecord.report import facts, shard_scan

    try:
        doc = records.read_manifest(directory)
    except (FileNotFoundError, ValueError) as e:
        raise ReportUsageError(str(e)) from None
    if doc.is_sequence:
        raise ReportUsageError(
            f"{directory} holds {doc.record_type.value} records (convert --sequence); "
            f"report reads {manifest.RECORD_TYPE} outputs only (inspect and verify read sequences)"
        )
    try:
        tasks = _tasks(directory, doc, ns)
        sizes = {shard.file: shard.num_bytes for _, shard in doc.shards()}
    except (KeyError, TypeError, AttributeError, ValueError) as e:  # feature_spec entries of the wrong shape
        raise ReportUsageError(f"{manifest.MANIFEST_FILE} is malformed: {type(e).__name__}: {e}") from None
    processes = ns.processes or usable_cores()

    started = time.perf_counter()
    with shard_scan.Workers(processes) as workers:
        scans = _read_all(tasks, sizes, workers)
        read_seconds = time.perf_counter() - started
        located = [
            dup.Located(s.split, s.file, r.record_index, r.offset, r.filename, r.class_name, r.sha256, r.dhash)
            for s in scans
            for r in s.records
        ]
        found = dup.find_duplicates(located, ns.near_duplicate_distance)
        samples = facts.select_samples((t for s in scans for t in s.samples), ns.thumbnails_per_class)
        pictures = _pictures(directory, doc, found, samples, workers)
    error_rows, problems = facts.read_errors(directory, doc)
    total_seconds = time.perf_counter() - started
    document = facts.build_document(
        directory=directory,
        doc=doc,
        scans=scans,
        found=found,
        samples=samples,
        error_rows=error_rows,
        problems=problems,
        options={
            "seed": ns.seed,
            "thumbnails_per_class": ns.thumbnails_per_class,
            "near_duplicate_distance": ns.near_duplicate_distance,
        },
        timing={
            "processes": processes,
            "seconds": round(read_seconds, 3),
            "images_per_second": round(len(located) / read_seconds, 1) if read_seconds > 0 else None,
            "total_seconds": round(total_seconds, 3),
        },
    )
    return document, pictures


def _error(message: str, code: int = EXIT_USAGE) -> int:
    print(f"{_PROG}: error: {message}", file=sys.stderr)
    return code


def run(ns: argparse.Namespace) -> int:
    """Run ``report``; returns the exit code."""
    from img2tfrecord.readers import records
    from img2tfrecord.report import html_page

    directory = ns.directory.rstrip("/") if records.is_remote(ns.directory) else ns.directory
    html_path, json_path = output_paths(ns.output)
    to_folder = is_folder_output(ns.output)  # created, once the report is built
    if not to_folder and not os.path.isdir(os.path.dirname(html_path)):
        return _error(f"--output: folder {os.path.dirname(html_path)} does not exist")
    try:
        document, pictures = build(directory, ns)
        page = html_page.render(document, pictures)
    except ReportUsageError as e:
        return _error(str(e))
    except KeyboardInterrupt:
        return _error("interrupted", EXIT_INCOMPLETE)
    except Exception as e:  # never a traceback: one line naming what failed
        return _error(
            f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}", EXIT_INCOMPLETE
        )
    try:
        if to_folder:
            os.makedirs(os.path.dirname(html_path), exist_ok=True)
        _write(json_path, json.dumps(document, indent=2, ensure_ascii=False) + "\n")
        _write(html_path, page)
    except OSError as e:
        return _error(f"cannot write the report: {e}")
    print(html_path)
    if not document["dataset"]["complete"]:
        print(
            f"{_PROG}: warning: no {manifest.SUCCESS_FILE} in {directory}: the conversion did not finish",
            file=sys.stderr,
        )
    problems = document["read"]["problems"]
    if problems:
        print(
            f"{_PROG}: warning: {len(problems)} problem(s) reading the dataset, e.g. {problems[0]} "
            f"(listed in the report)",
            file=sys.stderr,
        )
    return EXIT_OK if document["dataset"]["complete"] and not problems else EXIT_INCOMPLETE
