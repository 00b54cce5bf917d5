"""Discovery of every input kind as a Beam transform: the same work items whatever holds the bytes.

Archives are listed by a DoFn per archive (after a Reshuffle, so many
archives are listed in parallel); manifests are read by a DoFn per manifest;
folders are matched by ``fileio.MatchFiles`` (``discover.py``). The reading
itself is Beam-free (``img2tfrecord.sources``).
"""

from __future__ import annotations

from typing import Dict, Sequence, Tuple

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.fileio import EmptyMatchTreatment

from img2tfrecord.model import ERRORS, ErrorEntry, MemberEntry, SkippedEntry, WorkItem, error_row
from img2tfrecord.sources import detection
from img2tfrecord.sources import detection_archives as archived
from img2tfrecord.sources.archives import (
    MIN_DEPTH_IMAGES,
    MIN_DEPTH_SEQUENCES,
    list_archive,
    member_item,
    member_path,
    merge_top,
    prefix_of,
    top_of,
)
from img2tfrecord.sources.kinds import INPUT_FOLDER, INPUT_MANIFEST
from img2tfrecord.sources.manifests import manifest_rows, row_to_source
from img2tfrecord.transforms.discover import SKIPPED, DiscoverImages


class _CommonTopFolder(beam.CombineFn):
    """Member names of one archive -> the prefix :func:`top_folder_to_strip` gives."""

    def __init__(self, min_depth: int):
        self._min_depth = min_depth

    def create_accumulator(self):
        return (None, 0, 0)

    def add_input(self, acc, name):
        return merge_top(acc, top_of(name, self._min_depth))

    def merge_accumulators(self, accumulators):
        out = (None, 0, 0)
        for acc in accumulators:
            out = merge_top(out, acc)
        return out

    def extract_output(self, acc):
        return prefix_of(acc)


# ---------------------------------------------------------------------------
# The discovery transforms.


class _ListArchiveFn(beam.DoFn):
    def __init__(self, limit: int):
        self._limit = limit
        self._skipped = beam.metrics.Metrics.counter("img2tfrecord", "inputs_skipped")
        self._members = beam.metrics.Metrics.counter("img2tfrecord", "archive_members")

    def process(self, metadata):
        archive = metadata.path
        for entry in list_archive(archive, metadata.size_in_bytes, self._limit):
            if isinstance(entry, MemberEntry):
                self._members.inc()
                yield archive, entry
            elif isinstance(entry, SkippedEntry):
                self._skipped.inc()
                yield beam.pvalue.TaggedOutput(SKIPPED, member_path(archive, entry.name))
            else:
                where = member_path(archive, entry.name) if entry.name else archive
                yield beam.pvalue.TaggedOutput(ERRORS, error_row(where, entry.name, entry.reason, entry.message))


def _archive_and_name(listed: Tuple[str, MemberEntry]) -> Tuple[str, str]:
    archive, entry = listed
    return archive, entry.name


def _to_source(listed: Tuple[str, MemberEntry], prefixes: Dict[str, str]) -> WorkItem:
    archive, entry = listed
    return member_item(archive, entry, prefixes.get(archive, ""))


class _ReadManifestFn(beam.DoFn):
    def __init__(self, labeled: bool, has_split: bool, split_names: Sequence[str]):
        self._labeled = labeled
        self._has_split = has_split
        self._split_names = tuple(split_names)

    def process(self, metadata):
        for number, row in manifest_rows(metadata.path):
            ok, out = row_to_source(metadata.path, number, row, self._labeled, self._has_split, self._split_names)
            yield out if ok else beam.pvalue.TaggedOutput(ERRORS, out)


