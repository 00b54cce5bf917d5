"""One read of one shard, in a worker process: the facts of every record and a seeded thumbnail sample.

:func:`scan_shard` and :func:`fetch_thumbnails` are the functions a process
pool runs; their arguments and results are small picklable values. A shard
that cannot be read to its end gives the records before the break and a
problem naming where it broke, never an exception.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import heapq
import io
import time
import warnings
from typing import TYPE_CHECKING, Any, Dict, FrozenSet, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from img2tfrecord.readers import records
from img2tfrecord.report import perceptual_hash
from img2tfrecord.schemas import features as keys

if TYPE_CHECKING:
    import concurrent.futures

DEFAULT_THUMBNAIL_PX = 96
_HASH_DECODE_PX = 16  # JPEGs are decoded at the smallest DCT scale at least this big for the hash
_THUMBNAIL_QUALITY = 75
_WANTED = (
    keys.IMAGE_ENCODED,
    keys.IMAGE_FORMAT,
    keys.IMAGE_HEIGHT,
    keys.IMAGE_WIDTH,
    keys.IMAGE_CHANNELS,
    keys.CLASS_TEXT,
    keys.FILENAME,
    keys.KEY_SHA256,
)
UNLABELED = ""  # the class name of every record of an unlabeled dataset


class RecordFacts(NamedTuple):
    """What the report keeps of one record; ``dhash`` is None when its image does not decode."""

    record_index: int  # the record's number in its shard
    offset: int
    filename: str
    class_name: str
    sha256: str
    dhash: Optional[int]
    width: int
    height: int


class Thumbnail(NamedTuple):
    """A sampled record, ``sample_key`` ordering the seeded sample; ``data_uri`` its picture, or "" when
    it is still to be drawn (see :func:`fetch_thumbnails`)."""

    sample_key: int
    split: str
    class_name: str
    filename: str
    data_uri: str
    shard: str
    record_index: int
    offset: int


@dataclasses.dataclass(frozen=True)
class ShardTask:
    directory: str
    file: str
    split: str
    compression: str
    spec: Mapping[str, Mapping[str, Any]]  # the scalar features of dataset.json's feature_spec
    seed: int
    thumbnails_per_class: int
    thumbnail_px: int = DEFAULT_THUMBNAIL_PX
    # Draw the shard's sample candidates here; otherwise they are drawn later, once the
    # sample over all shards is known, from their offsets (cheap only without compression).
    draw_samples: bool = True
    withdrawn: FrozenSet[int] = frozenset()  # records --accept-changes withdrew: framed, not scanned


@dataclasses.dataclass
class ShardScan:
    """The result of reading one shard. ``complete`` when every record was framed, parsed and decoded."""

    file: str
    split: str
    records: List[RecordFacts]
    samples: List[Thumbnail]
    framed: int = 0  # records whose framing was read, parsed or not
    file_bytes: Optional[int] = None
    problems: List[str] = dataclasses.field(default_factory=list)
    read_to_end: bool = True
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        return self.read_to_end and not self.problems


def scalar_spec(spec_json: Mapping[str, Mapping[str, Any]]) -> Dict[str, Mapping[str, Any]]:
    """The features of a ``feature_spec`` block that the report reads."""
    context = keys.split_spec_json(dict(spec_json))[0]
    return {k: context[k] for k in _WANTED if k in context}


def sample_key(seed: int, filename: str) -> int:
    """The seeded order of the thumbnail sample: the records with the smallest keys are shown."""
    digest = hashlib.blake2b(f"{seed}\0{filename}".encode("utf-8", "surrogateescape"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def decode_image(values: Mapping[str, Any], min_px: int):
    """The record's image as a PIL image, JPEGs decoded at the smallest scale at least ``min_px`` wide and high."""
    from PIL import Image

    fmt = records.decode_text(values[keys.IMAGE_FORMAT])
    data = values[keys.IMAGE_ENCODED]
    if fmt == keys.FORMAT_RAW:
        w, h, c = int(values[keys.IMAGE_WIDTH]), int(values[keys.IMAGE_HEIGHT]), int(values[keys.IMAGE_CHANNELS])
        return Image.frombytes({1: "L", 3: "RGB"}[c], (w, h), data)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        image = Image.open(io.BytesIO(data))
        if image.format == "JPEG":
            image.draft(image.mode, (min_px, min_px))
        image.load()
    return image


def thumbnail_uri(image, px: int) -> str:
    """A JPEG of at most ``px`` x ``px`` (aspect kept) as a ``data:image/jpeg;base64`` URI."""
    from PIL import Image

    thumb = image.convert("RGB")
    thumb.thumbnail((px, px), Image.Resampling.BILINEAR)
    buf = io.BytesIO()
    thumb.save(buf, format="JPEG", quality=_THUMBNAIL_QUALITY)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _text(values: Mapping[str, Any], key: str, default: str = "") -> str:
    return records.decode_text(values[key]) if key in values else default


