"""Bar charts as inline SVG strings: no script, no external resource; every bar has a tooltip (``<title>``)."""

from __future__ import annotations

import html
from typing import NamedTuple, Sequence

SPLIT_COLORS = {"train": "#1f77b4", "validation": "#ff7f0e", "test": "#2ca02c"}
OTHER_COLORS = ("#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
_CHAR_PX = 7.0  # average glyph width of the 12px sans-serif labels, to size the label column


class Bar(NamedTuple):
    label: str
    value: float
    color: str
    tooltip: str = ""
    text: str = ""  # printed after the bar; the value when empty


def split_color(split: str, index: int = 0) -> str:
    return SPLIT_COLORS.get(split, OTHER_COLORS[index % len(OTHER_COLORS)])


def _esc(text: str) -> str:
    return html.escape(str(text), quote=True)


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def horizontal_bars(bars: Sequence[Bar], *, bar_px: int = 480, row_px: int = 20, title: str = "") -> str:
    """One row per bar: label, bar scaled to the largest value, value text."""
    label_px = int(min(320, max([40.0] + [len(b.label) * _CHAR_PX for b in bars]))) + 10
    text_px = int(max([30.0] + [len(b.text or _number(b.value)) * _CHAR_PX for b in bars])) + 10
    width = label_px + bar_px + text_px
    height = max(1, len(bars)) * row_px + 4
    biggest = max([b.value for b in bars] + [0]) or 1
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{_esc(title)}">'
    ]
    for i, b in enumerate(bars):
        y = 2 + i * row_px
        length = bar_px * b.value / biggest
        label = (
            b.label
            if len(b.label) * _CHAR_PX <= label_px - 10
            else b.label[: int((label_px - 10) / _CHAR_PX) - 1] + "…"
        )
        parts.append(
            f"<g><title>{_esc(b.tooltip or f'{b.label}: {_number(b.value)}')}</title>"
            f'<text x="{label_px - 6}" y="{y + row_px * 0.7:.1f}" text-anchor="end" class="label">{_esc(label)}</text>'
            f'<rect x="{label_px}" y="{y + 3}" width="{length:.1f}" height="{row_px - 6}" fill="{b.color}"/>'
            f'<text x="{label_px + length + 5:.1f}" y="{y + row_px * 0.7:.1f}" class="value">{_esc(b.text or _number(b.value))}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def columns(bars: Sequence[Bar], *, height_px: int = 140, max_width_px: int = 900, axis_label: str = "") -> str:
    """Vertical bars side by side (histograms, shards): widths shrink to fit ``max_width_px``; labels under
    the bars when they fit, else only in the tooltips."""
    n = max(1, len(bars))
    column_px = max(2.0, min(60.0, (max_width_px - 60) / n))
    labelled = column_px >= 40
    left, top, bottom = 56, 8, 34 if labelled else 20
    width = int(left + n * column_px + 8)
    height = top + height_px + bottom
    biggest = max([b.value for b in bars] + [0]) or 1
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{_esc(axis_label)}">',
        f'<text x="{left - 6}" y="{top + 10}" text-anchor="end" class="value">{_esc(_number(biggest))}</text>',
        f'<text x="{left - 6}" y="{top + height_px}" text-anchor="end" class="value">0</text>',
        f'<line x1="{left}" y1="{top + height_px}" x2="{width - 4}" y2="{top + height_px}" stroke="#888"/>',
    ]
    for i, b in enumerate(bars):
        x = left + i * column_px
        h = height_px * b.value / biggest
        parts.append(
            f"<g><title>{_esc(b.tooltip or f'{b.label}: {_number(b.value)}')}</title>"
            f'<rect x="{x + 1:.1f}" y="{top + height_px - h:.1f}" width="{max(1.0, column_px - 2):.1f}" '
            f'height="{h:.1f}" fill="{b.color}"/></g>'
        )
        if labelled:
            parts.append(
                f'<text x="{x + column_px / 2:.1f}" y="{top + height_px + 14}" text-anchor="middle" class="tick">{_esc(b.label[:11])}</text>'
            )
    if axis_label:
        parts.append(f'<text x="{left}" y="{height - 4}" class="tick">{_esc(axis_label)}</text>')
    parts.append("</svg>")
    return "".join(parts)
