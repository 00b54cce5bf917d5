"""Feature keys and the ``tf.io`` parsing spec of the records written by ``convert``.

Every feature key of a record is spelled here and nowhere else: the writer,
the reader, ``inspect``/``verify`` and the tests all import these names.
"""
from __future__ import annotations

from typing import Any, Dict

IMAGE_ENCODED = "image/encoded"
IMAGE_FORMAT = "image/format"
IMAGE_HEIGHT = "image/height"
IMAGE_WIDTH = "image/width"
IMAGE_CHANNELS = "image/channels"
CLASS_LABEL = "image/class/label"
CLASS_TEXT = "image/class/text"
FILENAME = "image/filename"
KEY_SHA256 = "image/key/sha256"

# Not a record feature: the key under which ``img2tfrecord.load(..., as_dict=True)``
# puts the decoded float32 image next to the parsed features.
DECODED_IMAGE = "image"

# Values of image/format. FORMAT_RAW marks uncompressed uint8 pixels in
# row-major height x width x channels order.
FORMAT_JPEG = "jpeg"
FORMAT_PNG = "png"
FORMAT_RAW = "raw"

# Feature key -> (dtype name, description). Every feature is a scalar
# (FixedLenFeature with shape []); bytes features hold one value.
FEATURES: Dict[str, tuple] = {
    IMAGE_ENCODED: ("string", "the stored image: encoded JPEG/PNG bytes (or the original file bytes with --format keep)"),
    IMAGE_FORMAT: ("string", "format of image/encoded: jpeg, png, ..."),
    IMAGE_HEIGHT: ("int64", "height in pixels of the stored image"),
    IMAGE_WIDTH: ("int64", "width in pixels of the stored image"),
    IMAGE_CHANNELS: ("int64", "channels of the stored image (1 or 3)"),
    CLASS_LABEL: ("int64", "0-based class id: index of the class name in sorted order (labels.txt)"),
    CLASS_TEXT: ("string", "class name"),
    FILENAME: ("string", "path of the source image relative to the input root"),
    KEY_SHA256: ("string", "hex SHA-256 digest of image/encoded"),
}

INT_FEATURES = tuple(k for k, (dtype, _) in FEATURES.items() if dtype == "int64")
BYTES_FEATURES = tuple(k for k, (dtype, _) in FEATURES.items() if dtype == "string")


def feature_spec_json() -> Dict[str, Dict[str, Any]]:
    """The parsing spec in a JSON-serialisable form, as stored in ``dataset.json``."""
    return {
        key: {"kind": "FixedLenFeature", "shape": [], "dtype": dtype, "description": desc}
        for key, (dtype, desc) in FEATURES.items()
    }


def feature_spec(spec_json: Dict[str, Dict[str, Any]] | None = None) -> Dict[str, Any]:
    """The ``tf.io`` feature spec for ``tf.io.parse_example`` / ``parse_single_example``.

    Built from ``spec_json`` (the ``feature_spec`` block of a ``dataset.json``)
    when given, so a reader follows what the writer declared; else from this
    module's own declaration.
    """
    import tensorflow as tf  # deferred: workers that only write records never need TensorFlow

    spec_json = spec_json or feature_spec_json()
    spec = {}
    for key, entry in spec_json.items():
        if entry.get("kind") != "FixedLenFeature":
            raise ValueError(f"unsupported feature kind {entry.get('kind')!r} for {key!r}")
        spec[key] = tf.io.FixedLenFeature(entry["shape"], tf.dtypes.as_dtype(entry["dtype"]))
    return spec
