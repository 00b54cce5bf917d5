"""img2tfrecord: image datasets to sharded TFRecord files with Apache Beam.

``img2tfrecord.convert(input, output, image_size=224, ...)`` converts as the ``convert``
command does and returns the written manifest; ``plan(...)`` is ``convert --plan``
(:mod:`img2tfrecord.api`); :class:`ConvertConfig` is the checked options value both make.
``read_manifest(path)`` reads a finished output's ``dataset.json`` as a :class:`DatasetManifest`;
``load(path, split=...)`` reads its records as a ``tf.data.Dataset`` (:mod:`img2tfrecord.readers.tfdata`). Each is
imported on first use: ``import img2tfrecord`` imports neither Beam nor TensorFlow.
"""

from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:  # what a type checker and an editor see; at run time each name is imported on first use
    from img2tfrecord.api import convert as convert
    from img2tfrecord.api import plan as plan
    from img2tfrecord.errors import ConversionFailed as ConversionFailed
    from img2tfrecord.errors import ErrorBudgetExceeded as ErrorBudgetExceeded
    from img2tfrecord.errors import UsageError as UsageError
    from img2tfrecord.pipeline.config import ConvertConfig as ConvertConfig
    from img2tfrecord.readers.read_errors import read_finished_manifest as read_manifest  # noqa: F401
    from img2tfrecord.readers.tfdata import load as load
    from img2tfrecord.schemas.dataset_json import DatasetManifest as DatasetManifest

# name -> its module, or "module:attribute" where the module names it otherwise.
_LAZY = {
    "load": "img2tfrecord.readers.tfdata",
    "convert": "img2tfrecord.api",
    "plan": "img2tfrecord.api",
    "read_manifest": "img2tfrecord.readers.read_errors:read_finished_manifest",
    "DatasetManifest": "img2tfrecord.schemas.dataset_json",
    "ConvertConfig": "img2tfrecord.pipeline.config",
    "UsageError": "img2tfrecord.errors",
    "ConversionFailed": "img2tfrecord.errors",
    "ErrorBudgetExceeded": "img2tfrecord.errors",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name):
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'img2tfrecord' has no attribute {name!r}")
    import importlib

    module_name, _, attribute = where.partition(":")
    value = getattr(importlib.import_module(module_name), attribute or name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
