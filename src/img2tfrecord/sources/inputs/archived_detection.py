"""Detection annotations inside archives with their images: each image an annotation member names is
one input, joined with the member of that name (``sources/detection_archives.py``)."""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Sequence, Tuple, Union

from img2tfrecord.model import ERRORS, ErrorEntry, MemberEntry, WorkItem
from img2tfrecord.sources import detection_archives as archived
from img2tfrecord.sources.archives import member_path
from img2tfrecord.sources.inputs import FILES, Finding, InputSource

MEMBERS = "members"  # (ARCHIVE!/NAME, MemberEntry or its ErrorEntry): what an annotation may name
ANNOTATIONS = "annotations"  # (archive, MemberEntry) of an annotation file
IMAGE_SETS = "image_sets"  # (archive, MemberEntry) of a VOC image set


class ArchivedDetectionSource(InputSource):
    """The archives ``pattern`` matches (``units``: these archives instead, an append's new ones), holding
    ``annotations`` (``ArchivedAnnotations``) and images."""

    join_tags = (MEMBERS, ANNOTATIONS, IMAGE_SETS)
    spread_units = True

    def __init__(
        self,
        annotations: archived.ArchivedAnnotations,
        pattern: str,
        split_names: Sequence[str],
        named_splits: bool,
        max_file_bytes: int,
        units: Sequence[str] = (),
    ):
        super().__init__(tuple(units) or (pattern,))
        self.annotations = annotations
        self.split_names = tuple(split_names)
        self.named_splits = named_splits
        self.max_file_bytes = max_file_bytes

    def read(self, path: str, size: int) -> Iterator[Finding]:
        for entry in archived.list_members(self.annotations, path, size, self.max_file_bytes):
            if isinstance(entry, ErrorEntry):
                row = archived.reported_problem(self.annotations, path, entry)
                yield (ERRORS, row) if row is not None else (MEMBERS, (member_path(path, entry.name), entry))
                continue
            role = self.annotations.role(entry.name)
            if role == archived.ANNOTATION:
                yield ANNOTATIONS, (path, entry)
            elif role == archived.IMAGE_SET:
                yield IMAGE_SETS, (path, entry)
            else:
                yield MEMBERS, (member_path(path, entry.name), entry)

    def annotated(
        self, annotation: Tuple[str, MemberEntry], image_sets, members=None
    ) -> Iterator[Union[archived.AnnotatedImage, Any]]:
        """The images one annotation member names (keyed by their member) and its error rows."""
        archive, entry = annotation
        return archived.annotated_images(
            self.annotations, archive, entry, self.split_names, self.named_splits, image_sets, members
        )

    def join(self, findings: Dict[str, List[Any]]) -> Iterator[Finding]:
        texts: Dict[str, List[Tuple[str, bytes]]] = {}
        for archive, entry in findings[IMAGE_SETS]:
            root, text = archived.image_set_text(archive, entry)
            texts.setdefault(root, []).append(text)
        image_sets = {root: archived.root_image_sets(found) for root, found in texts.items()}
        members: Dict[str, List[Union[MemberEntry, ErrorEntry]]] = {}
        for key, entry in findings[MEMBERS]:
            members.setdefault(key, []).append(entry)
        for annotation in findings[ANNOTATIONS]:
            for out in self.annotated(annotation, image_sets, members):
                joined = archived.attach_member(out.item, members.get(out.key, ())) if _is_image(out) else out
                yield (FILES, joined) if isinstance(joined, WorkItem) else (ERRORS, joined)


def _is_image(out: Any) -> bool:
    return isinstance(out, archived.AnnotatedImage)
