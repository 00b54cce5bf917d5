"""``dataset.json`` as typed objects: :class:`DatasetManifest` and its parts, read and written only here.

``DatasetManifest.from_json`` checks every field's type and names the first
wrong one (a :class:`DatasetJsonError`); ``to_json`` gives back the same document,
key for key and in the same order, so ``dumps(loads(text)) == text`` for every
manifest this version writes. The file names of an output folder are
:mod:`img2tfrecord.schemas.output_files`'s.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any, Dict, FrozenSet, List, Optional, Tuple

from img2tfrecord.schemas import features, output_files
from img2tfrecord.schemas.dataset_json_fields import (
    DatasetJsonError,
    count,
    counts,
    enum_value,
    fail,
    obj,
    opt_string,
    string,
)
from img2tfrecord.schemas.generations import Generation, Withdrawal

FORMAT_VERSION = output_files.FORMAT_VERSION
TOOL = "img2tfrecord"


class Task(str, enum.Enum):
    CLASSIFICATION = output_files.TASK_CLASSIFICATION
    DETECTION = output_files.TASK_DETECTION


class RecordType(str, enum.Enum):
    EXAMPLE = output_files.RECORD_TYPE
    SEQUENCE_EXAMPLE = output_files.SEQUENCE_RECORD_TYPE


class Compression(str, enum.Enum):
    NONE = output_files.COMPRESSION_NONE
    GZIP = output_files.COMPRESSION_GZIP


def _file_format(value: Any) -> str:
    """The container of the shards (``--file-format``; the records in them are the same): one of the table's."""
    if value not in output_files.FILE_FORMATS:
        raise fail("file_format", f"is {value!r}; expected one of {', '.join(output_files.FILE_FORMATS)}")
    return str(value)


# ---------------------------------------------------------------------------
# The parts.


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """One shard file: its name in the output folder, records, bytes, sha256 and (uncompressed) index file."""

    file: str
    num_records: int
    num_bytes: int
    sha256: Optional[str] = None
    index: Optional[str] = None  # relative to the output, e.g. index/train-00000-of-00004.tfrecord.idx

    @classmethod
    def from_json(cls, doc: Any, where: str) -> ShardInfo:
        doc = obj(doc, where)
        return cls(
            file=string(doc.get("file"), f"{where}.file"),
            num_records=count(doc.get("num_records"), f"{where}.num_records"),
            num_bytes=count(doc.get("num_bytes"), f"{where}.num_bytes"),
            sha256=opt_string(doc.get("sha256"), f"{where}.sha256"),
            index=opt_string(doc.get("index"), f"{where}.index"),
        )

    def to_json(self) -> Dict[str, Any]:
        doc: Dict[str, Any] = {"file": self.file, "num_records": self.num_records, "num_bytes": self.num_bytes}
        if self.sha256 is not None:
            doc["sha256"] = self.sha256
        if self.index is not None:
            doc["index"] = self.index
        return doc


@dataclasses.dataclass(frozen=True)
class SplitInfo:
    """One split: its records, bytes, records per class name and shards in order.

    Detection splits also count the boxes written per class and the boxes dropped per reason
    (``clipped_to_image`` counts boxes kept after clipping); both are None for classification.
    """

    num_examples: int
    num_bytes: int
    examples_per_class: Dict[str, int]
    shards: Tuple[ShardInfo, ...]
    boxes_per_class: Optional[Dict[str, int]] = None
    dropped_boxes: Optional[Dict[str, int]] = None
    pattern: Optional[str] = None  # webdataset: the brace pattern(s) of its shards, "::"-joined per generation

    @classmethod
    def from_json(cls, doc: Any, where: str) -> SplitInfo:
        doc = obj(doc, where)
        shards = doc.get("shards", [])
        if not isinstance(shards, list):
            raise fail(f"{where}.shards", "is not a list")
        return cls(
            num_examples=count(doc.get("num_examples"), f"{where}.num_examples"),
            num_bytes=count(doc.get("num_bytes", 0), f"{where}.num_bytes"),
            examples_per_class=counts(doc.get("examples_per_class", {}), f"{where}.examples_per_class"),
            shards=tuple(ShardInfo.from_json(s, f"{where}.shards[{i}]") for i, s in enumerate(shards)),
            boxes_per_class=(
                None
                if doc.get(output_files.BOXES_PER_CLASS) is None
                else counts(doc[output_files.BOXES_PER_CLASS], f"{where}.{output_files.BOXES_PER_CLASS}")
            ),
            dropped_boxes=(
                None
                if doc.get(output_files.DROPPED_BOXES) is None
                else counts(doc[output_files.DROPPED_BOXES], f"{where}.{output_files.DROPPED_BOXES}")
            ),
            pattern=opt_string(doc.get(output_files.SHARD_PATTERN), f"{where}.{output_files.SHARD_PATTERN}"),
        )

    def to_json(self) -> Dict[str, Any]:
        doc: Dict[str, Any] = {
            "num_examples": self.num_examples,
            "num_bytes": self.num_bytes,
            "examples_per_class": dict(self.examples_per_class),
            "shards": [s.to_json() for s in self.shards],
        }
        if self.pattern is not None:
            doc[output_files.SHARD_PATTERN] = self.pattern
        if self.boxes_per_class is not None:
            doc[output_files.BOXES_PER_CLASS] = dict(self.boxes_per_class)
        if self.dropped_boxes is not None:
            doc[output_files.DROPPED_BOXES] = dict(self.dropped_boxes)
        return doc

    @property
    def listed_records(self) -> int:
        """The records its shards list (equal to ``num_examples`` in a consistent manifest)."""
        return sum(s.num_records for s in self.shards)


