"""``convert --dedupe``: work items with identical bytes go on to the shards once.

    work items -> SpreadItems: GroupByKey on a hash of the relpath   the reads spread over the workers
               -> ContentDigest: (sha256 of its bytes, item)          read as the converter reads them
               -> GroupByKey                                           digests and work items only
               -> KeepFirstCopy: the copy whose relpath sorts first goes on; every other
                  copy becomes an error row, reason ``duplicate``, naming the kept one

It runs before the shard step, so no content is written twice or lands in
two splits, and the order is total (relpath, then path), so every run keeps
the same copy and writes the same shards. Items that are not compared go on
as they are, and the converter reports them with its own reason: an item
without a place (outside a class folder, a split the plan does not have),
so a copy is never left out in favour of a file that is not written, and
an item whose bytes cannot be read here (missing, over ``--max-file-mb``,
a damaged archive member, permission denied). A transient read failure is
raised: the runner retries the bundle.
"""

from __future__ import annotations

import hashlib
import zlib
from typing import Any, Optional, Sequence, Tuple

import apache_beam as beam

from img2tfrecord.conversion.converter import Converter
from img2tfrecord.images.options import ImageError
from img2tfrecord.model import DUPLICATE, ERRORS, DetectionPlacement, WorkItem, error_row
from img2tfrecord.sources.files import is_permanent_read_error, read_source
from img2tfrecord.sources.layout import PlacementError
from img2tfrecord.transforms.counters import NAMESPACE

NOT_COMPARED = "not_compared"  # the tag of items that go on without a digest
SPREAD_GROUPS = 1024  # groups of work items whose reads any worker may take


def spread_key(item: WorkItem) -> Tuple[int, WorkItem]:
    """``(group, item)``: the group a work item is read in, from its relpath."""
    return zlib.crc32(item.relpath.encode("utf-8", "surrogatepass")) % SPREAD_GROUPS, item


def copy_order(item: WorkItem) -> Tuple[str, str, str]:
    """The sort key of the copies of one content, the first kept: relpath, then path (one relpath in two
    archives), then the row (one file named by two manifest rows or annotations)."""
    return item.relpath, item.path, repr(item.row)


def duplicate_message(kept: WorkItem, copy: WorkItem, digest: str) -> str:
    """The ``errors.jsonl`` message of a copy left out: it names the kept file."""
    name = kept.relpath if kept.relpath != copy.relpath else kept.path
    message = f"same bytes as {name}, the copy kept (sha256 {digest[:16]})"
    if isinstance(copy.row, DetectionPlacement):  # a copy's own annotations are not merged into the kept one
        boxes = len(copy.row.annotation.boxes)
        message += f"; this copy's {boxes} box(es) are not written"
    return message


class ContentDigestFn(beam.DoFn):
    """``(group, work items)`` -> ``(sha256 hex of its bytes, item)`` per item; items not compared on
    ``not_compared``."""

    def __init__(self, converter: Converter[WorkItem], split_names: Sequence[str]):
        self._converter = converter
        self._split_names = frozenset(split_names)
        self._hashed = beam.metrics.Metrics.counter(NAMESPACE, "inputs_hashed")

    def _has_place(self, item: WorkItem) -> bool:
        try:
            return self._converter.split_of(item) in self._split_names
        except PlacementError:
            return False

    def process(self, element):
        _, items = element
        for item in items:
            digest = self._digest(item)
            yield (digest, item) if digest else beam.pvalue.TaggedOutput(NOT_COMPARED, item)

    def _digest(self, item: WorkItem) -> Optional[str]:
        if not self._has_place(item):
            return None
        try:
            data = read_source(item, self._converter.options.max_file_bytes)
        except ImageError:
            return None
        except Exception as e:  # pylint: disable=broad-except
            if not is_permanent_read_error(e):
                raise
            return None
        self._hashed.inc()
        return hashlib.sha256(data).hexdigest()


class KeepFirstCopyFn(beam.DoFn):
    """``(digest, copies)`` -> the first copy; the others as ``duplicate`` error rows on ``errors``."""

    def process(self, element):
        digest, copies = element
        kept, *others = sorted(copies, key=copy_order)
        yield kept
        for copy in others:
            row = error_row(copy.path, copy.relpath, DUPLICATE, duplicate_message(kept, copy, digest))
            yield beam.pvalue.TaggedOutput(ERRORS, row)


class Dedupe(beam.PTransform):
    """Work items -> ``{"items": the items to convert, "errors": duplicate rows}`` (counted by the caller,
    as the other inputs rejected before the shard step are).

    ``converter`` is the run's (its placement and read limit); ``split_names``
    the plan's splits.
    """

    def __init__(self, converter: Converter[Any], split_names: Sequence[str]):
        super().__init__()
        self._converter = converter
        self._split_names = tuple(split_names)

    def expand(self, items):
        # Items leave discovery fused to the worker that listed them: a grouping spreads the reads over
        # the workers (a plain one: beam.Reshuffle's trigger takes the local runner's slow path).
        spread = items | "SpreadKey" >> beam.Map(spread_key) | "SpreadItems" >> beam.GroupByKey()
        digested = spread | "ContentDigest" >> beam.ParDo(
            ContentDigestFn(self._converter, self._split_names)
        ).with_output_types(Tuple[str, Any]).with_outputs(NOT_COMPARED, main="digested")
        kept = (
            digested.digested
            | "GroupByContent" >> beam.GroupByKey()
            | "KeepFirstCopy" >> beam.ParDo(KeepFirstCopyFn()).with_outputs(ERRORS, main="kept")
        )
        unique = (kept.kept, digested[NOT_COMPARED]) | "KeptAndNotCompared" >> beam.Flatten()
        return {"items": unique, ERRORS: kept[ERRORS]}
