"""Parse and decode ``load``'s serialized records into tensors: images, labels, detection boxes, clips.

:class:`LoadPlan` is what ``tfdata.load`` works out from ``dataset.json``
and its arguments; the functions here turn one record, a batch of records
or a ``--sequence`` clip into what ``load`` yields, in the forms its
docstring describes. ``transformed.py`` reads the same plan.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Tuple

import tensorflow as tf

from img2tfrecord.schemas import features as keys


@dataclasses.dataclass(frozen=True)
class LoadPlan:
    """What ``load`` builds, worked out from the manifest and the arguments before any TF op."""

    files: List[str]
    compression_type: str
    spec: Dict[str, Any]
    channels: int
    stored_size: Optional[Tuple[int, int]]  # (height, width) every record has, when the writer resized
    target_size: Optional[Tuple[int, int]]  # (height, width) to resize to, None to keep the stored size
    decoder: str  # "encoded", "raw" or "by_record"
    num_records: int  # in the listed shards, less the withdrawn ones
    detection: bool = False  # TF Object Detection API records: yield boxes and classes
    pad_boxes: bool = False  # detection, batched: zero-padded dense object lists instead of RaggedTensors
    withdrawn: Tuple[str, ...] = ()  # "<file>#<index>" of each record no reader returns (--accept-changes)


# ---------------------------------------------------------------------------
# Decoding. Per image: bytes -> uint8 [H, W, C] (or float32 when resized);
# per batch: -> float32 in [0, 1].


def decode_encoded(encoded: tf.Tensor, channels: int) -> tf.Tensor:
    """Stored JPEG/PNG bytes -> uint8 [H, W, C].

    JPEG with libjpeg's accurate integer DCT, not TensorFlow's default fast
    one: that decode is bit for bit Pillow's, so the pixels equal the ones
    ``convert`` computes the train statistics from whenever it decodes the
    stored bytes (originals kept as they are, ``--exact-statistics``:
    ``image.pixel_sums``), and the exported tf.Transform graph decodes the
    same way.
    """
    return tf.cond(
        tf.io.is_jpeg(encoded),
        lambda: tf.io.decode_jpeg(encoded, channels=channels, dct_method="INTEGER_ACCURATE"),
        lambda: tf.io.decode_png(encoded, channels=channels, dtype=tf.uint8),
    )


def decode_raw(encoded: tf.Tensor, height: tf.Tensor, width: tf.Tensor, channels: tf.Tensor) -> tf.Tensor:
    """Stored raw bytes (``--format raw``: uint8, row-major) -> uint8 [height, width, channels]."""
    pixels = tf.io.decode_raw(encoded, tf.uint8)
    shape = tf.cast(tf.stack([height, width, channels]), tf.int32)
    return tf.reshape(pixels, shape)


def _decode_one(plan: LoadPlan, encoded, fmt, height, width, channels) -> tf.Tensor:
    """One stored image -> [H, W, C], C = the dataset's channel count."""
    if plan.decoder == "encoded":
        image = decode_encoded(encoded, plan.channels)
    elif plan.decoder == "raw":
        image = decode_raw(encoded, height, width, channels)
    else:  # format decided per record: the branch point for stored formats beyond jpeg/png
        image = tf.cond(
            tf.equal(fmt, keys.FORMAT_RAW),
            lambda: decode_raw(encoded, height, width, channels),
            lambda: decode_encoded(encoded, plan.channels),
        )
    if plan.target_size is not None:
        image.set_shape([None, None, plan.channels])
        return tf.image.resize(image, plan.target_size, method="bilinear")
    if plan.stored_size is not None:
        return tf.ensure_shape(image, [*plan.stored_size, plan.channels])
    image.set_shape([None, None, plan.channels])
    return image


def _element_spec(plan: LoadPlan) -> tf.TensorSpec:
    size = plan.target_size or plan.stored_size or (None, None)
    dtype = tf.float32 if plan.target_size is not None else tf.uint8
    return tf.TensorSpec([*size, plan.channels], dtype)


def _decode_fields(plan: LoadPlan, parsed: Mapping[str, tf.Tensor]):
    return (
        parsed[keys.IMAGE_ENCODED],
        parsed.get(keys.IMAGE_FORMAT, tf.constant(b"")),
        parsed.get(keys.IMAGE_HEIGHT, tf.constant(0, tf.int64)),
        parsed.get(keys.IMAGE_WIDTH, tf.constant(0, tf.int64)),
        parsed.get(keys.IMAGE_CHANNELS, tf.constant(plan.channels, tf.int64)),
    )


def _to_unit_float(images: tf.Tensor) -> tf.Tensor:
    if images.dtype == tf.uint8:
        return tf.cast(images, tf.float32) * (1.0 / 255.0)
    return images * (1.0 / 255.0)


