"""Build the serialized ``tf.train.Example`` / ``SequenceExample`` records (no TensorFlow import)."""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence, Tuple

from img2tfrecord.images.options import ConvertedImage
from img2tfrecord.model import MetadataValue
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import transformed as names
from img2tfrecord.schemas.example_proto import Example, SequenceExample


def _add_image(feature, image: ConvertedImage) -> None:
    """The stored image and its format and shape, as every image record holds them."""
    feature[keys.IMAGE_ENCODED].bytes_list.value.append(image.encoded)
    feature[keys.IMAGE_FORMAT].bytes_list.value.append(image.format.encode())
    feature[keys.IMAGE_HEIGHT].int64_list.value.append(image.height)
    feature[keys.IMAGE_WIDTH].int64_list.value.append(image.width)
    feature[keys.IMAGE_CHANNELS].int64_list.value.append(image.channels)


def _add_metadata(feature, metadata: Sequence[MetadataValue]) -> None:
    for value in metadata:
        stored = feature[keys.METADATA_PREFIX + value.name]
        if value.list_type == "int64":
            stored.int64_list.value.extend(value.values)
        elif value.list_type == "float":
            stored.float_list.value.extend(value.values)
        else:
            stored.bytes_list.value.extend(value.values)


def encode_example(
    image: ConvertedImage,
    label: Optional[int],
    class_name: Optional[str],
    relpath: str,
    metadata: Sequence[MetadataValue] = (),
    texts: Sequence[Tuple[str, str]] = (),
) -> bytes:
    """The record for one image, with every feature declared in ``schemas.features``.

    ``class_name`` None (an unlabeled dataset) leaves out the label features; ``metadata`` adds one
    ``metadata/<name>`` feature per value; ``texts``: ``(feature key, text)`` of further bytes features
    (a URL list's caption and URL).
    """
    example = Example()
    feature = example.features.feature
    _add_image(feature, image)
    _add_metadata(feature, metadata)
    if class_name is not None:
        feature[keys.CLASS_LABEL].int64_list.value.append(label)
        feature[keys.CLASS_TEXT].bytes_list.value.append(class_name.encode("utf-8"))
    feature[keys.FILENAME].bytes_list.value.append(relpath.encode("utf-8"))
    feature[keys.KEY_SHA256].bytes_list.value.append(image.sha256.encode())
    for key, text in texts:
        feature[key].bytes_list.value.append(text.encode("utf-8"))
    return example.SerializeToString(deterministic=True)  # map keys sorted: the same bytes in every process


class StoredObject(NamedTuple):
    """One box of a detection record: edges as fractions of the stored image, class and flags."""

    ymin: float
    xmin: float
    ymax: float
    xmax: float
    label: int  # 1-based (label_map.pbtxt)
    class_name: str
    difficult: bool
    truncated: bool
    view: str
    is_crowd: bool
    area: float  # stored pixels


def encode_detection_example(
    image: ConvertedImage,
    relpath: str,
    source_id: str,
    objects: Sequence[StoredObject],
    metadata: Sequence[MetadataValue] = (),
) -> bytes:
    """The TF Object Detection API record of one image, every key of ``schemas.features.DETECTION_FEATURES``
    and ``OBJECT_FEATURES`` present (the object lists empty for an image without boxes), plus ``metadata``."""
    example = Example()
    feature = example.features.feature
    _add_image(feature, image)
    _add_metadata(feature, metadata)
    feature[keys.FILENAME].bytes_list.value.append(relpath.encode("utf-8"))
    feature[keys.SOURCE_ID].bytes_list.value.append(source_id.encode("utf-8"))
    feature[keys.KEY_SHA256].bytes_list.value.append(image.sha256.encode())
    floats = {
        keys.BBOX_XMIN: [o.xmin for o in objects],
        keys.BBOX_YMIN: [o.ymin for o in objects],
        keys.BBOX_XMAX: [o.xmax for o in objects],
        keys.BBOX_YMAX: [o.ymax for o in objects],
        keys.OBJECT_AREA: [o.area for o in objects],
    }
    ints = {
        keys.OBJECT_CLASS_LABEL: [o.label for o in objects],
        keys.OBJECT_DIFFICULT: [int(o.difficult) for o in objects],
        keys.OBJECT_TRUNCATED: [int(o.truncated) for o in objects],
        keys.OBJECT_IS_CROWD: [int(o.is_crowd) for o in objects],
    }
    strings = {
        keys.OBJECT_CLASS_TEXT: [o.class_name.encode("utf-8") for o in objects],
        keys.OBJECT_VIEW: [o.view.encode("utf-8") for o in objects],
    }
    for key, values in floats.items():  # SetInParent: an empty list is still a list of its type
        feature[key].float_list.SetInParent()
        feature[key].float_list.value.extend(values)
    for key, ivalues in ints.items():
        feature[key].int64_list.SetInParent()
        feature[key].int64_list.value.extend(ivalues)
    for key, svalues in strings.items():
        feature[key].bytes_list.SetInParent()
        feature[key].bytes_list.value.extend(svalues)
    return example.SerializeToString(deterministic=True)


def encode_pixel_sums(sums: Sequence[int], squares: Sequence[int]) -> bytes:
    """An Example holding only the analysis features of one image (``schemas.transformed``).

    Serialized protobuf messages merge when concatenated, so ``record + this``
    parses as the record with these two features added: how the train
    examples reach tf.Transform (``transforms/analyze.py``).
    """
    example = Example()
    feature = example.features.feature
    feature[names.PIXEL_SUM].int64_list.value.extend(sums)
    feature[names.PIXEL_SQUARE_SUM].int64_list.value.extend(squares)
    return example.SerializeToString(deterministic=True)


def encode_sequence_example(
    frames: Sequence[ConvertedImage], label: Optional[int], class_name: Optional[str], clip_name: str
) -> bytes:
    """The record of one clip: context features and one ``image/encoded`` step per frame, in order.

    Every frame must have the same size, channels and format (the caller checks).
    """
    first = frames[0]
    seq = SequenceExample()
    context = seq.context.feature
    if class_name is not None:
        context[keys.CLASS_LABEL].int64_list.value.append(label)
        context[keys.CLASS_TEXT].bytes_list.value.append(class_name.encode("utf-8"))
    context[keys.CLIP_NAME].bytes_list.value.append(clip_name.encode("utf-8"))
    context[keys.CLIP_NUM_FRAMES].int64_list.value.append(len(frames))
    context[keys.IMAGE_HEIGHT].int64_list.value.append(first.height)
    context[keys.IMAGE_WIDTH].int64_list.value.append(first.width)
    context[keys.IMAGE_CHANNELS].int64_list.value.append(first.channels)
    context[keys.IMAGE_FORMAT].bytes_list.value.append(first.format.encode())
    steps = seq.feature_lists.feature_list[keys.IMAGE_ENCODED].feature
    for frame in frames:
        steps.add().bytes_list.value.append(frame.encoded)
    return seq.SerializeToString(deterministic=True)
