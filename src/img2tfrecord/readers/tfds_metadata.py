"""Make an output directory loadable with ``tfds.builder_from_directory``, without TensorFlow Datasets.

    reason = write_tfds_metadata("out/")  # None: TFDS reads it
    builder = tfds.builder_from_directory("out/")

The files and their content are :mod:`img2tfrecord.schemas.tfds_layout`'s;
this module only writes them.
"""

from __future__ import annotations

from typing import Callable, Optional

from img2tfrecord import storage
from img2tfrecord.readers import records
from img2tfrecord.schemas import tfds_layout
from img2tfrecord.schemas.dataset_json import DatasetManifest


def _write_file(path: str, text: str) -> None:
    """Write ``text`` to ``path`` on any Beam filesystem (local: through a temporary file renamed into place)."""
    storage.write_bytes(path, text.encode("utf-8"))


def write_tfds_metadata(
    output_dir: str,
    manifest_doc: Optional[DatasetManifest] = None,
    *,
    write: Callable[[str, str], None] = _write_file,
) -> Optional[str]:
    """Write TFDS' ``dataset_info.json``, ``features.json`` and label names file into ``output_dir``.

    ``manifest_doc`` is the output's ``dataset.json`` (read from
    ``output_dir`` when None); ``write(path, text)`` writes one file. Returns
    None when TFDS can read the output, else the reason it cannot (then the
    files make a TFDS load fail with that reason).
    """
    doc = records.read_manifest(output_dir) if manifest_doc is None else manifest_doc
    for name, text in tfds_layout.metadata_files(doc).items():
        write(storage.join(output_dir, name), text)
    return tfds_layout.unsupported_reason(doc)


__all__ = ["write_tfds_metadata"]
