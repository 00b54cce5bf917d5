"""One read of one shard, in a worker process: the facts of every record and a seeded thumbnail sample.

:func:`scan_shard` and :func:`fetch_thumbnails` are the functions a process
pool runs; their arguments and results are small picklable values (a shard's
records come back as numpy columns, :class:`ShardColumns`). A shard that cannot
be read to its end gives the records before the break and a problem naming
where it broke, never an exception. Records are read through
:mod:`img2tfrecord.readers.records` only (``shard_records``, ``records_at``), whatever the file format.
"""

from __future__ import annotations

import array
import base64
import collections
import dataclasses
import hashlib
import heapq
import io
import time
import warnings
from typing import TYPE_CHECKING, Any, Dict, FrozenSet, List, Mapping, NamedTuple, Optional, Tuple

from img2tfrecord import faults, storage, tfrecord_codec
from img2tfrecord.readers import records
from img2tfrecord.report import perceptual_hash
from img2tfrecord.schemas import features as keys

if TYPE_CHECKING:
    import numpy as np

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


MAX_PROBLEMS_PER_SHARD = 20  # problems listed per shard; the rest are counted


class ShardColumns(NamedTuple):
    """What the report keeps of a shard's live records, one array entry per record (a few dozen bytes each).

    ``class_ids`` index ``class_names`` (this shard's own list); ``sha256`` holds
    raw 32-byte digests; ``dhash`` is meaningful where ``hashed`` (the image
    decoded); file names are ``names[name_ends[i-1]:name_ends[i]]`` (UTF-8 bytes).
    """

    record_index: np.ndarray  # int32
    offset: np.ndarray  # int64
    class_ids: np.ndarray  # int32
    sha256: np.ndarray  # (n, 32) uint8
    dhash: np.ndarray  # uint64
    hashed: np.ndarray  # bool
    names: bytes
    name_ends: np.ndarray  # int64
    class_names: Tuple[str, ...]

    def __len__(self) -> int:
        return len(self.record_index)


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
    candidates_per_class: int  # sample candidates kept per class: the records with the smallest sample keys
    thumbnail_px: int = DEFAULT_THUMBNAIL_PX
    # Draw the shard's sample candidates here; otherwise they are drawn later, once the
    # sample over all shards is known, from their offsets (cheap only without compression).
    draw_samples: bool = True
    withdrawn: FrozenSet[int] = frozenset()  # records --accept-changes withdrew: framed, not scanned


@dataclasses.dataclass
class ShardScan:
    """The result of reading one shard. ``complete`` when every record was framed, parsed and decoded.

    ``problems`` lists the first :data:`MAX_PROBLEMS_PER_SHARD`; ``problem_count`` counts them all.
    """

    file: str
    split: str
    columns: Optional[ShardColumns]  # None once the launching process has taken them
    samples: List[Thumbnail]
    records: int = 0  # live records read
    class_counts: Dict[str, int] = dataclasses.field(default_factory=dict)
    sizes: Dict[Tuple[int, int], int] = dataclasses.field(default_factory=dict)  # (width, height) -> records
    framed: int = 0  # records whose framing was read, parsed or not
    file_bytes: Optional[int] = None
    problems: List[str] = dataclasses.field(default_factory=list)
    problem_count: int = 0
    read_to_end: bool = True
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        return self.read_to_end and not self.problem_count

    def problem(self, text: str) -> None:
        self.problem_count += 1
        if len(self.problems) < MAX_PROBLEMS_PER_SHARD:
            self.problems.append(text)


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


def image_hash(values: Mapping[str, Any]) -> int:
    """The difference hash of the record's image decoded at the smallest DCT scale at least
    :data:`_HASH_DECODE_PX` wide and high (:func:`decode_image`), the JPEGs through :func:`_draft_jpeg`."""
    image = _draft_jpeg(values[keys.IMAGE_ENCODED], _HASH_DECODE_PX) if _is_jpeg(values) else None
    return perceptual_hash.difference_hash(image if image is not None else decode_image(values, _HASH_DECODE_PX))


