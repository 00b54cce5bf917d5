"""Read a converted output directory as a ``tf.data.Dataset`` ready for training.

    import img2tfrecord
    ds = img2tfrecord.load("gs://bucket/out", split="train", batch_size=64)
    model.fit(ds, epochs=10)

Everything the reader needs comes from ``dataset.json``: the shard list,
their compression, the feature spec, the class names and the stored image
size and channel count. ``--format raw`` records (uint8 pixels) are
reshaped with their height/width/channels features; an unlabeled dataset
(a manifest without labels) yields images only; a ``--sequence`` dataset
is read with ``load(..., sequence=True)``; a detection dataset yields its
boxes and classes next to the images (``task``). The pipeline is fast by construction: shuffled
shard order, parallel interleaved shard reads, a record-level shuffle of
the serialized bytes, batched parsing with ``tf.io.parse_example``,
parallel decoding, and ``prefetch``.

The shards are read by TensorFlow's own filesystems where it opens the path
(local paths, ``gs://`` on real Cloud Storage), else (``s3://``, ``azfs://``,
an emulated ``gs://``) through the storage layer (:mod:`img2tfrecord.readers.tfdata_storage`).
``dataset.json`` is read through the storage layer like every other reader of an output. Records
are parsed and decoded by :mod:`img2tfrecord.readers.tfdata_decode`.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import tensorflow as tf

from img2tfrecord import shard_formats, storage
from img2tfrecord.readers import tfdata_storage
from img2tfrecord.readers.read_errors import read_finished_manifest
from img2tfrecord.readers.tfdata_decode import (
    LoadPlan,
    decode_encoded,  # noqa: F401  (re-exported: tfdata.decode_encoded)
    decode_raw,  # noqa: F401  (re-exported: tfdata.decode_raw)
    parse_batch,
    parse_clip,
    parse_single,
)
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas.dataset_json import Compression, DatasetManifest, Task

ImageSize = Union[int, Tuple[int, int], Sequence[int]]

AUTOTUNE = tf.data.AUTOTUNE
DEFAULT_SHUFFLE_BUFFER = 2048  # serialized records held for the record-level shuffle
MAX_PARALLEL_SHARDS = 16  # shards read at the same time
READ_BUFFER_BYTES = 4 << 20  # per open shard; large reads matter on GCS
_TF_COMPRESSION = {Compression.NONE: "", Compression.GZIP: "GZIP"}
_ENCODED_FORMATS = ("keep", keys.FORMAT_JPEG, keys.FORMAT_PNG)  # options.format values decode_image handles
TASK_AUTO = "auto"  # load's default task: the one dataset.json records


# ---------------------------------------------------------------------------
# Manifest and arguments.


# The manifest of a finished conversion; raises FileNotFoundError, IncompleteOutputError or DatasetJsonError.
read_manifest = read_finished_manifest


def _normalise_image_size(image_size: Optional[ImageSize]) -> Optional[Tuple[int, int]]:
    if image_size is None:
        return None
    if isinstance(image_size, bool):
        raise TypeError("image_size must be an int or a (height, width) pair")
    if isinstance(image_size, int):
        size = (image_size, image_size)
    else:
        try:
            values = tuple(int(v) for v in image_size)
        except TypeError:
            raise TypeError(f"image_size must be an int or a (height, width) pair, got {image_size!r}") from None
        if len(values) != 2:
            raise ValueError(f"image_size must be an int or a (height, width) pair, got {image_size!r}")
        size = (values[0], values[1])
    if size[0] <= 0 or size[1] <= 0:
        raise ValueError(f"image_size must be positive, got {image_size!r}")
    return size


def _stored_size(doc: DatasetManifest) -> Optional[Tuple[int, int]]:
    """(height, width) of every stored image, or None when sizes vary.

    ``options.image_size`` is ``[width, height]`` (the CLI's WxH); the writer
    gives every image exactly that size for each resize mode.
    """
    size = doc.image_size
    if size is None:
        return None
    width, height = size
    return height, width


def _decoder(doc: DatasetManifest) -> str:
    fmt = doc.image_format
    if fmt in _ENCODED_FORMATS:
        return "encoded"
    if fmt == keys.FORMAT_RAW:
        return "raw"
    return "by_record"


def _check_file_format(path: str, doc: DatasetManifest) -> None:
    """ValueError naming the reader to use for shards that ``tf.data`` does not read."""
    own = shard_formats.adapter(doc.file_format)
    if not own.tf_data_reads:
        raise ValueError(
            f"{path} holds {own.title} shards (convert --file-format {own.name}), which tf.data does not read: "
            f"{own.reader_hint}"
        )


def _task(path: str, doc: DatasetManifest, task: str) -> str:
    """The task ``load`` reads ``path`` as: ``task``, or dataset.json's for ``"auto"``; ValueError when they differ."""
    recorded = doc.task.value
    choices = (TASK_AUTO, Task.CLASSIFICATION.value, Task.DETECTION.value)
    if task not in choices:
        raise ValueError(f"task must be one of {', '.join(map(repr, choices))}, got {task!r}")
    if task != TASK_AUTO and task != recorded:
        raise ValueError(
            f"{path} is a {recorded} output (dataset.json task {recorded!r}): task={task!r} cannot read it; "
            f"pass task={recorded!r} or leave the default task={TASK_AUTO!r}"
        )
    return recorded


def _plan(
    path: str,
    doc: DatasetManifest,
    split: str,
    batch_size: Optional[int],
    image_size: Optional[ImageSize],
    detection: bool = False,
    pad_boxes: bool = False,
) -> LoadPlan:
    splits = doc.splits
    if split not in splits:
        available = ", ".join(sorted(splits)) or "none"
        raise ValueError(f"unknown split {split!r} in {path}; available splits: {available}")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0):
        raise ValueError(f"batch_size must be a positive int or None, got {batch_size!r}")
    target = _normalise_image_size(image_size)
    stored = _stored_size(doc)
    if target is None and stored is None and batch_size is not None:
        raise ValueError(
            f"the images of {path} have different sizes (it was converted without --image-size), "
            f"so they cannot be batched as they are: pass image_size=N or image_size=(height, width) "
            f"to resize them, or batch_size=None to get single images of their stored sizes"
        )
    if target == stored:
        target = None
    shards = [s for s in splits[split].shards if s.num_records > 0]
    withdrawn = doc.withdrawn_by_file()
    return LoadPlan(
        files=[storage.join(path, s.file) for s in shards],
        compression_type=_TF_COMPRESSION[doc.compression],
        spec=keys.feature_spec(doc.spec),
        channels=doc.channels or 3,
        stored_size=stored,
        target_size=target,
        decoder=_decoder(doc),
        num_records=doc.live_records(split),
        detection=detection,
        pad_boxes=pad_boxes,
        withdrawn=tuple(f"{storage.join(path, s.file)}#{i}" for s in shards for i in sorted(withdrawn.get(s.file, ()))),
    )