class DiscoverSources(beam.PTransform):
    """The work items of any input kind: ``{"files": items, "skipped": names, "errors": error rows}``.

    ``errors`` are inputs rejected before conversion (an unreadable archive,
    a manifest row without a path): each counts as one input. ``outputs``: a folder
    input's folders that hold earlier outputs, whose files are not inputs.
    """

    def __init__(
        self,
        kind: str,
        pattern: str,
        base: str,
        max_file_bytes: int,
        sequence: bool = False,
        labeled: bool = True,
        has_split: bool = False,
        split_names: Sequence[str] = (),
        outputs: Sequence[str] = (),
    ):
        super().__init__()
        self._kind = kind
        self._pattern = pattern
        self._base = base
        self._limit = max_file_bytes
        self._min_depth = MIN_DEPTH_SEQUENCES if sequence else MIN_DEPTH_IMAGES
        self._labeled = labeled
        self._has_split = has_split
        self._split_names = tuple(split_names)
        self._outputs = tuple(outputs)

    def expand(self, pbegin):
        if self._kind == INPUT_FOLDER:
            found = pbegin | "ListFiles" >> DiscoverImages(self._pattern, self._base, self._outputs)
            return {"files": found.files, SKIPPED: found[SKIPPED], ERRORS: found[ERRORS]}
        matched = pbegin | "MatchInputs" >> fileio.MatchFiles(
            self._pattern, empty_match_treatment=EmptyMatchTreatment.ALLOW
        )
        if self._kind == INPUT_MANIFEST:
            rows = matched | "ReadManifest" >> beam.ParDo(
                _ReadManifestFn(self._labeled, self._has_split, self._split_names)
            ).with_outputs(ERRORS, main="files")
            return {"files": rows.files, SKIPPED: pbegin | "NoSkipped" >> beam.Create([]), ERRORS: rows[ERRORS]}
        listed = (
            matched
            | "SpreadArchives" >> beam.Reshuffle()
            | "ListArchives" >> beam.ParDo(_ListArchiveFn(self._limit)).with_outputs(SKIPPED, ERRORS, main="members")
        )
        prefixes = (
            listed.members
            | "ArchiveAndName" >> beam.Map(_archive_and_name)
            | "TopFolder" >> beam.CombinePerKey(_CommonTopFolder(self._min_depth))
        )
        files = listed.members | "ToSource" >> beam.Map(_to_source, prefixes=beam.pvalue.AsDict(prefixes))
        return {"files": files, SKIPPED: listed[SKIPPED], ERRORS: listed[ERRORS]}


class _ReadAnnotationsFn(beam.DoFn):
    """One annotation file -> its detection work items; error rows on ``errors``."""

    def __init__(self, kind: str, base: str, split_names: Sequence[str], named_splits: bool):
        self._kind = kind
        self._base = base
        self._split_names = tuple(split_names)
        self._named_splits = named_splits
        self._image_sets: Dict[str, Dict[str, str]] = {}
        self._images = beam.metrics.Metrics.counter("img2tfrecord", "annotated_images")

    def _sets_of(self, root: str) -> Dict[str, str]:
        if root not in self._image_sets:  # read once per VOC root and worker
            self._image_sets[root] = detection.voc_image_sets(root)
        return self._image_sets[root]

    def process(self, metadata):
        for out in detection.read_items(
            self._kind, metadata.path, self._base, self._split_names, self._named_splits, self._sets_of
        ):
            if isinstance(out, WorkItem):
                self._images.inc()
                yield out
            else:
                yield beam.pvalue.TaggedOutput(ERRORS, out)


class DiscoverAnnotations(beam.PTransform):
    """Detection inputs: annotation files (``patterns``) of one ``kind`` (voc, coco, boxes) -> work items.

    ``{"files": annotated images, "skipped": (none), "errors": error rows}``;
    each error row counts as one input. ``named_splits``: the annotations
    name each image's split (else the seeded hash places it).
    """

    def __init__(self, kind: str, patterns: Sequence[str], base: str, split_names: Sequence[str], named_splits: bool):
        super().__init__()
        self._kind = kind
        self._patterns = list(patterns)
        self._base = base
        self._split_names = tuple(split_names)
        self._named_splits = named_splits

    def expand(self, pbegin):
        found = (
            pbegin
            | "AnnotationPatterns" >> beam.Create(self._patterns)
            | "MatchAnnotations" >> fileio.MatchAll(empty_match_treatment=EmptyMatchTreatment.ALLOW)
            | "SpreadAnnotations" >> beam.Reshuffle()
            | "ReadAnnotations"
            >> beam.ParDo(
                _ReadAnnotationsFn(self._kind, self._base, self._split_names, self._named_splits)
            ).with_outputs(ERRORS, main="files")
        )
        return {"files": found.files, SKIPPED: pbegin | "NoSkipped" >> beam.Create([]), ERRORS: found[ERRORS]}


# ---------------------------------------------------------------------------
# Detection inputs inside archives (sources/detection_archives.py).

_ANNOTATIONS = "annotations"
_IMAGE_SETS = "image_sets"


class _ListDetectionArchiveFn(beam.DoFn):
    """One archive -> ``(ARCHIVE!/NAME, MemberEntry or ErrorEntry)`` of the members an annotation may
    name (main output), ``(archive, MemberEntry)`` of its annotation files and VOC image sets, and
    error rows of the archive's own problems and of unreadable annotation files. Junk is left out."""

    def __init__(self, annotations: archived.ArchivedAnnotations, limit: int):
        self._annotations = annotations
        self._limit = limit

    def process(self, metadata):
        archive = metadata.path
        for entry in archived.list_members(self._annotations, archive, metadata.size_in_bytes, self._limit):
            if isinstance(entry, ErrorEntry):
                row = archived.reported_problem(self._annotations, archive, entry)
                if row is not None:
                    yield beam.pvalue.TaggedOutput(ERRORS, row)
                else:
                    yield member_path(archive, entry.name), entry
                continue
            role = self._annotations.role(entry.name)
            if role == archived.ANNOTATION:
                yield beam.pvalue.TaggedOutput(_ANNOTATIONS, (archive, entry))
            elif role == archived.IMAGE_SET:
                yield beam.pvalue.TaggedOutput(_IMAGE_SETS, (archive, entry))
            else:
                yield member_path(archive, entry.name), entry


