"""Whether a file name is one Pillow reads as an image (``convert --plan`` flags the others).

The content decides the format when converting, never the name; this is
only a cheap guess at what will be rejected, made without reading a file.
"""

from __future__ import annotations

import posixpath
from typing import FrozenSet, Optional

from PIL import Image

from img2tfrecord.images.options import NEVER_OPENED_FORMATS

_SUFFIXES: Optional[FrozenSet[str]] = None


def image_suffixes() -> FrozenSet[str]:
    """Lower-case name suffixes (``.jpg``, ``.png``, ...) of the formats a conversion opens."""
    global _SUFFIXES  # pylint: disable=global-statement
    if _SUFFIXES is None:
        Image.init()
        _SUFFIXES = frozenset(
            suffix
            for suffix, fmt in Image.registered_extensions().items()
            if fmt in Image.OPEN and fmt not in NEVER_OPENED_FORMATS
        )
    return _SUFFIXES


def looks_like_image(name: str) -> bool:
    """True when ``name`` ends with the suffix of a format a conversion opens."""
    return posixpath.splitext(name)[1].lower() in image_suffixes()
