"""Find the images of an input root inside the pipeline.

The listing runs as a Beam transform (``fileio.MatchFiles``) on any Beam
filesystem, so millions of files are listed by the runner, not collected in
the launching process. Each match becomes ``(path, relpath, size)``; junk
that operating systems leave in folders (``.DS_Store``, ``Thumbs.db``,
``__MACOSX/``, any hidden file or folder) is skipped and counted.
"""
from __future__ import annotations

from typing import Optional, Tuple

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.fileio import EmptyMatchTreatment

from img2tfrecord.transforms.split import split_of_folder

LAYOUT_CLASS = "class"  # SRC/<class>/<file>
LAYOUT_SPLIT = "split"  # SRC/<split>/<class>/<file>
LAYOUT_MANIFEST = "manifest"  # label and split come from the rows of a CSV/JSONL manifest
LAYOUTS = (LAYOUT_CLASS, LAYOUT_SPLIT)
SKIPPED = "skipped"
# Files and folders that operating systems, file managers and NAS boxes leave next to
# pictures (compared lower-case). "@eadir" is where Synology keeps thumbnails of every
# photo: JPEGs that would otherwise become duplicate records.
_JUNK_NAMES = {
    "thumbs.db", "ehthumbs.db", "ehthumbs_vista.db", "desktop.ini", "icon\r", "__macosx",
    "@eadir", "$recycle.bin", "system volume information", "lost+found",
}

SourceFile = Tuple[str, str, int]  # (path, path relative to the input root, size in bytes)
# Archive members and manifest rows extend it (transforms/sources.py):
# (path, relpath, size, member locator or None, (split, label) of a manifest row or None).


class PlacementError(ValueError):
    """A file that is not inside a class folder of the expected layout."""

    reason = "no_class_folder"


def relative_path(base: str, path: str) -> str:
    """``path`` relative to the input root ``base`` (which ends with a separator)."""
    if not path.startswith(base):
        raise ValueError(f"{path!r} is not under the input root {base!r}")
    return path[len(base):].lstrip("/")


def is_junk(relpath: str) -> bool:
    return any(part.startswith(".") or part.lower() in _JUNK_NAMES for part in relpath.split("/"))


def parse_relpath(relpath: str, layout: str) -> Tuple[Optional[str], str]:
    """``(split folder or None, class name)`` of a file, or PlacementError."""
    parts = relpath.split("/")
    if layout == LAYOUT_SPLIT:
        if len(parts) < 3:
            raise PlacementError(f"{relpath!r} is not inside SRC/<split>/<class>/")
        split = split_of_folder(parts[0])
        if split is None:
            raise PlacementError(f"{parts[0]!r} is not a split folder (train, validation/val, test)")
        return split, parts[1]
    if len(parts) < 2:
        raise PlacementError(f"{relpath!r} is not inside a class folder SRC/<class>/")
    return None, parts[0]


def class_of(relpath: str, layout: str) -> Optional[str]:
    try:
        return parse_relpath(relpath, layout)[1]
    except PlacementError:
        return None


def placement(source: SourceFile, layout: str) -> Tuple[Optional[str], Optional[str]]:
    """``(split or None, class name)`` of any source: from a manifest row, else from its relpath.

    The class name is None only for a row of an unlabeled manifest.
    """
    if len(source) > 4 and source[4] is not None:
        return source[4]
    return parse_relpath(source[1], layout)


def _classes_of_file(source: SourceFile, layout: str):
    try:
        name = placement(source, layout)[1]
    except PlacementError:
        name = None
    return [name] if name is not None else []


class _ToSourceFile(beam.DoFn):
    def __init__(self, base: str):
        self._base = base
        self._skipped = beam.metrics.Metrics.counter("img2tfrecord", "inputs_skipped")
        self._inputs = beam.metrics.Metrics.counter("img2tfrecord", "inputs")

    def process(self, metadata):
        relpath = relative_path(self._base, metadata.path)
        if is_junk(relpath):
            self._skipped.inc()
            yield beam.pvalue.TaggedOutput(SKIPPED, relpath)
            return
        self._inputs.inc()
        yield metadata.path, relpath, metadata.size_in_bytes


class DiscoverImages(beam.PTransform):
    """``pattern`` -> main output of SourceFile tuples, tagged output ``skipped`` of relpaths.

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
            | "ToSourceFile" >> beam.ParDo(_ToSourceFile(self._base)).with_outputs(SKIPPED, main="files")
        )


class DiscoverClasses(beam.PTransform):
    """SourceFile PCollection -> one element: the sorted list of class names (the label map)."""

    def __init__(self, layout: str):
        super().__init__()
        self._layout = layout

    def expand(self, files):
        return (
            files
            | "ClassOfFile" >> beam.FlatMap(_classes_of_file, self._layout)
            | "DistinctClasses" >> beam.Distinct()
            | "CollectClasses" >> beam.combiners.ToList()
            | "SortClasses" >> beam.Map(sorted)
        )