def _is_jpeg(values: Mapping[str, Any]) -> bool:
    return records.decode_text(values[keys.IMAGE_FORMAT]) == keys.FORMAT_JPEG


def _draft_jpeg(data: bytes, min_px: int):
    """A YCbCr or grayscale JPEG decoded as Pillow's ``draft`` decodes it (the same 1/1, 1/2, 1/4 or 1/8 DCT
    scale, libjpeg-turbo's default DCT and upsampling), by simplejpeg: the same pixels, without Pillow's
    header parsing in Python. None for any other JPEG, or one simplejpeg refuses (Pillow decides then)."""
    import simplejpeg
    from PIL import Image

    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
        if colorspace not in ("YCbCr", "Gray"):
            return None
        ratio = min(width // min_px, height // min_px)
        scale = next((s for s in (8, 4, 2) if ratio >= s), 1)
        size = {"min_factor": scale, "min_height": -(-height // scale), "min_width": -(-width // scale)}
        if colorspace == "Gray":
            pixels = simplejpeg.decode_jpeg(data, colorspace="GRAY", **size)
            return Image.fromarray(pixels.reshape(pixels.shape[:2]), "L")
        return Image.fromarray(simplejpeg.decode_jpeg(data, colorspace="RGB", **size), "RGB")
    except Exception:  # simplejpeg's ValueError, or anything a damaged header triggers
        return None


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


def sha256_digest(values: Mapping[str, Any]) -> bytes:
    """The record's 32-byte content digest: its ``image/key/sha256`` (hex), else the SHA-256 of its image bytes.

    A key that is not 64 hex digits is hashed itself, so equal keys still make equal digests.
    """
    key = values.get(keys.KEY_SHA256)
    if not key:
        return hashlib.sha256(values[keys.IMAGE_ENCODED]).digest()
    if len(key) == 64:
        try:
            return bytes.fromhex(records.decode_text(key))
        except ValueError:
            pass
    return hashlib.sha256(key).digest()


class _ColumnsBuilder:
    """The columns of one shard, appended record by record into typed buffers (no Python object per record)."""

    def __init__(self) -> None:
        self.index = array.array("i")
        self.offset = array.array("q")
        self.class_ids = array.array("i")
        self.sha = bytearray()
        self.dhash = array.array("Q")
        self.hashed = bytearray()
        self.names = bytearray()
        self.name_ends = array.array("q")
        self.class_of: Dict[str, int] = {}

    def add(self, index: int, offset: int, class_name: str, sha: bytes, dhash: Optional[int], name: bytes) -> None:
        self.index.append(index)
        self.offset.append(offset)
        self.class_ids.append(self.class_of.setdefault(class_name, len(self.class_of)))
        self.sha += sha
        self.dhash.append(dhash or 0)
        self.hashed.append(dhash is not None)
        self.names += name
        self.name_ends.append(len(self.names))

    def build(self) -> ShardColumns:
        import numpy as np

        return ShardColumns(
            np.frombuffer(self.index, dtype=np.int32).copy(),
            np.frombuffer(self.offset, dtype=np.int64).copy(),
            np.frombuffer(self.class_ids, dtype=np.int32).copy(),
            np.frombuffer(bytes(self.sha), dtype=np.uint8).reshape(-1, 32),
            np.frombuffer(self.dhash, dtype=np.uint64).copy(),
            np.frombuffer(bytes(self.hashed), dtype=bool),
            bytes(self.names),
            np.frombuffer(self.name_ends, dtype=np.int64).copy(),
            tuple(self.class_of),
        )


def scan_shard(task: ShardTask) -> ShardScan:
    """Read every record of one shard once: its columns, counts per class and image size, and the
    ``candidates_per_class`` records of each class with the smallest sample keys (drawn when
    ``task.draw_samples``, once the shard has been read)."""
    faults.pause_at("scanning")  # test-only: stops here with IMG2TFRECORD_FAULT=pause:scanning
    faults.fail_at("scanning", task.file)  # test-only: none unless IMG2TFRECORD_FAULT is set
    started = time.perf_counter()
    built = _ColumnsBuilder()
    samples: List[Thumbnail] = []
    scan = ShardScan(task.file, task.split, None, samples)
    path = storage.join(task.directory, task.file)
    # class -> max-heap (negated keys) of the sample so far, with the features to draw it from
    heaps: Dict[str, List[Tuple[int, str, int, int, Mapping[str, Any]]]] = {}
    dhash_of: Dict[bytes, Optional[int]] = {}  # digest -> dhash, so identical bytes are decoded once
    class_counts: Dict[str, int] = collections.Counter()
    sizes: Dict[Tuple[int, int], int] = collections.Counter()
    try:
        scan.file_bytes = storage.file_size(path)
        for record in records.shard_records(path, task.compression):
            scan.framed += 1
            if not record.data_crc_ok:
                scan.problem(f"record {record.index}: data checksum mismatch (corrupt record data)")
                continue
            if record.index in task.withdrawn:
                continue
            try:
                values = records.parse_example(record.data, task.spec)
            except records.ExampleError as e:
                scan.problem(f"record {record.index}: {e}")
                continue
            name = values.get(keys.FILENAME, b"")
            filename = records.decode_text(name)
            class_name = _text(values, keys.CLASS_TEXT, UNLABELED)
            sha = sha256_digest(values)
            if task.candidates_per_class > 0:
                _offer(heaps.setdefault(class_name, []), task, filename, record.index, record.offset, values)
            if sha not in dhash_of:
                try:
                    dhash_of[sha] = image_hash(values)
                except Exception as e:  # any decoder failure is a finding about the data
                    dhash_of[sha] = None
                    scan.problem(f"record {record.index} ({filename}): image does not decode: {type(e).__name__}: {e}")
            built.add(record.index, record.offset, class_name, sha, dhash_of[sha], name)
            class_counts[class_name] += 1
            sizes[int(values.get(keys.IMAGE_WIDTH, 0)), int(values.get(keys.IMAGE_HEIGHT, 0))] += 1
    except tfrecord_codec.RecordError as e:
        scan.read_to_end = False
        scan.problem(f"{e}; the rest of the shard cannot be read")
    except FileNotFoundError:
        scan.read_to_end = False
        scan.problem("shard file missing")
    except Exception as e:  # unreadable file (permissions, network): a finding, never a traceback
        scan.read_to_end = False
        scan.problem(f"cannot read shard: {type(e).__name__}: {e}")
    for class_name, heap in heaps.items():
        for negated, filename, index, offset, sampled in sorted(heap, key=lambda e: (-e[0], e[1], e[2])):
            uri = ""
            if task.draw_samples:
                try:
                    uri = thumbnail_uri(decode_image(sampled, task.thumbnail_px), task.thumbnail_px)
                except Exception:  # reported above, when its hash was computed
                    continue
            samples.append(Thumbnail(-negated, task.split, class_name, filename, uri, task.file, index, offset))
    scan.columns = built.build()
    scan.records = len(scan.columns)
    scan.class_counts = dict(class_counts)
    scan.sizes = dict(sizes)
    scan.seconds = time.perf_counter() - started
    return scan


def _offer(heap: List, task: ShardTask, filename: str, index: int, offset: int, values: Mapping[str, Any]) -> None:
    """Keep the record in its class's sample heap when its key is among the smallest so far."""
    key = sample_key(task.seed, filename)
    if len(heap) < task.candidates_per_class or -heap[0][0] > key:
        entry = (-key, filename, index, offset, values if task.draw_samples else None)
        if len(heap) < task.candidates_per_class:
            heapq.heappush(heap, entry)
        else:
            heapq.heappushpop(heap, entry)


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
    path = storage.join(task.directory, task.file)

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
