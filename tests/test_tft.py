"""The tf.Transform analysis of ``convert`` (transforms/analyze.py, analysis_totals.py), ``load(transform=True)``.

Real CLI runs on the generated sample dataset; every expectation is
recomputed here with NumPy from the records themselves.
"""

from __future__ import annotations

import os
import random

import conftest
import numpy as np
import pytest
from helpers.cli import run_in_process
from PIL import Image

from img2tfrecord.readers.records import read_manifest
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import labels as label_map
from img2tfrecord.schemas import output_files
from img2tfrecord.schemas import transformed as names

tf = pytest.importorskip("tensorflow")
tft = pytest.importorskip("tensorflow_transform")

from img2tfrecord.readers.tfdata import decode_encoded  # noqa: E402  (after the TensorFlow skip)


def convert(*args, **kwargs):
    """``conftest.convert`` with the tf.Transform analysis: every run here is about the analysis."""
    return conftest.convert(*args, analyze=True, **kwargs)


SIZE = 64  # converted_sample: --image-size 64
HEIGHT, WIDTH = 32, 40  # the --exact-statistics run: --image-size 40x32 is width x height, not a square
# The other runs in one process: converted_sample is analysed with a worker process per core.
ONE_PROCESS = ("--processes", "1")


def parsed_split(out, split):
    """Every record of ``split`` as one batch parsed with the raw feature spec (dict of tensors)."""
    doc = read_manifest(out)
    files = [os.path.join(out, s.file) for s in doc.splits[split].shards]
    serialized = list(tf.data.TFRecordDataset(files))
    assert serialized, f"no {split} records"
    return tf.io.parse_example(tf.stack(serialized), keys.feature_spec())


def decoded(parsed, channels=3):
    """The stored images as uint8 arrays, decoded the way ``load`` decodes them (accurate-DCT JPEG)."""
    images = []
    for encoded, fmt, h, w in zip(
        parsed[keys.IMAGE_ENCODED].numpy(),
        parsed[keys.IMAGE_FORMAT].numpy(),
        parsed[keys.IMAGE_HEIGHT].numpy(),
        parsed[keys.IMAGE_WIDTH].numpy(),
    ):
        if fmt == keys.FORMAT_RAW.encode():
            images.append(np.frombuffer(encoded, np.uint8).reshape(h, w, channels))
        else:
            images.append(decode_encoded(encoded, channels).numpy())
    return images


def moments(images):
    """Per-channel mean and std in [0, 1] over every pixel of every image (float64)."""
    pixels = np.concatenate([im.reshape(-1, im.shape[-1]) for im in images]).astype(np.float64) / 255.0
    return pixels.mean(0), pixels.std(0)


def flat_pixels(image_tensor):
    values = image_tensor.flat_values if isinstance(image_tensor, tf.RaggedTensor) else image_tensor
    values = values.numpy()
    return values.reshape(-1, values.shape[-1]).astype(np.float64)


@pytest.fixture(scope="module")
def analysed(converted_sample):
    """The sample dataset at 64x64 JPEG, three splits, two shards each, analysed (convert's default)."""
    return converted_sample


@pytest.fixture(scope="module")
def layer(analysed):
    return tft.TFTransformOutput(analysed).transform_features_layer()


