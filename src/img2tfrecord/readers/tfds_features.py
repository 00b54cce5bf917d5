"""The TFDS feature that ``features.json`` names for an output TFDS cannot describe.

Imported by TensorFlow Datasets only, when it loads such an output's
``features.json`` (see :mod:`img2tfrecord.schemas.tfds_layout`): restoring
the feature raises the reason, so ``tfds.builder_from_directory`` fails with
img2tfrecord's message rather than a parsing error deep in TFDS.
"""

from __future__ import annotations

from typing import Any, Mapping, NoReturn

import tensorflow_datasets as tfds

from img2tfrecord.schemas.tfds_layout import NotATfdsDatasetError


class NotDescribable(tfds.features.FeatureConnector):
    """Never constructed: ``from_json_content`` raises :class:`NotATfdsDatasetError` with the stored reason."""

    @classmethod
    def from_json_content(cls, value: Mapping[str, Any]) -> NoReturn:
        raise NotATfdsDatasetError(str(value.get("reason", "TFDS cannot read this img2tfrecord output")))

    def get_tensor_info(self) -> NoReturn:
        raise NotATfdsDatasetError("TFDS cannot read this img2tfrecord output")

    def encode_example(self, example_data: Any) -> NoReturn:
        raise NotATfdsDatasetError("TFDS cannot read this img2tfrecord output")
