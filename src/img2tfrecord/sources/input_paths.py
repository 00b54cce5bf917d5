"""What ``--input`` names: a folder (or glob) of images, archives, or manifests."""

from __future__ import annotations

import os
import re
from typing import Optional, Sequence

from img2tfrecord.sources.archives import archive_format
from img2tfrecord.sources.manifests import manifest_format

INPUT_FOLDER = "folder"
INPUT_ARCHIVES = "archives"
INPUT_MANIFEST = "manifest"


def input_form(path: str) -> str:
    """What ``--input`` names: archives, manifests (one file or a glob of them), or a folder/glob of images."""
    if archive_format(path):
        return INPUT_ARCHIVES
    if manifest_format(path):
        return INPUT_MANIFEST
    return INPUT_FOLDER


GLOB_CHARS = re.compile(r"[*?\[]")  # what makes an --input a glob


def absolute_input(path: str) -> str:
    """``--input`` as it names the same files from any folder: a local path made absolute (a trailing '/'
    and glob characters kept), a URI as it is."""
    if "://" in path:
        return path
    return os.path.abspath(path) + ("/" if path.endswith("/") else "")


def first_glob_part(parts: Sequence[str]) -> Optional[int]:
    """The index of the first ``/``-separated part of a path that holds a glob character, or None."""
    return next((i for i, part in enumerate(parts) if GLOB_CHARS.search(part)), None)


def _resolved(path: str) -> str:
    """A local path with links resolved, or a URI without its trailing ``/``."""
    return path.rstrip("/") if "://" in path else os.path.realpath(path)


def listed_folder(path: str) -> Optional[str]:
    """The folder an ``--input`` of images lists, as given (a glob's fixed part); None for archives
    and manifests (files, whose folder is not listed)."""
    if input_form(path) != INPUT_FOLDER:
        return None
    parts = path.split("/")
    first_glob = first_glob_part(parts)
    if first_glob is None:
        return path
    return "/".join(parts[:first_glob]) or ("/" if path.startswith("/") else ".")


def input_folder(path: str) -> Optional[str]:
    """:func:`listed_folder`, resolved (local links followed, a URI without its trailing ``/``)."""
    folder = listed_folder(path)
    return None if folder is None else _resolved(folder)


def output_inside_input(input_path: str, output: str) -> bool:
    """True when ``output`` is the folder ``input_path`` lists or lies inside it: a later run over
    the input would list the output too (local paths compared with links resolved, URIs as prefixes)."""
    folder = input_folder(input_path)
    if folder is None or ("://" in folder) != ("://" in output):
        return False
    out = _resolved(output)
    return out == folder or out.startswith(folder.rstrip("/") + "/")
