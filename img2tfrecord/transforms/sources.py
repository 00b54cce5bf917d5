"""Inputs beyond a folder of files: archives (zip, tar, tar.gz) and manifests (CSV, JSONL).

Discovery turns every input kind into the same work items, so the graph
after it never cares where bytes come from. A work item extends the
folder's ``SourceFile``::

    (path, relpath, size, member, row)

* ``path`` -- the file, or ``ARCHIVE!/MEMBER`` for an archive member (what
  ``errors.jsonl`` names);
* ``member`` -- None for a file, else how to get the member's bytes
  (``reading.read_source``): a zip member is read by seeking to its local
  header (offsets come from the central directory), an uncompressed tar
  member by seeking to its data (offsets come from the member headers),
  and a tar.gz member, which cannot be seeked to, carries its bytes: the
  archive is streamed once by one worker and the members are spread over
  the workers by the Reshuffle that follows discovery;
* ``row`` -- ``(split or None, label or None)`` of a manifest row, else None.

Archives are listed by a DoFn per archive (after a Reshuffle, so many
archives are listed in parallel); members are never extracted to disk.
Member names lose a leading ``./`` and, when every file of an archive sits
under one folder that wraps the dataset, that folder (see
:func:`top_folder_to_strip`), so an archive gives the relpaths, and so the
records, of its unpacked folder.
"""
from __future__ import annotations

import csv
import io
import json
import os
import posixpath
import struct
import tarfile
import zipfile
import zlib
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.fileio import EmptyMatchTreatment

from img2tfrecord.schemas.manifest import SPLIT_NAME_RE
from img2tfrecord.transforms.discover import SKIPPED, DiscoverImages, is_junk
from img2tfrecord.transforms.converter import ERRORS, error_row
from img2tfrecord.transforms.layout import is_text, printable
from img2tfrecord.transforms.reading import open_raw
from img2tfrecord.transforms.split import split_of_folder


INPUT_FOLDER = "folder"
INPUT_ARCHIVES = "archives"
INPUT_MANIFEST = "manifest"
# Longest suffix first: "x.tar.gz" is a tar.gz, not a ".gz".
ARCHIVE_SUFFIXES = ((".tar.gz", "tgz"), (".tgz", "tgz"), (".tar", "tar"), (".zip", "zip"))
MANIFEST_SUFFIXES = ((".csv", "csv"), (".jsonl", "jsonl"))
MEMBER_SEPARATOR = "!/"

# Path parts of a file inside a class folder under a wrapping top folder:
# TOP/<class>/<file> for images, TOP/<class>/<clip>/<frame> for sequences.
MIN_DEPTH_IMAGES = 3
MIN_DEPTH_SEQUENCES = 4

_TAR_BLOCK = tarfile.BLOCKSIZE


# ---------------------------------------------------------------------------
# Input kinds.


def _suffix_kind(path: str, table) -> Optional[str]:
    lower = path.lower()
    for suffix, kind in table:
        if lower.endswith(suffix):
            return kind
    return None


def archive_kind(path: str) -> Optional[str]:
    """``zip``, ``tar``, ``tgz`` (gzip-compressed tar) or None, by the file name."""
    return _suffix_kind(path, ARCHIVE_SUFFIXES)


def manifest_kind(path: str) -> Optional[str]:
    """``csv``, ``jsonl`` or None, by the file name."""
    return _suffix_kind(path, MANIFEST_SUFFIXES)


def input_kind(path: str) -> str:
    """What ``--input`` names: archives, manifests (one file or a glob of them), or a folder/glob of images."""
    if archive_kind(path):
        return INPUT_ARCHIVES
    if manifest_kind(path):
        return INPUT_MANIFEST
    return INPUT_FOLDER


def member_path(archive: str, name: str) -> str:
    return f"{archive}{MEMBER_SEPARATOR}{name}"


# ---------------------------------------------------------------------------
# Member names.


def normalise_member_name(name: str) -> str:
    """``./a/b.jpg`` -> ``a/b.jpg``: no leading ``./`` or ``/``, no empty or ``.`` parts."""
    return "/".join(part for part in name.replace("\\", "/").split("/") if part not in ("", "."))


_MIXED = "/"  # not a folder name: files under more than one top folder (or at the top)
_Acc = Tuple[Optional[str], int, int]  # (common top folder, files deep enough, files)


def _merge_top(a: _Acc, b: _Acc) -> _Acc:
    if a[0] is None:
        return b
    if b[0] is None:
        return a
    return (a[0] if a[0] == b[0] else _MIXED), a[1] + b[1], a[2] + b[2]