def test_tft_output_loads(analysed):
    for path in (
        os.path.join(output_files.TRANSFORM_FN_DIR, "saved_model.pb"),
        output_files.TRANSFORMED_METADATA_DIR,
        os.path.join(output_files.RAW_METADATA_DIR, output_files.SCHEMA_FILE),
        output_files.SCHEMA_FILE,
        output_files.SUCCESS_FILE,
    ):
        assert os.path.exists(os.path.join(analysed, path)), path
    # Temp and staging folders are gone; everything left is a name --overwrite may delete.
    for name in os.listdir(analysed):
        assert output_files.is_output_file(name) and not name.startswith(output_files.TEMP_PREFIXES), name
    assert output_files.TRANSFORM_STAGING_DIR not in os.listdir(analysed)

    output = tft.TFTransformOutput(analysed)
    assert output.raw_feature_spec() == keys.feature_spec()
    assert output.transformed_feature_spec() == {
        names.IMAGE: tf.io.FixedLenFeature([SIZE, SIZE, 3], tf.float32),
        names.LABEL: tf.io.FixedLenFeature([], tf.int64),
    }

    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    with open(os.path.join(analysed, output_files.SCHEMA_FILE), encoding="utf-8") as f:
        text = f.read()
    schema = text_format.Parse(text, schema_pb2.Schema())
    assert sorted(f.name for f in schema.feature) == sorted(keys.FEATURES)
    with open(os.path.join(analysed, output_files.RAW_METADATA_DIR, output_files.SCHEMA_FILE), encoding="utf-8") as f:
        assert f.read() == text

    doc = read_manifest(analysed)
    assert doc.options["analyze"] is True
    stats = doc.statistics
    assert stats["split"] == "train" and stats["label_vocabulary"] == names.LABEL_VOCABULARY
    assert stats["files"]["transform_fn"] == output_files.TRANSFORM_FN_DIR


def test_label_vocabulary_equals_labels_txt(analysed, layer):
    with open(os.path.join(analysed, output_files.LABELS_FILE), encoding="utf-8") as f:
        labels_txt = label_map.parse_labels_text(f.read())
    vocabulary = tft.TFTransformOutput(analysed).vocabulary_by_name(names.LABEL_VOCABULARY)
    assert [v.decode("utf-8") for v in vocabulary] == labels_txt == list(read_manifest(analysed).labels)
    for split in ("train", "validation", "test"):
        parsed = parsed_split(analysed, split)
        labels = layer(parsed)[names.LABEL].numpy()
        np.testing.assert_array_equal(labels, parsed[keys.CLASS_LABEL].numpy())
        texts = [t.decode("utf-8") for t in parsed[keys.CLASS_TEXT].numpy()]
        assert [labels_txt[i] for i in labels] == texts


def encoder_inputs(sample_dir, parsed, options):
    """The pixels the converter gave the JPEG encoder for each parsed record, from its source file."""
    from img2tfrecord.images.convert import convert_image

    images = []
    for relpath in parsed[keys.FILENAME].numpy():
        with open(os.path.join(sample_dir, relpath.decode("utf-8")), "rb") as f:
            images.append(np.asarray(convert_image(f.read(), options, keep_pixels=True).pixels))
    return images


def test_statistics_agree_with_numpy(analysed, sample_dir):
    """By default a re-encoded JPEG counts with the pixels given to its encoder: exactly their
    moments, and within the JPEG loss of the moments of the decoded records."""
    from img2tfrecord.images.options import ImageOptions

    doc = read_manifest(analysed)
    stats = doc.statistics
    assert stats["exact"] is False and doc.options["exact_statistics"] is False
    parsed = parsed_split(analysed, "train")
    mean, std = moments(encoder_inputs(sample_dir, parsed, ImageOptions(size=(SIZE, SIZE), format="jpeg")))
    np.testing.assert_allclose(stats["pixel_mean"], mean, rtol=0, atol=1e-9)
    np.testing.assert_allclose(stats["pixel_std"], std, rtol=0, atol=1e-9)
    images = decoded(parsed)
    stored_mean, stored_std = moments(images)
    # The sample's 64x64 images of flat shapes with hard colour edges are about the worst case
    # for 4:2:0 chroma subsampling: std here is 3% above the decoded images' in one channel
    # (0.45% on photo-like 224x224 images, benchmarks/bench_analyze.py).
    np.testing.assert_allclose(stats["pixel_mean"], stored_mean, rtol=0, atol=2e-3)
    np.testing.assert_allclose(stats["pixel_std"], stored_std, rtol=8e-2, atol=0)
    assert stats["num_examples"] == len(images) == doc.splits["train"].num_examples
    assert stats["image_height"] == stats["image_width"] == {"min": SIZE, "max": SIZE}
    expected = {name: 0 for name in doc.labels}
    expected.update(doc.splits["train"].examples_per_class)
    assert stats["examples_per_class"] == expected
    assert list(stats["examples_per_class"]) == list(doc.labels)  # vocabulary order


