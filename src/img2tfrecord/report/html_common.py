"""What the page's sections share: escaping, number formats, the split badge."""

from __future__ import annotations

import html
from typing import Any, Sequence

from img2tfrecord.report import svg


def e(value: Any) -> str:
    """``value`` as HTML text or attribute value."""
    return html.escape(str(value), quote=True)


def num(n: Any) -> str:
    return f"{n:,}" if isinstance(n, int) else e(n)


def size_text(n: Any) -> str:
    """A byte count in B / kB / MB / GB / TB."""
    if n is None:
        return "?"
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} TB"


def split_badge(split: str, splits: Sequence[str]) -> str:
    index = list(splits).index(split) if split in splits else 0
    color = svg.split_color(split, index)
    return f'<span class="split" data-split="{e(split)}" style="background:{color}">{e(split)}</span>'