def scan_shard(task: ShardTask) -> ShardScan:
    """Read every record of one shard once: facts per record, and thumbnails of the records with the
    ``thumbnails_per_class`` smallest sample keys of each class (drawn when the shard has been read)."""
    started = time.perf_counter()
    scan = ShardScan(task.file, task.split, [], [])
    path = records.join(task.directory, task.file)
    # class -> max-heap (negated keys) of the sample so far, with the features to draw it from
    heaps: Dict[str, List[Tuple[int, str, int, int, Mapping[str, Any]]]] = {}
    dhash_of: Dict[str, Optional[int]] = {}  # sha256 -> dhash, so identical bytes are decoded once
    try:
        scan.file_bytes = records.file_size(path)
        for record in records.shard_records(path, task.compression):
            scan.framed += 1
            if not record.data_crc_ok:
                scan.problems.append(f"record {record.index}: data checksum mismatch (corrupt record data)")
                continue
            if record.index in task.withdrawn:
                continue
            try:
                values = records.parse_example(record.data, task.spec)
            except records.ExampleError as e:
                scan.problems.append(f"record {record.index}: {e}")
                continue
            filename = _text(values, keys.FILENAME)
            class_name = _text(values, keys.CLASS_TEXT, UNLABELED)
            sha = _text(values, keys.KEY_SHA256) or hashlib.sha256(values[keys.IMAGE_ENCODED]).hexdigest()
            key = sample_key(task.seed, filename)
            heap = heaps.setdefault(class_name, [])
            if task.thumbnails_per_class > 0 and (len(heap) < task.thumbnails_per_class or -heap[0][0] > key):
                entry = (-key, filename, record.index, record.offset, values)
                if len(heap) < task.thumbnails_per_class:
                    heapq.heappush(heap, entry)
                else:
                    heapq.heappushpop(heap, entry)
            if sha not in dhash_of:
                try:
                    dhash_of[sha] = perceptual_hash.difference_hash(decode_image(values, _HASH_DECODE_PX))
                except Exception as e:  # any decoder failure is a finding about the data
                    dhash_of[sha] = None
                    scan.problems.append(
                        f"record {record.index} ({filename}): image does not decode: {type(e).__name__}: {e}"
                    )
            scan.records.append(
                RecordFacts(
                    record.index,
                    record.offset,
                    filename,
                    class_name,
                    sha,
                    dhash_of.get(sha),
                    int(values.get(keys.IMAGE_WIDTH, 0)),
                    int(values.get(keys.IMAGE_HEIGHT, 0)),
                )
            )
    except records.RecordError as e:
        scan.read_to_end = False
        scan.problems.append(f"{e}; the rest of the shard cannot be read")
    except FileNotFoundError:
        scan.read_to_end = False
        scan.problems.append("shard file missing")
    except Exception as e:  # unreadable file (permissions, network): a finding, never a traceback
        scan.read_to_end = False
        scan.problems.append(f"cannot read shard: {type(e).__name__}: {e}")
    for class_name, heap in heaps.items():
        for negated, filename, index, offset, sampled in sorted(heap, key=lambda e: (-e[0], e[1], e[2])):
            uri = ""
            if task.draw_samples:
                try:
                    uri = thumbnail_uri(decode_image(sampled, task.thumbnail_px), task.thumbnail_px)
                except Exception:  # reported above, when its hash was computed
                    continue
            scan.samples.append(Thumbnail(-negated, task.split, class_name, filename, uri, task.file, index, offset))
    scan.seconds = time.perf_counter() - started
    return scan


@dataclasses.dataclass(frozen=True)
class FetchTask:
    """Records of one shard to draw as thumbnails: ``(index, offset)`` pairs."""

    directory: str
    file: str
    compression: str
    spec: Mapping[str, Mapping[str, Any]]
    wanted: Tuple[Tuple[int, int], ...]
    thumbnail_px: int = DEFAULT_THUMBNAIL_PX


def fetch_thumbnails(task: FetchTask) -> Dict[int, str]:
    """``{record index: data URI}`` for the wanted records that read and decode; others are left out.

    Read by :func:`records.records_at`: at the records' offsets where the shard's format allows,
    else from its start to the last wanted record.
    """
    out: Dict[int, str] = {}
    path = records.join(task.directory, task.file)

    def draw(index: int, data: bytes) -> None:
        try:
            out[index] = thumbnail_uri(
                decode_image(records.parse_example(data, task.spec), task.thumbnail_px), task.thumbnail_px
            )
        except Exception:  # the scan already reported this record
            pass

    try:
        for index, data in records.records_at(path, task.compression, task.wanted):
            draw(index, data)
    except Exception:  # the scan already reported an unreadable shard; draw what could be read
        pass
    return out


class Workers:
    """A pool of ``processes`` spawned processes, started on the first ``map`` that can use it; a context manager."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._pool: Optional[concurrent.futures.ProcessPoolExecutor] = None

    def map(self, function, tasks: Sequence[Any]) -> List[Any]:
        """``[function(task) for task in tasks]``, in the pool when there are several tasks and processes."""
        if self.processes <= 1 or len(tasks) <= 1:
            return [function(task) for task in tasks]
        if self._pool is None:
            import concurrent.futures
            import multiprocessing

            self._pool = concurrent.futures.ProcessPoolExecutor(
                self.processes, mp_context=multiprocessing.get_context("spawn")
            )
        return list(self._pool.map(function, tasks))

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
