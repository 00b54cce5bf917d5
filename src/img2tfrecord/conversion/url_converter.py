"""One URL-list row -> one record (its image, caption and URL) or one error row naming the URL and why.

A batch's HTTP(S) URLs are downloaded at once on the process's :class:`~img2tfrecord.sources.downloads.Downloader`
threads, and each image is converted as soon as its body (and those before it) arrived, so decoding overlaps
the waiting. Other entries (``gs://``, ``s3://``, local paths) are read through the storage layer as any
file is. No Beam and no TensorFlow: pickled into the conversion worker processes.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from typing import Any, Dict, List, Optional, Sequence

from img2tfrecord.conversion.converter import ImageConverter, Output, _rejected
from img2tfrecord.conversion.examples import encode_example, encode_pixel_sums
from img2tfrecord.conversion.seeded_hashes import Splits, assign_split
from img2tfrecord.images.convert import convert_image
from img2tfrecord.images.options import ConvertedImage, ImageError, ImageOptions
from img2tfrecord.images.statistics import pixel_sums
from img2tfrecord.model import Record, WorkItem
from img2tfrecord.schemas import features as keys
from img2tfrecord.sources import downloads
from img2tfrecord.sources.layout import PlacementError, placement
from img2tfrecord.sources.url_lists import CAPTION_FIELD

_NOT_IMAGE_REASONS = ("corrupt", "empty_file", "unsupported_format")


class UrlConverter(ImageConverter):
    """A URL list's work items (``path`` and ``relpath``: the URL) -> records with ``image/text`` (the caption)
    and ``image/source_url``; a failed download is an error row with the download's reason."""

    def __init__(
        self,
        options: ImageOptions,
        layout: str,
        splits: Splits,
        seed: int,
        download: downloads.DownloadOptions,
        sums_split: Optional[str] = None,
        exact_sums: bool = False,
    ):
        super().__init__(options, layout, splits, seed, sums_split, exact_sums)
        self.download = download
        self._downloader: Optional[downloads.Downloader] = None

    def __getstate__(self) -> Dict[str, Any]:
        state = super().__getstate__()
        state["_downloader"] = None  # threads and connections: made again where it is unpickled
        return state

    def downloader(self) -> downloads.Downloader:
        if self._downloader is None:
            self._downloader = downloads.Downloader(self.download, self.options.max_file_bytes)
        return self._downloader

    def close(self) -> None:
        if self._downloader is not None:
            self._downloader.close()
            self._downloader = None

    def convert_all(self, items: Sequence[WorkItem], label_names: List[str]) -> List[Output]:
        urls = [item.path for item in items if downloads.is_download(item.path)]
        futures = iter(self.downloader().submit(urls)) if urls else iter(())
        outputs = []
        for item in items:
            body: Optional[concurrent.futures.Future] = next(futures) if downloads.is_download(item.path) else None
            outputs.append(self._convert(item, label_names, body))
        return outputs

    def __call__(self, source: WorkItem, label_names: List[str]) -> Output:
        return self.convert_all([source], label_names)[0]

    def _image(self, source: WorkItem, body: Optional[concurrent.futures.Future], keep_pixels: bool) -> ConvertedImage:
        if body is None:  # gs://, s3://, a local path: read as any file
            return self.read_and_convert(source, keep_pixels)
        data = body.result()  # DownloadError when the download failed
        try:
            return convert_image(data, self.options, keep_pixels)
        except ImageError as e:
            if e.reason in _NOT_IMAGE_REASONS:
                raise ImageError(downloads.NOT_AN_IMAGE, f"the body is not an image ({e.message})") from None
            raise

    def _convert(self, source: WorkItem, label_names: List[str], body: Optional[concurrent.futures.Future]) -> Output:
        url = source.path
        try:
            split_folder, class_name = placement(source, self.layout)
        except PlacementError as e:
            return _rejected(url, url, e.reason, str(e))
        split = split_folder or assign_split(source.relpath, self.seed, self.splits)
        with_sums = split == self.sums_split
        try:
            image = self._image(source, body, with_sums)
        except downloads.DownloadError as e:
            return _rejected(url, url, e.reason, e.message)
        except ImageError as e:
            return _rejected(url, url, e.reason, e.message)
        ids = self.label_ids(label_names)
        if class_name is not None and class_name not in ids:
            return _rejected(url, url, "unknown_class", f"class {class_name!r} is not in the label map")
        label = None if class_name is None else ids[class_name]
        caption = [v for v in source.metadata if v.name == CAPTION_FIELD]
        metadata = tuple(v for v in source.metadata if v.name != CAPTION_FIELD)
        texts = [(keys.SOURCE_URL, url)]
        if caption:
            text = caption[0].values[0]
            texts.append((keys.IMAGE_TEXT, text.decode("utf-8") if isinstance(text, bytes) else str(text)))
        analysis = None
        if with_sums:
            try:
                sums = encode_pixel_sums(*pixel_sums(image, self.exact_sums))
            except ImageError as e:
                return _rejected(url, url, e.reason, e.message)
            stripped = dataclasses.replace(image, encoded=b"", pixels=None)
            analysis = encode_example(stripped, label, class_name, source.relpath) + sums
        example = encode_example(image, label, class_name, source.relpath, metadata, texts)
        return None, Record(split, class_name, example, analysis)
