"""Every record the report read, as numpy columns in the launching process (about 100 bytes a record).

Built shard by shard from the workers' :class:`~.shard_scan.ShardColumns`;
the duplicate search (:mod:`.duplicates`) reads the columns, and turns the
few records it reports into :class:`Located` values.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Sequence, Tuple

from img2tfrecord.readers import records

if TYPE_CHECKING:
    import numpy as np

    from img2tfrecord.report.shard_scan import ShardColumns

_SPLIT_RANK = {"train": 0, "validation": 1, "test": 2}


def _split_rank(split: str) -> Tuple[int, str]:
    return (_SPLIT_RANK.get(split, len(_SPLIT_RANK)), split)


def split_order(splits: Iterable[str]) -> List[str]:
    """train, validation, test, then any other split names alphabetically."""
    return sorted(set(splits), key=_split_rank)


@dataclasses.dataclass(frozen=True)
class Located:
    """One record and where it is."""

    split: str
    shard: str
    index: int
    offset: int
    filename: str
    class_name: str
    sha256: str
    dhash: Optional[int]


@dataclasses.dataclass
class RecordTable:
    """Columns, one entry per record; ``split_of_shard`` and ``splits`` give each record's split,
    ``splits`` in :func:`split_order` (so a split's id is its rank)."""

    splits: List[str]
    shard_files: List[str]
    split_of_shard: np.ndarray  # int32, per shard
    classes: List[str]
    shard: np.ndarray  # int32, per record
    index: np.ndarray  # int32
    offset: np.ndarray  # int64
    class_id: np.ndarray  # int32
    sha256: np.ndarray  # (n, 32) uint8
    dhash: np.ndarray  # uint64
    hashed: np.ndarray  # bool
    names: List[bytes]  # per shard, the file names one after the other
    name_ends: List[np.ndarray]  # per shard
    first_row: np.ndarray  # int64, per shard: its first record's row
    sha_text: Optional[Dict[bytes, str]] = None  # digest -> the key it was made from, when not its hex

    def __len__(self) -> int:
        return len(self.shard)

    def split_ids(self, rows: np.ndarray) -> np.ndarray:
        return self.split_of_shard[self.shard[rows]]

    def filename(self, row: int) -> str:
        shard = int(self.shard[row])
        local = row - int(self.first_row[shard])
        ends = self.name_ends[shard]
        start = int(ends[local - 1]) if local else 0
        return records.decode_text(self.names[shard][start : int(ends[local])])

    def digest_text(self, row: int) -> str:
        digest = self.sha256[row].tobytes()
        return (self.sha_text or {}).get(digest) or digest.hex()

    def located(self, row: int) -> Located:
        shard = int(self.shard[row])
        return Located(
            self.splits[int(self.split_of_shard[shard])],
            self.shard_files[shard],
            int(self.index[row]),
            int(self.offset[row]),
            self.filename(row),
            self.classes[int(self.class_id[row])],
            self.digest_text(row),
            int(self.dhash[row]) if self.hashed[row] else None,
        )


_JOINED = ("record_index", "offset", "class_ids", "sha256", "dhash", "hashed")  # concatenated over the shards


class TableBuilder:
    """A :class:`RecordTable` assembled from one shard's columns at a time; ``classes`` come first in its
    class list, any other class names after them in the order met."""

    def __init__(self, splits: Iterable[str], classes: Sequence[str] = ()) -> None:
        self.splits = split_order(splits)
        self.classes = list(classes)
        self._class_id = {c: i for i, c in enumerate(self.classes)}
        self._files: List[Tuple[str, str]] = []  # (file, split) per shard
        self._columns: Dict[str, List[np.ndarray]] = {name: [] for name in _JOINED}
        self._names: List[bytes] = []
        self._name_ends: List[np.ndarray] = []

    def add(self, file: str, split: str, columns: ShardColumns) -> None:
        import numpy as np

        if split not in self.splits:
            self.splits = split_order([*self.splits, split])
        self._files.append((file, split))
        ids = np.array([self._class_of(c) for c in columns.class_names] or [0], dtype=np.int32)
        for name in _JOINED:
            self._columns[name].append(ids[columns.class_ids] if name == "class_ids" else getattr(columns, name))
        self._names.append(columns.names)
        self._name_ends.append(columns.name_ends)

    def _class_of(self, name: str) -> int:
        if name not in self._class_id:
            self._class_id[name] = len(self.classes)
            self.classes.append(name)
        return self._class_id[name]

    def build(self) -> RecordTable:
        """The table; the builder is empty afterwards. Each column is joined and its parts let go before the
        next, so the peak is the table and one column's parts, not the table twice."""
        import numpy as np

        sizes = [len(part) for part in self._columns["record_index"]]
        rank = {s: i for i, s in enumerate(self.splits)}
        empty = {"sha256": np.zeros((0, 32), dtype=np.uint8)}

        def joined(name: str, dtype) -> np.ndarray:
            parts = self._columns.pop(name)
            if not parts:
                return empty.get(name, np.zeros(0, dtype=dtype))
            out = np.concatenate(parts)
            parts.clear()
            return out

        table = RecordTable(
            splits=self.splits,
            shard_files=[file for file, _ in self._files],
            split_of_shard=np.array([rank[split] for _, split in self._files], dtype=np.int32),
            classes=self.classes,
            shard=np.repeat(np.arange(len(sizes), dtype=np.int32), sizes),
            index=joined("record_index", np.int32),
            offset=joined("offset", np.int64),
            class_id=joined("class_ids", np.int32),
            sha256=joined("sha256", np.uint8),
            dhash=joined("dhash", np.uint64),
            hashed=joined("hashed", bool),
            names=self._names,
            name_ends=self._name_ends,
            first_row=np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])[:-1].astype(np.int64),
        )
        self._files, self._names, self._name_ends = [], [], []
        self._columns = {name: [] for name in _JOINED}
        return table


def key_digest(key: str) -> bytes:
    """The 32 bytes a ``sha256`` text stands for: its hex digits, else the SHA-256 of the text itself."""
    if len(key) == 64:
        try:
            return bytes.fromhex(key)
        except ValueError:
            pass
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


def from_located(items: Sequence[Located]) -> RecordTable:
    """A table of the given records (for callers holding a few records as values); each item is its own shard."""
    import numpy as np

    from img2tfrecord.report.shard_scan import ShardColumns

    builder = TableBuilder({item.split for item in items})
    sha_text: Dict[bytes, str] = {}
    for item in items:
        digest = key_digest(item.sha256)
        sha_text[digest] = item.sha256
        name = item.filename.encode("utf-8", "surrogateescape")
        columns = ShardColumns(
            np.array([item.index], dtype=np.int32),
            np.array([item.offset], dtype=np.int64),
            np.array([0], dtype=np.int32),
            np.frombuffer(digest, dtype=np.uint8).reshape(1, 32),
            np.array([item.dhash or 0], dtype=np.uint64),
            np.array([item.dhash is not None]),
            name,
            np.array([len(name)], dtype=np.int64),
            (item.class_name,),
        )
        builder.add(item.shard, item.split, columns)
    table = builder.build()
    table.sha_text = sha_text
    return table