# ---------------------------------------------------------------------------
# The pipeline.


def _withdrawn_table(withdrawn: Sequence[str]) -> Optional[tf.lookup.StaticHashTable]:
    """ "<file>#<index>" -> 1 for the records --accept-changes withdrew (None when there are none)."""
    if not withdrawn:
        return None
    keys_ = tf.constant(list(withdrawn), dtype=tf.string)
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(keys_, tf.ones_like(keys_, dtype=tf.int64)), default_value=0
    )


def _records(plan: LoadPlan, shuffle: bool, seed: Optional[int], deterministic: bool) -> tf.data.Dataset:
    files = tf.data.Dataset.from_tensor_slices(tf.constant(plan.files, dtype=tf.string))
    if shuffle and len(plan.files) > 1:
        files = files.shuffle(len(plan.files), seed=seed, reshuffle_each_iteration=True)
    compression_type = plan.compression_type
    cycle_length = max(1, min(len(plan.files), MAX_PARALLEL_SHARDS))
    if plan.files and not tfdata_storage.tensorflow_opens(plan.files[0]):
        return files.interleave(
            tfdata_storage.ShardReader(compression_type, plan.withdrawn),
            cycle_length=cycle_length,
            block_length=1,
            num_parallel_calls=AUTOTUNE,
            deterministic=deterministic,
        )
    withdrawn = _withdrawn_table(plan.withdrawn)

    def shard(f: tf.Tensor) -> tf.data.Dataset:
        records_ = tf.data.TFRecordDataset(f, compression_type=compression_type, buffer_size=READ_BUFFER_BYTES)
        if withdrawn is None:
            return records_
        live = records_.enumerate().filter(
            lambda i, _: tf.equal(withdrawn.lookup(tf.strings.join([f, "#", tf.strings.as_string(i)])), 0)
        )
        return live.map(lambda _, record: record)

    return files.interleave(
        shard,
        cycle_length=cycle_length,
        block_length=1,
        num_parallel_calls=AUTOTUNE,
        deterministic=deterministic,
    )


