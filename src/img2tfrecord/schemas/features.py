"""Feature keys and the ``tf.io`` parsing spec of the records written by ``convert``.

Every feature key of a record is spelled here and nowhere else: the writer,
the reader, ``inspect``/``verify`` and the tests all import these names.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping

IMAGE_ENCODED = "image/encoded"
IMAGE_FORMAT = "image/format"
IMAGE_HEIGHT = "image/height"
IMAGE_WIDTH = "image/width"
IMAGE_CHANNELS = "image/channels"
CLASS_LABEL = "image/class/label"
CLASS_TEXT = "image/class/text"
FILENAME = "image/filename"
METADATA_PREFIX = "metadata/"  # + a name: a value an image reference carried, copied into its record
KEY_SHA256 = "image/key/sha256"
# A URL list's records (--input urls.parquet): the caption of the image and the URL it was read from.
IMAGE_TEXT = "image/text"
SOURCE_URL = "image/source_url"
# Context features of a tf.train.SequenceExample (``convert --sequence``): one record per clip.
CLIP_NAME = "clip/name"
CLIP_NUM_FRAMES = "clip/num_frames"

# Detection records (``--task detection``): the TF Object Detection API's keys. One value per
# object in each list, all lists of a record the same length (0 for an image without boxes).
SOURCE_ID = "image/source_id"
BBOX_XMIN = "image/object/bbox/xmin"
BBOX_YMIN = "image/object/bbox/ymin"
BBOX_XMAX = "image/object/bbox/xmax"
BBOX_YMAX = "image/object/bbox/ymax"
OBJECT_CLASS_TEXT = "image/object/class/text"
OBJECT_CLASS_LABEL = "image/object/class/label"
OBJECT_DIFFICULT = "image/object/difficult"
OBJECT_TRUNCATED = "image/object/truncated"
OBJECT_VIEW = "image/object/view"
OBJECT_IS_CROWD = "image/object/is_crowd"
OBJECT_AREA = "image/object/area"
BBOX_KEYS = (BBOX_YMIN, BBOX_XMIN, BBOX_YMAX, BBOX_XMAX)  # the order of load(task="detection")'s boxes

# Not a record feature: the key under which ``img2tfrecord.load(..., as_dict=True)``
# puts the decoded float32 image next to the parsed features.
DECODED_IMAGE = "image"
# Not record features either: what ``load(..., task="detection")`` and the TF-free readers add to a
# detection record. ``boxes``: float32 [N, 4], each row (ymin, xmin, ymax, xmax) as fractions of the
# image (BBOX_KEYS order); ``num_boxes``: N. The targets of ``load``'s ``(images, targets)`` are
# ``{DECODED_BOXES, DECODED_CLASSES (1-based ids), DECODED_CLASS_TEXTS, DECODED_NUM_BOXES}``.
DECODED_BOXES = "boxes"
DECODED_CLASSES = "classes"
DECODED_CLASS_TEXTS = "class_texts"
DECODED_NUM_BOXES = "num_boxes"
# The same for ``load(..., sequence=True, as_dict=True)``: the decoded frames and their count.
DECODED_FRAMES = "frames"
FRAME_COUNT = "length"

# Values of image/format. FORMAT_RAW marks uncompressed uint8 pixels in
# row-major height x width x channels order.
FORMAT_JPEG = "jpeg"
FORMAT_PNG = "png"
FORMAT_RAW = "raw"

# Feature key -> (dtype name, description). Every feature is a scalar
# (FixedLenFeature with shape []); bytes features hold one value.
FEATURES: Dict[str, tuple] = {
    IMAGE_ENCODED: (
        "string",
        "the stored image: encoded JPEG/PNG bytes (or the original file bytes with --format keep)",
    ),
    IMAGE_FORMAT: ("string", "format of image/encoded: jpeg, png or raw (uint8 pixels, row-major HxWxC)"),
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
# Left out of every record of an unlabeled dataset (a manifest without a label column).
LABEL_FEATURES = (CLASS_LABEL, CLASS_TEXT)

# tf.train.SequenceExample records (one per clip): the context features, then the
# feature lists (one value per frame, frames in natural name order).
SEQUENCE_CONTEXT_FEATURES: Dict[str, tuple] = {
    CLASS_LABEL: FEATURES[CLASS_LABEL],
    CLASS_TEXT: FEATURES[CLASS_TEXT],
    CLIP_NAME: ("string", "path of the clip folder relative to the input root"),
    CLIP_NUM_FRAMES: ("int64", "number of frames (steps of the image/encoded feature list)"),
    IMAGE_HEIGHT: ("int64", "height in pixels of every frame"),
    IMAGE_WIDTH: ("int64", "width in pixels of every frame"),
    IMAGE_CHANNELS: ("int64", "channels of every frame (1 or 3)"),
    IMAGE_FORMAT: ("string", "format of every frame: jpeg, png or raw"),
}
SEQUENCE_FEATURES: Dict[str, tuple] = {
    IMAGE_ENCODED: ("string", "one frame per step, stored as image/encoded of an Example is"),
}
# Detection records: the scalar features, then one list per object property (VarLenFeature).
DETECTION_FEATURES: Dict[str, tuple] = {
    IMAGE_ENCODED: FEATURES[IMAGE_ENCODED],
    IMAGE_FORMAT: FEATURES[IMAGE_FORMAT],
    IMAGE_HEIGHT: FEATURES[IMAGE_HEIGHT],
    IMAGE_WIDTH: FEATURES[IMAGE_WIDTH],
    IMAGE_CHANNELS: FEATURES[IMAGE_CHANNELS],
    FILENAME: FEATURES[FILENAME],
    SOURCE_ID: ("string", "the image's id: the COCO image id, else its file name without extension"),
    KEY_SHA256: FEATURES[KEY_SHA256],
}
OBJECT_FEATURES: Dict[str, tuple] = {
    BBOX_XMIN: ("float", "left edge of each box, as a fraction of the stored image's width"),
    BBOX_YMIN: ("float", "top edge of each box, as a fraction of the stored image's height"),
    BBOX_XMAX: ("float", "right edge of each box, as a fraction of the stored image's width"),
    BBOX_YMAX: ("float", "bottom edge of each box, as a fraction of the stored image's height"),
    OBJECT_CLASS_TEXT: ("string", "class name of each box"),
    OBJECT_CLASS_LABEL: ("int64", "1-based class id of each box: its line in labels.txt + 1 (label_map.pbtxt)"),
    OBJECT_DIFFICULT: ("int64", "1 for a box VOC marks difficult"),
    OBJECT_TRUNCATED: ("int64", "1 for a box VOC marks truncated or that the crop or image edge cut"),
    OBJECT_VIEW: ("string", "VOC <pose> of each box (empty when not given)"),
    OBJECT_IS_CROWD: ("int64", "1 for a COCO crowd box"),
    OBJECT_AREA: ("float", "area of each object in stored pixels (COCO's area scaled, else the box's)"),
}
# A URL list's records: the URL always, the caption when the list has a caption column.
URL_FEATURES: Dict[str, tuple] = {
    SOURCE_URL: ("string", "the URL the image was downloaded from (a URL list's row)"),
    IMAGE_TEXT: ("string", "the image's caption: the URL list's caption column"),
}
FIXED_LEN = "FixedLenFeature"
VAR_LEN = "VarLenFeature"  # a list of any length: one value per object of a detection record
FIXED_LEN_SEQUENCE = "FixedLenSequenceFeature"  # a feature list of scalars: one value per step


def feature_spec_json(
    labeled: bool = True, sequence: bool = False, detection: bool = False, url: bool = False, caption: bool = False
) -> Dict[str, Dict[str, Any]]:
    """The parsing spec in a JSON-serialisable form, as stored in ``dataset.json``.

    ``sequence``: the spec of SequenceExample records, context features with
    kind FixedLenFeature and feature lists with kind FixedLenSequenceFeature.
    ``detection``: the spec of detection records, the object lists with kind
    VarLenFeature. ``labeled=False`` leaves out the label features. ``url``: a URL list's records, with
    their source URL (and ``caption``: their caption).
    """
    if detection:
        spec = {
            key: {"kind": FIXED_LEN, "shape": [], "dtype": dtype, "description": desc}
            for key, (dtype, desc) in DETECTION_FEATURES.items()
        }
        for key, (dtype, desc) in OBJECT_FEATURES.items():
            spec[key] = {"kind": VAR_LEN, "shape": [None], "dtype": dtype, "description": desc}
        return spec
    spec = {
        key: {"kind": FIXED_LEN, "shape": [], "dtype": dtype, "description": desc}
        for key, (dtype, desc) in (SEQUENCE_CONTEXT_FEATURES if sequence else FEATURES).items()
        if labeled or key not in LABEL_FEATURES
    }
    if sequence:
        for key, (dtype, desc) in SEQUENCE_FEATURES.items():
            spec[key] = {"kind": FIXED_LEN_SEQUENCE, "shape": [], "dtype": dtype, "description": desc}
    for key, (dtype, desc) in URL_FEATURES.items():
        if url and (caption or key != IMAGE_TEXT):
            spec[key] = {"kind": FIXED_LEN, "shape": [], "dtype": dtype, "description": desc}
    return spec


def split_spec_json(spec_json: Mapping[str, Mapping[str, Any]]) -> tuple:
    """``(context features, feature lists)`` of a ``feature_spec`` block (the lists empty for Examples)."""
    context = {k: v for k, v in spec_json.items() if v.get("kind") != FIXED_LEN_SEQUENCE}
    lists = {k: v for k, v in spec_json.items() if v.get("kind") == FIXED_LEN_SEQUENCE}
    return context, lists


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
        kind = entry.get("kind")
        if kind == FIXED_LEN:
            spec[key] = tf.io.FixedLenFeature(entry["shape"], tf.dtypes.as_dtype(entry["dtype"]))
        elif kind == FIXED_LEN_SEQUENCE:
            spec[key] = tf.io.FixedLenSequenceFeature(entry["shape"], tf.dtypes.as_dtype(entry["dtype"]))
        elif kind == VAR_LEN:
            spec[key] = tf.io.VarLenFeature(tf.dtypes.as_dtype(entry["dtype"]))
        else:
            raise ValueError(f"unsupported feature kind {kind!r} for {key!r}")
    return spec
