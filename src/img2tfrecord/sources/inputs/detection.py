"""Detection annotations beside their images (Pascal VOC XML, COCO JSON, a CSV/JSONL manifest of
boxes): each image an annotation file names is one input (``detection.read_items``)."""

from __future__ import annotations

from typing import Dict, Iterator, Sequence

from img2tfrecord.model import ERRORS, WorkItem
from img2tfrecord.sources import detection
from img2tfrecord.sources.inputs import FILES, Finding, InputSource


class DetectionSource(InputSource):
    """The annotation files of ``annotations`` (voc, coco, boxes) that ``patterns`` match, images
    relative to ``base``; ``named_splits``: the annotations name each image's split."""

    spread_units = True

    def __init__(
        self, annotations: str, patterns: Sequence[str], base: str, split_names: Sequence[str], named_splits: bool
    ):
        super().__init__(patterns)
        self.annotations = annotations
        self.base = base
        self.split_names = tuple(split_names)
        self.named_splits = named_splits
        self._image_sets: Dict[str, Dict[str, str]] = {}

    def __getstate__(self):
        return {**self.__dict__, "_image_sets": {}}  # a worker reads each VOC root's image sets itself

    def _sets_of(self, root: str) -> Dict[str, str]:
        if root not in self._image_sets:  # read once per VOC root
            self._image_sets[root] = detection.voc_image_sets(root)
        return self._image_sets[root]

    def read(self, path: str, size: int) -> Iterator[Finding]:
        for out in detection.read_items(
            self.annotations, path, self.base, self.split_names, self.named_splits, self._sets_of
        ):
            yield (FILES, out) if isinstance(out, WorkItem) else (ERRORS, out)
