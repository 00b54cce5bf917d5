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


class WorkItem(NamedTuple):
    """One input to convert: a file, an archive member or a manifest row."""

    path: str  # the file, or ARCHIVE!/MEMBER (what errors.jsonl names)
    relpath: str  # relative to the input root: the key of its split, shard, position and record name
    size: int
    member: Optional[Member] = None  # None: a plain file at ``path``
    row: Optional[RowPlacement] = None  # a manifest row's split and label


class Clip(NamedTuple):
    """``--sequence``: the frames of one clip folder, the unit converted into one SequenceExample."""

    relpath: str  # the clip folder (or the frame itself when it is in no clip folder)
    is_clip: bool
    frames: Tuple[WorkItem, ...]


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


class Record(NamedTuple):
    """A converted work item, ready to be written to its split's shard."""

    split: str
    class_name: Optional[str]  # None: a row of an unlabeled manifest
    example: bytes  # the serialized tf.train.Example / SequenceExample
    # For the analysed split: the record without its image bytes, plus the image's pixel
    # sums (schemas.transformed.ANALYSIS_FEATURES) -- the small row tf.Transform reads.
    analysis: Optional[bytes] = None


class ErrorRow(TypedDict):
    """One line of ``errors.jsonl``."""

    path: str
    relpath: str
    reason: str  # a short stable category (docs/bad-input.md)
    error: str  # the message


def error_row(path: str, relpath: str, reason: str, message: str) -> ErrorRow:
    return {"path": path, "relpath": relpath, "reason": reason, "error": message}


# ---------------------------------------------------------------------------
# Shards.


class ShardItem(NamedTuple):
    """A work item placed in its shard: sorted by ``(position, relpath)`` inside the shard."""

    position: int
    relpath: str
    item: Union[WorkItem, Clip]


ClassCounts = Tuple[Tuple[Optional[str], int], ...]


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


class CommittedShard(NamedTuple):
    """A shard under its final name, as ``dataset.json`` lists it."""

    split: str
    file: str
    num_records: int
    num_bytes: int
    sha256: str
    index_file: Optional[str]  # relative to the output, e.g. index/train-00000-of-00004.tfrecord.idx
    class_counts: ClassCounts

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
