"""The elements that travel through a conversion, typed: work items, archive members, records, errors, shards.

No Beam and no TensorFlow: the conversion worker processes unpickle these.
Every element is an immutable ``NamedTuple`` (cheap to pickle and to encode
with Beam's deterministic tuple coder), read by its field names.
"""

from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Tuple, TypedDict, Union

ERRORS = "errors"  # the tag of error rows (and of every step's error output)


# ---------------------------------------------------------------------------
# Where a work item's bytes are.


class ZipMember(NamedTuple):
    """A zip member, read by seeking to its local header (offsets from the central directory)."""

    archive: str
    header_offset: int
    method: int
    compressed_size: int
    size: int
    crc: int
    flags: int


class TarMember(NamedTuple):
    """An uncompressed tar member, read by seeking to its data."""

    archive: str
    offset: int
    size: int


class InlineMember(NamedTuple):
    """A tar.gz member, which cannot be seeked to: its bytes travel with the work item."""

    data: bytes


Member = Union[ZipMember, TarMember, InlineMember]


class RowPlacement(NamedTuple):
    """What a manifest row says of its image: split and label (None where the manifest has no such column)."""

    split: Optional[str]
    label: Optional[str]


class Box(NamedTuple):
    """One annotated object: its class and its edges in source pixels (0-based, before EXIF orientation)."""

    label: str
    xmin: float
    ymin: float
    xmax: float
    ymax: float
    difficult: bool = False  # VOC
    truncated: bool = False  # VOC; also set when a crop or the image edge cuts the box
    view: str = ""  # VOC <pose>
    is_crowd: bool = False  # COCO iscrowd
    area: Optional[float] = None  # COCO area in source pixels; None: the box's own area


class DroppedBox(NamedTuple):
    """A box left out of its image's record, with why (counted in ``dataset.json``, never silent)."""

    label: str
    reason: str
    message: str


class Annotation(NamedTuple):
    """The objects of one detection image, as its annotation file or rows describe them."""

    boxes: Tuple[Box, ...]
    source_id: str  # image/source_id: the COCO image id, else the image's file name without extension
    dropped: Tuple[DroppedBox, ...] = ()  # boxes already refused while parsing (bad coordinates, unknown class)


class DetectionPlacement(NamedTuple):
    """What the annotations say of a detection image: its split (None: assigned by hash) and its objects."""

    split: Optional[str]
    annotation: Annotation


class MetadataValue(NamedTuple):
    """One value copied into a record as the feature ``metadata/<name>``: its feature list's type, its values."""

    name: str
    list_type: str  # "bytes", "int64" or "float": the tf.train.Feature list it is stored in
    values: Tuple[Union[bytes, int, float], ...]


class WorkItem(NamedTuple):
    """One input to convert: a file, an archive member, a manifest row or an annotated detection image."""

    path: str  # the file, or ARCHIVE!/MEMBER (what errors.jsonl names)
    relpath: str  # relative to the input root: the key of its split, shard, position and record name
    size: int
    member: Optional[Member] = None  # None: a plain file at ``path``
    row: Optional[Union[RowPlacement, DetectionPlacement]] = None  # a manifest row's or annotation's placement
    metadata: Tuple[MetadataValue, ...] = ()  # an image reference's values, copied into its record


class Clip(NamedTuple):
    """``--sequence``: the frames of one clip folder, the unit converted into one SequenceExample."""

    relpath: str  # the clip folder (or the frame itself when it is in no clip folder)
    is_clip: bool
    frames: Tuple[WorkItem, ...]


Item = Union[WorkItem, Clip]  # what a converter converts into one record


def frames(item: Item) -> Tuple[WorkItem, ...]:
    """The files of a work item: a clip's frames, an image itself."""
    return item.frames if isinstance(item, Clip) else (item,)


# ---------------------------------------------------------------------------
# Listing an archive.


class MemberEntry(NamedTuple):
    name: str
    size: int
    member: Member


class SkippedEntry(NamedTuple):
    name: str


class ErrorEntry(NamedTuple):
    name: str  # "" when the problem is the archive's, not one member's
    reason: str
    message: str


ArchiveEntry = Union[MemberEntry, SkippedEntry, ErrorEntry]


# ---------------------------------------------------------------------------
# Conversion outputs.


ClassCounts = Tuple[Tuple[Optional[str], int], ...]
ReasonCounts = Tuple[Tuple[str, int], ...]


class Record(NamedTuple):
    """A converted work item, ready to be written to its split's shard."""

    split: str
    class_name: Optional[str]  # None: a row of an unlabeled manifest
    example: bytes  # the serialized tf.train.Example / SequenceExample
    # For the analysed split: the record without its image bytes, plus the image's pixel
    # sums (schemas.transformed.ANALYSIS_FEATURES) -- the small row tf.Transform reads.
    analysis: Optional[bytes] = None


class DetectionRecord(NamedTuple):
    """A converted detection image: its record, and the count of its boxes written and left out."""

    split: str
    example: bytes  # the serialized TF Object Detection API tf.train.Example
    boxes: ClassCounts  # boxes written per class
    dropped_boxes: ReasonCounts  # boxes left out per reason, and clipped_to_image: boxes kept but clipped
    class_name: Optional[str] = None  # one record holds many classes: counted per box, not per record
    analysis: Optional[bytes] = None  # never analysed


class ErrorRow(TypedDict):
    """One line of ``errors.jsonl``."""

    path: str
    relpath: str
    reason: str  # a short stable category (docs/bad-input.md)
    error: str  # the message


DUPLICATE = "duplicate"  # the reason of a copy ``convert --dedupe`` left out (its message names the kept file)


def error_row(path: str, relpath: str, reason: str, message: str) -> ErrorRow:
    return {"path": path, "relpath": relpath, "reason": reason, "error": message}


# ---------------------------------------------------------------------------
# Shards.


class ShardItem(NamedTuple):
    """A work item placed in its shard: sorted by ``(position, relpath)`` inside the shard."""

    position: int
    relpath: str
    item: Item


class ShardResult(NamedTuple):
    """A written (not yet committed) shard, as its writer counted it."""

    split: str
    shard: int
    temp_path: str
    num_records: int
    num_bytes: int
    sha256: str
    class_counts: ClassCounts
    index_path: Optional[str]  # the index's temp path; None for gzip shards
    box_counts: ClassCounts = ()  # detection: boxes written per class
    dropped_boxes: ReasonCounts = ()  # detection: boxes left out per reason
    index_sha256: str = ""  # of the index file as written ("" when none, or from an older done file)


class CommittedShard(NamedTuple):
    """A shard under its final name, as ``dataset.json`` lists it."""

    split: str
    file: str
    num_records: int
    num_bytes: int
    sha256: str
    index_file: Optional[str]  # relative to the output, e.g. index/train-00000-of-00004.tfrecord.idx
    class_counts: ClassCounts
    box_counts: ClassCounts = ()
    dropped_boxes: ReasonCounts = ()

    def manifest_entry(self) -> Dict[str, object]:
        entry: Dict[str, object] = {
            "file": self.file,
            "num_records": self.num_records,
            "num_bytes": self.num_bytes,
            "sha256": self.sha256,
        }
        if self.index_file:
            entry["index"] = self.index_file
        return entry