def _top_of(name: str, min_depth: int) -> _Acc:
    parts = name.split("/")
    return (parts[0] if len(parts) > 1 else _MIXED), int(len(parts) >= min_depth), 1


def _prefix_of(acc: _Acc) -> str:
    top, deep, total = acc
    if top in (None, _MIXED) or 2 * deep <= total or split_of_folder(top) is not None:
        return ""
    return top + "/"


def top_folder_to_strip(names: Sequence[str], min_depth: int = MIN_DEPTH_IMAGES) -> str:
    """The prefix ``TOP/`` that wraps a dataset in an archive, or ``""``.

    An archive's files are taken to be wrapped in a folder when all of them
    sit under that one folder, the folder is not a split name, and most
    files are still inside a class folder once it is removed (at least
    ``min_depth`` path parts with it). So ``flowers/cat/a.jpg`` becomes
    ``cat/a.jpg`` (a stray ``flowers/LICENSE`` then is a file outside any
    class folder, as in the unpacked folder), while ``cat/a.jpg`` (a single
    class) and ``train/cat/a.jpg`` stay as they are.
    """
    acc: _Acc = (None, 0, 0)
    for name in names:
        acc = _merge_top(acc, _top_of(name, min_depth))
    return _prefix_of(acc)


class _CommonTopFolder(beam.CombineFn):
    """Member names of one archive -> the prefix :func:`top_folder_to_strip` gives."""

    def __init__(self, min_depth: int):
        self._min_depth = min_depth

    def create_accumulator(self):
        return (None, 0, 0)

    def add_input(self, acc, name):
        return _merge_top(acc, _top_of(name, self._min_depth))

    def merge_accumulators(self, accumulators):
        out = (None, 0, 0)
        for acc in accumulators:
            out = _merge_top(out, acc)
        return out

    def extract_output(self, acc):
        return _prefix_of(acc)


# ---------------------------------------------------------------------------
# Listing archives. Entries: ("member", name, size, member) | ("skipped", name)
# | ("error", name or "", reason, message). Names are normalised.


def _list_zip(path: str) -> Iterator[tuple]:
    with open_raw(path) as f:
        try:
            infos = zipfile.ZipFile(f).infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, OSError, struct.error) as e:
            yield "error", "", "corrupt_archive", f"not a readable zip archive: {type(e).__name__}: {e}"
            return
    for info in infos:
        if info.is_dir():
            continue
        name = normalise_member_name(info.filename)
        if not name or is_junk(name):
            yield "skipped", name or info.filename
            continue
        yield "member", name, info.file_size, (
            "zip", path, info.header_offset, info.compress_type, info.compress_size, info.file_size, info.CRC, info.flag_bits,
        )


def _tar_members(tar: tarfile.TarFile) -> Iterator[Tuple[str, str, tarfile.TarInfo]]:
    """``(action, name, info)`` of each member to convert (``member``) or count as skipped (``skip``), in order.

    Directories are left out. Headers are read one at a time, as the
    caller asks for the next one, so a streamed archive is read once.
    """
    while True:
        info = tar.next()
        tar.members = []  # TarFile keeps every header it reads; a big archive must not fill memory
        if info is None:
            return
        name, action = _classify_tar_member(info)
        if action != "ignore":
            yield action, name, info


def _classify_tar_member(info: tarfile.TarInfo) -> Tuple[str, str]:
    """``(name, action)`` of a tar member: ``member`` to convert, ``skip`` (counted as
    skipped: junk, links, devices, unusable names) or ``ignore`` (directories)."""
    name = normalise_member_name(info.name)
    if not info.isfile() or info.issparse():
        return name or info.name, "ignore" if info.isdir() else "skip"
    if not name or is_junk(name):
        return name or info.name, "skip"
    return name, "member"


