"""Archives of images (.zip, .tar, .tar.gz, .tgz): each member is one input, named without the folder
that wraps the whole archive (``archives.top_folder_to_strip``)."""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Sequence, Tuple

from img2tfrecord.model import ERRORS, InlineMember, MemberEntry, SkippedEntry, error_row
from img2tfrecord.sources import archives
from img2tfrecord.sources.inputs import FILES, SKIPPED, Finding, InputSource

MEMBERS = "members"  # (archive, MemberEntry), joined with its archive's wrapping folder


class ArchiveSource(InputSource):
    """The archives ``pattern`` matches (``units``: these archives instead, an append's new ones); members
    over ``max_file_bytes`` are rejected when listed."""

    join_tags = (MEMBERS,)
    spread_units = True

    def __init__(self, pattern: str, max_file_bytes: int, sequence: bool = False, units: Sequence[str] = ()):
        super().__init__(tuple(units) or (pattern,))
        self.max_file_bytes = max_file_bytes
        self.min_depth = archives.MIN_DEPTH_SEQUENCES if sequence else archives.MIN_DEPTH_IMAGES

    def read(self, path: str, size: int) -> Iterator[Finding]:
        for entry in archives.list_archive(path, size, self.max_file_bytes):
            if isinstance(entry, MemberEntry):
                yield MEMBERS, (path, entry)
            elif isinstance(entry, SkippedEntry):
                yield SKIPPED, archives.member_path(path, entry.name)
            else:
                where = archives.member_path(path, entry.name) if entry.name else path
                yield ERRORS, error_row(where, entry.name, entry.reason, entry.message)

    def join(self, findings: Dict[str, List[Any]]) -> Iterator[Finding]:
        by_archive: Dict[str, List[MemberEntry]] = {}
        for archive, entry in findings[MEMBERS]:
            by_archive.setdefault(archive, []).append(entry)
        for archive, entries in by_archive.items():
            prefix = archives.top_folder_to_strip([e.name for e in entries], self.min_depth)
            for entry in entries:
                yield FILES, archives.member_item(archive, entry, prefix)

    def top_of(self, member: Tuple[str, MemberEntry]) -> Tuple[str, Any]:
        """``(archive, partial wrapping folder)`` of one member, for a combine per archive (``archives.merge_top``)."""
        archive, entry = member
        return archive, archives.top_of(entry.name, self.min_depth)


def slim_members(keep: int) -> Callable[[Finding], Finding]:
    """A ``discover`` slim for a listing made at launch: the bytes of the first ``keep`` tar.gz members
    are kept (a size sample needs no more), the others' dropped."""
    kept = [0]

    def slim(finding: Finding) -> Finding:
        tag, value = finding
        if tag == MEMBERS and isinstance(value[1], MemberEntry) and isinstance(value[1].member, InlineMember):
            kept[0] += 1
            if kept[0] > keep:
                return tag, (value[0], value[1]._replace(member=InlineMember(b"")))
        return finding

    return slim
