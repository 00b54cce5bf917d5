"""Parquet shards as Hugging Face ``datasets`` reads them: one row per record, written row group by row group.

A row holds ``image`` (``{bytes, path}``: the stored image and its input path, ``datasets``' ``Image``),
``label`` (int64, a ``ClassLabel`` with the class names), ``label_name``, ``path`` (the input path),
``sha256`` (of the input file's bytes), ``format``, ``height``, ``width``, ``channels``, ``text`` (a URL
list's caption), and
``other_features``: every other feature of the record as JSON (``webdataset_samples``' encoding),
``{}`` for most records. A feature goes to its column only when it holds one value of the column's
type; otherwise it stays in ``other_features``, so :func:`record_from_row` rebuilds the record the
TFRecord run holds byte for byte. The schema's ``huggingface`` metadata declares the features.

Rows are buffered up to :data:`ROW_GROUP_ROWS` rows or :data:`ROW_GROUP_BYTES` bytes and written as one
row group (``datasets``' size for image datasets): a shard is never held whole, and a streaming
reader fetches one group of about 100 images at a time. The footer indexes the row groups: the
shards get no index file, and a record is read by its number. No Beam and no TensorFlow.
"""

from __future__ import annotations

import array
import json
from typing import Any, BinaryIO, Dict, Iterator, List, Optional, Sequence, Tuple

import pyarrow as pa
import pyarrow.parquet as pq

from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas.example_proto import Example, Features
from img2tfrecord.shard_formats import webdataset_samples
from img2tfrecord.tfrecord_codec import Record, RecordError, TruncatedRecordError

ROW_GROUP_ROWS = 100  # datasets' row group size for image datasets (config.PARQUET_ROW_GROUP_SIZE_FOR_IMAGE_DATASETS)
ROW_GROUP_BYTES = 64 << 20  # a row group of large images ends sooner
IMAGE = "image"
LABEL = "label"
OTHER = "other_features"
# column -> (feature key, "int" or "text"): one value of that kind moves the feature to the column.
COLUMNS: Dict[str, Tuple[str, str]] = {
    LABEL: (keys.CLASS_LABEL, "int"),
    "label_name": (keys.CLASS_TEXT, "text"),
    "path": (keys.FILENAME, "text"),
    "sha256": (keys.KEY_SHA256, "text"),
    "format": (keys.IMAGE_FORMAT, "text"),
    "height": (keys.IMAGE_HEIGHT, "int"),
    "width": (keys.IMAGE_WIDTH, "int"),
    "channels": (keys.IMAGE_CHANNELS, "int"),
    "text": (keys.IMAGE_TEXT, "text"),  # a URL list's caption (null for other records)
}
_IMAGE_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
SCHEMA = pa.schema(
    [(IMAGE, _IMAGE_TYPE)]
    + [(name, pa.int64() if kind == "int" else pa.string()) for name, (_, kind) in COLUMNS.items()]
    + [(OTHER, pa.string())]
)


def hf_features(class_names: Sequence[str]) -> Dict[str, Any]:
    """``datasets``' description of the columns: ``Image``, and ``ClassLabel`` with the names when labeled."""
    described: Dict[str, Any] = {IMAGE: {"_type": "Image"}}
    for name, (_, kind) in COLUMNS.items():
        described[name] = {"dtype": "int64" if kind == "int" else "string", "_type": "Value"}
    if class_names:
        described[LABEL] = {"names": list(class_names), "_type": "ClassLabel"}
    described[OTHER] = {"dtype": "string", "_type": "Value"}
    return described


def schema_for(class_names: Sequence[str]) -> pa.Schema:
    return SCHEMA.with_metadata({"huggingface": json.dumps({"info": {"features": hf_features(class_names)}})})


def row_of(record: bytes) -> Dict[str, Any]:
    """The row of a serialized Example (ValueError for bytes that are not one)."""
    split = _split_image(record)
    if split is not None:  # the image stays a view of the record: parsed and copied once, into its column
        rest, image = split
        return _row(Features.FromString(rest).feature, image)
    return _row(Example.FromString(record).features.feature, None)


