"""Examples per class and split as a terminal shows them at any number of classes.

``inspect``, ``convert --plan`` and a run's summary print one row per class where classes are few; past
:data:`MANY_CLASSES` they print the counts' spread instead (:func:`spread_lines`): min, median and max per
class in each split and over all of them, the smallest and largest classes, and the classes a split lacks.
``--all-classes`` keeps one row per class; the JSON forms and ``dataset.json`` always hold every count.
"""

from __future__ import annotations

import statistics
from typing import Dict, List, Mapping, Sequence

MANY_CLASSES = 20  # more classes than this: the spread instead of a row per class
EXTREMES = 5  # the smallest and the largest classes named
MISSING_SHOWN = 5  # the classes a split lacks named


def is_many(classes: Sequence[str], all_classes: bool) -> bool:
    """Whether ``classes`` are shown as their spread (too many for a row each, and not ``--all-classes``)."""
    return len(classes) > MANY_CLASSES and not all_classes


def spread_lines(classes: Sequence[str], per_split: Mapping[str, Mapping[str, int]], indent: str = "  ") -> List[str]:
    """The spread of ``per_split`` (split -> class -> examples) over ``classes`` and any other class it counts:
    a table of min / median / max / total per split and over all splits, the smallest and largest classes
    by their total, and the classes missing from each split; each line starts with ``indent``."""
    names = list(dict.fromkeys([*classes, *(c for counts in per_split.values() for c in counts)]))
    if not names:
        return []
    totals: Dict[str, int] = {name: 0 for name in names}
    rows = []
    for split, counts in per_split.items():
        values = [int(counts.get(name, 0)) for name in names]
        for name, n in zip(names, values):
            totals[name] += n
        rows.append((split, values))
    if len(rows) > 1:
        rows.append(("all splits", [totals[name] for name in names]))
    width = max(len("per class"), *(len(split) for split, _ in rows))
    lines = [f"{indent}{'per class':<{width}}  {'min':>7}  {'median':>7}  {'max':>7}  {'total':>9}"]
    for split, values in rows:
        median = statistics.median(values)
        lines.append(f"{indent}{split:<{width}}  {min(values):>7}  {median:>7g}  {max(values):>7}  {sum(values):>9}")
    by_total = sorted(names, key=lambda name: (totals[name], name))
    shown = min(EXTREMES, len(names) // 2)
    if shown:
        lines.append(f"{indent}smallest classes: " + ", ".join(f"{n} ({totals[n]})" for n in by_total[:shown]))
        largest = sorted(by_total[-shown:], key=lambda name: (-totals[name], name))
        lines.append(f"{indent}largest classes: " + ", ".join(f"{n} ({totals[n]})" for n in largest))
    for split, counts in per_split.items():
        missing = [name for name in names if not counts.get(name)]
        if missing:
            more = f" and {len(missing) - MISSING_SHOWN} more" if len(missing) > MISSING_SHOWN else ""
            lines.append(
                f"{indent}missing from {split}: {len(missing)} class(es) ({', '.join(missing[:MISSING_SHOWN])}{more})"
            )
    return lines
