"""The label map: class names in sorted order, id = position.

Ids follow Keras' ``image_dataset_from_directory``: class names sorted as
strings, numbered from 0. ``labels.txt`` holds one name per line, line i
being the class of id i.
"""

from __future__ import annotations

from typing import Dict, Iterable, List

LABELS_FILE = "labels.txt"


def label_names(class_names: Iterable[str]) -> List[str]:
    """Sorted, de-duplicated class names: the id of a class is its index here."""
    return sorted(set(class_names))


def label_ids(names: List[str]) -> Dict[str, int]:
    return {name: i for i, name in enumerate(names)}


def labels_text(names: List[str]) -> str:
    for name in names:
        if "\n" in name or "\r" in name:
            raise ValueError(f"class name contains a line break: {name!r}")
    return "".join(name + "\n" for name in names)


def parse_labels_text(text: str) -> List[str]:
    return [line for line in text.split("\n") if line != ""]
