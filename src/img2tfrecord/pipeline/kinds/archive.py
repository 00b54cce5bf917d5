"""Archives of images (``.zip``, ``.tar``, ``.tar.gz``, ``.tgz``): their plan, their source and their ledger
(one entry per archive; the pipeline reads the members).

The plan peeks at the first few archives of a glob: a zip's central directory is read whole, a tar's
first members (a tar.gz is decompressed only that far). The peek decides the layout; when it did not
see everything, a split-folder layout gets every split name (train, validation, test) so a split first
seen in the pipeline still has somewhere to go (one never seen is listed with 0 records). The peek is
shared with the other kinds packed in archives: clips (``clips.py``) and detection annotations
(``archived_detection.py``).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from img2tfrecord import storage
from img2tfrecord.conversion.appends import GenerationInputs, holders, locate
from img2tfrecord.conversion.record_sizes import MIB, SAMPLE_SIZE
from img2tfrecord.model import ErrorEntry, ErrorRow, Item, MemberEntry, WorkItem
from img2tfrecord.pipeline.config import ConvertConfig
from img2tfrecord.pipeline.kinds.base import InputKind
from img2tfrecord.pipeline.kinds.common import check_images, layout_of, split_bytes
from img2tfrecord.pipeline.kinds.ledger import InputLedger, ListedItems
from img2tfrecord.pipeline.listing import digest, file_pattern, list_input, list_stamped, read_once, resolve_input
from img2tfrecord.pipeline.plan_model import InputPlan, Plan, PlanError
from img2tfrecord.pipeline.sizing import estimate_size_ratio, sized
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas.generations import Withdrawal
from img2tfrecord.schemas.ledger import LedgerEntry, parse_members, row_text
from img2tfrecord.sources import archives, input_paths
from img2tfrecord.sources import layout as layouts
from img2tfrecord.sources.inputs import InputSource, discover
from img2tfrecord.sources.inputs.archive import ArchiveSource, slim_members
from img2tfrecord.sources.split_folders import SPLIT_FOLDERS

_PEEK_ARCHIVES = 4  # archives of a glob looked into at launch
_PEEK_MEMBERS = 2000  # members of a tar / tar.gz looked at (a zip's central directory is read whole)
_PEEK_ZIP_MEMBERS = 10_000_000
_PEEK_STREAM_BYTES = 64 * MIB  # member data decompressed from a tar.gz at launch, at most


def is_archive_input(config: ConvertConfig) -> bool:
    """Whether ``--input`` names archives: by its name, or a glob of images (``shards/*``) that lists only them."""
    named = input_paths.input_form(config.input)
    if named == input_paths.INPUT_ARCHIVES:
        return True
    if named != input_paths.INPUT_FOLDER or not input_paths.GLOB_CHARS.search(config.input):
        return False
    listing = list_input(resolve_input(config.input)[1])
    return bool(listing) and all(archives.archive_format(p) for p, _ in listing)


class Peek(NamedTuple):
    """What the launch saw of an archive input: the archives, and the members of the first few."""

    base: str
    pattern: str
    found: List[Tuple[str, int]]  # (archive, size) of every archive, sorted
    files: List[WorkItem]  # the peeked members, named without the wrapping folder, sorted by relpath
    peeked: List[Tuple[str, MemberEntry]]  # (archive, member) of the peeked members
    peeked_names: List[str]  # every named entry, also those refused (a tar.gz member over the image limit)
    complete: bool  # the peek saw every member of every archive
    refused: bool  # an entry the run rejects (a damaged archive, a link): the run's errors.jsonl says why


def peek(config: ConvertConfig) -> Peek:
    """The peek at ``config.input``'s archives, made once per launch; PlanError when none match."""
    return read_once(f"archive_peek:{config.sequence}", config.input, lambda unused: _peek(config))


def _peek(config: ConvertConfig) -> Peek:
    base, pattern = file_pattern(config.input)
    found = sorted((p, size) for p, size in list_input(pattern) if archives.archive_format(p))
    if not found:
        raise PlanError(f"no archives (.zip, .tar, .tar.gz, .tgz) match {pattern}")
    limit = config.image.max_file_bytes
    min_depth = archives.MIN_DEPTH_SEQUENCES if config.sequence else archives.MIN_DEPTH_IMAGES
    files: List[WorkItem] = []
    peeked: List[Tuple[str, MemberEntry]] = []
    peeked_names: List[str] = []
    complete = len(found) <= _PEEK_ARCHIVES
    refused = False
    for path, size in found[:_PEEK_ARCHIVES]:
        max_members = _PEEK_ZIP_MEMBERS if archives.archive_format(path) == "zip" else _PEEK_MEMBERS
        entries, whole = archives.peek_archive(path, size, limit, max_members, _PEEK_STREAM_BYTES)
        complete = complete and whole
        members = [e for e in entries if isinstance(e, MemberEntry)]
        refused = refused or any(isinstance(e, ErrorEntry) for e in entries)
        peeked.extend((path, m) for m in members)
        peeked_names.extend(e.name for e in entries if e.name)
        prefix = archives.top_folder_to_strip([m.name for m in members], min_depth)
        for m in members:
            files.append(WorkItem(archives.member_path(path, m.name), m.name[len(prefix) :], m.size, m.member))
    files.sort(key=lambda f: f.relpath)
    return Peek(base, pattern, found, files, peeked, peeked_names, complete, refused)


def plan_archives(config: ConvertConfig, whole: bool = True) -> Plan:
    """The plan of archives of images (or of clips' frames), from a peek at the first ones."""
    base, pattern, found, files, _, _, complete, refused = peek(config)
    layout, split_names = layout_of(config, files)
    if complete and (files or not refused):  # a partial peek may not have seen the images or class folders
        check_images(config, files, layout, in_archives=True)
    if layout == layouts.LAYOUT_SPLIT and not complete:
        split_names = tuple(sorted(set(SPLIT_FOLDERS.values())))
    ratio = estimate_size_ratio(config, files) if whole else 1.0  # an append sizes its new inputs
    per_split = split_bytes(config, layout, split_names, files, ratio)
    input_bytes = sum(size for _, size in found)
    seen = sum(f.size for f in files)
    scale = input_bytes / seen if seen else 0.0  # the peek's split proportions, over every archive
    per_split = {name: b * scale for name, b in per_split.items()}
    return Plan(
        InputPlan(
            base=base,
            pattern=pattern,
            layout=layout,
            split_names=split_names,
            listing_digest=digest(found),
            listing_complete=complete,
        ),
        sized(config, split_names, per_split, len(files), input_bytes, ratio),
    )


class Archives(InputKind):
    """.zip, .tar, .tar.gz or .tgz archives of class folders (or a glob of them); the pipeline reads the members."""

    name = "archives"
    records_members = True

    def claims(self, config: ConvertConfig) -> bool:
        return is_archive_input(config)

    def plan(self, config: ConvertConfig, whole: bool) -> Optional[Plan]:
        return plan_archives(config, whole)

    def source(self, config: ConvertConfig, plan: Plan) -> InputSource:
        return ArchiveSource(plan.input.pattern, config.image.max_file_bytes, self.sequence, plan.input.units)

    def ledger(self, config: ConvertConfig, plan: Plan) -> Optional[InputLedger]:
        return ArchiveLedger(config, plan, self)

    def places_at_launch(self, config: ConvertConfig) -> bool:
        return False  # a tar.gz member carries its bytes: the graph reads the archives


def archive_root(plan: Plan) -> str:
    """The folder an archive run's ledger names its archives relative to: the one above the pattern's first
    glob ('dumps/*/day.zip' -> 'dumps/'), or the archive's own folder."""
    pattern = plan.input.pattern
    return resolve_input(pattern)[0] if input_paths.GLOB_CHARS.search(pattern) else plan.input.base


class ArchiveLedger(InputLedger):
    """The archives a plan's pattern matches, each one entry (relative to the folder above the pattern's
    first glob), whatever they hold: images, clips' frames, or detection annotations with their images."""

    places_at_launch = False
    noun = "archive(s)"

    def __init__(self, config: ConvertConfig, plan: Plan, kind: InputKind):
        super().__init__(config, plan)
        self._base = archive_root(plan)
        self._config, self._plan, self._kind = config, plan, kind
        self.entries = sorted(
            LedgerEntry(layouts.relative_path(self._base, path), size, mtime)
            for path, size, mtime in list_stamped(plan.input.pattern)
            if path.startswith(self._base) and archives.archive_format(path)
        )

    def work_items(self, entries: Sequence[LedgerEntry]) -> ListedItems:
        """The members of the archives ``entries`` name (clips of them with ``--sequence``), read in this
        process (most tar.gz members without their bytes: these items size and label an append, the
        pipeline converts from the archives)."""
        if not entries:
            return ListedItems()
        plan = dataclasses.replace(self._plan, input=dataclasses.replace(self._plan.input, units=self.units(entries)))
        found = discover(self._kind.source(self._config, plan), list_input, slim_members(4 * SAMPLE_SIZE))
        return ListedItems(list(self._kind.units(found.files, plan.input.layout)), found.errors)

    def placed_item(self, entry: LedgerEntry) -> Optional[Item]:
        return None

    def key_of(self, found: Union[WorkItem, ErrorRow]) -> str:
        path = found.path if isinstance(found, WorkItem) else found["path"]
        return layouts.relative_path(self._base, path.split(archives.MEMBER_SEPARATOR, 1)[0])

    def rejection_key(self, row: ErrorRow) -> str:
        """An archive rejected whole (unreadable: its row names no member) is the archive's entry; a rejected
        member is keyed by its path in its archive (``archives.member_path``), which no entry equals, so an archive
        that also gave records is not taken for a rejected one."""
        archive = self.key_of(row)
        return archives.member_path(archive, str(row["relpath"])) if row["relpath"] else archive

    def units(self, entries: Sequence[LedgerEntry]) -> Tuple[str, ...]:
        return tuple(self._base + e.relpath for e in entries)

    def locate(
        self,
        stale: Mapping[str, str],
        generations: Sequence[GenerationInputs],
        split_of: Callable[[LedgerEntry], Optional[str]],
        seed: int,
        compression: str,
    ) -> List[Withdrawal]:
        """The records every ``stale`` archive gave, from the members file of the generation that converted it
        last: each of its items written then, placed as that generation placed all of its items."""
        holding = holders(generations)
        by_generation: Dict[int, List[str]] = {}
        for archive in stale:
            if archive not in holding:
                raise ValueError(f"no generation holds the records of {archive}")
            by_generation.setdefault(holding[archive].number, []).append(archive)
        found: List[Withdrawal] = []
        for generation in generations:
            if generation.number in by_generation:
                found.extend(self._locate_in(generation, by_generation[generation.number], stale, seed, compression))
        return found

    def _locate_in(
        self,
        generation: GenerationInputs,
        stale: Sequence[str],
        changes: Mapping[str, str],
        seed: int,
        compression: str,
    ) -> List[Withdrawal]:
        """The records of the ``stale`` archives among ``generation``'s, each tagged with its archive."""
        output = self._config.output
        name = output_files.members_file(generation.number)
        try:
            members = parse_members(storage.read_bytes(storage.join(output, name)), name)
        except FileNotFoundError:
            raise ValueError(
                f"generation {generation.number} does not record what its archives held ({name} is missing: it "
                "was written before outputs recorded it)"
            ) from None
        written = [
            (archive, relpath, split)
            for archive, items in sorted(members.items())
            for relpath, split in items
            if split is not None and archives.member_path(archive, relpath) not in generation.rejected
        ]
        held_by: Dict[str, List[str]] = {}
        for archive, relpath, _ in written:
            held_by.setdefault(relpath, []).append(archive)
        wanted: Dict[str, str] = {}
        for archive, relpath, _ in written:
            if archive in stale:
                if len(held_by[relpath]) > 1:
                    shown = " and ".join(held_by[relpath][:2])
                    raise ValueError(f"{shown} both hold {relpath}, so their records cannot be told apart")
                wanted[relpath] = changes[archive]
        view = GenerationInputs(
            generation.number,
            tuple(LedgerEntry(relpath, 0, 0.0, row_text(None, split)) for _, relpath, split in written),
            {},
            frozenset(),
            generation.shards,
        )
        located = locate(wanted, [view], lambda entry: entry.placement()[1], seed, compression)
        return [dataclasses.replace(w, archive=held_by[w.relpath][0]) for w in located]