def _row(feature: Any, image: Any) -> Dict[str, Any]:
    """The row of a record's feature map; ``image``: its image's bytes taken out of the map beforehand."""
    row: Dict[str, Any] = {name: None for name in COLUMNS}
    placed = set()
    for name, (key, kind) in COLUMNS.items():
        if key not in feature:
            continue
        entry = feature[key]
        if kind == "int" and entry.WhichOneof("kind") == "int64_list" and len(entry.int64_list.value) == 1:
            row[name] = int(entry.int64_list.value[0])
            placed.add(key)
        elif kind == "text" and entry.WhichOneof("kind") == "bytes_list" and len(entry.bytes_list.value) == 1:
            try:
                row[name] = entry.bytes_list.value[0].decode("utf-8")
            except UnicodeDecodeError:
                continue
            placed.add(key)
    if image is None and keys.IMAGE_ENCODED in feature:
        entry = feature[keys.IMAGE_ENCODED]
        if entry.WhichOneof("kind") == "bytes_list" and len(entry.bytes_list.value) == 1:
            image = entry.bytes_list.value[0]
            placed.add(keys.IMAGE_ENCODED)
    row[IMAGE] = None if image is None else {"bytes": image, "path": row["path"]}
    rest = {k: feature[k] for k in feature if k not in placed}
    row[OTHER] = json.dumps(
        webdataset_samples.json_features(rest, ()), ensure_ascii=False, separators=(",", ":"), sort_keys=True
    )
    return row


_IMAGE_KEY = keys.IMAGE_ENCODED.encode("utf-8")


def _varint(data: bytes, pos: int) -> Tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise ValueError("a varint longer than 10 bytes")


def _length_delimited(data: bytes, pos: int, end: int, tag: int) -> Tuple[int, int]:
    """``(start, end)`` of the field with the one-byte ``tag`` at ``pos`` (a length-delimited field); ValueError
    when another field is there or it runs past ``end``."""
    if pos >= end or data[pos] != tag:
        raise ValueError("not the expected field")
    length, start = _varint(data, pos + 1)
    if start + length > end:
        raise ValueError("a field runs past its message")
    return start, start + length


def _split_image(record: bytes) -> Optional[Tuple[bytes, memoryview]]:
    """``(the record's Features without its image entry, the image as a view of record)`` for an Example laid
    out as one Features field whose ``image/encoded`` entry holds one bytes value; None otherwise (the
    record is then parsed whole)."""
    try:
        start, end = _length_delimited(record, 0, len(record), 0x0A)  # Example.features
        if end != len(record):
            return None
        found: Optional[Tuple[int, int, int, int]] = None
        pos = start
        while pos < end:
            entry_start, entry_end = _length_delimited(record, pos, end, 0x0A)  # a map entry
            key_start, key_end = _length_delimited(record, entry_start, entry_end, 0x0A)
            if record[key_start:key_end] == _IMAGE_KEY:
                if found is not None:
                    return None
                value = _length_delimited(record, key_end, entry_end, 0x12)  # Feature
                values = _length_delimited(record, value[0], value[1], 0x0A)  # bytes_list
                image = _length_delimited(record, values[0], values[1], 0x0A)  # its one value
                if value[1] != entry_end or values[1] != value[1] or image[1] != values[1]:
                    return None
                found = (pos, entry_end, image[0], image[1])
            pos = entry_end
    except (ValueError, IndexError):
        return None
    if found is None:
        return None
    return record[start : found[0]] + record[found[1] : end], memoryview(record)[found[2] : found[3]]


