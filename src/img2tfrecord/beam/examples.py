"""Image references -> converted records and rejection rows, inside a user's pipeline (``ImagesToExamples``)."""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Tuple

import apache_beam as beam

from img2tfrecord.conversion.converter import Converter, DetectionConverter, ImageConverter
from img2tfrecord.conversion.seeded_hashes import DEFAULT_SPLIT, Splits
from img2tfrecord.errors import UsageError
from img2tfrecord.images.options import DEFAULT_DECODE_TIMEOUT_S, DEFAULT_MAX_FILE_MB, DEFAULT_MAX_PIXELS
from img2tfrecord.model import ERRORS, DetectionRecord, Record, WorkItem
from img2tfrecord.option_values import (
    DEFAULT_QUALITY,
    TASK_DETECTION,
    ChannelCount,
    ImageSize,
    ResampleMode,
    ResizeMode,
    SplitsGiven,
    StoredFormat,
    TaskName,
)
from img2tfrecord.pipeline.config import ConvertConfig, config_from_options
from img2tfrecord.schemas import transformed as names
from img2tfrecord.sources.layout import LAYOUT_DETECTION, LAYOUT_MANIFEST
from img2tfrecord.sources.references import reference_item
from img2tfrecord.transforms.discover import DiscoverClasses

OPTIONS = (
    "image_size",
    "resize",
    "resample",
    "channels",
    "format",
    "quality",
    "max_pixels",
    "max_file_mb",
    "decode_timeout_s",
    "splits",
    "seed",
    "task",
    "require_boxes",
)
REJECTED = "rejected"
INPUT_DESCRIPTION = "image references of a Beam pipeline"  # dataset.json's input, below ``root`` when given


class ConvertedExample(NamedTuple):
    """A converted image: its split, its class name (None when unlabeled or detection), the serialized record
    and its key, the relpath its shard and place in the shard come from (:class:`ExamplesToTFRecords`)."""

    split: str
    class_name: Optional[str]
    example: bytes
    key: str = ""


class _ToItems(beam.DoFn):
    def __init__(self, root: Optional[str], labeled: bool, detection: bool):
        self._root = root
        self._labeled = labeled
        self._detection = detection

    def process(self, ref):
        item = reference_item(ref, self._root, self._labeled, self._detection)
        if isinstance(item, WorkItem):
            yield item
        else:
            yield beam.pvalue.TaggedOutput(REJECTED, item)


class _Convert(beam.DoFn):
    def __init__(self, converter: Converter[WorkItem]):
        self._converter = converter

    def process(self, item: WorkItem, label_names: List[str]):
        tag, value = self._converter(item, label_names)
        if tag == ERRORS:
            yield beam.pvalue.TaggedOutput(REJECTED, value)
        else:
            assert isinstance(value, (Record, DetectionRecord))
            yield ConvertedExample(value.split, value.class_name, value.example, item.relpath)


def record_converter(config: ConvertConfig) -> Tuple[Converter[WorkItem], Splits]:
    """The converter of a configuration's record options, and the splits; UsageError for a bad combination."""
    splits = config.splits or ((DEFAULT_SPLIT, 1.0),)
    if config.task == TASK_DETECTION:
        return DetectionConverter(config.image, LAYOUT_DETECTION, splits, config.seed, config.require_boxes), splits
    if config.require_boxes:
        raise UsageError("--require-boxes applies to detection: give it with task='detection'")
    sums_split = names.ANALYZED_SPLIT if config.analyze else None
    exact = config.exact_statistics
    return ImageConverter(config.image, LAYOUT_MANIFEST, splits, config.seed, sums_split, exact), splits


def _to_items(converter: Converter[WorkItem], root: Optional[str], labeled: bool) -> _ToItems:
    return _ToItems(root, labeled, isinstance(converter, DetectionConverter))


class ImagesToExamples(beam.PTransform):
    """Image references -> ``examples`` (:class:`ConvertedExample`), ``rejected`` (error rows) and ``labels``.

    Keywords are ``convert``'s options that shape a record (:data:`OPTIONS`, with the same names,
    defaults and checks: a bad value raises ``img2tfrecord.UsageError`` when the transform is built).
    ``root``: relpaths are URIs below it (else the whole URI); ``labeled`` False: records without label
    features (as a manifest without a label column); ``task="detection"``: TF Object Detection API
    records of each reference's boxes (as a manifest of boxes gives them; the label is ignored). Every
    reference comes out exactly once, as an example or a rejected row: one that is not a reference
    (no ``uri``, boxes that are not a list, boxes for a classification record), has no label or a
    label that is not a string or an int is a row with reason ``bad_reference``, ``missing_label`` or
    ``bad_label``, never an exception. Returns a dict of the three PCollections.
    """

    def __init__(
        self,
        *,
        root: Optional[str] = None,
        labeled: bool = True,
        # convert()'s options that shape a record (OPTIONS), with its types and defaults.
        image_size: Optional[ImageSize] = None,
        resize: ResizeMode = "fill",
        resample: ResampleMode = "fast",
        channels: ChannelCount = 3,
        format: Optional[StoredFormat] = None,
        quality: int = DEFAULT_QUALITY,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        max_file_mb: float = DEFAULT_MAX_FILE_MB,
        decode_timeout_s: float = DEFAULT_DECODE_TIMEOUT_S,
        splits: Optional[SplitsGiven] = None,
        seed: int = 0,
        task: Optional[TaskName] = None,
        require_boxes: bool = False,
    ):
        super().__init__()
        given = locals()
        options = {name: given[name] for name in OPTIONS}
        config = config_from_options(root or INPUT_DESCRIPTION, None, **options, analyze=False)
        self._converter, _ = record_converter(config)
        self._root = root
        self._labeled = labeled

    def expand(self, refs):
        to_items = _to_items(self._converter, self._root, self._labeled)
        parsed = refs | "ToItems" >> beam.ParDo(to_items).with_outputs(REJECTED, main="items")
        labels = parsed.items | "ClassIds" >> DiscoverClasses(self._converter.layout)
        converted = parsed.items | "Convert" >> beam.ParDo(
            _Convert(self._converter), beam.pvalue.AsSingleton(labels)
        ).with_outputs(REJECTED, main="examples")
        rejected = (parsed[REJECTED], converted[REJECTED]) | "Rejected" >> beam.Flatten()
        return {"examples": converted.examples, "rejected": rejected, "labels": labels}


# The options that shape the output folder, besides those of a record.
