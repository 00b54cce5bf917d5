"""Shard records as ``tf.data`` for paths TensorFlow's own filesystems cannot open (``s3://``, ``azfs://``, ...).

TensorFlow 2.21 registers local files and ``gs://`` only (``tensorflow-io``'s S3 and Azure
filesystems have no build for it), and its ``gs://`` ignores ``STORAGE_EMULATOR_HOST``. For those
paths ``load`` reads each shard through :mod:`img2tfrecord.storage` (Beam's filesystems, the
run's settings and the standard environment) with :mod:`img2tfrecord.tfrecord_codec`'s sequential
reader, one Python generator per shard, every record's checksums checked as TensorFlow's
``TFRecordDataset`` checks them. The records then go through the same shuffle, parsing and decoding.
"""

from __future__ import annotations

import os
from typing import Dict, FrozenSet, Iterator, Sequence

import tensorflow as tf

from img2tfrecord import storage, tfrecord_codec
from img2tfrecord.readers import records
from img2tfrecord.readers.read_errors import from_record_error
from img2tfrecord.schemas import output_files

# TensorFlow's compression_type -> the output's compression name, as the storage readers take it.
_COMPRESSION = {"": output_files.COMPRESSION_NONE, "GZIP": output_files.COMPRESSION_GZIP}
_RECORD = tf.TensorSpec(shape=(), dtype=tf.string)


def tensorflow_opens(path: str) -> bool:
    """True when ``tf.data`` reads ``path`` with TensorFlow's own filesystems: a local path, or a scheme
    TensorFlow has registered (``gs://`` unless an emulator is named by ``STORAGE_EMULATOR_HOST``)."""
    if not storage.is_remote(path):
        return True
    scheme = path.split("://", 1)[0]
    if scheme == "gs" and os.environ.get("STORAGE_EMULATOR_HOST"):
        return False
    return scheme in tf.io.gfile.get_registered_schemes()


def _withdrawn_by_file(withdrawn: Sequence[str]) -> Dict[str, FrozenSet[int]]:
    found: Dict[str, set] = {}
    for entry in withdrawn:
        path, index = entry.rsplit("#", 1)
        found.setdefault(path, set()).add(int(index))
    return {path: frozenset(indices) for path, indices in found.items()}


class ShardReader:
    """``reader(path_tensor)``: a ``tf.data.Dataset`` of one shard's serialized records, in order, less the
    withdrawn ones (``"<file>#<index>"``); a framing or checksum error fails the iteration with the reader's
    message. ``compression_type`` is TensorFlow's (``""`` or ``"GZIP"``)."""

    def __init__(self, compression_type: str, withdrawn: Sequence[str] = ()):
        self._compression = _COMPRESSION[compression_type]
        self._withdrawn = _withdrawn_by_file(withdrawn)

    def records(self, path: bytes) -> Iterator[bytes]:
        shard = path.decode("utf-8")
        skip = self._withdrawn.get(shard, frozenset())
        try:
            for index, _, data in records.iter_records(shard, self._compression):
                if index not in skip:
                    yield data
        except tfrecord_codec.RecordError as e:
            raise from_record_error(shard, e) from None

    def __call__(self, path: tf.Tensor) -> tf.data.Dataset:
        return tf.data.Dataset.from_generator(self.records, args=(path,), output_signature=_RECORD)


__all__ = ["ShardReader", "tensorflow_opens"]
