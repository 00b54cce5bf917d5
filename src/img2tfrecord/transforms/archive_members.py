"""What each archive of a run gave: every item's relpath and split, written into the run's staging folder
(``schemas/ledger.members_bytes``) for the finalise step to move beside the run's ledger.

    items (work items, or clips with --sequence) -> one members file -> its path (one element)
"""

from __future__ import annotations

from typing import Any, Iterator

import apache_beam as beam

from img2tfrecord import storage
from img2tfrecord.conversion.converter import Converter
from img2tfrecord.model import frames
from img2tfrecord.schemas.ledger import ArchiveItem, members_bytes
from img2tfrecord.sources import archives
from img2tfrecord.sources import layout as layouts
from img2tfrecord.sources.layout import PlacementError


def archive_items(item: Any, converter: Converter, root: str) -> Iterator[ArchiveItem]:
    """``(archive, relpath, split)`` of an item, once per archive its files come from (a clip's frames
    may span archives); ``root``: the folder the ledger names archives relative to."""
    try:
        split = converter.split_of(item)
    except PlacementError:
        split = None
    relpath = converter.relpath_of(item)
    held = {layouts.relative_path(root, f.path.split(archives.MEMBER_SEPARATOR, 1)[0]) for f in frames(item)}
    for archive in sorted(held):
        yield archive, relpath, split


def _write(items, path: str) -> str:
    storage.write_bytes(path, members_bytes(items))
    return path


class RecordArchiveMembers(beam.PTransform):
    """items -> the path of the members file written at ``path`` (one element, once every item is in it)."""

    def __init__(self, converter: Converter, root: str, path: str):
        super().__init__()
        self._converter = converter
        self._root = root
        self._path = path

    def expand(self, items):
        return (
            items
            | "ArchiveItems" >> beam.FlatMap(archive_items, self._converter, self._root)
            | "AllArchiveItems" >> beam.combiners.ToList()
            | "WriteMembers" >> beam.Map(_write, self._path)
        )
