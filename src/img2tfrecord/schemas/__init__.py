"""The contract between writer and readers: feature keys, spec, label map, manifest."""

from img2tfrecord.schemas import features, labels, manifest  # noqa: F401
from img2tfrecord.schemas.features import (  # noqa: F401
    BYTES_FEATURES,
    CLASS_LABEL,
    CLASS_TEXT,
    FEATURES,
    FILENAME,
    IMAGE_CHANNELS,
    IMAGE_ENCODED,
    IMAGE_FORMAT,
    IMAGE_HEIGHT,
    IMAGE_WIDTH,
    INT_FEATURES,
    KEY_SHA256,
    feature_spec,
    feature_spec_json,
)