def test_transformed_train_images_are_standardised(analysed, layer):
    image = layer(parsed_split(analysed, "train"))[names.IMAGE]
    assert image.dtype == tf.float32 and image.shape[1:] == (SIZE, SIZE, 3)
    pixels = flat_pixels(image)
    # Within the JPEG loss (see test_statistics_agree_with_numpy); exactly with --exact-statistics.
    np.testing.assert_allclose(pixels.mean(0), 0.0, atol=1e-2)
    np.testing.assert_allclose(pixels.std(0), 1.0, atol=8e-2)


def test_exact_statistics_are_those_of_the_decoded_records(sample_dir, tmp_path):
    """--exact-statistics: the moments of the stored JPEGs as load() decodes them, and a transform
    that standardises the train split exactly, height before width."""
    out = str(tmp_path / "out")
    proc = convert(
        sample_dir,
        out,
        "--image-size",
        f"{WIDTH}x{HEIGHT}",
        "--format",
        "jpeg",
        "--exact-statistics",
        "--splits",
        "train=0.6,validation=0.2,test=0.2",
        "--seed",
        "3",
        "-q",
        *ONE_PROCESS,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = read_manifest(out)
    stats = doc.statistics
    assert stats["exact"] is True and doc.options["exact_statistics"] is True
    assert stats["image_height"] == {"min": HEIGHT, "max": HEIGHT}
    assert stats["image_width"] == {"min": WIDTH, "max": WIDTH}
    assert "  of the stored pixels, as load() decodes them" in run_in_process("inspect", out).stdout.splitlines()
    parsed = parsed_split(out, "train")
    mean, std = moments(decoded(parsed))
    np.testing.assert_allclose(stats["pixel_mean"], mean, rtol=0, atol=1e-9)
    np.testing.assert_allclose(stats["pixel_std"], std, rtol=0, atol=1e-9)
    output = tft.TFTransformOutput(out)
    assert output.transformed_feature_spec()[names.IMAGE] == tf.io.FixedLenFeature([HEIGHT, WIDTH, 3], tf.float32)
    image = output.transform_features_layer()(parsed)[names.IMAGE]
    assert image.shape[1:] == (HEIGHT, WIDTH, 3)
    pixels = flat_pixels(image)
    np.testing.assert_allclose(pixels.mean(0), 0.0, atol=1e-4)
    np.testing.assert_allclose(pixels.std(0), 1.0, atol=1e-4)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--no-analyze"], "--exact-statistics applies to the analysis, which --no-analyze skips"),
        (["--sequence"], "--exact-statistics applies to the analysis, and --sequence records are not analysed"),
    ],
)
def test_exact_statistics_without_an_analysis_is_a_usage_error(sample_dir, tmp_path, flags, message):
    out = str(tmp_path / "out")
    proc = convert(sample_dir, out, "--exact-statistics", *flags)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].endswith(message), proc.stderr
    assert not os.path.exists(out)


@pytest.mark.parametrize("split", ["validation", "test"])
def test_other_splits_use_the_train_statistics(analysed, layer, split):
    stats = read_manifest(analysed).statistics
    parsed = parsed_split(analysed, split)
    images = np.stack(decoded(parsed)).astype(np.float64) / 255.0
    got = layer(parsed)[names.IMAGE].numpy()
    with_train = (images - np.array(stats["pixel_mean"])) / np.array(stats["pixel_std"])
    np.testing.assert_allclose(got, with_train, atol=1e-5)
    own_mean, own_std = moments(decoded(parsed))
    with_own = (images - own_mean) / own_std
    assert np.abs(got - with_own).max() > 1e-3  # not the split's own statistics


