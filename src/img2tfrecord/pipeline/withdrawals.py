"""``convert --append --accept-changes`` at launch: the records of changed and removed inputs, found and checked.

Each stale input's record is located from the ledgers (``conversion.appends.locate``), then read back
from its shard to confirm that it is the record of that input, and to learn its class (and, for the
train split's statistics, its pixel totals); a record that is not where the ledgers place it refuses
the append (``PlanError``) before anything is written.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from img2tfrecord import shard_formats, storage, tfrecord_codec
from img2tfrecord.conversion.appends import GenerationInputs, locate
from img2tfrecord.conversion.converter import Converter
from img2tfrecord.conversion.run_totals import RunTotals
from img2tfrecord.images.options import ConvertedImage, ImageError
from img2tfrecord.images.statistics import pixel_sums
from img2tfrecord.pipeline.plan_model import PlanError
from img2tfrecord.readers import records
from img2tfrecord.readers.read_errors import ReadError
from img2tfrecord.readers.split_shards import shard_info, shard_offsets
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas.dataset_json import DatasetManifest
from img2tfrecord.schemas.generations import Withdrawal
from img2tfrecord.schemas.ledger import LedgerEntry
from img2tfrecord.schemas.transformed import ANALYZED_SPLIT
from img2tfrecord.sources.layout import PlacementError

# (stale inputs, generations, split_of, seed, compression) -> their records (conversion.appends.locate)
Locator = Callable[
    [Mapping[str, str], Sequence[GenerationInputs], Callable[[LedgerEntry], Optional[str]], int, str], List[Withdrawal]
]


class SplitOf:
    """A recorded input -> its split (None: it has none), as the run placed it: the converter's placement
    of the work item ``placed_item`` makes of its ledger entry."""

    def __init__(self, converter: Converter, placed_item: Callable[[LedgerEntry], Optional[Any]]):
        self._converter = converter
        self._placed_item = placed_item
        self._known: Dict[str, Optional[str]] = {}

    def __call__(self, entry: LedgerEntry) -> Optional[str]:
        if entry.relpath not in self._known:
            item = self._placed_item(entry)
            try:
                self._known[entry.relpath] = self._converter.split_of(item) if item is not None else None
            except PlacementError:
                self._known[entry.relpath] = None
        return self._known[entry.relpath]


def withdrawals(
    output: str,
    doc: DatasetManifest,
    generations: Sequence[GenerationInputs],
    stale: Mapping[str, str],
    split_of: SplitOf,
    seed: int,
    with_totals: bool = False,
    locator: Locator = locate,
) -> Tuple[Tuple[Withdrawal, ...], RunTotals]:
    """The records of the ``stale`` inputs (relpath -> change), each confirmed in its shard and labelled,
    and, ``with_totals`` (the append is analysed), the analysis totals of those in the analysed split
    (their stored pixels, decoded). ``locator``: where the records are (``InputLedger.locate``)."""
    channels = doc.channels or 3
    analysed = RunTotals(channels)
    if not stale:
        return (), analysed
    try:
        located = [_in_file_format(w, doc) for w in locator(stale, generations, split_of, seed, doc.compression.value)]
    except ValueError as e:
        raise PlanError(f"--accept-changes: {e}; rebuild with --overwrite") from None
    listed = {shard.file: shard for _, shard in doc.shards()}
    sequence = doc.is_sequence
    by_file: Dict[str, List[Withdrawal]] = {}
    for w in located:
        by_file.setdefault(w.file, []).append(w)
    confirmed = []
    for file, wanted in sorted(by_file.items()):
        entry = listed.get(file)
        if entry is None:
            raise PlanError(
                f"--accept-changes: the record of {wanted[0].relpath} should be in {file}, which "
                f"{output_files.MANIFEST_FILE} does not list; rebuild with --overwrite"
            )
        found = _read_records(output, doc, entry, {w.index for w in wanted})
        for w in wanted:
            if w.index not in found:
                raise PlanError(
                    f"--accept-changes: {file} has no record {w.index}, where the ledgers place {w.relpath}; "
                    "rebuild with --overwrite"
                )
            try:
                name, label_name, values = records.record_source(found[w.index], doc.spec, sequence)
            except records.ExampleError as e:
                raise PlanError(f"--accept-changes: record {w.index} of {file} cannot be read: {e}") from None
            if name != w.relpath:
                raise PlanError(
                    f"--accept-changes: record {w.index} of {file} holds {name!r}, not {w.relpath!r} as the "
                    "ledgers say; rebuild with --overwrite"
                )
            objects = values.get(keys.OBJECT_CLASS_TEXT)  # a detection record's (None for other records)
            boxes = dict(collections.Counter(records.decode_text(c) for c in objects)) if objects is not None else None
            confirmed.append(dataclasses.replace(w, label=label_name or None, boxes=boxes))
            if with_totals and w.split == ANALYZED_SPLIT and not sequence:
                analysed.add(_record_totals(values, channels, values.get(keys.CLASS_TEXT), file, w.index))
    return tuple(sorted(confirmed, key=lambda w: w.relpath)), analysed


def _in_file_format(w: Withdrawal, doc: DatasetManifest) -> Withdrawal:
    """``w`` naming its shard in the output's file format (the locator names TFRecord shards)."""
    if doc.file_format == output_files.DEFAULT_FILE_FORMAT:  # the locator's names
        return w
    parsed = output_files.parse_shard_file_name(w.file)
    if parsed is None:
        raise ValueError(f"{w.file} is not a shard name")
    file = output_files.shard_file_name(
        parsed["split"],
        parsed["index"],
        parsed["count"],
        generation=parsed["generation"],
        file_format=doc.file_format,
    )
    return dataclasses.replace(w, file=file)


def _record_totals(values: Mapping, channels: int, label: Optional[bytes], file: str, index: int) -> RunTotals:
    """One record's part of the analysis totals: the sums of its stored pixels, as a reader decodes them."""
    height, width = int(values[keys.IMAGE_HEIGHT]), int(values[keys.IMAGE_WIDTH])
    image = ConvertedImage(
        values[keys.IMAGE_ENCODED], records.decode_text(values[keys.IMAGE_FORMAT]), height, width, channels
    )
    try:
        sums, squares = pixel_sums(image, exact=True)
    except (ImageError, ValueError, OSError) as e:
        raise PlanError(f"--accept-changes: record {index} of {file} does not decode: {e}") from None
    classes = {label: 1} if label else {}
    return RunTotals(channels, 1, height * width, sums, squares, (height, height), (width, width), classes)


def _read_records(output: str, doc: DatasetManifest, entry, indices: Iterable[int]) -> Dict[int, bytes]:
    """Records ``indices`` of a listed shard: through its offsets when uncompressed, else by a scan."""
    path = storage.join(output, entry.file)
    wanted = set(indices)
    file_format = doc.file_format
    try:
        if doc.compression.value == "none" and shard_formats.adapter(file_format).random_access == "offsets":
            shard = shard_info(output, entry)
            offsets = shard_offsets(shard, file_format)
            with records.RandomAccessFile(path) as f:
                return {
                    i: records.read_record(f, i, *offsets[i], file_format=file_format)
                    for i in sorted(wanted)
                    if i < len(offsets)
                }
        found = {}
        for i, _, data in records.iter_records(
            path, doc.compression.value, file_format=file_format, sequence=doc.is_sequence
        ):
            if i in wanted:
                found[i] = data
                if len(found) == len(wanted):
                    break
        return found
    except (OSError, ValueError, ReadError, tfrecord_codec.RecordError) as e:
        raise PlanError(f"--accept-changes: cannot read {entry.file}: {e}") from None