@dataclasses.dataclass(frozen=True)
class Accounting:
    """Where every input went: ``inputs == written + rejected``; ``skipped`` inputs were not inputs;
    ``withdrawn`` of the ``written`` records no reader returns (``--accept-changes``)."""

    inputs: int
    written: int
    rejected: int
    skipped: int = 0
    rejected_by_reason: Dict[str, int] = dataclasses.field(default_factory=dict)
    withdrawn: int = 0

    @classmethod
    def from_json(cls, doc: Any, where: str = "accounting") -> Accounting:
        doc = obj(doc, where)
        return cls(
            inputs=count(doc.get("inputs"), f"{where}.inputs"),
            written=count(doc.get("written"), f"{where}.written"),
            rejected=count(doc.get("rejected"), f"{where}.rejected"),
            skipped=count(doc.get("skipped", 0), f"{where}.skipped"),
            rejected_by_reason=counts(doc.get("rejected_by_reason", {}), f"{where}.rejected_by_reason"),
            withdrawn=count(doc.get("withdrawn", 0), f"{where}.withdrawn"),
        )

    def to_json(self) -> Dict[str, Any]:
        return {
            "inputs": self.inputs,
            "written": self.written,
            "rejected": self.rejected,
            "skipped": self.skipped,
            "rejected_by_reason": dict(self.rejected_by_reason),
            **({"withdrawn": self.withdrawn} if self.withdrawn else {}),
        }


@dataclasses.dataclass(frozen=True)
class TfdsStatus:
    """Whether ``tfds.builder_from_directory`` reads the output, and if not why (``schemas/tfds_layout.py``)."""

    readable: bool
    reason: Optional[str] = None

    @classmethod
    def from_json(cls, doc: Any, where: str = "tfds") -> TfdsStatus:
        doc = obj(doc, where)
        readable = doc.get("readable")
        if not isinstance(readable, bool):
            raise fail(f"{where}.readable", f"is {readable!r}, not true or false")
        return cls(readable, opt_string(doc.get("reason"), f"{where}.reason"))

    def to_json(self) -> Dict[str, Any]:
        return {"readable": True} if self.readable else {"readable": False, "reason": self.reason}


# ---------------------------------------------------------------------------
# The manifest.


