"""``img2tfrecord report OUT``: read every record of a converted dataset once, write report.html and report.json.

Shards are read in parallel, one shard per task in a pool of spawned
processes (``--processes``, default one per core); the launching process keeps
a few dozen bytes per record (:mod:`img2tfrecord.report.record_table`) for the
duplicate search. The HTML page goes to ``--output`` (default ``./report.html``)
and the JSON document beside it with the suffix ``.json``, the long lists in
JSON-lines files beside that (:mod:`img2tfrecord.report.outputs`); a folder
(``DIR/`` or an existing folder, created when missing) gets ``report.html``,
``report.json`` and ``report-*.jsonl``. The command prints the page's path.

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
from collections import Counter
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, NamedTuple, Sequence, Tuple

from img2tfrecord import storage
from img2tfrecord.commands.errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE
from img2tfrecord.report import perceptual_hash
from img2tfrecord.schemas import output_files

if TYPE_CHECKING:  # imported where used: the parser is built without any third-party package
    from img2tfrecord.report import group_lines, html_page, outputs, shard_scan, workers
    from img2tfrecord.schemas.dataset_json import DatasetManifest

EXIT_INCOMPLETE = EXIT_FAILURE  # the report was written, but something could not be read
DEFAULT_OUTPUT = "report.html"
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
    p.add_argument("directory", metavar="OUT", help="output directory of convert (local, gs://, s3://, azfs://, ...)")
    p.add_argument(
        "--output",
        metavar="PATH",
        default=DEFAULT_OUTPUT,
        help="where to write the HTML page (default ./report.html), the JSON beside it with the suffix .json; "
        "a folder (a path ending in / or an existing folder, created when missing) gets report.html and "
        "report.json; a local path",
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


def _tasks(
    directory: str, doc: DatasetManifest, ns: argparse.Namespace, candidates_per_class: int
) -> List[shard_scan.ShardTask]:
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
                    candidates_per_class,
                    # drawn from offsets later where that is cheap, and where few candidates are kept
                    draw_samples=compression != "none" and candidates_per_class > 1,
                    withdrawn=withdrawn.get(shard.file, frozenset()),
                )
            )
    return tasks


def _draw(
    directory: str, doc: DatasetManifest, wanted: Mapping[str, Mapping[int, int]], pool: workers.Workers
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
    drawn = pool.map(shard_scan.fetch_thumbnails, tasks)
    return {(task.file, index): uri for task, uris in zip(tasks, drawn) for index, uri in uris.items()}


def _pictures(
    directory: str,
    doc: DatasetManifest,
    refs: Sequence[group_lines.PictureRef],
    samples: Sequence[shard_scan.Thumbnail],
    pool: workers.Workers,
) -> html_page.Pictures:
    """The page's thumbnails: the sample, and one record per content of the groups the page shows."""
    from img2tfrecord.report import html_page

    wanted: Dict[str, Dict[int, int]] = {}
    for t in samples:
        if not t.data_uri:
            wanted.setdefault(t.shard, {})[t.record_index] = t.offset
    for ref in refs:
        wanted.setdefault(ref.shard, {})[ref.record_index] = ref.offset
    drawn = _draw(directory, doc, wanted, pool)
    pictures = html_page.Pictures()
    for t in samples:
        uri = t.data_uri or drawn.get((t.shard, t.record_index))
        if uri:
            pictures.samples[(t.split, t.filename)] = uri
    for ref in refs:
        uri = drawn.get((ref.shard, ref.record_index))
        if uri:
            pictures.contents[ref.sha256] = uri
    return pictures


class Report(NamedTuple):
    document: Dict[str, Any]
    pictures: html_page.Pictures
    class_rows: List[Dict[str, Any]]


def _read_manifest(directory: str) -> DatasetManifest:
    from img2tfrecord.readers import records

    try:
        doc = records.read_manifest(directory)
    except (FileNotFoundError, ValueError) as e:
        raise ReportUsageError(str(e)) from None
    if doc.is_sequence:
        raise ReportUsageError(
            f"{directory} holds {doc.record_type.value} records (convert --sequence); "
            f"report reads {output_files.RECORD_TYPE} outputs only (inspect and verify read sequences)"
        )
    return doc