def _list_tar(path: str, size: int) -> Iterator[tuple]:
    """An uncompressed tar: only the member headers are read (the data is seeked over)."""
    truncated = False
    with open_raw(path) as f:
        try:
            tar = tarfile.open(fileobj=f, mode="r:")
        except (tarfile.TarError, EOFError, OSError) as e:
            yield "error", "", "corrupt_archive", f"not a readable tar archive: {type(e).__name__}: {e}"
            return
        try:
            for action, name, info in _tar_members(tar):
                if action == "skip":
                    yield "skipped", name
                    continue
                if info.offset_data + info.size > size:
                    truncated = True
                    yield "error", name, "truncated_archive", (
                        f"archive ends inside this member: it needs bytes up to {info.offset_data + info.size}, "
                        f"the archive has {size}"
                    )
                    break
                yield "member", name, info.size, ("tar", path, info.offset_data, info.size)
        except (tarfile.TarError, EOFError, OSError) as e:
            if not truncated:
                yield "error", "", "truncated_archive" if "end of" in str(e) else "corrupt_archive", (
                    f"cannot read the archive past byte {tar.offset}: {type(e).__name__}: {e}"
                )
            return
        if not truncated and size - tar.offset < _TAR_BLOCK:
            yield "error", "", "truncated_archive", (
                f"archive ends at byte {size} without the end-of-archive marker: members after it may be missing"
            )


def _list_tgz(path: str, limit: int) -> Iterator[tuple]:
    """A compressed tar, streamed once: every member comes with its bytes."""
    current = ""
    with open_raw(path) as f:
        try:
            tar = tarfile.open(fileobj=f, mode="r|*")
            for action, name, info in _tar_members(tar):
                if action == "skip":
                    yield "skipped", name
                    continue
                if info.size > limit:
                    yield "error", name, "file_too_large", (
                        f"member is {info.size} bytes, over the limit of {limit} bytes (--max-file-mb)"
                    )
                    continue
                current = name
                data = tar.extractfile(info).read()
                if len(data) != info.size:
                    raise EOFError(f"member data ends after {len(data)} of {info.size} bytes")
                yield "member", name, info.size, ("data", data)
                current = ""  # a failure from here on is in the next header, not in this member
        except (tarfile.TarError, EOFError, OSError, zlib.error) as e:
            text = str(e).lower()
            cut = isinstance(e, EOFError) or "end of" in text or "ended before" in text or "truncated" in text
            yield "error", current, "truncated_archive" if cut else "corrupt_archive", (
                f"cannot read the compressed archive{' in this member' if current else ''}: {type(e).__name__}: {e}"
            )


def list_archive(path: str, size: int, limit: int) -> Iterator[tuple]:
    """Every entry of one archive, in archive order; problems are ``error`` entries, never exceptions."""
    kind = archive_kind(path)
    listers = {"zip": lambda: _list_zip(path), "tar": lambda: _list_tar(path, size), "tgz": lambda: _list_tgz(path, limit)}
    if kind not in listers:
        yield "error", "", "corrupt_archive", "not a .zip, .tar, .tar.gz or .tgz file"
        return
    try:
        for entry in listers[kind]():
            problem = _name_problem(entry[1])
            if problem and entry[0] == "member":
                yield "error", printable(entry[1]), "bad_name", problem
            elif problem:
                yield (entry[0], printable(entry[1])) + tuple(entry[2:])
            else:
                yield entry
    except (OSError, EOFError) as e:  # the archive itself cannot be opened
        yield "error", "", "unreadable", f"{type(e).__name__}: {e}"


def _name_problem(name: str) -> Optional[str]:
    """Why a member name cannot be carried as text (records, labels.txt, errors.jsonl), or None."""
    if "\n" in name or "\r" in name:
        return "member name contains a line break"
    if not is_text(name):  # tar names that are not UTF-8 decode to surrogates
        return "member name is not valid UTF-8"
    return None


# ---------------------------------------------------------------------------
# Manifests.


class ManifestError(ValueError):
    """A manifest that cannot be used at all (a usage error at launch)."""


MANIFEST_COLUMNS = ("path", "label", "split")


def _text_lines(path: str) -> Iterator[str]:
    with open_raw(path) as f:
        yield from io.TextIOWrapper(f, encoding="utf-8-sig", newline="")