def test_load_with_transform(analysed, layer):
    import img2tfrecord

    parsed = parsed_split(analysed, "validation")
    expected = layer(parsed)[names.IMAGE].numpy()
    by_key = {k.decode(): i for i, k in enumerate(parsed[keys.KEY_SHA256].numpy())}

    ds = img2tfrecord.load(analysed, split="validation", batch_size=4, transform=True, shuffle=False, as_dict=True)
    seen = 0
    for batch in ds:
        assert batch[names.IMAGE].shape[1:] == (SIZE, SIZE, 3)
        np.testing.assert_array_equal(batch[names.LABEL].numpy(), batch[keys.CLASS_LABEL].numpy())
        for key, image in zip(batch[keys.KEY_SHA256].numpy(), batch[names.IMAGE].numpy()):
            np.testing.assert_allclose(image, expected[by_key[key.decode()]], atol=1e-6)
            seen += 1
    assert seen == len(expected)

    images, labels = next(iter(img2tfrecord.load(analysed, split="train", batch_size=None, transform=True)))
    assert images.shape == (SIZE, SIZE, 3) and labels.dtype == tf.int64
    images, _ = next(iter(img2tfrecord.load(analysed, split="train", batch_size=2, image_size=16, transform=True)))
    assert images.shape == (2, 16, 16, 3)


def test_serving_needs_only_the_encoded_image(analysed, layer):
    parsed = parsed_split(analysed, "test")
    full = layer(parsed)[names.IMAGE].numpy()
    served = layer({keys.IMAGE_ENCODED: parsed[keys.IMAGE_ENCODED]})
    assert set(served) == {names.IMAGE}
    np.testing.assert_array_equal(served[names.IMAGE].numpy(), full)


