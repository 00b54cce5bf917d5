"""What every shard file format answers (:class:`ShardFormat`): the one interface ``--file-format`` is behind.

An adapter is the only code that knows a format: its flag value, its file names, whether its shards
get index files, how records are written into a shard (:meth:`ShardFormat.open_writer`, streaming) and
read back (a scan; random access by index file or by record number), what a record is made of, and
what the readers of other libraries can open. Every format stores the same serialized
``tf.train.Example`` / ``SequenceExample`` records in the same order: a format's reader gives back the
record the TFRecord run holds, byte for byte, so ``verify``, ``inspect``, ``report`` and ``load()``
never ask which format a shard is in.

Import-light (the standard library only): ``schemas/output_files.py`` and ``options.py`` read the
table; each adapter imports its implementation (and its third-party library) when first used.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, List, Optional, Protocol, Sequence, Tuple

IndexEntry = Tuple[int, int]  # (offset, length) of one record in its shard; tfrecord_codec's too

NUMBERED_NAMES = "-SSSSS-of-NNNNN"  # Beam's shard name template: train-00000-of-00004 (TFDS's names)
NUMBERED_RE = r"-(?P<index>\d{5})-of-(?P<count>\d{5})"


@dataclasses.dataclass(frozen=True)
class ShardContext:
    """What a writer may need beyond its stream: the shard's file name without its suffix (keys samples),
    whether records are SequenceExamples, and the run's class names (label id ``i`` is ``class_names[i]``)."""

    shard_stem: str
    sequence: bool = False
    class_names: Tuple[str, ...] = ()


class RecordWriter(Protocol):
    """Records into one shard: ``write(record)`` -> its ``(offset, length)`` for the index file (None for a
    format with its own index); ``close`` writes what ends the shard (a stream stays open)."""

    def write(self, record: bytes) -> Optional[IndexEntry]: ...

    def close(self) -> None: ...


class NumberedShard(Protocol):
    """An open shard read by record number: ``len()``, ``read(indices)``, ``close``."""

    def __len__(self) -> int: ...

    def read(self, indices: Sequence[int]) -> List[bytes]: ...

    def close(self) -> None: ...


class ShardFormat:
    """One file format (subclasses in this package; the table is ``shard_formats.ADAPTER_FOR_FORMAT``)."""

    name: str = ""  # the --file-format value, dataset.json's file_format
    title: str = ""  # how messages name it
    suffix: str = ""  # the shard file name suffix, uncompressed
    compressible: bool = False  # --compression gzip compresses the whole shard
    name_template: str = NUMBERED_NAMES  # Beam's shard name template
    name_re: str = NUMBERED_RE  # the index (and count) of a shard name, as a regular expression
    streams: bool = True  # written into a stream (any filesystem); else to a local path, copied when closed
    index_files: bool = True  # uncompressed shards get index/<shard>.idx (offset and length per record)
    random_access: str = "offsets"  # "offsets" (index file), "numbered" (by record number), "" (none)
    self_framed: bool = False  # a record is read at its offset alone (its length is in its header)
    remote_random_access: bool = True  # numbered reads of a remote shard work without a local copy
    tfds_name: Optional[str] = None  # TFDS's name of the format, when TFDS reads it
    tf_data_reads: bool = False  # tf.data's TFRecordDataset reads the shards (load(), DALI)
    brace_patterns: bool = False  # dataset.json lists each split's brace pattern (WebDataset's readers)
    reader_hint: str = ""  # how its own users read it, for a reader (tf.data) that cannot
    other_readers: str = ""  # the same, shorter, for TFDS's refusal
    help_note: str = ""  # what --file-format's help says of it
    doc_note: str = ""  # ... docs/options.md
    template_note: str = ""  # ... the Flex Template's parameter
    described: str = ""  # "<name> tar shards": what TFDS's refusal says the output holds
    card_file: str = ""  # the name of dataset_card's file, when the format writes one
    trailer: bool = False  # bytes of its own follow the last record (a tar's end-of-archive blocks)
    unsupported: Tuple[
        Tuple[str, str], ...
    ] = ()  # (run kind, what it says) the format refuses: "detection", "sequence"

    # -- names --------------------------------------------------------------------------------

    def shard_suffix(self, compression: str) -> str:
        if compression == "none":
            return self.suffix
        if not self.compressible:
            raise ValueError(f"{self.name} shards are not compressed as a whole (compression {compression!r})")
        return f"{self.suffix}.gz"

    def file_name(self, prefix: str, index: int, count: int, suffix: str) -> str:
        return f"{prefix}-{index:05d}-of-{count:05d}{suffix}"

    def suffix_re(self) -> str:
        import re

        return re.escape(self.suffix) + (r"(?:\.gz)?" if self.compressible else "")

    def has_index_files(self, compression: str) -> bool:
        return self.index_files and compression == "none"

    # -- writing ------------------------------------------------------------------------------

    def open_writer(self, target: Any, context: ShardContext) -> RecordWriter:
        """A writer of records into ``target``: a binary stream (``streams``), else a local path."""
        raise NotImplementedError

    def refusal(self, detection: bool, sequence: bool) -> Optional[str]:
        """Why a run of these records cannot be written in this format (a usage error), or None."""
        for kind, text in self.unsupported:
            if (kind == "detection" and detection) or (kind == "sequence" and sequence):
                return text
        return None

    # -- reading ------------------------------------------------------------------------------

    def scan(self, path: str, compression: str, check_crc: bool, sequence: bool) -> Iterator[Any]:
        """Every record of the shard at ``path`` (any filesystem), in order, as ``tfrecord_codec.Record``;
        ``RecordError`` for what cannot be read on."""
        raise NotImplementedError

    def walk_offsets(self, path: str, check_crc: bool) -> List[IndexEntry]:
        """``(offset, length)`` of every record, as the index file lists them (``random_access == "offsets"``)."""
        raise NotImplementedError

    def read_indexed(self, f: Any, index: int, offset: int, length: int, sequence: bool) -> bytes:
        """The record an index line ``(offset, length)`` places in the open shard ``f`` (a
        ``tfrecord_codec.RangeReader``), checked as the format can."""
        raise NotImplementedError

    def open_numbered(self, path: str) -> NumberedShard:
        """The shard at the local ``path`` read by record number (``random_access == "numbered"``)."""
        raise NotImplementedError

    def verify_offset(self, offset: int) -> Optional[int]:
        """What ``verify`` reports as a record's byte offset (None: the format's offsets are record numbers)."""
        return offset

    def write_file(self, path: str, records: Any, context: ShardContext) -> int:
        """Write ``records`` (serialized) as one shard at the local ``path``; -> how many."""
        count = 0
        if not self.streams:
            writer = self.open_writer(path, context)
            for data in records:
                writer.write(data)
                count += 1
            writer.close()
            return count
        with open(path, "wb") as out:
            writer = self.open_writer(out, context)
            for data in records:
                writer.write(data)
                count += 1
            writer.close()
        return count

    def dataset_card(self, doc: Any) -> Optional[Tuple[str, str]]:
        """``(file name, text)`` of a file that describes the output to the format's own readers, or None."""
        return None