def record_from_row(row: Dict[str, Any]) -> bytes:
    """The serialized Example a row holds (:class:`webdataset_samples.SampleError` for one this format
    does not write)."""
    example = Example()
    feature = example.features.feature
    try:
        doc = json.loads(row.get(OTHER) or "{}")
    except json.JSONDecodeError as e:
        raise webdataset_samples.SampleError(f"{OTHER} is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise webdataset_samples.SampleError(f"{OTHER} is not a JSON object")
    webdataset_samples.set_features(feature, doc)
    for name, (key, kind) in COLUMNS.items():
        value = row.get(name)
        if value is None:
            continue
        if kind == "int":
            feature[key].int64_list.value.append(int(value))
        else:
            feature[key].bytes_list.value.append(str(value).encode("utf-8"))
    image = row.get(IMAGE)
    if image is not None:
        feature[keys.IMAGE_ENCODED].bytes_list.value.append(image.get("bytes") or b"")
    return example.SerializeToString(deterministic=True)


class ParquetShardWriter:
    """Records as rows into the stream ``stream`` (not closed), one row group per :data:`ROW_GROUP_ROWS` rows.

    The rows are buffered column by column and each column becomes one Arrow array: no dict per row.
    """

    def __init__(self, stream: BinaryIO, class_names: Sequence[str] = ()):
        self._schema = schema_for(class_names)
        self._writer = pq.ParquetWriter(
            stream,
            self._schema,
            compression={IMAGE + ".bytes": "NONE", IMAGE + ".path": "SNAPPY", **{c: "SNAPPY" for c in COLUMNS}}
            | {OTHER: "SNAPPY"},
            use_dictionary=[c for c in COLUMNS if c != "sha256"],
            write_statistics=[c for c in COLUMNS if c in (LABEL, "height", "width", "channels")],
        )
        self._columns: Dict[str, List[Any]] = {name: [] for name in SCHEMA.names}
        self._bytes = 0

    def write(self, record: bytes) -> None:
        for name, value in row_of(record).items():
            self._columns[name].append(value)
        self._bytes += len(record)
        if len(self._columns[OTHER]) >= ROW_GROUP_ROWS or self._bytes >= ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        rows = len(self._columns[OTHER])
        if not rows:
            return
        images = self._columns[IMAGE]
        image = pa.StructArray.from_arrays(
            [
                _binary_array([i["bytes"] if i is not None else None for i in images]),
                pa.array([i["path"] if i is not None else None for i in images], pa.string()),
            ],
            fields=list(_IMAGE_TYPE),
            mask=pa.array([i is None for i in images], pa.bool_()),
        )
        arrays = [image] + [pa.array(self._columns[f.name], f.type) for f in list(self._schema)[1:]]
        self._writer.write_table(pa.Table.from_arrays(arrays, schema=self._schema), row_group_size=rows)
        self._columns = {name: [] for name in SCHEMA.names}
        self._bytes = 0

    def close(self) -> None:
        self._flush()
        self._writer.close()


def _binary_array(values: List[Any]) -> pa.Array:
    """A binary array of bytes-like ``values`` (None: null), their bytes copied once, into one buffer."""
    offsets = array.array("i", [0])
    for value in values:
        offsets.append(offsets[-1] + (len(value) if value is not None else 0))
    nulls = sum(value is None for value in values)
    validity = pa.array([value is not None for value in values], pa.bool_()).buffers()[1] if nulls else None
    data = b"".join(value for value in values if value is not None)
    return pa.Array.from_buffers(
        pa.binary(), len(values), [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls
    )


def _rows(table: pa.Table) -> List[Dict[str, Any]]:
    return table.to_pylist()


def _error(e: Exception) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:300]


class ParquetShard:
    """An open Parquet shard read by record number: ``len()``, ``read(indices)``; :class:`RecordError` when
    its footer or a row group does not read."""

    def __init__(self, source: Any):
        try:
            self._file = pq.ParquetFile(source)
        except (pa.ArrowException, OSError, ValueError) as e:
            raise TruncatedRecordError(-1, 0, f"not a Parquet file, or cut short: {_error(e)}") from None
        meta = self._file.metadata
        self._starts = [0]
        for i in range(meta.num_row_groups):
            self._starts.append(self._starts[-1] + meta.row_group(i).num_rows)
        self._cached: Optional[Tuple[int, List[Dict[str, Any]]]] = None

    def __len__(self) -> int:
        return self._starts[-1]

    @property
    def num_row_groups(self) -> int:
        return len(self._starts) - 1

    def group(self, number: int) -> List[Dict[str, Any]]:
        """The rows of row group ``number``."""
        if self._cached is not None and self._cached[0] == number:
            return self._cached[1]
        try:
            rows = _rows(self._file.read_row_group(number))
        except (pa.ArrowException, OSError, ValueError) as e:
            raise RecordError(self._starts[number], -1, f"row group {number} does not read: {_error(e)}") from None
        self._cached = (number, rows)
        return rows

    def read(self, indices: Sequence[int]) -> List[bytes]:
        import bisect

        found = []
        for index in indices:
            if not 0 <= index < len(self):
                raise RecordError(index, -1, f"no record {index}: the shard has {len(self)}")
            number = bisect.bisect_right(self._starts, index) - 1
            row = self.group(number)[index - self._starts[number]]
            try:
                found.append(record_from_row(row))
            except (webdataset_samples.SampleError, ValueError, TypeError) as e:
                raise RecordError(index, -1, f"not a row of this output: {e}") from None
        return found

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ParquetShard:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_records(source: Any) -> Iterator[Record]:
    """Every record of the Parquet shard ``source`` (a path or a seekable binary file), in order
    (``offset`` is the record's number)."""
    with ParquetShard(source) as shard:
        index = 0
        for number in range(shard.num_row_groups):
            for row in shard.group(number):
                try:
                    data = record_from_row(row)
                except (webdataset_samples.SampleError, ValueError, TypeError) as e:
                    raise RecordError(index, index, f"not a row of this output: {e}") from None
                yield Record(index, index, data)
                index += 1


__all__ = ["ParquetShard", "ParquetShardWriter", "hf_features", "read_records", "record_from_row", "row_of"]