def load(
    path: str,
    split: str = "train",
    batch_size: Optional[int] = 32,
    image_size: Optional[ImageSize] = None,
    shuffle: bool = True,
    shuffle_buffer: Optional[int] = None,
    repeat: bool = False,
    seed: Optional[int] = None,
    as_dict: bool = False,
    deterministic: bool = False,
    sequence: bool = False,
    pad_frames: bool = False,
    transform: bool = False,
    task: str = TASK_AUTO,
    pad_boxes: bool = False,
) -> tf.data.Dataset:
    """A ``tf.data.Dataset`` over one split of an ``img2tfrecord convert`` output directory.

    Args:
      path: the output directory, holding ``dataset.json`` and ``_SUCCESS``:
        a local folder, ``gs://``, ``s3://``, ``azfs://`` or any path Beam's
        filesystems open (those TensorFlow cannot open are read through them).
      split: a split name listed in ``dataset.json``.
      batch_size: examples per batch (the last batch may be smaller); None
        yields single examples, which may then have different sizes.
      image_size: resize every image to this size: an int N for N x N, or a
        ``(height, width)`` pair -- note the CLI's ``--image-size WxH`` is
        width first. Resizing is bilinear and does not keep the aspect ratio
        (as Keras' ``image_dataset_from_directory``). None keeps the stored
        size; that requires a dataset converted with ``--image-size`` unless
        ``batch_size`` is None.
      shuffle: shuffle the shard order and, through a buffer of
        ``shuffle_buffer`` serialized records, the examples; both are
        reshuffled every epoch.
      shuffle_buffer: records in the shuffle buffer; default
        ``min(2048, examples in the split)``.
      repeat: repeat forever (batches then run across epoch boundaries).
      seed: seed of both shuffles. Same seed and ``deterministic=True`` give
        the same order every run.
      as_dict: yield a dict of every parsed feature (keys from
        ``schemas.features``) plus the decoded image under
        ``schemas.features.DECODED_IMAGE``, instead of ``(images, labels)``.
      deterministic: keep the parallel reads and decodes in a fixed order
        (slower); with False, whichever shard or batch is ready first goes first.
      sequence: read a ``convert --sequence`` dataset (one
        ``tf.train.SequenceExample`` per clip); required for those, refused
        for image datasets.
      pad_frames: with ``sequence`` and batching, zero-pad every clip of a
        batch to its longest clip (dense frames) instead of a RaggedTensor.
      transform: pass the records through the tf.Transform graph that
        ``convert`` exported (``TFTransformOutput(path).transform_features_layer()``,
        see ``img2tfrecord/readers/transformed.py``): images come out
        normalised with the train split's per-channel mean and standard
        deviation (``dataset.json`` ``statistics``) instead of in [0, 1],
        labels from the ``label`` vocabulary; ``as_dict`` adds the
        transformed ``image`` and ``label``. ValueError when the directory
        has no ``transform_fn/`` (converted with ``--no-analyze``).
      task: ``"auto"`` (the task ``dataset.json`` records), ``"classification"``
        or ``"detection"``; a task other than the recorded one is a ValueError.
      pad_boxes: detection with batching: zero-pad every object list of a
        batch to its image with the most boxes (dense; class id 0, which no
        class has, marks padding) instead of RaggedTensors.

    Returns:
      ``(images, labels)`` with images float32 ``[batch, H, W, C]`` in
      [0, 1] (C is the converted channel count, 1 or 3) and labels int64
      ``[batch]`` (ids into ``dataset.json``'s ``labels``); without batching
      the leading dimension is absent. An unlabeled dataset
      (``"labeled": false`` in ``dataset.json``) yields ``images`` alone.

      With ``sequence=True``: ``((frames, lengths), labels)`` -- frames
      float32 in [0, 1], a RaggedTensor ``[batch, (frames), H, W, C]``
      (dense ``[batch, max frames, H, W, C]`` with ``pad_frames``), lengths
      int64 ``[batch]`` (frames per clip); unbatched, frames are
      ``[frames, H, W, C]`` and the length a scalar. Unlabeled: ``(frames,
      lengths)``. ``as_dict`` gives the context features plus
      ``schemas.features.DECODED_FRAMES`` and ``FRAME_COUNT``.

      Detection: ``(images, targets)``, images as above, targets a dict of
      ``boxes`` float32 ``[batch, (N), 4]``, each row ``(ymin, xmin, ymax,
      xmax)`` as fractions of the image (the TF Object Detection API's order;
      resizing with ``image_size`` leaves them exact), ``classes`` int64
      ``[batch, (N)]`` (1-based ids of ``label_map.pbtxt``), ``class_texts``
      string ``[batch, (N)]`` and ``num_boxes`` int64 ``[batch]``. ``(N)`` is
      ragged (RaggedTensors), or the batch's most boxes with ``pad_boxes``;
      unbatched, the lists are dense ``[N]``. ``as_dict`` gives every record
      feature (object lists in the same form) plus ``image``, ``boxes`` and
      ``num_boxes``.

    Raises:
      FileNotFoundError: ``path`` or its ``dataset.json`` does not exist.
      ValueError: the shards are ArrayRecord or WebDataset files (the message
        names their readers), the conversion is incomplete (no ``_SUCCESS``, whether or
        not ``dataset.json`` is there; the message names the folder), ``split``
        is unknown (the message lists the available ones), or the images
        have different sizes and neither ``image_size`` nor
        ``batch_size=None`` was given.
    """
    doc = read_manifest(path)
    _check_file_format(path, doc)
    detection = _task(path, doc, task) == Task.DETECTION.value
    if pad_boxes and not detection:
        raise ValueError(f"pad_boxes=True reads detection outputs; {path} is a classification output")
    if detection and (sequence or pad_frames or transform):
        raise ValueError(
            f"{path} is a detection output: sequence, pad_frames and transform apply to classification outputs"
        )
    is_sequence = doc.is_sequence
    if is_sequence != bool(sequence):
        raise ValueError(
            f"{path} holds {doc.record_type.value} records: "
            + (
                "pass sequence=True to read its clips"
                if is_sequence
                else "sequence=True reads only datasets converted with --sequence"
            )
        )
    plan = _plan(path, doc, split, batch_size, image_size, detection, bool(pad_boxes))
    if shuffle_buffer is not None and (isinstance(shuffle_buffer, bool) or int(shuffle_buffer) <= 0):
        raise ValueError(f"shuffle_buffer must be a positive int, got {shuffle_buffer!r}")
    ds = _records(plan, shuffle, seed, deterministic)
    # The manifest knows the count: len(ds) works and Keras sees where an epoch ends.
    # A shard holding other than its listed count fails the iteration with a clear error.
    ds = ds.apply(tf.data.experimental.assert_cardinality(plan.num_records))
    if shuffle:
        buffer = shuffle_buffer or max(1, min(DEFAULT_SHUFFLE_BUFFER, plan.num_records))
        ds = ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    if transform:
        from img2tfrecord.readers import transformed as transformed_reader  # deferred: imports tf.Transform

        if sequence:
            raise ValueError("transform=True applies to image datasets; --sequence datasets have no transform")
        tft_output = transformed_reader.transform_output(path)
        return transformed_reader.transformed_dataset(
            ds, plan, tft_output, batch_size, as_dict, deterministic
        ).prefetch(AUTOTUNE)
    if sequence:
        return _sequence_batches(ds, plan, batch_size, as_dict, deterministic, pad_frames).prefetch(AUTOTUNE)
    if batch_size is None:
        ds = ds.map(
            lambda record: parse_single(plan, record, as_dict), num_parallel_calls=AUTOTUNE, deterministic=deterministic
        )
    else:
        ds = ds.batch(batch_size).map(
            lambda records: parse_batch(plan, records, as_dict),
            num_parallel_calls=AUTOTUNE,
            deterministic=deterministic,
        )
    return ds.prefetch(AUTOTUNE)


def _sequence_batches(ds, plan: LoadPlan, batch_size: Optional[int], as_dict: bool, deterministic: bool, pad: bool):
    ds = ds.map(
        lambda record: parse_clip(plan, record, as_dict), num_parallel_calls=AUTOTUNE, deterministic=deterministic
    )
    if batch_size is None:
        return ds
    return ds.padded_batch(batch_size) if pad else ds.ragged_batch(batch_size)


__all__ = ["TASK_AUTO", "load", "read_manifest"]
