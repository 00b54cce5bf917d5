"""A split's shards and index files for DALI's TFRecord reader, without the records ``--accept-changes`` withdrew.

DALI reads each record at the offset its index file lists, so an index that leaves a record out
skips it. The output's own index files list every record a shard holds; for a shard with withdrawn
records, :func:`dali_inputs` writes an index of its live records into a folder of the caller's.
TensorFlow-free.
"""

from __future__ import annotations

import os
import tempfile
from typing import List, Optional, Tuple

from img2tfrecord import shard_formats, storage, tfrecord_codec
from img2tfrecord.readers.split_shards import read_split, shard_offsets
from img2tfrecord.schemas import output_files


def dali_inputs(path: str, split: str = "train", index_dir: Optional[str] = None) -> Tuple[List[str], List[str]]:
    """``(shard paths, index paths)`` to give ``fn.readers.tfrecord(path=..., index_path=...)`` for ``split``.

    Shards with no live record are left out. A shard with withdrawn records gets an index of its
    live records, written into ``index_dir`` (a new temporary folder when None, left for the caller);
    the others keep the output's ``index/<shard>.idx``. Raises ValueError for a compressed output
    (DALI reads uncompressed TFRecord files), for another file format, and what :func:`read_split` raises.
    """
    info = read_split(path, split)
    if not shard_formats.adapter(info.file_format).tf_data_reads:
        raise ValueError(
            f"{path} holds {info.file_format} shards: these index files are for DALI's TFRecord reader "
            f"(convert --file-format {output_files.DEFAULT_FILE_FORMAT})"
        )
    if info.compression != "none":
        raise ValueError(
            f"{path} is {info.compression}-compressed: DALI reads uncompressed shards (--compression none)"
        )
    shards: List[str] = []
    indexes: List[str] = []
    for shard in info.shards:
        if shard.live_records == 0:
            continue
        index = shard.index_file()
        if shard.withdrawn or index is None or not storage.exists(index):
            if index_dir is None:
                index_dir = tempfile.mkdtemp(prefix="img2tfrecord-dali-")
            os.makedirs(index_dir, exist_ok=True)
            live = [entry for i, entry in enumerate(shard_offsets(shard)) if i not in shard.withdrawn]
            index = os.path.join(index_dir, os.path.basename(shard.path) + ".idx")
            with open(index, "w", encoding="ascii") as f:
                f.write(tfrecord_codec.index_text(live))
        shards.append(shard.path)
        indexes.append(index)
    return shards, indexes


__all__ = ["dali_inputs"]