@dataclasses.dataclass(frozen=True)
class DatasetManifest:
    """A finished output: how it was made (tool, input, options), what it holds (labels, features, splits,
    shards) and where every input went (accounting).

    ``options`` are the run's option values as ``options.py`` records them; the properties below read the
    ones readers need. ``statistics`` is the tf.Transform analysis of the train split (``transforms/analyze.py``),
    None with ``--no-analyze``. ``image_libraries`` names the image libraries' versions where the run started
    (a changed version explains a changed shard digest).
    """

    tool_version: str
    created: str
    input: str
    options: Dict[str, Any]
    compression: Compression
    labels: Tuple[str, ...]
    splits: Dict[str, SplitInfo]
    accounting: Optional[Accounting]
    record_type: RecordType = RecordType.EXAMPLE
    task: Task = Task.CLASSIFICATION
    labeled: bool = True
    feature_spec: Optional[Dict[str, Dict[str, Any]]] = None  # None: the spec of record_type, task, labeled
    run_fingerprint: Optional[str] = None
    statistics: Optional[Dict[str, Any]] = None
    tfds: Optional[TfdsStatus] = None
    image_libraries: Optional[Dict[str, str]] = None  # distribution -> version: what decoded and resized
    generations: Tuple[Generation, ...] = ()  # (): an output with no input ledger (it cannot be appended to)
    format_version: int = output_files.BASE_FORMAT_VERSION
    file_format: str = output_files.DEFAULT_FILE_FORMAT  # a key of shard_formats.ADAPTER_FOR_FORMAT

    def __post_init__(self) -> None:
        if self.feature_spec is None:
            spec = features.feature_spec_json(
                labeled=self.labeled, sequence=self.is_sequence, detection=self.task is Task.DETECTION
            )
            object.__setattr__(self, "feature_spec", spec)

    # -- what readers ask ---------------------------------------------------

    @property
    def is_sequence(self) -> bool:
        return self.record_type is RecordType.SEQUENCE_EXAMPLE

    @property
    def is_detection(self) -> bool:
        return self.task is Task.DETECTION

    @property
    def num_classes(self) -> int:
        return len(self.labels)

    @property
    def spec(self) -> Dict[str, Dict[str, Any]]:
        """The records' feature spec in ``dataset.json``'s JSON form (``schemas/features.py``)."""
        assert self.feature_spec is not None  # set by __post_init__
        return self.feature_spec

    @property
    def image_format(self) -> Optional[str]:
        """``--format``: jpeg, png, raw or keep."""
        return self.options.get("format")

    @property
    def image_size(self) -> Optional[Tuple[int, int]]:
        """``--image-size`` as (width, height), or None when images keep their size."""
        size = self.options.get("image_size")
        return (int(size[0]), int(size[1])) if size else None

    @property
    def channels(self) -> Optional[int]:
        """``--channels``, or None when images keep theirs."""
        value = self.options.get("channels")
        return int(value) if value else None

    @property
    def max_pixels(self) -> Optional[int]:
        value = self.options.get("max_pixels")
        return int(value) if value else None

    @property
    def exact_statistics(self) -> bool:
        return bool(self.options.get("exact_statistics"))

    @property
    def files(self) -> Dict[str, str]:
        """The side files by role: labels, (detection) label_map, errors, success."""
        return {
            "labels": output_files.LABELS_FILE,
            **({"label_map": output_files.LABEL_MAP_FILE} if self.is_detection else {}),
            "errors": output_files.ERRORS_FILE,
            "success": output_files.SUCCESS_FILE,
        }

    @property
    def error_files(self) -> List[str]:
        """Every generation's error report, oldest first (``errors.jsonl`` alone without generations)."""
        return [g.errors for g in self.generations] or [output_files.ERRORS_FILE]

    @property
    def last_generation(self) -> Optional[Generation]:
        return self.generations[-1] if self.generations else None

    @property
    def withdrawals(self) -> List[Withdrawal]:
        """Every withdrawn record, oldest generation first."""
        return [w for g in self.generations for w in g.withdrawn]

    def withdrawn_by_file(self) -> Dict[str, FrozenSet[int]]:
        """shard file -> the indices of its records that no reader returns (only shards with some)."""
        found: Dict[str, set] = {}
        for w in self.withdrawals:
            found.setdefault(w.file, set()).add(w.index)
        return {file: frozenset(indices) for file, indices in found.items()}

    def live_records(self, split: str) -> int:
        """The records of ``split`` a reader returns: its shards' records less the withdrawn ones."""
        return self.splits[split].listed_records - sum(1 for w in self.withdrawals if w.split == split)

    @property
    def num_examples(self) -> int:
        return sum(info.num_examples for info in self.splits.values())

    def shards(self) -> List[Tuple[str, ShardInfo]]:
        """Every shard with its split, split by split in the manifest's order."""
        return [(name, shard) for name, info in self.splits.items() for shard in info.shards]

    def listed_files(self) -> FrozenSet[str]:
        """Every file this manifest names, relative to the output: shards, their indexes, each generation's
        error report and ledger. While the manifest is committed nothing deletes or rewrites them."""
        names = {shard.file for _, shard in self.shards()} | {shard.index for _, shard in self.shards() if shard.index}
        names.update(self.error_files)
        names.update(g.ledger for g in self.generations)
        return frozenset(names)

    def replace(self, **changes: Any) -> DatasetManifest:
        return dataclasses.replace(self, **changes)

    # -- JSON -----------------------------------------------------------------

    @classmethod
    def from_json(cls, doc: Any) -> DatasetManifest:
        """Check and read a parsed ``dataset.json``; :class:`DatasetJsonError` names the first bad field."""
        if not isinstance(doc, dict) or doc.get("tool") != TOOL:
            raise DatasetJsonError(f"{output_files.MANIFEST_FILE} was not written by img2tfrecord")
        version = doc.get("format_version")
        if isinstance(version, bool) or not isinstance(version, int) or version > FORMAT_VERSION:
            raise DatasetJsonError(
                f"{output_files.MANIFEST_FILE} has format_version {version!r}; "
                f"this img2tfrecord reads up to {FORMAT_VERSION}"
            )
        labels = doc.get("labels", [])
        if not isinstance(labels, list):
            raise fail("labels", "is not a list")
        labeled = doc.get("labeled", True)
        if not isinstance(labeled, bool):
            raise fail("labeled", f"is {labeled!r}, not true or false")
        spec = doc.get("feature_spec")
        accounting = doc.get("accounting")
        statistics = doc.get(output_files.STATISTICS)
        tfds = doc.get("tfds")
        libraries = doc.get("image_libraries")
        generations = doc.get("generations", [])
        if not isinstance(generations, list):
            raise fail("generations", "is not a list")
        return cls(
            format_version=version,
            tool_version=string(doc.get("tool_version", ""), "tool_version"),
            created=string(doc.get("created", ""), "created"),
            input=string(doc.get("input", ""), "input"),
            options=dict(obj(doc.get("options", {}), "options")),
            record_type=enum_value(RecordType, doc.get("record_type", RecordType.EXAMPLE.value), "record_type"),
            task=enum_value(Task, doc.get(output_files.TASK, Task.CLASSIFICATION.value), output_files.TASK),
            compression=enum_value(Compression, doc.get("compression", Compression.NONE.value), "compression"),
            file_format=_file_format(doc.get("file_format", output_files.DEFAULT_FILE_FORMAT)),
            labeled=labeled,
            labels=tuple(string(name, f"labels[{i}]") for i, name in enumerate(labels)),
            feature_spec=None if spec is None else dict(obj(spec, "feature_spec")),
            splits={
                name: SplitInfo.from_json(info, f"splits.{name}")
                for name, info in obj(doc.get("splits", {}), "splits").items()
            },
            accounting=None if accounting is None else Accounting.from_json(accounting),
            run_fingerprint=opt_string(doc.get("run_fingerprint"), "run_fingerprint"),
            statistics=None if statistics is None else dict(obj(statistics, output_files.STATISTICS)),
            tfds=None if tfds is None else TfdsStatus.from_json(tfds),
            image_libraries=None
            if libraries is None
            else {
                string(name, "image_libraries"): string(version, f"image_libraries.{name}")
                for name, version in obj(libraries, "image_libraries").items()
            },
            generations=tuple(Generation.from_json(g, f"generations[{i}]") for i, g in enumerate(generations)),
        )

    def to_json(self) -> Dict[str, Any]:
        version = max(self.format_version, output_files.BASE_FORMAT_VERSION)
        if self.withdrawals:
            version = max(version, output_files.WITHDRAWALS_FORMAT_VERSION)
        if self.file_format != output_files.DEFAULT_FILE_FORMAT:  # earlier versions would read its shards as TFRecord
            version = max(version, output_files.FILE_FORMATS_FORMAT_VERSION)
        doc: Dict[str, Any] = {
            "format_version": version,
            "tool": TOOL,
            "tool_version": self.tool_version,
            **({"image_libraries": dict(self.image_libraries)} if self.image_libraries is not None else {}),
            "created": self.created,
            "input": self.input,
            "options": dict(self.options),
            "record_type": self.record_type.value,
            output_files.TASK: self.task.value,
            "compression": self.compression.value,
            "file_format": self.file_format,
            "labeled": self.labeled,
            "labels": list(self.labels),
            "num_classes": self.num_classes,
            "feature_spec": dict(self.spec),
            "splits": {name: info.to_json() for name, info in self.splits.items()},
        }
        if self.accounting is not None:
            doc["accounting"] = self.accounting.to_json()
        doc["files"] = self.files
        if self.run_fingerprint:
            doc["run_fingerprint"] = self.run_fingerprint
        if self.statistics is not None:
            doc[output_files.STATISTICS] = dict(self.statistics)
        if self.tfds is not None:
            doc["tfds"] = self.tfds.to_json()
        if self.generations:
            doc["generations"] = [g.to_json() for g in self.generations]
        return doc


def dumps(doc: DatasetManifest) -> str:
    """``dataset.json``'s text: indented, keys in the manifest's order, UTF-8 names as they are."""
    return json.dumps(doc.to_json(), indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def loads(text: str) -> DatasetManifest:
    """Parse and check ``dataset.json``'s text."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise DatasetJsonError(f"{output_files.MANIFEST_FILE} is not valid JSON: {e}") from e
    return DatasetManifest.from_json(doc)
