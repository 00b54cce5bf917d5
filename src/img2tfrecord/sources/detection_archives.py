"""Detection inputs inside archives (zip, tar, tar.gz), without Beam: which members are annotations,
where relpaths start, and an annotated image joined with the member it names.

The launch plan lists the archives and names the annotation members by
patterns of member names: ``ROOT/Annotations/*.xml`` for each VOC root, the
COCO JSON and box manifest members by their names. Annotations are parsed
by ``sources/detection.py`` from the members' bytes, the images they name are
paths ``ARCHIVE!/MEMBER``; such an image becomes a work item once joined with
its member (read later by seeking, like a classification member), and one
naming no member is ``not_found``, as a missing file is.

Relpaths are taken from the dataset's folder inside the archive: the deepest
folder holding every VOC root (the folder with ``Annotations/`` and
``JPEGImages/``), COCO root (the folder above ``annotations/``, else the
JSON's) or box manifest. So ``VOCdevkit/VOC2012/JPEGImages/a.jpg`` has the
relpath ``JPEGImages/a.jpg``, as when the folder ``VOC2012`` is converted,
and gives the same split, shard and record.
"""

from __future__ import annotations

import dataclasses
import posixpath
from typing import (
    Callable,
    Container,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from img2tfrecord.model import (
    ArchiveEntry,
    ErrorEntry,
    ErrorRow,
    InlineMember,
    MemberEntry,
    SkippedEntry,
    WorkItem,
    error_row,
)
from img2tfrecord.sources import detection
from img2tfrecord.sources.archives import list_archive, member_path
from img2tfrecord.sources.files import read_source
from img2tfrecord.sources.manifests import manifest_format

ANNOTATION = "annotation"  # a VOC XML, COCO JSON or box manifest the plan named
IMAGE_SET = "image_set"  # ROOT/ImageSets/Main/*.txt
MEMBER = "member"  # anything else: an image an annotation may name

NOT_FOUND = "no such member in the archive (named by the annotations)"
_ANY_XML = "*.xml"
# Member-level listing problems that concern the whole archive: always reported, never joined.
_ARCHIVE_PROBLEMS = ("corrupt_archive", "truncated_archive", "not_an_archive", "unreadable")


def matches(name: str, pattern: str) -> bool:
    """``pattern`` is a member name, or ``FOLDER/*.xml``: every ``.xml`` file directly in FOLDER."""
    folder, _, last = pattern.rpartition("/")
    if last == _ANY_XML:
        return posixpath.dirname(name) == folder and name.endswith(".xml")
    return name == pattern


def voc_pattern(root: str) -> str:
    """The pattern of the annotation files of the VOC root ``root`` (``""`` or ending with ``/``)."""
    return f"{root}{detection.VOC_ANNOTATIONS}/{_ANY_XML}"


def _root_of(annotation_format: str, pattern: str) -> str:
    """The dataset folder (no trailing ``/``, ``""`` for the top) one annotation pattern belongs to."""
    folder = posixpath.dirname(pattern)
    coco_folder = annotation_format == detection.COCO and posixpath.basename(folder).lower() == "annotations"
    if annotation_format == detection.VOC or coco_folder:
        return posixpath.dirname(folder)
    return folder


def common_folder(folders: Iterable[str]) -> str:
    """The deepest folder holding all ``folders`` (``""``: the top), ending with ``/`` unless empty."""
    split = [f.split("/") if f else [] for f in folders]
    common: List[str] = []
    for parts in zip(*split) if split else ():
        if len(set(parts)) != 1:
            break
        common.append(parts[0])
    return "/".join(common) + "/" if common else ""


@dataclasses.dataclass(frozen=True)
class ArchivedAnnotations:
    """The annotation members of detection archives, as the launch plan found them.

    ``annotation_format``: voc, coco or boxes; ``patterns``: see :func:`matches`.
    """

    annotation_format: str
    patterns: Tuple[str, ...]

    @property
    def prefix(self) -> str:
        """The member-name prefix relpaths start after (``""`` or ending with ``/``)."""
        return common_folder(_root_of(self.annotation_format, p) for p in self.patterns)

    def base(self, archive: str) -> str:
        """The input root of one archive's items: ``ARCHIVE!/PREFIX``."""
        return member_path(archive, self.prefix)

    def relpath(self, name: str) -> str:
        """A member's relpath: its name after :attr:`prefix` (the whole name outside it)."""
        prefix = self.prefix
        return name[len(prefix) :] if name.startswith(prefix) else name

    def role(self, name: str) -> str:
        if any(matches(name, p) for p in self.patterns):
            return ANNOTATION
        if self.annotation_format == detection.VOC and image_set_root(name) is not None:
            return IMAGE_SET
        return MEMBER

    def limit_of(self, name: str, image_limit: int) -> int:
        """The most bytes a member may have: annotation files have their own limits, images ``image_limit``."""
        role = self.role(name)
        if role == ANNOTATION:
            voc = self.annotation_format == detection.VOC
            return detection.MAX_ANNOTATION_BYTES if voc else detection.MAX_COCO_BYTES
        if role == IMAGE_SET:
            return detection.MAX_ANNOTATION_BYTES
        return image_limit


def image_set_root(name: str) -> Optional[str]:
    """``ROOT/`` (or ``""``) of a member ``ROOT/ImageSets/Main/NAME.txt``, else None."""
    folder = posixpath.dirname(name)
    sets = detection.VOC_IMAGE_SETS
    if not name.endswith(".txt") or not (folder == sets or folder.endswith("/" + sets)):
        return None
    return folder[: -len(detection.VOC_IMAGE_SETS)]


def image_set_name(name: str) -> str:
    """``train`` of ``ROOT/ImageSets/Main/train.txt``."""
    return posixpath.splitext(posixpath.basename(name))[0]


def member_reader(archive: str, entry: MemberEntry) -> detection.Reader:
    """The bytes of one member, for the annotation parsers (``read(path, limit)``); ImageError past the limit."""
    item = WorkItem(member_path(archive, entry.name), entry.name, entry.size, entry.member)
    return lambda unused_path, limit: read_source(item, limit)


def member_key(archive: str, path: str) -> Optional[str]:
    """``ARCHIVE!/NAME`` of an image path an annotation gives (``./`` and ``a/../`` folded), or None
    when the path is not inside ``archive``."""
    head = member_path(archive, "")
    if not path.startswith(head):
        return None
    name = posixpath.normpath(path[len(head) :])
    if name in (".", "..") or name.startswith(("../", "/")):
        return None
    return member_path(archive, name)


def attach_member(item: WorkItem, found: Sequence[Union[MemberEntry, ErrorEntry]]) -> Union[WorkItem, ErrorRow]:
    """An annotated image joined with what its archive holds under its name: a work item that
    reads that member, or why it cannot be converted (``not_found``, the listing's reason)."""
    if not found:
        return error_row(item.path, item.relpath, "not_found", NOT_FOUND)
    if len(found) > 1:
        message = f"the archive holds {len(found)} members of this name: which one the annotation means is unclear"
        return error_row(item.path, item.relpath, "duplicate_member", message)
    entry = found[0]
    if isinstance(entry, ErrorEntry):
        return error_row(item.path, item.relpath, entry.reason, entry.message)
    return item._replace(size=entry.size, member=entry.member)


def is_archive_problem(entry: ErrorEntry) -> bool:
    """True for a listing error that is the archive's (reported as it is), not one member's."""
    return not entry.name or entry.reason in _ARCHIVE_PROBLEMS


# ---------------------------------------------------------------------------
# Discovery, one step at a time: sources/inputs/archived_detection.py calls these, and joins the keyed
# images with the keyed members in-process (--plan); the pipeline joins them by a CoGroupByKey.


def list_members(
    annotations: ArchivedAnnotations, archive: str, size: int, limit: int
) -> Iterator[Union[MemberEntry, ErrorEntry]]:
    """Every member and problem of one archive, each member listed up to its own limit; junk left out."""
    for entry in list_archive(archive, size, limit, lambda name: annotations.limit_of(name, limit)):
        if not isinstance(entry, SkippedEntry):
            yield entry


def reported_problem(annotations: ArchivedAnnotations, archive: str, entry: ErrorEntry) -> Optional[ErrorRow]:
    """The error row of a listing problem reported as it is (the archive's own, an annotation file's or
    an image set's); None for an image member's, which is joined with the annotation naming it, if any."""
    if is_archive_problem(entry) or annotations.role(entry.name) != MEMBER:
        where = member_path(archive, entry.name) if entry.name else archive
        return error_row(where, annotations.relpath(entry.name), entry.reason, entry.message)
    return None


def image_set_text(archive: str, entry: MemberEntry) -> Tuple[str, Tuple[str, bytes]]:
    """``(ARCHIVE!/ROOT/, (set name, bytes))`` of one VOC image set member."""
    root = image_set_root(entry.name) or ""
    data = member_reader(archive, entry)("", detection.MAX_ANNOTATION_BYTES)
    return member_path(archive, root), (image_set_name(entry.name), data)


def root_image_sets(texts: Iterable[Tuple[str, bytes]]) -> Dict[str, str]:
    """Image id -> split of one VOC root, from its image sets' ``(set name, bytes)``."""
    by_name = dict(texts)
    return detection.parse_image_sets(by_name.__getitem__, by_name)


class AnnotatedImage(NamedTuple):
    """An image an annotation member names, before it is joined with its member (:func:`attach_member`)."""

    key: str  # ARCHIVE!/NAME of the member it names
    item: WorkItem


def annotated_images(
    annotations: ArchivedAnnotations,
    archive: str,
    entry: MemberEntry,
    split_names: Sequence[str],
    named_splits: bool,
    image_sets: Mapping[str, Dict[str, str]],
    members: Optional[Container[str]] = None,
) -> Iterator[Union[AnnotatedImage, ErrorRow]]:
    """The images one annotation member names, keyed by the member each names, and its error rows.

    ``image_sets``: ``ARCHIVE!/ROOT/`` -> image id -> split (:func:`root_image_sets`); ``members``:
    the ``ARCHIVE!/NAME`` keys of the image members, which COCO needs to find its image folder.
    """
    path = member_path(archive, entry.name)

    def exists_in_archive(image_path: str) -> bool:
        return members is not None and member_key(archive, image_path) in members

    for out in detection.read_items(
        annotations.annotation_format,
        path,
        annotations.base(archive),
        split_names,
        named_splits,
        lambda root: image_sets.get(root, {}),
        read=member_reader(archive, entry),
        exists_fn=exists_in_archive,
    ):
        if not isinstance(out, WorkItem):
            yield out
            continue
        key = member_key(archive, out.path)
        if key is None:  # e.g. a manifest row climbing out of the archive with '..'
            yield error_row(out.path, out.relpath, "not_found", NOT_FOUND)
        else:
            yield AnnotatedImage(key, out)


# ---------------------------------------------------------------------------
# At launch: the layout, the whole listing of an archive, and the small annotation members' bytes.


def _is_voc_annotation(name: str) -> bool:
    parts = name.split("/")
    return len(parts) >= 2 and parts[-2] == detection.VOC_ANNOTATIONS and parts[-1].endswith(".xml")


def _voc_root(annotation: str) -> str:
    """``ROOT/`` (or ``""``) of ``ROOT/Annotations/NAME.xml``."""
    root = "/".join(annotation.split("/")[:-2])
    return root + "/" if root else ""


def find_annotations(
    names: Sequence[str], data: Callable[[str], Optional[bytes]], forced: bool, complete: bool = True
) -> Optional[ArchivedAnnotations]:
    """The annotation members among the member ``names`` of archives, or None when they hold none.

    The rules of a folder: VOC (``Annotations/*.xml`` and a ``JPEGImages/`` folder, which a
    partial listing, ``complete`` False, may not have reached yet), else COCO (``instances*.json``;
    any ``.json`` when ``forced``), else manifests of boxes (``.csv``/``.jsonl`` with an ``xmin``
    column; ``data(name)`` gives their bytes).
    """
    voc_roots = sorted({_voc_root(name) for name in names if _is_voc_annotation(name)})
    has_images = any(detection.VOC_IMAGES in name.split("/")[:-1] for name in names)
    if voc_roots and (has_images or not complete):
        return ArchivedAnnotations(detection.VOC, tuple(voc_pattern(root) for root in voc_roots))
    jsons = sorted(name for name in names if name.lower().endswith(".json"))
    instances = [name for name in jsons if posixpath.basename(name).lower().startswith("instances")]
    if instances or (forced and jsons):
        return ArchivedAnnotations(detection.COCO, tuple(instances or jsons))
    boxes = []
    for name in sorted(names):
        content = data(name) if manifest_format(name) else None
        if content is not None and detection.is_box_manifest(name, content):
            boxes.append(name)
    if boxes:
        return ArchivedAnnotations(detection.BOXES, tuple(boxes))
    return None


def _kept(name: str) -> bool:
    """Members whose bytes the plan reads: VOC image sets and manifests (header, split column)."""
    return image_set_root(name) is not None or manifest_format(name) is not None


def _may_annotate(name: str) -> bool:
    """A member that may be an annotation file: listed up to the annotation limit, not the image limit."""
    return _kept(name) or name.lower().endswith((".xml", ".json"))


@dataclasses.dataclass
class ArchiveScan:
    """What the launch plan needs of one archive: every member, and the bytes of the small ones it reads."""

    archive: str
    members: List[MemberEntry] = dataclasses.field(default_factory=list)  # inline bytes dropped
    data: Dict[str, bytes] = dataclasses.field(default_factory=dict)  # image sets, manifests
    problems: List[ErrorEntry] = dataclasses.field(default_factory=list)


def scan_archive(archive: str, size: int, limit: int) -> ArchiveScan:
    """List one archive whole (a zip's directory, a tar's headers, a tar.gz decompressed once)."""
    scan = ArchiveScan(archive)

    def member_limit(name: str) -> int:
        return detection.MAX_COCO_BYTES if _may_annotate(name) else limit

    entry: ArchiveEntry
    for entry in list_archive(archive, size, limit, member_limit):
        if isinstance(entry, ErrorEntry):
            scan.problems.append(entry)
        elif isinstance(entry, MemberEntry):
            if _kept(entry.name):
                scan.data[entry.name] = member_reader(archive, entry)("", detection.MAX_COCO_BYTES)
            if isinstance(entry.member, InlineMember):
                entry = entry._replace(member=InlineMember(b""))
            scan.members.append(entry)
    return scan
