"""Find the images of an input root inside the pipeline.

The listing runs as a Beam transform (``fileio.MatchFiles``) on any Beam
filesystem, so millions of files are listed by the runner, not collected in
the launching process. Each match becomes ``(path, relpath, size)``; junk
that operating systems leave in folders (``.DS_Store``, ``Thumbs.db``,
``__MACOSX/``, any hidden file or folder) is skipped and counted. Files inside
the folders of earlier outputs the launch plan found (``Plan.skipped_outputs``)
are left out without a count: the launch warned about them once.
"""

from __future__ import annotations

import json
from typing import Sequence

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.fileio import EmptyMatchTreatment
from apache_beam.io.filesystem import CompressionTypes, FileMetadata

from img2tfrecord.model import ERRORS, SkippedEntry, WorkItem
from img2tfrecord.sources.layout import classes_of_file, folder_entry

SKIPPED = "skipped"


class _ToSourceFile(beam.DoFn):
    def __init__(self, base: str, outputs: Sequence[str] = ()):
        self._base = base
        self._outputs = tuple(outputs)
        self._skipped = beam.metrics.Metrics.counter("img2tfrecord", "inputs_skipped")
        self._inputs = beam.metrics.Metrics.counter("img2tfrecord", "inputs")

    def process(self, metadata):
        entry = folder_entry(self._base, metadata.path, metadata.size_in_bytes, self._outputs)
        if entry is None:
            return
        if isinstance(entry, SkippedEntry):
            self._skipped.inc()
            yield beam.pvalue.TaggedOutput(SKIPPED, entry.name)
            return
        self._inputs.inc()
        yield entry if isinstance(entry, WorkItem) else beam.pvalue.TaggedOutput(ERRORS, entry)


class DiscoverImages(beam.PTransform):
    """``pattern`` -> main output of SourceFile tuples, tagged outputs ``skipped`` (relpaths of junk)
    and ``errors`` (``bad_name`` rows for local names that are not UTF-8).

    ``base`` is the input root every match is made relative to; files under the folders ``outputs``
    (relative to it) are not inputs.
    """

    def __init__(self, pattern: str, base: str, outputs: Sequence[str] = ()):
        super().__init__()
        self._pattern = pattern
        self._base = base
        self._outputs = tuple(outputs)

    def expand(self, pbegin):
        return (
            pbegin
            | "MatchFiles" >> fileio.MatchFiles(self._pattern, empty_match_treatment=EmptyMatchTreatment.ALLOW)
            | "ToSourceFile"
            >> beam.ParDo(_ToSourceFile(self._base, self._outputs)).with_outputs(SKIPPED, ERRORS, main="files")
        )


def _listed_file(line: str, base: str) -> FileMetadata:
    entry = json.loads(line)
    return FileMetadata(base + entry["relpath"], int(entry["size"]))


class DiscoverLedger(beam.PTransform):
    """The inputs a ledger file lists (``schemas/ledger.py``), as :class:`DiscoverImages` gives them, from
    the launch's listing instead of a second one: ``{"files", "skipped", "errors"}``. ``junk``: the names
    that listing skipped (counted as skipped)."""

    def __init__(self, ledger: str, base: str, outputs: Sequence[str] = (), junk: Sequence[str] = ()):
        super().__init__()
        self._ledger = ledger
        self._base = base
        self._outputs = tuple(outputs)
        self._junk = list(junk)

    def expand(self, pbegin):
        # validate=False: the launcher writes the ledger after the graph is built (and a dry run never does).
        found = (
            pbegin
            | "ReadLedger" >> beam.io.ReadFromText(self._ledger, compression_type=CompressionTypes.GZIP, validate=False)
            | "ToFile" >> beam.Map(_listed_file, self._base)
            | "ToSourceFile"
            >> beam.ParDo(_ToSourceFile(self._base, self._outputs)).with_outputs(SKIPPED, ERRORS, main="files")
        )
        junk = pbegin | "Junk" >> beam.Create(self._junk) | "CountJunk" >> beam.Map(_counted_junk)
        return {"files": found.files, SKIPPED: junk, ERRORS: found[ERRORS]}


_JUNK_COUNTER = beam.metrics.Metrics.counter("img2tfrecord", "inputs_skipped")


def _counted_junk(name: str) -> str:
    _JUNK_COUNTER.inc()
    return name


class DiscoverClasses(beam.PTransform):
    """SourceFile PCollection -> one element: the sorted list of class names (the label map)."""

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
