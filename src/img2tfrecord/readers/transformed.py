"""``img2tfrecord.load(..., transform=True)``: records through the exported tf.Transform graph.

``convert`` analyses the train split with tf.Transform and writes the
transform into the output directory (``transform_fn/``,
``transformed_metadata/``, ``metadata/``; see ``transforms/analyze.py``).
Here the raw records are parsed with ``TFTransformOutput.raw_feature_spec()``
and passed through ``transform_features_layer()``, the same graph a
serving model embeds, so training and serving see identical inputs:
``image`` float32 normalised with the train mean/std, ``label`` the int64
class id.

Datasets converted with ``--image-size`` are transformed a batch at a
time. Without it the stored images differ in size and the transform
yields a RaggedTensor batch; records are then transformed one at a time
into dense ``[H, W, C]`` images (resized when ``image_size`` is given)
and batched afterwards.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import tensorflow as tf

from img2tfrecord import storage
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas import transformed as names

AUTOTUNE = tf.data.AUTOTUNE


def transform_output(path: str):
    """``tft.TFTransformOutput`` of an output directory; ValueError when it has no transform."""
    if not storage.exists(storage.join(path, output_files.TRANSFORM_FN_DIR)):
        raise ValueError(
            f"{path} has no {output_files.TRANSFORM_FN_DIR}/: transform=True needs the tf.Transform analysis of "
            f"convert, which was skipped (--no-analyze, no train split, or --sequence); re-run convert without "
            f"--no-analyze, or load with transform=False"
        )
    import tensorflow_transform as tft  # deferred: only transform=True needs tf.Transform

    return tft.TFTransformOutput(path)


def _result(parsed: Dict[str, tf.Tensor], transformed: Dict[str, tf.Tensor], as_dict: bool):
    if as_dict:
        out = dict(parsed)
        out.update(transformed)
        return out
    if names.LABEL not in transformed:  # an unlabeled dataset: images only
        return transformed[names.IMAGE]
    return transformed[names.IMAGE], transformed[names.LABEL]


def _resize(images: tf.Tensor, target) -> tf.Tensor:
    return images if target is None else tf.image.resize(images, target, method="bilinear")


def transformed_dataset(
    ds: tf.data.Dataset,
    plan,
    tft_output,
    batch_size: Optional[int],
    as_dict: bool,
    deterministic: bool,
) -> tf.data.Dataset:
    """Serialized records ``ds`` -> transformed ``(image, label)`` (or dicts), as ``load`` documents."""
    layer = tft_output.transform_features_layer()
    spec = tft_output.raw_feature_spec()
    channels = plan.channels
    target = plan.target_size

    def many(serialized):
        parsed = tf.io.parse_example(serialized, spec)
        out = dict(layer(parsed))
        out[names.IMAGE] = _resize(out[names.IMAGE], target)
        return _result(parsed, out, as_dict)

    def one(serialized):
        parsed = tf.io.parse_single_example(serialized, spec)
        out = layer({key: value[tf.newaxis] for key, value in parsed.items()})
        image = out[names.IMAGE]
        if isinstance(image, tf.RaggedTensor):  # one image: to_tensor() pads nothing
            image = image.to_tensor()
        image = image[0]
        image.set_shape([*(plan.stored_size or (None, None)), channels])
        single: Dict[str, Any] = {names.IMAGE: _resize(image, target)}
        if names.LABEL in out:
            single[names.LABEL] = out[names.LABEL][0]
        return _result(parsed, single, as_dict)

    if plan.stored_size is not None and batch_size is not None:
        return ds.batch(batch_size).map(many, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    ds = ds.map(one, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    return ds if batch_size is None else ds.batch(batch_size)
