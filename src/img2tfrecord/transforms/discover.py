"""Discovery as a Beam transform: an input source's units matched, each read by the source's own
per-unit function (``sources/inputs/``), and its findings joined where one depends on others.

Units are matched by Beam's ``fileio.MatchAll`` on any Beam filesystem, so a bucket is listed by the
runner; a folder input's units come instead from the input ledger the launcher wrote (its one
listing, ``pipeline/kinds/``), with ``--dedupe``; without it, the launcher places the work
items itself and this step does not run. Archives and annotation files are spread over the workers first:
each is much work. ``--plan`` runs the same ``read`` and ``join`` in-process (``sources.inputs.discover``).
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Sequence

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.fileio import EmptyMatchTreatment
from apache_beam.io.filesystem import CompressionTypes, FileMetadata

from img2tfrecord.model import ERRORS
from img2tfrecord.sources.inputs import FILES, SKIPPED, InputSource
from img2tfrecord.sources.inputs.archive import ArchiveSource
from img2tfrecord.sources.inputs.archived_detection import ArchivedDetectionSource
from img2tfrecord.sources.inputs.folder import FolderSource
from img2tfrecord.sources.layout import classes_of_file
from img2tfrecord.transforms.counters import INPUTS, INPUTS_SKIPPED, NAMESPACE
from img2tfrecord.transforms.discover_joins import JoinAnnotatedMembers, JoinArchiveMembers
from img2tfrecord.transforms.launch_values import launch_value, launch_values

# The joins of the sources whose findings depend on each other; the others need none.
_JOINS = {ArchiveSource: JoinArchiveMembers, ArchivedDetectionSource: JoinAnnotatedMembers}


class _ReadUnitFn(beam.DoFn):
    """One unit (``FileMetadata``) -> its source's findings: work items on the main output, the rest tagged."""

    def __init__(self, source: InputSource):
        self._source = source
        self._inputs = beam.metrics.Metrics.counter(NAMESPACE, INPUTS)
        self._skipped = beam.metrics.Metrics.counter(NAMESPACE, INPUTS_SKIPPED)

    def process(self, unit: FileMetadata):
        if not self._source.is_unit(unit.path):
            return
        for tag, value in self._source.read(unit.path, unit.size_in_bytes):
            if tag == FILES:
                self._inputs.inc()
                yield value
            else:
                if tag == SKIPPED:
                    self._skipped.inc()
                yield beam.pvalue.TaggedOutput(tag, value)


def _listed_file(line: str, base: str) -> FileMetadata:
    entry = json.loads(line)
    return FileMetadata(base + entry["relpath"], int(entry["size"]))


_JUNK_COUNTER = beam.metrics.Metrics.counter(NAMESPACE, INPUTS_SKIPPED)


def _counted_junk(name: str) -> str:
    _JUNK_COUNTER.inc()
    return name


class ListedJunk(beam.PTransform):
    """PBegin -> the junk names a launch's listing skipped, each counted as skipped."""

    def __init__(self, names: Sequence[str]):
        super().__init__()
        self._names = list(names)

    def expand(self, pbegin):
        return launch_values(pbegin.pipeline, "Names", self._names) | "CountJunk" >> beam.Map(_counted_junk)


def _counted_junk_total(count: int) -> int:
    _JUNK_COUNTER.inc(count)
    return count


class JunkCount(beam.PTransform):
    """PBegin -> how many junk names a launch's listing skipped (one element), counted as skipped: for a
    run placed at launch, whose junk the graph never lists."""

    def __init__(self, count: int):
        super().__init__()
        self._count = count

    def expand(self, pbegin):
        return launch_value(pbegin.pipeline, "Count", self._count) | "CountJunk" >> beam.Map(_counted_junk_total)


class Discover(beam.PTransform):
    """The work items of ``source``: ``{"files": items, "skipped": junk names, "errors": error rows}``.

    ``errors`` are inputs rejected before conversion (an unreadable archive, a manifest row without a
    path): each counts as one input. ``ledger``: a folder's input ledger (``schemas/ledger.py``), read
    instead of matching the folder again, and ``junk`` the names the launch's listing skipped.
    """

    def __init__(self, source: InputSource, ledger: Optional[str] = None, junk: Sequence[str] = ()):
        super().__init__()
        self._source = source
        self._ledger = ledger
        self._junk = list(junk)

    def expand(self, pbegin):
        if self._ledger is not None:
            if not isinstance(self._source, FolderSource):
                raise ValueError(
                    f"an input ledger lists a folder's files, not the units of {type(self._source).__name__}"
                )
            base = self._source.base
            # validate=False: the launcher writes the ledger after the graph is built (and a dry run never does).
            units = (
                pbegin
                | "ReadLedger"
                >> beam.io.ReadFromText(self._ledger, compression_type=CompressionTypes.GZIP, validate=False)
                | "ToFile" >> beam.Map(_listed_file, base)
            )
        else:
            units = (
                pbegin
                | "Patterns" >> beam.Create(list(self._source.patterns))
                | "MatchUnits" >> fileio.MatchAll(empty_match_treatment=EmptyMatchTreatment.ALLOW)
            )
        if self._source.spread_units:
            units = units | "SpreadUnits" >> beam.Reshuffle()
        found = units | "ReadUnits" >> beam.ParDo(_ReadUnitFn(self._source)).with_outputs(
            SKIPPED, ERRORS, *self._source.join_tags, main=FILES
        )
        files, errors = [found[FILES]], [found[ERRORS]]
        join = _JOINS.get(type(self._source))
        if join is not None:
            pending = {tag: found[tag] for tag in self._source.join_tags}
            joined: Dict[str, Any] = pending | "Join" >> join(self._source)
            files.append(joined[FILES])
            errors.append(joined[ERRORS])
        skipped = [found[SKIPPED]]
        if self._junk:
            skipped.append(pbegin | "Junk" >> ListedJunk(self._junk))
        return {
            FILES: _one(files, "Files"),
            SKIPPED: _one(skipped, "Skipped"),
            ERRORS: _one(errors, "Errors"),
        }


def _one(pcolls, name: str):
    return pcolls[0] if len(pcolls) == 1 else tuple(pcolls) | f"All{name}" >> beam.Flatten()


class DiscoverClasses(beam.PTransform):
    """WorkItem PCollection -> one element: the sorted list of class names (the label map)."""

    def __init__(self, layout: str):
        super().__init__()
        self._layout = layout

    def expand(self, files):
        return (
            files
            | "ClassOfFile" >> beam.FlatMap(classes_of_file, self._layout)
            | "DistinctClasses" >> beam.Distinct()
            | "CollectClasses" >> beam.combiners.ToList()
            | "SortClasses" >> beam.Map(sorted)
        )
