"""The split folder vocabulary: which folder names mark ``SRC/<split>/<class>/<file>``, and the split each names.

Folders, archives, manifests' ``split`` column and ``--splits`` all read a
split's name through :func:`split_of_folder`, so ``val`` is ``validation`` everywhere.
"""

from __future__ import annotations

from typing import Optional, Sequence

# Folder names that mark the SRC/<split>/<class>/<file> layout, and the split each stands for.
SPLIT_FOLDERS = {"train": "train", "validation": "validation", "val": "validation", "test": "test"}


def split_of_folder(folder: str) -> Optional[str]:
    """The split a folder (or a ``split`` value) named exactly so stands for; None for any other name."""
    return SPLIT_FOLDERS.get(folder)


def is_split_layout(top_level_folders: Sequence[str]) -> bool:
    """True when every first-level folder is a split name (``SRC/<split>/<class>/<file>``)."""
    return bool(top_level_folders) and all(f in SPLIT_FOLDERS for f in top_level_folders)
