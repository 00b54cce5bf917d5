"""Find the images of an input root inside the pipeline.

The listing runs as a Beam transform (``fileio.MatchFiles``) on any Beam
filesystem, so millions of files are listed by the runner, not collected in
the launching process. Each match becomes ``(path, relpath, size)``; junk
that operating systems leave in folders (``.DS_Store``, ``Thumbs.db``,
``__MACOSX/``, any hidden file or folder) is skipped and counted.
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.fileio import EmptyMatchTreatment

from img2tfrecord.model import ERRORS, SkippedEntry, WorkItem
from img2tfrecord.sources.layout import classes_of_file, folder_entry

SKIPPED = "skipped"


class _ToSourceFile(beam.DoFn):
    def __init__(self, base: str):
        self._base = base
        self._skipped = beam.metrics.Metrics.counter("img2tfrecord", "inputs_skipped")
        self._inputs = beam.metrics.Metrics.counter("img2tfrecord", "inputs")

    def process(self, metadata):
        entry = folder_entry(self._base, metadata.path, metadata.size_in_bytes)
        if isinstance(entry, SkippedEntry):
            self._skipped.inc()
            yield beam.pvalue.TaggedOutput(SKIPPED, entry.name)
            return
        self._inputs.inc()
        yield entry if isinstance(entry, WorkItem) else beam.pvalue.TaggedOutput(ERRORS, entry)


class DiscoverImages(beam.PTransform):
    """``pattern`` -> main output of SourceFile tuples, tagged outputs ``skipped`` (relpaths of junk)
    and ``errors`` (``bad_name`` rows for local names that are not UTF-8).

    ``base`` is the input root every match is made relative to.
    """

    def __init__(self, pattern: str, base: str):
        super().__init__()
        self._pattern = pattern
        self._base = base

    def expand(self, pbegin):
        return (
            pbegin
            | "MatchFiles" >> fileio.MatchFiles(self._pattern, empty_match_treatment=EmptyMatchTreatment.ALLOW)
            | "ToSourceFile" >> beam.ParDo(_ToSourceFile(self._base)).with_outputs(SKIPPED, ERRORS, main="files")
        )


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
