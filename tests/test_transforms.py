"""The Beam transforms on a real (in-memory FnApiRunner) pipeline with real files and TensorFlow."""

from __future__ import annotations

import hashlib
import os

import apache_beam as beam
import images as I
import numpy as np
import pytest
import tensorflow as tf
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to
from convert_fn import ERRORS, ConvertFn

from img2tfrecord.conversion.converter import ImageConverter
from img2tfrecord.conversion.seeded_hashes import assign_split
from img2tfrecord.images.convert import convert_image
from img2tfrecord.images.options import ImageOptions
from img2tfrecord.model import WorkItem
from img2tfrecord.schemas import features as keys
from img2tfrecord.sources.inputs import SKIPPED
from img2tfrecord.sources.inputs.folder import FolderSource
from img2tfrecord.sources.layout import LAYOUT_CLASS, LAYOUT_SPLIT
from img2tfrecord.transforms.discover import Discover, DiscoverClasses

SPLITS = (("train", 0.6), ("validation", 0.2), ("test", 0.2))
SEED = 11


def pipeline() -> test_pipeline.TestPipeline:
    return test_pipeline.TestPipeline(
        argv=[], options=PipelineOptions(["--runner=FnApiRunner", "--direct_running_mode=in_memory"])
    )


def write_files(root, files):
    """``{relpath: bytes}`` under ``root``; returns ``{relpath: absolute path}``."""
    paths = {}
    for rel, data in files.items():
        path = os.path.join(str(root), *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        paths[rel] = path
    return paths


def source_files(root, files):
    return [WorkItem(path, rel, os.path.getsize(path)) for rel, path in sorted(write_files(root, files).items())]


# -- Discover (a folder source) / DiscoverClasses ------------------------------------------------------------

IMAGES = {
    "cat/a.jpg": I.jpeg(40, 30),
    "cat/b.png": I.png(20, 10, mode="RGBA"),
    "dog/c.jpg": I.jpeg(30, 20, exif_orientation=6),
    "dog/sub/d.png": I.png(12, 8, mode="L"),
    "bird/e.gif": I.gif_animated(16, 12),
    "root.jpg": I.jpeg(8, 8),
}
JUNK = {
    ".DS_Store": b"\x00\x00\x00\x01Bud1",
    "cat/Thumbs.db": b"thumbs",
    "dog/desktop.ini": b"[.ShellClassInfo]",
    "__MACOSX/x.jpg": b"resource fork",
    "__MACOSX/cat/._a.jpg": b"resource fork",
    ".hidden/x.jpg": I.jpeg(8, 8),
    "cat/.x.jpg": I.jpeg(8, 8),
}


@pytest.mark.e2e
def test_discover_images(tmp_path):
    paths = write_files(tmp_path, {**IMAGES, **JUNK})
    base = str(tmp_path) + "/"
    expected = [WorkItem(paths[rel], rel, len(data)) for rel, data in IMAGES.items()]
    with pipeline() as p:
        found = p | Discover(FolderSource(base + "**", base))
        assert_that(found["files"], equal_to(expected), label="files")
        assert_that(found[SKIPPED], equal_to(sorted(JUNK)), label="skipped")


@pytest.mark.e2e
def test_discover_images_of_an_empty_folder(tmp_path):
    base = str(tmp_path) + "/"
    with pipeline() as p:
        found = p | Discover(FolderSource(base + "**", base))
        assert_that(found["files"], equal_to([]), label="files")
        assert_that(found[SKIPPED], equal_to([]), label="skipped")


@pytest.mark.e2e
def test_discover_classes_class_layout(tmp_path):
    write_files(tmp_path, {**IMAGES, **JUNK})
    base = str(tmp_path) + "/"
    with pipeline() as p:
        classes = (p | Discover(FolderSource(base + "**", base)))["files"] | DiscoverClasses(LAYOUT_CLASS)
        # root.jpg has no class; junk never reaches the class list
        assert_that(classes, equal_to([["bird", "cat", "dog"]]))


@pytest.mark.e2e
def test_discover_classes_split_layout_and_string_order():
    files = [
        WorkItem("/in/train/cat/1.jpg", "train/cat/1.jpg", 1),
        WorkItem("/in/train/dog/2.jpg", "train/dog/2.jpg", 1),
        WorkItem("/in/val/dog/3.jpg", "val/dog/3.jpg", 1),
        WorkItem("/in/test/zebra/4.jpg", "test/zebra/4.jpg", 1),
        WorkItem("/in/validation/B/5.jpg", "validation/B/5.jpg", 1),
        WorkItem("/in/train/10/6.jpg", "train/10/6.jpg", 1),
        WorkItem("/in/test/9/sub/7.jpg", "test/9/sub/7.jpg", 1),
        WorkItem("/in/train/loose.jpg", "train/loose.jpg", 1),  # not in a class folder
        WorkItem("/in/other/cat/8.jpg", "other/cat/8.jpg", 1),  # not a split folder
    ]
    with pipeline() as p:
        classes = p | beam.Create(files) | DiscoverClasses(LAYOUT_SPLIT)
        # sorted as strings (like Keras): "10" < "9" < "B" < "cat"
        assert_that(classes, equal_to([["10", "9", "B", "cat", "dog", "zebra"]]))


@pytest.mark.e2e
def test_discover_classes_of_nothing():
    with pipeline() as p:
        classes = p | beam.Create([]) | DiscoverClasses(LAYOUT_CLASS)
        assert_that(classes, equal_to([[]]))


# -- ConvertFn ----------------------------------------------------------------------------------


def summarize_record(record):
    """A comparable view of one output record, with the Example parsed by TensorFlow."""
    split, class_name, serialized, _ = record
    example = tf.train.Example.FromString(serialized)
    feature = example.features.feature
    encoded = feature[keys.IMAGE_ENCODED].bytes_list.value[0]
    pixels = tf.io.decode_image(encoded, expand_animations=False)
    for name in keys.INT_FEATURES:
        assert len(feature[name].int64_list.value) == 1, name
    for name in keys.BYTES_FEATURES:
        assert len(feature[name].bytes_list.value) == 1, name
    return (
        split,
        class_name,
        tuple(sorted(feature.keys())),
        feature[keys.CLASS_LABEL].int64_list.value[0],
        feature[keys.CLASS_TEXT].bytes_list.value[0].decode(),
        feature[keys.FILENAME].bytes_list.value[0].decode(),
        feature[keys.IMAGE_FORMAT].bytes_list.value[0].decode(),
        feature[keys.IMAGE_HEIGHT].int64_list.value[0],
        feature[keys.IMAGE_WIDTH].int64_list.value[0],
        feature[keys.IMAGE_CHANNELS].int64_list.value[0],
        feature[keys.KEY_SHA256].bytes_list.value[0].decode(),
        hashlib.sha256(encoded).hexdigest(),
        tuple(pixels.shape),
    )


def summarize_error(row):
    return row["path"], row["relpath"], row["reason"], bool(row["error"])


def convert_pipeline(p, sources, labels, layout, options=ImageOptions(), splits=SPLITS):
    """(record summaries, error summaries) of ConvertFn over ``sources``."""
    label_names = p | "Labels" >> beam.Create([labels])
    out = (
        p
        | "Sources" >> beam.Create(sources)
        | "Convert"
        >> beam.ParDo(
            ConvertFn(ImageConverter(options, layout, splits, SEED)), label_names=beam.pvalue.AsSingleton(label_names)
        ).with_outputs(ERRORS, main="records")
    )
    return out.records | "Summarize" >> beam.Map(summarize_record), out[ERRORS] | "Errors" >> beam.Map(summarize_error)


ALL_KEYS = tuple(sorted(keys.FEATURES))


def expected_record(rel, data, class_name, label, height, width, fmt, split=None, options=ImageOptions()):
    sha = convert_image(data, options).sha256
    return (
        split or assign_split(rel, SEED, SPLITS),
        class_name,
        ALL_KEYS,
        label,
        class_name,
        rel,
        fmt,
        height,
        width,
        options.channels,
        sha,
        sha,
        (height, width, options.channels),
    )


@pytest.mark.e2e
def test_convert_image_fn_class_layout(tmp_path):
    bad = {
        "dog/broken.jpg": I.truncated_jpeg(),
        "dog/notes.jpg": I.text_as_jpg(),
        "dog/empty.jpg": I.empty(),
        "cat/bomb.png": I.png_bomb(),
        "cat/corrupt.jpg": I.corrupt_jpeg(),
    }
    sources = source_files(tmp_path, {**IMAGES, **bad})
    path = {s.relpath: s.path for s in sources}
    labels = ["bird", "cat", "dog"]
    expected = [
        expected_record("cat/a.jpg", IMAGES["cat/a.jpg"], "cat", 1, 30, 40, "jpeg"),
        expected_record("cat/b.png", IMAGES["cat/b.png"], "cat", 1, 10, 20, "png"),
        expected_record("dog/c.jpg", IMAGES["dog/c.jpg"], "dog", 2, 30, 20, "jpeg"),  # EXIF 6: upright is 20x30
        expected_record("dog/sub/d.png", IMAGES["dog/sub/d.png"], "dog", 2, 8, 12, "png"),
        expected_record("bird/e.gif", IMAGES["bird/e.gif"], "bird", 0, 12, 16, "png"),
    ]
    # A JPEG that needs no change is stored as the very file.
    assert expected[0][11] == hashlib.sha256(IMAGES["cat/a.jpg"]).hexdigest()
    assert len({e[0] for e in expected}) > 1, "the seed should spread these files over more than one split"
    expected_errors = [
        (path["dog/broken.jpg"], "dog/broken.jpg", "truncated", True),
        (path["dog/notes.jpg"], "dog/notes.jpg", "not_an_image", True),
        (path["dog/empty.jpg"], "dog/empty.jpg", "empty_file", True),
        (path["cat/bomb.png"], "cat/bomb.png", "too_many_pixels", True),
        (path["cat/corrupt.jpg"], "cat/corrupt.jpg", "corrupt", True),
        (path["root.jpg"], "root.jpg", "no_class_folder", True),
    ]
    with pipeline() as p:
        records, errors = convert_pipeline(p, sources, labels, LAYOUT_CLASS)
        assert_that(records, equal_to(expected), label="records")
        assert_that(errors, equal_to(expected_errors), label="errors")


@pytest.mark.parametrize("exact", [False, True], ids=["encoder_input", "exact"])
def test_converter_attaches_pixel_sums_to_the_analysed_split_only(tmp_path, exact):
    """Records of ``sums_split`` carry an analysis row: the Example without its image bytes, plus the sums.

    The sums of a re-encoded JPEG are those of the pixels given to the encoder, or with
    ``exact_sums`` those of its stored bytes as TensorFlow decodes them.
    """
    from img2tfrecord.schemas import transformed as names

    files = {f"cat/{i}.jpg": I.jpeg(40 + i, 30) for i in range(12)}
    sources = source_files(tmp_path, files)
    options = ImageOptions(size=(24, 16), format="jpeg")
    converter = ImageConverter(options, LAYOUT_CLASS, SPLITS, SEED, sums_split="train", exact_sums=exact)
    plain = ImageConverter(options, LAYOUT_CLASS, SPLITS, SEED)
    splits = set()
    for source in sources:
        tag, (split, class_name, serialized, analysis) = converter(source, ["cat"])
        assert tag is None and class_name == "cat"
        assert plain(source, ["cat"]) == (None, (split, class_name, serialized, None))
        splits.add(split)
        if split != "train":
            assert analysis is None
            continue
        example = tf.train.Example.FromString(serialized)
        stored = example.features.feature[keys.IMAGE_ENCODED].bytes_list.value[0]
        merged = tf.train.Example.FromString(analysis).features.feature  # the record without its image bytes
        decoded = tf.io.decode_jpeg(stored, dct_method="INTEGER_ACCURATE").numpy().reshape(-1, 3).astype(np.int64)
        encoded = np.asarray(convert_image(files[source[1]], options, keep_pixels=True).pixels).reshape(-1, 3)
        pixels = decoded if exact else encoded.astype(np.int64)
        assert list(merged[names.PIXEL_SUM].int64_list.value) == pixels.sum(0).tolist()
        assert list(merged[names.PIXEL_SQUARE_SUM].int64_list.value) == (pixels * pixels).sum(0).tolist()
        if not exact:  # the JPEG loss: the encoder's input and the stored image differ a little
            assert not np.array_equal(encoded, decoded)
            np.testing.assert_allclose(encoded.mean(0), decoded.mean(0), atol=2.0)
        assert merged[keys.IMAGE_ENCODED].bytes_list.value == [b""]
        for key in example.features.feature:  # the record's other features are untouched
            if key not in (keys.IMAGE_ENCODED, keys.KEY_SHA256):  # the row's key is of its empty bytes
                assert merged[key] == example.features.feature[key]
        assert set(merged) == set(example.features.feature) | set(names.ANALYSIS_FEATURES)
    assert "train" in splits and len(splits) > 1


@pytest.mark.e2e
def test_convert_image_fn_split_layout_resized_gray(tmp_path):
    files = {
        "train/cat/1.jpg": I.jpeg(64, 48),
        "val/dog/2.png": I.png(50, 50, mode="RGBA"),
        "validation/dog/3.bmp": I.bmp(30, 60),
        "test/cat/4.jpg": I.jpeg(80, 40, exif_orientation=8),
        "train/loose.jpg": I.jpeg(8, 8),
        "other/cat/5.jpg": I.jpeg(8, 8),
    }
    sources = source_files(tmp_path, files)
    path = {s.relpath: s.path for s in sources}
    options = ImageOptions(size=(24, 16), resize="fit", channels=1, format="png")

    def rec(rel, split, class_name, label):
        return expected_record(rel, files[rel], class_name, label, 16, 24, "png", split=split, options=options)

    expected = [
        rec("train/cat/1.jpg", "train", "cat", 0),
        rec("val/dog/2.png", "validation", "dog", 1),
        rec("validation/dog/3.bmp", "validation", "dog", 1),
        rec("test/cat/4.jpg", "test", "cat", 0),
    ]
    expected_errors = [
        (path["train/loose.jpg"], "train/loose.jpg", "no_class_folder", True),
        (path["other/cat/5.jpg"], "other/cat/5.jpg", "no_class_folder", True),
    ]
    with pipeline() as p:
        records, errors = convert_pipeline(p, sources, ["cat", "dog"], LAYOUT_SPLIT, options=options)
        assert_that(records, equal_to(expected), label="records")
        assert_that(errors, equal_to(expected_errors), label="errors")


@pytest.mark.e2e
def test_convert_image_fn_unknown_class_gone_and_too_large(tmp_path):
    files = {"cat/a.jpg": I.jpeg(40, 30), "zebra/z.jpg": I.jpeg(10, 10), "cat/big.png": I.png(64, 64, I.noise(64, 64))}
    sources = source_files(tmp_path, files)
    path = {s.relpath: s.path for s in sources}
    sources.append(WorkItem(str(tmp_path / "cat" / "gone.jpg"), "cat/gone.jpg", 10))  # listed, then deleted
    options = ImageOptions(max_file_bytes=len(files["cat/a.jpg"]))
    assert len(files["cat/big.png"]) > options.max_file_bytes
    expected = [expected_record("cat/a.jpg", files["cat/a.jpg"], "cat", 0, 30, 40, "jpeg", options=options)]
    expected_errors = [
        (path["zebra/z.jpg"], "zebra/z.jpg", "unknown_class", True),
        (path["cat/big.png"], "cat/big.png", "file_too_large", True),
        (str(tmp_path / "cat" / "gone.jpg"), "cat/gone.jpg", "not_found", True),
    ]
    with pipeline() as p:
        records, errors = convert_pipeline(p, sources, ["cat", "dog"], LAYOUT_CLASS, options=options)
        assert_that(records, equal_to(expected), label="records")
        assert_that(errors, equal_to(expected_errors), label="errors")


def test_records_parse_with_the_declared_feature_spec(tmp_path):
    # The same records through tf.io.parse_single_example with the schema's spec.
    sources = source_files(tmp_path, {"cat/a.jpg": I.jpeg(40, 30), "dog/b.png": I.png(12, 8)})
    fn = ConvertFn(ImageConverter(ImageOptions(), LAYOUT_CLASS, SPLITS, SEED))
    fn.setup()
    records = [r for s in sources for r in fn.process(s, ["cat", "dog"])]
    assert len(records) == 2
    spec = keys.feature_spec()
    for (_, class_name, serialized, _), source in zip(records, sources):
        parsed = tf.io.parse_single_example(serialized, spec)
        assert parsed[keys.FILENAME].numpy().decode() == source.relpath
        assert parsed[keys.CLASS_TEXT].numpy().decode() == class_name
        assert int(parsed[keys.CLASS_LABEL]) == ["cat", "dog"].index(class_name)


def test_a_launchs_junk_is_one_count_and_counted_as_skipped():
    from img2tfrecord.transforms.counters import INPUTS_SKIPPED, NAMESPACE
    from img2tfrecord.transforms.discover import JunkCount

    p = pipeline()
    counts = p | JunkCount(3)
    assert_that(counts, equal_to([3]))
    result = p.run()
    result.wait_until_finish()
    query = beam.metrics.MetricsFilter().with_namespace(NAMESPACE).with_name(INPUTS_SKIPPED)
    assert sum(c.committed for c in result.metrics().query(query)["counters"]) == 3
