"""Build the serialized ``tf.train.Example`` of one converted image (no TensorFlow import)."""
from __future__ import annotations

from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas.example_proto import Example
from img2tfrecord.transforms.image import ConvertedImage


def encode_example(image: ConvertedImage, label: int, class_name: str, relpath: str) -> bytes:
    """The record for one image, with every feature declared in ``schemas.features``."""
    example = Example()
    feature = example.features.feature
    feature[keys.IMAGE_ENCODED].bytes_list.value.append(image.encoded)
    feature[keys.IMAGE_FORMAT].bytes_list.value.append(image.format.encode())
    feature[keys.IMAGE_HEIGHT].int64_list.value.append(image.height)
    feature[keys.IMAGE_WIDTH].int64_list.value.append(image.width)
    feature[keys.IMAGE_CHANNELS].int64_list.value.append(image.channels)
    feature[keys.CLASS_LABEL].int64_list.value.append(label)
    feature[keys.CLASS_TEXT].bytes_list.value.append(class_name.encode("utf-8"))
    feature[keys.FILENAME].bytes_list.value.append(relpath.encode("utf-8"))
    feature[keys.KEY_SHA256].bytes_list.value.append(image.sha256.encode())
    return example.SerializeToString()
