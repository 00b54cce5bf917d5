"""The label map: class names in sorted order, id = position.

Ids follow Keras' ``image_dataset_from_directory``: class names sorted as
strings, numbered from 0. ``labels.txt`` holds one name per line, line i
being the class of id i.
"""

from __future__ import annotations

from typing import Dict, Iterable, List

LABELS_FILE = "labels.txt"
LABEL_MAP_FILE = "label_map.pbtxt"  # detection: the TF Object Detection API's label map, ids from 1
DETECTION_FIRST_ID = 1  # the API keeps id 0 for the background


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


def detection_ids(names: List[str]) -> Dict[str, int]:
    """Class name -> detection id: its position in the sorted names, from 1."""
    return {name: i + DETECTION_FIRST_ID for i, name in enumerate(names)}


def label_map_pbtxt(names: List[str]) -> str:
    """``label_map.pbtxt`` (a StringIntLabelMap in text format): one ``item`` per class, ids from 1."""
    items = []
    for name, i in detection_ids(names).items():
        quoted = name.replace("\\", "\\\\").replace("'", "\\'")
        items.append(f"item {{\n  id: {i}\n  name: '{quoted}'\n  display_name: '{quoted}'\n}}\n")
    return "".join(items)


def parse_label_map_pbtxt(text: str) -> Dict[int, str]:
    """Id -> name of a ``label_map.pbtxt`` written by :func:`label_map_pbtxt`."""
    import re

    found = re.findall(r"item\s*\{\s*id:\s*(\d+)\s*name:\s*'((?:[^'\\]|\\.)*)'", text)
    return {int(i): re.sub(r"\\(.)", r"\1", name) for i, name in found}