def manifest_rows(path: str) -> Iterator[Tuple[int, Dict[str, Any]]]:
    """``(line number, {"path", ["label"], ["split"]} or {"error": message})`` of every row.

    CSV: a header row naming the columns (``path``, ``label``, ``split``, in
    any order, other columns ignored) or, without one, the columns
    ``path,label,split`` in that order (fewer columns: no label / no split).
    JSONL: one object per line with ``path`` and optional ``label``/``split``.
    A label or split column present means every row must have a value.
    """
    kind = manifest_kind(path)
    lines = _text_lines(path)
    if kind == "jsonl":
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                yield number, {"error": f"line is not JSON: {e}"}
                continue
            if not isinstance(obj, dict):
                yield number, {"error": "line is not a JSON object"}
                continue
            # A number label (JSONL "label": 3) is the class "3"; the ids still follow sorted names.
            yield number, {k: obj[k] if isinstance(obj[k], str) else json.dumps(obj[k])
                           for k in MANIFEST_COLUMNS if k in obj and obj[k] is not None}
        return
    columns: Optional[Dict[str, int]] = None
    for number, cells in enumerate(csv.reader(lines), 1):
        if not cells or not any(c.strip() for c in cells):
            continue
        if columns is None:
            lowered = [c.strip().lower() for c in cells]
            if "path" in lowered:
                columns = {name: lowered.index(name) for name in MANIFEST_COLUMNS if name in lowered}
                continue
            columns = {name: i for i, name in enumerate(MANIFEST_COLUMNS[: len(cells)])}
        yield number, {name: cells[i].strip() if i < len(cells) else "" for name, i in columns.items()}


def manifest_columns(path: str, rows: Sequence[Tuple[int, Dict[str, Any]]]) -> Tuple[bool, bool]:
    """``(has a label column, has a split column)`` of a manifest, from its parsed rows."""
    good = [r for _, r in rows if "error" not in r]
    return any("label" in r for r in good), any("split" in r for r in good)


def canonical_split(value: str) -> str:
    """A split value of a manifest: ``val`` -> ``validation`` (as split folders); others as written."""
    return split_of_folder(value.strip().lower()) or value.strip()


def _join(directory: str, relative: str) -> str:
    if "://" in directory:
        scheme, rest = directory.split("://", 1)
        return f"{scheme}://{posixpath.normpath(posixpath.join(rest, relative))}"
    return os.path.normpath(os.path.join(directory, relative))