def test_mixed_sizes_raw_pixels_then_overwrite_without_analysis(sample_dir, tmp_path):
    """No --image-size: a ragged ``image``; statistics over every pixel; then --overwrite --no-analyze."""
    import img2tfrecord

    out = str(tmp_path / "out")
    proc = convert(sample_dir, out, "--format", "raw", *ONE_PROCESS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stats = read_manifest(out).statistics
    parsed = parsed_split(out, "train")
    images = decoded(parsed)
    mean, std = moments(images)
    assert stats["exact"] is True  # raw pixels are lossless
    np.testing.assert_allclose(stats["pixel_mean"], mean, atol=1e-9)
    np.testing.assert_allclose(stats["pixel_std"], std, atol=1e-9)
    heights = [im.shape[0] for im in images]
    widths = [im.shape[1] for im in images]
    assert stats["image_height"] == {"min": min(heights), "max": max(heights)}
    assert stats["image_width"] == {"min": min(widths), "max": max(widths)}

    output = tft.TFTransformOutput(out)
    assert isinstance(output.transformed_feature_spec()[names.IMAGE], tf.io.RaggedFeature)
    image = output.transform_features_layer()(parsed)[names.IMAGE]
    assert isinstance(image, tf.RaggedTensor) and image.shape[0] == len(images)
    pixels = flat_pixels(image)
    np.testing.assert_allclose(pixels.mean(0), 0.0, atol=1e-4)
    np.testing.assert_allclose(pixels.std(0), 1.0, atol=1e-4)

    shapes = sorted(tuple(im.shape) for im in images)
    single = img2tfrecord.load(out, batch_size=None, transform=True, shuffle=False)
    assert sorted(tuple(im.shape) for im, _ in single) == shapes
    resized, _ = next(iter(img2tfrecord.load(out, batch_size=4, image_size=(24, 20), transform=True)))
    assert resized.shape == (4, 24, 20, 3)

    proc = convert(sample_dir, out, "--format", "raw", "--overwrite", "--no-analyze", *ONE_PROCESS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = read_manifest(out)
    assert doc.options["analyze"] is False and doc.statistics is None
    left = set(os.listdir(out))
    assert not left & set(output_files.ANALYSIS_FILE_NAMES), left
    with pytest.raises(ValueError, match="--no-analyze"):
        img2tfrecord.load(out, batch_size=None, transform=True)
    img2tfrecord.load(out, batch_size=None)  # the records themselves are as before


@pytest.mark.parametrize("exact", [False, True], ids=["default", "exact"])
def test_kept_originals_statistics(sample_dir, tmp_path, exact):
    """--format keep stores the original JPEG/PNG files, whose statistics are exact for what load
    decodes; the few images that must be re-encoded (orientation, mode) count with the pixels given
    to the encoder unless --exact-statistics."""
    out = str(tmp_path / "out")
    flags = ["--exact-statistics"] if exact else []
    proc = convert(sample_dir, out, "--format", "keep", "--splits", "train=0.7,test=0.3", *flags, *ONE_PROCESS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    parsed = parsed_split(out, "train")
    assert set(parsed[keys.IMAGE_FORMAT].numpy()) == {b"jpeg", b"png"}  # both kinds of original kept
    mean, std = moments(decoded(parsed))
    stats = read_manifest(out).statistics
    assert stats["exact"] is exact
    if exact:
        np.testing.assert_allclose(stats["pixel_mean"], mean, rtol=0, atol=1e-9)
        np.testing.assert_allclose(stats["pixel_std"], std, rtol=0, atol=1e-9)
    else:  # the re-encoded fifth of the sample (grayscale and EXIF-rotated JPEGs) within the JPEG loss
        np.testing.assert_allclose(stats["pixel_mean"], mean, rtol=0, atol=2e-3)
        np.testing.assert_allclose(stats["pixel_std"], std, rtol=2e-2, atol=0)
        assert not np.allclose(stats["pixel_std"], std, rtol=0, atol=1e-9)  # they did count differently


def test_no_train_split_skips_the_analysis(tmp_path):
    root = tmp_path / "in"
    rng = random.Random(0)
    for split in ("validation", "test"):
        for name in ("a", "b"):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(2):
                Image.new("RGB", (20, 16), tuple(rng.randrange(256) for _ in range(3))).save(folder / f"{i}.png")
    out = str(tmp_path / "out")
    proc = convert(str(root), out, *ONE_PROCESS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "skipping the tf.Transform analysis" in proc.stderr
    doc = read_manifest(out)
    assert doc.statistics is None and sorted(doc.splits) == ["test", "validation"]
    assert not set(os.listdir(out)) & set(output_files.ANALYSIS_FILE_NAMES)


# ---------------------------------------------------------------------------
# The statistics arithmetic, without a pipeline.


def test_pixel_moments_are_exact():
    from img2tfrecord.conversion.run_totals import pixel_moments

    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, size=(100_000, 3))
    sums = [int(v) for v in pixels.sum(0)]
    squares = [int(v) for v in (pixels * pixels).sum(0)]
    mean, std = pixel_moments(len(pixels), sums, squares)
    np.testing.assert_allclose(mean, (pixels / 255.0).mean(0), rtol=1e-12)
    np.testing.assert_allclose(std, (pixels / 255.0).std(0), rtol=1e-12)
    assert pixel_moments(0, [0], [0]) == ([0.0], [0.0])
    assert pixel_moments(4, [40], [400]) == ([40 / (4 * 255)], [0.0])  # a constant channel


def test_totals_do_not_depend_on_batching():
    from img2tfrecord.conversion.run_totals import statistics_json
    from img2tfrecord.transforms.analysis_totals import TotalsCombineFn

    rng = np.random.default_rng(1)

    def batch(n):
        h, w = rng.integers(1, 50, n), rng.integers(1, 50, n)
        sums = rng.integers(0, 10_000, (n, 3))
        classes = rng.choice([b"x", b"y"], n)
        names_, counts = np.unique(classes, return_counts=True)
        return [
            np.int64(n),
            np.int64((h * w).sum()),
            sums.sum(0),
            (sums * 3).sum(0),
            h.min(),
            h.max(),
            w.min(),
            w.max(),
            names_.astype(object),
            counts,
        ]

    batches = [batch(n) for n in (3, 1, 7, 2)] + [
        [np.int64(0), np.int64(0), np.zeros(3), np.zeros(3), 0, 0, 0, 0, np.array([], object), np.array([], np.int64)]
    ]
    combine = TotalsCombineFn(3)
    one = combine.create_accumulator()
    for b in batches:
        one = combine.add_input(one, b)
    left, right = combine.create_accumulator(), combine.create_accumulator()
    for i, b in enumerate(batches):
        if i % 2:
            left = combine.add_input(left, b)
        else:
            right = combine.add_input(right, b)
    merged = combine.merge_accumulators([right, combine.create_accumulator(), left])
    assert statistics_json(one, ["w", "x", "y"]) == statistics_json(merged, ["w", "x", "y"])
    stats = statistics_json(merged, ["w", "x", "y"])
    assert stats["num_examples"] == 13 and stats["examples_per_class"]["w"] == 0
    assert sum(stats["examples_per_class"].values()) == 13


def test_preprocessing_fn_alone_unlabeled_mixed_sizes(tmp_path):
    """The preprocessing_fn outside convert: records without labels, images of different sizes."""
    import io

    import apache_beam as beam
    import tensorflow_transform.beam as tft_beam

    from img2tfrecord.images.options import ConvertedImage
    from img2tfrecord.images.statistics import pixel_sums
    from img2tfrecord.transforms.analyze import TransformSpec, make_preprocessing_fn

    rng = np.random.default_rng(2)
    arrays = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in ((5, 7), (6, 4), (3, 3))]

    def png(array):
        buf = io.BytesIO()
        Image.fromarray(array).save(buf, format="PNG")
        return buf.getvalue()

    metadata = tft.DatasetMetadata.from_feature_spec(
        {
            keys.IMAGE_ENCODED: tf.io.FixedLenFeature([], tf.string),
            keys.IMAGE_HEIGHT: tf.io.FixedLenFeature([], tf.int64),
            keys.IMAGE_WIDTH: tf.io.FixedLenFeature([], tf.int64),
            names.PIXEL_SUM: tf.io.FixedLenFeature([3], tf.int64),
            names.PIXEL_SQUARE_SUM: tf.io.FixedLenFeature([3], tf.int64),
        }
    )

    def row(array):  # what the analysis reads: the record's features and the image's pixel sums
        h, w, _ = array.shape
        sums, squares = pixel_sums(ConvertedImage(png(array), "png", h, w, 3))
        return {
            keys.IMAGE_ENCODED: png(array),
            keys.IMAGE_HEIGHT: h,
            keys.IMAGE_WIDTH: w,
            names.PIXEL_SUM: sums,
            names.PIXEL_SQUARE_SUM: squares,
        }

    mean, std = moments(arrays)
    by_height = {a.shape[0]: (a.reshape(-1, 3) / 255.0 - mean) / std for a in arrays}

    def check(rows):  # runs inside the pipeline
        assert len(rows) == 3
        for row in rows:
            assert set(row) == {f"{names.IMAGE}$ragged_values", f"{names.IMAGE}$row_lengths_1"}
            height = int(np.asarray(row[f"{names.IMAGE}$row_lengths_1"]).shape[0])
            values = np.asarray(row[f"{names.IMAGE}$ragged_values"]).reshape(-1, 3)
            np.testing.assert_allclose(values, by_height[height], atol=1e-5)

    from apache_beam.testing.util import assert_that

    with beam.Pipeline() as p, tft_beam.Context(temp_dir=str(tmp_path)):
        (transformed, _), _ = (
            p | beam.Create([row(a) for a in arrays]),
            metadata,
        ) | tft_beam.AnalyzeAndTransformDataset(make_preprocessing_fn(TransformSpec(labeled=False)))
        assert_that(transformed, check)
