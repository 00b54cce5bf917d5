"""img2tfrecord: image datasets to sharded TFRecord files with Apache Beam.

``img2tfrecord.load(path, split=...)`` reads a converted directory as a
``tf.data.Dataset`` (see :mod:`img2tfrecord.readers.tfdata`). It is imported on
first use, so ``import img2tfrecord`` does not import TensorFlow.
"""

__version__ = "0.1.0"

_LAZY = {"load": "img2tfrecord.readers.tfdata"}

__all__ = ["__version__", "load"]


def __getattr__(name):
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'img2tfrecord' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
