"""What a finished shard step leaves in the run folder for a resumed run: its done file and its staged index.

A done file (``<run>/done/<split>-<shard>.json``) holds the shard's
``ShardResult``, its error rows and its analysis rows (base64), so a
``--resume``d run replays the shard instead of converting it again. Both
files are written through a temporary name: never seen half written.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from img2tfrecord.model import CommittedShard, ShardResult
from img2tfrecord.schemas import output_files


def done_path(run_dir: str, split: str, shard: int) -> str:
    return FileSystems.join(run_dir, output_files.RUN_DONE_DIR, f"{split}-{shard:05d}.json")


def index_temp_path(run_dir: str, split: str, shard: int) -> str:
    """Where a shard's index waits for the commit (then ``index/<final name>.idx``)."""
    return FileSystems.join(run_dir, output_files.INDEX_DIR, f"{split}-{shard:05d}.idx")


def write_whole(path: str, data: bytes) -> None:
    """Write ``path`` through a temporary name, so it is never seen half written."""
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with FileSystems.create(tmp) as f:
        f.write(data)
    FileSystems.rename([tmp], [path])


def read_whole(path: str) -> bytes:
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return f.read()


def done_json(result: ShardResult, errors: Sequence[Dict[str, str]], analysis: Sequence[bytes]) -> bytes:
    """The done file of a finished shard."""
    doc = {
        "result": {
            **result._asdict(),
            "class_counts": [list(c) for c in result.class_counts],
            "box_counts": [list(c) for c in result.box_counts],
            "dropped_boxes": [list(c) for c in result.dropped_boxes],
        },
        "errors": list(errors),
        "analysis": [base64.b64encode(row).decode("ascii") for row in analysis],
    }
    return json.dumps(doc, sort_keys=True).encode("utf-8")


def parse_done(data: bytes) -> Tuple[ShardResult, List[Dict[str, str]], List[bytes]]:
    """``(result, error rows, analysis rows)`` of a done file, as :func:`done_json` wrote them."""
    doc = json.loads(data.decode("utf-8"))
    fields = dict(doc["result"])
    for counts in ("class_counts", "box_counts", "dropped_boxes"):
        fields[counts] = tuple((name, n) for name, n in fields.get(counts, ()))
    return (
        ShardResult(**fields),
        list(doc["errors"]),
        [base64.b64decode(row) for row in doc["analysis"]],
    )


def wrong_size(
    folder: str, shards: Sequence[CommittedShard], missing_ok: bool = False
) -> Optional[Tuple[CommittedShard, str, Any]]:
    """``(shard, path, size found)`` of the first shard under ``folder`` whose size is not the one its writer wrote
    (size None: missing, unless ``missing_ok``); None when all are. One listing for all of them."""
    paths = [FileSystems.join(folder, c.file) for c in shards]
    sizes = {m.path: m.size_in_bytes for found in FileSystems.match(paths) for m in found.metadata_list}
    for c, path in zip(shards, paths):
        if sizes.get(path) != c.num_bytes and not (missing_ok and path not in sizes):
            return c, path, sizes.get(path)
    return None


def kept_shard_damage(path: str, result: ShardResult) -> Optional[str]:
    """Why the shard file ``path`` is not the one ``result`` recorded (its size, then its sha256), or None."""
    try:
        size = FileSystems.match([path])[0].metadata_list[0].size_in_bytes
        if size != result.num_bytes:
            return f"{size} bytes, but its writer wrote {result.num_bytes}"
        if result.sha256:
            digest = hashlib.sha256()
            with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
                for block in iter(lambda: f.read(1 << 22), b""):
                    digest.update(block)
            if digest.hexdigest() != result.sha256:
                return "its sha256 differs from the one its writer recorded"
    except Exception as e:  # pylint: disable=broad-except  # unreadable: as damaged as can be
        return f"cannot be read ({type(e).__name__}: {e})"
    return None


def index_damage(path: str, result: ShardResult) -> Optional[str]:
    """Why the index file ``path`` is not the one ``result``'s writer wrote (its sha256), or None."""
    if not result.index_sha256:
        return None
    try:
        if hashlib.sha256(read_whole(path)).hexdigest() != result.index_sha256:
            return "its index file differs from the one its writer wrote"
    except Exception as e:  # pylint: disable=broad-except  # unreadable: as damaged as can be
        return f"its index file cannot be read ({type(e).__name__}: {e})"
    return None