def _decode_batch(plan: LoadPlan, parsed: Dict[str, tf.Tensor]) -> tf.Tensor:
    fields = _decode_fields(plan, parsed)
    images = tf.map_fn(
        lambda f: _decode_one(plan, *f),
        fields,
        fn_output_signature=_element_spec(plan),
        parallel_iterations=16,
    )
    return _to_unit_float(images)


def _object_lists(plan: LoadPlan, parsed: Mapping[str, Any], batched: bool) -> Dict[str, Any]:
    """``parsed`` plus ``boxes`` and ``num_boxes``; object lists ragged if batched without ``pad_boxes``, else dense."""
    out = dict(parsed)
    ymin = parsed[keys.BBOX_YMIN]
    num_boxes = tf.RaggedTensor.from_sparse(ymin).row_lengths() if batched else ymin.dense_shape[0]
    for key, value in parsed.items():
        if isinstance(value, tf.sparse.SparseTensor):
            ragged = batched and not plan.pad_boxes
            out[key] = tf.RaggedTensor.from_sparse(value) if ragged else tf.sparse.to_dense(value)
    coords = [out[k] for k in keys.BBOX_KEYS]
    if isinstance(coords[0], tf.RaggedTensor):  # every list of a record has one value per box
        out[keys.DECODED_BOXES] = coords[0].with_values(tf.stack([c.values for c in coords], axis=-1))
    else:
        out[keys.DECODED_BOXES] = tf.stack(coords, axis=-1)
    out[keys.DECODED_NUM_BOXES] = num_boxes
    return out


def _detection_output(plan: LoadPlan, parsed: Mapping[str, Any], images: tf.Tensor, as_dict: bool, batched: bool):
    lists = _object_lists(plan, parsed, batched)
    if as_dict:
        lists[keys.DECODED_IMAGE] = images
        return lists
    targets = {
        keys.DECODED_BOXES: lists[keys.DECODED_BOXES],
        keys.DECODED_CLASSES: lists[keys.OBJECT_CLASS_LABEL],
        keys.DECODED_CLASS_TEXTS: lists[keys.OBJECT_CLASS_TEXT],
        keys.DECODED_NUM_BOXES: lists[keys.DECODED_NUM_BOXES],
    }
    return images, targets


def _output(parsed: Dict[str, tf.Tensor], images: tf.Tensor, as_dict: bool):
    if as_dict:
        out = dict(parsed)
        out[keys.DECODED_IMAGE] = images
        return out
    if keys.CLASS_LABEL not in parsed:  # an unlabeled dataset: images only
        return images
    return images, parsed[keys.CLASS_LABEL]


# ---------------------------------------------------------------------------
# Records -> what load yields.


def parse_single(plan: LoadPlan, record: tf.Tensor, as_dict: bool):
    """One serialized Example -> one unbatched element of ``load``."""
    parsed = tf.io.parse_single_example(record, plan.spec)
    image = _to_unit_float(_decode_one(plan, *_decode_fields(plan, parsed)))
    if plan.detection:
        return _detection_output(plan, parsed, image, as_dict, batched=False)
    return _output(parsed, image, as_dict)


def parse_batch(plan: LoadPlan, records: tf.Tensor, as_dict: bool):
    """A batch of serialized Examples -> one batch of ``load``: images float32 in [0, 1]."""
    parsed = tf.io.parse_example(records, plan.spec)
    if plan.detection:
        return _detection_output(plan, parsed, _decode_batch(plan, parsed), as_dict, batched=True)
    return _output(parsed, _decode_batch(plan, parsed), as_dict)


def parse_clip(plan: LoadPlan, record: tf.Tensor, as_dict: bool):
    """One serialized SequenceExample (``convert --sequence``) -> one unbatched clip of ``load(sequence=True)``."""
    context_spec = {k: v for k, v in plan.spec.items() if not isinstance(v, tf.io.FixedLenSequenceFeature)}
    list_spec = {k: v for k, v in plan.spec.items() if isinstance(v, tf.io.FixedLenSequenceFeature)}
    context, lists = tf.io.parse_single_sequence_example(
        record, context_features=context_spec, sequence_features=list_spec
    )
    encoded = lists[keys.IMAGE_ENCODED]
    _, fmt, height, width, channels = _decode_fields(plan, context | {keys.IMAGE_ENCODED: encoded})
    frames = tf.map_fn(
        lambda e: _decode_one(plan, e, fmt, height, width, channels),
        encoded,
        fn_output_signature=_element_spec(plan),
    )
    frames = _to_unit_float(frames)
    length = tf.shape(encoded, out_type=tf.int64)[0]
    if as_dict:
        out = dict(context)
        out[keys.DECODED_FRAMES] = frames
        out[keys.FRAME_COUNT] = length
        return out
    if keys.CLASS_LABEL not in context:
        return frames, length
    return (frames, length), context[keys.CLASS_LABEL]


__all__ = ["LoadPlan", "decode_encoded", "decode_raw", "parse_batch", "parse_clip", "parse_single"]