def manifest_dir(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else "."


def resolve_row_path(manifest_path: str, value: str) -> Tuple[str, str]:
    """``(path to read, relpath)`` of a manifest row's path.

    A relative path is relative to the manifest's folder and is its own
    relpath (``./`` and ``a/../`` folded), so a manifest in a dataset's root
    gives the relpaths of the folder. An absolute or ``gs://`` path is read
    as given; its relpath is the part under the manifest's folder, or the
    whole path.
    """
    directory = manifest_dir(manifest_path)
    value = value.strip()
    if "://" in value or value.startswith("/"):
        base = directory.rstrip("/") + "/"
        return value, value[len(base):] if value.startswith(base) else value
    relpath = posixpath.normpath(value.replace("\\", "/"))
    return _join(directory, relpath), relpath


def row_to_source(
    manifest_path: str, number: int, row: Dict[str, Any], labeled: bool, has_split: bool, split_names: Sequence[str]
):
    """A work item for one manifest row, or an error row (as ``(False, row)``)."""
    where = f"{manifest_path}:{number}"
    if "error" in row:
        return False, error_row(where, "", "bad_manifest_row", row["error"])
    value = row.get("path", "")
    if not value:
        return False, error_row(where, "", "bad_manifest_row", "row has no path")
    path, relpath = resolve_row_path(manifest_path, value)
    label = row.get("label") if labeled else None
    if labeled and not label:
        return False, error_row(path, relpath, "missing_label", f"{where}: row has no label")
    if label is not None and ("\n" in label or "\r" in label):
        return False, error_row(path, relpath, "bad_label", f"{where}: label contains a line break")
    split = None
    if has_split:
        raw = row.get("split", "")
        if not raw:
            return False, error_row(path, relpath, "missing_split", f"{where}: row has no split")
        split = canonical_split(raw)
        if split not in split_names:
            return False, error_row(
                path, relpath, "unknown_split", f"{where}: split {raw!r} is not one of {', '.join(split_names)}"
            )
    return True, (path, relpath, 0, None, (split, label))


def check_split_name(value: str) -> Optional[str]:
    """None when a manifest split value is usable, else why not."""
    split = canonical_split(value)
    if not SPLIT_NAME_RE.match(split):
        return f"split name {value!r} may only use letters, digits and '_'"
    return None


# ---------------------------------------------------------------------------
# The discovery transforms.


class _ListArchiveFn(beam.DoFn):
    def __init__(self, limit: int):
        self._limit = limit
        self._skipped = beam.metrics.Metrics.counter("img2tfrecord", "inputs_skipped")
        self._members = beam.metrics.Metrics.counter("img2tfrecord", "archive_members")

    def process(self, metadata):
        archive = metadata.path
        for entry in list_archive(archive, metadata.size_in_bytes, self._limit):
            if entry[0] == "member":
                self._members.inc()
                _, name, size, member = entry
                yield archive, name, size, member
            elif entry[0] == "skipped":
                self._skipped.inc()
                yield beam.pvalue.TaggedOutput(SKIPPED, member_path(archive, entry[1]))
            else:
                _, name, reason, message = entry
                yield beam.pvalue.TaggedOutput(
                    ERRORS, error_row(member_path(archive, name) if name else archive, name, reason, message)
                )


def _archive_and_name(member):
    return member[0], member[1]


def _to_source(member, prefixes: Dict[str, str]):
    archive, name, size, locator = member
    prefix = prefixes.get(archive, "")
    relpath = name[len(prefix):] if prefix and name.startswith(prefix) else name
    return member_path(archive, name), relpath, size, locator, None


class _ReadManifestFn(beam.DoFn):
    def __init__(self, labeled: bool, has_split: bool, split_names: Sequence[str]):
        self._labeled = labeled
        self._has_split = has_split
        self._split_names = tuple(split_names)

    def process(self, metadata):
        for number, row in manifest_rows(metadata.path):
            ok, out = row_to_source(metadata.path, number, row, self._labeled, self._has_split, self._split_names)
            yield out if ok else beam.pvalue.TaggedOutput(ERRORS, out)


class DiscoverSources(beam.PTransform):
    """The work items of any input kind: ``{"files": items, "skipped": names, "errors": error rows}``.

    ``errors`` are inputs rejected before conversion (an unreadable archive,
    a manifest row without a path): each counts as one input.
    """

    def __init__(
        self,
        kind: str,
        pattern: str,
        base: str,
        max_file_bytes: int,
        sequence: bool = False,
        labeled: bool = True,
        has_split: bool = False,
        split_names: Sequence[str] = (),
    ):
        super().__init__()
        self._kind = kind
        self._pattern = pattern
        self._base = base
        self._limit = max_file_bytes
        self._min_depth = MIN_DEPTH_SEQUENCES if sequence else MIN_DEPTH_IMAGES
        self._labeled = labeled
        self._has_split = has_split
        self._split_names = tuple(split_names)

    def expand(self, pbegin):
        if self._kind == INPUT_FOLDER:
            found = pbegin | "ListFiles" >> DiscoverImages(self._pattern, self._base)
            return {"files": found.files, SKIPPED: found[SKIPPED], ERRORS: found[ERRORS]}
        matched = pbegin | "MatchInputs" >> fileio.MatchFiles(self._pattern, empty_match_treatment=EmptyMatchTreatment.ALLOW)
        if self._kind == INPUT_MANIFEST:
            rows = matched | "ReadManifest" >> beam.ParDo(
                _ReadManifestFn(self._labeled, self._has_split, self._split_names)
            ).with_outputs(ERRORS, main="files")
            return {"files": rows.files, SKIPPED: pbegin | "NoSkipped" >> beam.Create([]), ERRORS: rows[ERRORS]}
        listed = (
            matched
            | "SpreadArchives" >> beam.Reshuffle()
            | "ListArchives" >> beam.ParDo(_ListArchiveFn(self._limit)).with_outputs(SKIPPED, ERRORS, main="members")
        )
        prefixes = (
            listed.members
            | "ArchiveAndName" >> beam.Map(_archive_and_name)
            | "TopFolder" >> beam.CombinePerKey(_CommonTopFolder(self._min_depth))
        )
        files = listed.members | "ToSource" >> beam.Map(_to_source, prefixes=beam.pvalue.AsDict(prefixes))
        return {"files": files, SKIPPED: listed[SKIPPED], ERRORS: listed[ERRORS]}


# ---------------------------------------------------------------------------
# Launch-time peeks (plan.py).


def peek_archive(path: str, size: int, limit: int, max_members: int, max_bytes: int) -> Tuple[List[tuple], bool]:
    """The first entries of an archive (up to ``max_members`` members or ``max_bytes``
    of member data) and whether that was all of it.

    A zip's listing is its central directory (cheap); a tar's costs a read
    per member header; a tar.gz is decompressed as far as it is read.
    """
    entries: List[tuple] = []
    members = data_bytes = 0
    listing = list_archive(path, size, limit)
    try:
        for entry in listing:
            if members >= max_members or data_bytes > max_bytes:
                return entries, False
            entries.append(entry)
            if entry[0] == "member":
                members += 1
                if entry[3][0] == "data":
                    data_bytes += entry[2]
    finally:
        listing.close()
    return entries, True