def build(directory: str, ns: argparse.Namespace, files: outputs.ReportFiles) -> Report:
    """Read the dataset and write the lines files (under their temporary names): the report's document, its
    pictures and the class rows. Raises ReportUsageError before reading anything (or writing any file) when
    the dataset is not one to report on."""
    from img2tfrecord.conversion.pool import usable_cores
    from img2tfrecord.report import duplicates as dup
    from img2tfrecord.report import facts, group_lines, html_page, outputs, record_table, shard_scan, workers

    doc = _read_manifest(directory)
    classes = max(1, len(doc.labels))
    per_class = ns.thumbnails_per_class
    candidates = per_class if classes * per_class <= facts.MAX_SAMPLE_THUMBNAILS else min(per_class, 1)
    try:
        tasks = _tasks(directory, doc, ns, candidates)
        sizes = {shard.file: shard.num_bytes for _, shard in doc.shards()}
    except (KeyError, TypeError, AttributeError, ValueError) as e:  # feature_spec entries of the wrong shape
        raise ReportUsageError(f"{output_files.MANIFEST_FILE} is malformed: {type(e).__name__}: {e}") from None
    processes = ns.processes or usable_cores()
    files.open_lines()

    started = time.perf_counter()
    table = record_table.TableBuilder(doc.splits, doc.labels)
    merger = facts.SampleMerger(max(1, candidates))
    class_counts: Dict[str, Counter] = {split: Counter() for split in dup.split_order(doc.splits)}
    image_sizes: Dict[str, Counter] = {split: Counter() for split in class_counts}
    largest_first = sorted(tasks, key=lambda t: -int(sizes.get(t.file) or 0))  # so the pool ends together
    scans: Dict[str, shard_scan.ShardScan] = {}
    with workers.Workers(processes, warn=_warn) as pool:
        for scan in pool.imap(shard_scan.scan_shard, largest_first):
            if scan.columns is not None:
                table.add(scan.file, scan.split, scan.columns)
            merger.add(scan.samples)
            class_counts[scan.split].update(scan.class_counts)
            image_sizes[scan.split].update(scan.sizes)
            scan.columns, scan.samples = None, []  # in the table now
            scans[scan.file] = scan
        read_seconds = time.perf_counter() - started
        searching = time.perf_counter()
        top = group_lines.TopGroups(
            html_page.MAX_GROUPS_SHOWN, html_page.MAX_CONTENTS_SHOWN, html_page.MAX_RECORDS_PER_CONTENT_SHOWN
        )

        def emit(group: dup.Group) -> None:
            files.line(outputs.DUPLICATE_GROUPS, group_lines.group_json(group))
            top.offer(group)

        found = dup.search(table.build(), ns.near_duplicate_distance, emit)
        search_seconds = time.perf_counter() - searching
        samples = facts.select_samples(merger.by_class(), per_class)
        pictures = _pictures(directory, doc, top.pictures(), samples["items"], pool)
    rejected, problems = facts.rejected_section(directory, doc, files.line)
    class_rows = []
    for row in facts.class_rows(doc.labels, class_counts, doc):
        files.line(outputs.CLASSES, row)
        class_rows.append(row)
    in_order = [scans[t.file] for t in tasks if t.file in scans]
    records_read = sum(s.records for s in in_order)
    document = {
        "report_format_version": facts.REPORT_FORMAT_VERSION,
        "dataset": facts.dataset_section(directory, doc),
        "options": {
            "seed": ns.seed,
            "thumbnails_per_class": per_class,
            "near_duplicate_distance": ns.near_duplicate_distance,
        },
        "read": facts.read_section(
            in_order,
            problems,
            {
                "processes": processes,
                "seconds": round(read_seconds, 3),
                "images_per_second": round(records_read / read_seconds, 1) if read_seconds > 0 else None,
                "duplicate_search_seconds": round(search_seconds, 3),
                "total_seconds": round(time.perf_counter() - started, 3),
            },
        ),
        "files": facts.files_section(files.paths, files.counts),
        "splits": {
            split: facts.split_section(split, doc, class_counts[split], image_sizes[split]) for split in class_counts
        },
        "shards": facts.shard_rows(in_order, doc),
        "samples": facts.samples_section(samples),
        "rejected": rejected,
        "duplicates": facts.duplicates_section(found, top.groups()),
    }
    return Report(document, pictures, class_rows)


def _warn(message: str) -> None:
    print(f"{_PROG}: warning: {message}", file=sys.stderr)


def _error(message: str, code: int = EXIT_USAGE) -> int:
    print(f"{_PROG}: error: {message}", file=sys.stderr)
    return code


def run(ns: argparse.Namespace) -> int:
    """Run ``report``; returns the exit code. Its worker pool's resource tracker writes to fd 2 through the
    command's filter (``commands/quiet.py``): a report killed outright leaves no "leaked semaphore" warning."""
    from img2tfrecord.commands.quiet import StderrFilter

    with StderrFilter():
        return _run(ns)


def _run(ns: argparse.Namespace) -> int:
    from img2tfrecord.report import html_page, outputs, workers

    directory = ns.directory.rstrip("/") if storage.is_remote(ns.directory) else ns.directory
    if storage.is_remote(ns.output):
        return _error(f"--output {ns.output}: report writes its files to a local path; copy them to the store after")
    paths = outputs.report_paths(ns.output)
    if not outputs.is_folder_output(ns.output) and not os.path.isdir(os.path.dirname(paths.html)):
        return _error(f"--output: folder {os.path.dirname(paths.html)} does not exist")
    with outputs.ReportFiles(paths) as files:
        try:
            report = build(directory, ns, files)
            page = html_page.render(report.document, report.pictures, report.class_rows)
        except ReportUsageError as e:
            return _error(str(e))
        except OSError as e:
            return _error(f"cannot write the report: {e}")
        except KeyboardInterrupt:
            return _error("interrupted", EXIT_INCOMPLETE)
        except workers.WorkerDied as e:
            shard = getattr(e.task, "file", None) or repr(e.task)
            return _error(
                f"a worker process died twice while reading {shard} (out of memory, or a crash in an image decoder)",
                EXIT_INCOMPLETE,
            )
        except Exception as e:  # never a traceback: one line naming what failed
            return _error(
                f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}", EXIT_INCOMPLETE
            )
        document = report.document
        try:
            files.write(paths.json, json.dumps(document, indent=2, ensure_ascii=False) + "\n")
            files.write(paths.html, page)
            files.commit()
        except OSError as e:
            return _error(f"cannot write the report: {e}")
    print(paths.html)
    if not document["dataset"]["complete"]:
        _warn(f"no {output_files.SUCCESS_FILE} in {directory}: the conversion did not finish")
    problems = document["read"]["problems"]
    if problems:
        _warn(
            f"{document['read']['problem_count']} problem(s) reading the dataset, e.g. {problems[0]} "
            f"(listed in the report)"
        )
    return EXIT_OK if document["dataset"]["complete"] and not problems else EXIT_INCOMPLETE