def _image_sets_of_root(root: str, texts) -> Tuple[str, Dict[str, str]]:
    return root, archived.root_image_sets(texts)


def _present(keyed) -> Tuple[str, bool]:
    return keyed[0], True


class _ReadArchivedAnnotationsFn(beam.DoFn):
    """One annotation member -> ``(ARCHIVE!/IMAGE, work item)`` of each image it annotates; error rows."""

    def __init__(self, annotations: archived.ArchivedAnnotations, split_names: Sequence[str], named_splits: bool):
        self._annotations = annotations
        self._split_names = tuple(split_names)
        self._named_splits = named_splits

    def process(self, listed, image_sets, members=None):
        archive, entry = listed
        for out in archived.annotated_images(
            self._annotations, archive, entry, self._split_names, self._named_splits, image_sets, members
        ):
            if isinstance(out, archived.AnnotatedImage):
                yield out.key, out.item
            else:
                yield beam.pvalue.TaggedOutput(ERRORS, out)


class _AttachMemberFn(beam.DoFn):
    def __init__(self):
        self._images = beam.metrics.Metrics.counter("img2tfrecord", "annotated_images")

    def process(self, joined):
        _, grouped = joined
        found = list(grouped["members"])
        for item in grouped["items"]:
            out = archived.attach_member(item, found)
            if isinstance(out, WorkItem):
                self._images.inc()
                yield out
            else:
                yield beam.pvalue.TaggedOutput(ERRORS, out)


class DiscoverArchivedAnnotations(beam.PTransform):
    """Detection inputs inside the archives ``pattern`` matches -> work items that read image members.

    ``{"files": annotated images, "skipped": (none), "errors": error rows}``; each error row counts
    as one input. The annotations are parsed from their members; each image they name is joined
    with the member of that name (``sources/detection_archives.py``).
    """

    def __init__(
        self,
        annotations: archived.ArchivedAnnotations,
        pattern: str,
        split_names: Sequence[str],
        named_splits: bool,
        max_file_bytes: int,
    ):
        super().__init__()
        self._annotations = annotations
        self._pattern = pattern
        self._split_names = tuple(split_names)
        self._named_splits = named_splits
        self._limit = max_file_bytes

    def expand(self, pbegin):
        listed = (
            pbegin
            | "MatchArchives" >> fileio.MatchFiles(self._pattern, empty_match_treatment=EmptyMatchTreatment.ALLOW)
            | "SpreadArchives" >> beam.Reshuffle()
            | "ListArchives"
            >> beam.ParDo(_ListDetectionArchiveFn(self._annotations, self._limit)).with_outputs(
                _ANNOTATIONS, _IMAGE_SETS, ERRORS, main="members"
            )
        )
        image_sets = (
            listed[_IMAGE_SETS]
            | "ReadImageSets" >> beam.MapTuple(archived.image_set_text)
            | "GroupImageSets" >> beam.GroupByKey()
            | "ParseImageSets" >> beam.MapTuple(_image_sets_of_root)
        )
        side_inputs = {"image_sets": beam.pvalue.AsDict(image_sets)}
        if self._annotations.kind == detection.COCO:  # file_names are looked up among the members
            side_inputs["members"] = beam.pvalue.AsDict(listed.members | "MemberNames" >> beam.Map(_present))
        items = (
            listed[_ANNOTATIONS]
            | "SpreadAnnotations" >> beam.Reshuffle()
            | "ReadAnnotations"
            >> beam.ParDo(
                _ReadArchivedAnnotationsFn(self._annotations, self._split_names, self._named_splits), **side_inputs
            ).with_outputs(ERRORS, main="items")
        )
        joined = (
            {"items": items.items, "members": listed.members}
            | "JoinMembers" >> beam.CoGroupByKey()
            | "AttachMembers" >> beam.ParDo(_AttachMemberFn()).with_outputs(ERRORS, main="files")
        )
        errors = (listed[ERRORS], items[ERRORS], joined[ERRORS]) | "AnnotationErrors" >> beam.Flatten()
        return {"files": joined.files, SKIPPED: pbegin | "NoSkipped" >> beam.Create([]), ERRORS: errors}
