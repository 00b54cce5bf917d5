"""The Beam joins of the input sources whose findings depend on each other (``sources/inputs/``):
an archive's members and its wrapping folder; annotation members and the image members they name."""

from __future__ import annotations

from typing import Any, Dict, Tuple

import apache_beam as beam

from img2tfrecord.model import ERRORS, MemberEntry, WorkItem
from img2tfrecord.sources import detection
from img2tfrecord.sources import detection_archives as archived
from img2tfrecord.sources.archives import member_item, merge_top, prefix_of
from img2tfrecord.sources.inputs import FILES
from img2tfrecord.sources.inputs import archive as archive_source
from img2tfrecord.sources.inputs import archived_detection as annotated
from img2tfrecord.transforms.launch_values import launch_values


class _CommonTopFolder(beam.CombineFn):
    """Partial wrapping folders of one archive's members (``ArchiveSource.top_of``) -> the prefix to strip."""

    def create_accumulator(self):
        return (None, 0, 0)

    def add_input(self, acc, partial):
        return merge_top(acc, partial)

    def merge_accumulators(self, accumulators):
        out = (None, 0, 0)
        for acc in accumulators:
            out = merge_top(out, acc)
        return out

    def extract_output(self, acc):
        return prefix_of(acc)


def _to_item(member: Tuple[str, MemberEntry], prefixes: Dict[str, str]) -> WorkItem:
    archive, entry = member
    return member_item(archive, entry, prefixes.get(archive, ""))


class JoinArchiveMembers(beam.PTransform):
    """``ArchiveSource`` findings -> ``{"files": members named without their archive's wrapping folder, "errors"}``."""

    def __init__(self, source: archive_source.ArchiveSource):
        super().__init__()
        self._source = source

    def expand(self, found):
        members = found[archive_source.MEMBERS]
        prefixes = (
            members
            | "TopFolder" >> beam.Map(self._source.top_of)
            | "CommonTopFolder" >> beam.CombinePerKey(_CommonTopFolder())
        )
        files = members | "ToWorkItem" >> beam.Map(_to_item, prefixes=beam.pvalue.AsDict(prefixes))
        return {FILES: files, ERRORS: launch_values(members.pipeline, "NoErrors", [])}


def _image_sets_of_root(root: str, texts) -> Tuple[str, Dict[str, str]]:
    return root, archived.root_image_sets(texts)


def _present(keyed) -> Tuple[str, bool]:
    return keyed[0], True


class _ReadAnnotationFn(beam.DoFn):
    """One annotation member -> ``(ARCHIVE!/IMAGE, work item)`` of each image it names; error rows."""

    def __init__(self, source: annotated.ArchivedDetectionSource):
        self._source = source

    def process(self, annotation, image_sets, members=None):
        for out in self._source.annotated(annotation, image_sets, members):
            if isinstance(out, archived.AnnotatedImage):
                yield out.key, out.item
            else:
                yield beam.pvalue.TaggedOutput(ERRORS, out)


class _AttachMemberFn(beam.DoFn):
    def process(self, joined):
        _, grouped = joined
        found = list(grouped["members"])
        for item in grouped["items"]:
            out = archived.attach_member(item, found)
            yield out if isinstance(out, WorkItem) else beam.pvalue.TaggedOutput(ERRORS, out)


class JoinAnnotatedMembers(beam.PTransform):
    """``ArchivedDetectionSource`` findings -> ``{"files": annotated images reading their members, "errors"}``."""

    def __init__(self, source: annotated.ArchivedDetectionSource):
        super().__init__()
        self._source = source

    def expand(self, found):
        image_sets = (
            found[annotated.IMAGE_SETS]
            | "ReadImageSets" >> beam.MapTuple(archived.image_set_text)
            | "GroupImageSets" >> beam.GroupByKey()
            | "ParseImageSets" >> beam.MapTuple(_image_sets_of_root)
        )
        members = found[annotated.MEMBERS]
        side_inputs: Dict[str, Any] = {"image_sets": beam.pvalue.AsDict(image_sets)}
        if self._source.annotations.annotation_format == detection.COCO:  # file_names are looked up among the members
            side_inputs["members"] = beam.pvalue.AsDict(members | "MemberNames" >> beam.Map(_present))
        items = (
            found[annotated.ANNOTATIONS]
            | "SpreadAnnotations" >> beam.Reshuffle()
            | "ReadAnnotations"
            >> beam.ParDo(_ReadAnnotationFn(self._source), **side_inputs).with_outputs(ERRORS, main="items")
        )
        joined = (
            {"items": items.items, "members": members}
            | "JoinMembers" >> beam.CoGroupByKey()
            | "AttachMembers" >> beam.ParDo(_AttachMemberFn()).with_outputs(ERRORS, main=FILES)
        )
        errors = (items[ERRORS], joined[ERRORS]) | "AnnotationErrors" >> beam.Flatten()
        return {FILES: joined[FILES], ERRORS: errors}
