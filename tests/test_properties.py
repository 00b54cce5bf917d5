"""Property-based tests (hypothesis): any bytes through the decode step give a record or a typed error.

The inputs are random bytes and valid images of every format damaged the
way files get damaged: bits flipped, cut short, bytes overwritten, spliced
with another file's bytes, a stretch repeated. ``convert_image`` must return
an image or raise ``ImageError`` with a known reason, and ``ConvertFn``
must emit exactly one record or one error row for a file, never raise.
"""

from __future__ import annotations

import io
import json
import os
import tempfile

import images as I
import pytest
from convert_fn import ERRORS, ConvertFn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from img2tfrecord.conversion.converter import ImageConverter
from img2tfrecord.images.convert import convert_image
from img2tfrecord.images.options import ConvertedImage, ImageError, ImageOptions
from img2tfrecord.model import WorkItem
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas.example_proto import Example

# Every reason convert_image (and reading a file) may give.
REASONS = {
    "empty_file",
    "truncated",
    "corrupt",
    "not_an_image",
    "too_many_pixels",
    "file_too_large",
    "cannot_encode",
    "decode_timeout",
    "unreadable",
}


def _seeds():
    w, h = 24, 16
    noisy = I.noise(w, h, seed=3)
    return [
        I.jpeg(w, h),
        I.jpeg(w, h, noisy),
        I.save(noisy, "JPEG", progressive=True),
        I.jpeg(w, h, exif_orientation=6),
        I.cmyk_jpeg(w, h),
        I.ycck_jpeg(w, h),
        I.png(w, h),
        I.png(w, h, noisy),
        I.png(w, h, mode="RGBA"),
        I.png(w, h, mode="P"),
        I.png(w, h, mode="I;16"),
        I.png16_rgba(w, h),
        I.png_rgb_trns(w, h, 16),
        I.apng(w, h),
        I.gif_animated(w, h),
        I.webp(w, h),
        I.save(noisy, "WEBP", quality=60),
        I.webp_animated(w, h),
        I.tiff(w, h),
        I.save(noisy, "TIFF", compression="tiff_lzw"),
        I.tiff_float(w, h, [0.0, 0.3, 0.6, 1.0]),
        I.bmp(w, h),
    ]


SEEDS = _seeds()
KEEPABLE_SEEDS = [s for s in SEEDS if Image.open(io.BytesIO(s)).format in ("JPEG", "PNG")]

OPTIONS = [
    ImageOptions(),  # keep: original bytes stored when nothing changes
    ImageOptions(format="jpeg", size=(16, 12)),
    ImageOptions(format="png", channels=1, size=(9, 9), resize="fit"),
    ImageOptions(size=(8, 8), resize="stretch", max_pixels=2000),
    ImageOptions(max_file_bytes=700),
]


@st.composite
def damaged(draw, seeds=SEEDS):
    """A valid image damaged by one to four file-damaging operations."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        op = draw(st.sampled_from(("flip", "truncate", "overwrite", "splice", "repeat")))
        pos = draw(st.integers(0, len(data) - 1))
        if op == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del data[pos:]
        elif op == "overwrite":
            chunk = draw(st.binary(min_size=1, max_size=32))
            data[pos : pos + len(chunk)] = chunk
        elif op == "splice":
            other = draw(st.sampled_from(SEEDS))
            start = draw(st.integers(0, len(other) - 1))
            data[pos:pos] = other[start : start + draw(st.integers(1, 256))]
        else:
            end = min(len(data), pos + draw(st.integers(1, 64)))
            data[pos:pos] = data[pos:end]
    return bytes(data)


ANY_BYTES = st.one_of(st.binary(max_size=2048), damaged(), st.sampled_from(SEEDS))
# In CI (CI=true) the examples are derandomised: the same fixed budget of examples on every run.
SETTINGS = dict(
    deadline=None,
    database=None,
    derandomize=os.environ.get("CI", "").lower() == "true",
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(autouse=True)
def _restore_pillow_limit(monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", Image.MAX_IMAGE_PIXELS)


def _check_converted(c: ConvertedImage, options: ImageOptions) -> None:
    assert isinstance(c, ConvertedImage) and c.encoded and c.width > 0 and c.height > 0
    assert c.channels == options.channels
    if options.size is not None:
        assert (c.width, c.height) == options.size
    img = Image.open(io.BytesIO(c.encoded))
    img.load()
    assert img.format == {"jpeg": "JPEG", "png": "PNG"}[c.format] or img.format == "MPO"
    assert img.size == (c.width, c.height)


@settings(max_examples=250, **SETTINGS)
@given(data=ANY_BYTES, options=st.sampled_from(OPTIONS))
def test_convert_image_gives_an_image_or_a_typed_error(data, options):
    try:
        c = convert_image(data, options)
    except ImageError as e:
        assert e.reason in REASONS, e.reason
        assert e.message and str(e) == e.message
    else:
        _check_converted(c, options)


@settings(max_examples=120, **SETTINGS)
@given(data=st.one_of(damaged(KEEPABLE_SEEDS), st.sampled_from(KEEPABLE_SEEDS)))
def test_kept_bytes_always_decode_in_tensorflow(data):
    """With --format keep the file itself is stored: what passes must decode where it is read, in TensorFlow."""
    tf = pytest.importorskip("tensorflow")
    try:
        c = convert_image(data, ImageOptions())
    except ImageError:
        return
    if c.encoded != data:
        return
    decoded = tf.io.decode_image(data, channels=3, expand_animations=False)
    assert tuple(decoded.shape) == (c.height, c.width, 3)


@pytest.fixture(scope="module")
def input_root():
    with tempfile.TemporaryDirectory(prefix="img2tfrecord-properties-") as root:
        os.makedirs(os.path.join(root, "cat"))
        yield root


@settings(max_examples=120, **SETTINGS)
@given(
    data=ANY_BYTES,
    options=st.sampled_from(OPTIONS),
    name=st.text(min_size=1, max_size=30).filter(lambda n: "/" not in n and "\x00" not in n and n not in (".", "..")),
)
def test_convert_fn_emits_one_record_or_one_error_row(input_root, data, options, name):
    relpath = f"cat/{name}"
    path = os.path.join(input_root, relpath)
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError:  # a name this filesystem refuses (too long in bytes, ...)
        return
    fn = ConvertFn(ImageConverter(options, "class", (("train", 1.0),), seed=0))
    fn.setup()
    try:
        outputs = list(fn.process(WorkItem(path, relpath, len(data)), label_names=["cat", "dog"]))
    finally:
        fn.teardown()
        os.unlink(path)
    assert len(outputs) == 1
    out = outputs[0]
    if getattr(out, "tag", None) == ERRORS:
        row = out.value
        assert row["reason"] in REASONS and row["error"] and row["path"] == path and row["relpath"] == relpath
        assert json.loads(json.dumps(row, ensure_ascii=True)) == row
    else:
        split, class_name, serialized = out.split, out.class_name, out.example
        assert split == "train" and class_name == "cat"
        example = Example.FromString(serialized)
        feature = example.features.feature
        assert feature[keys.FILENAME].bytes_list.value[0] == relpath.encode("utf-8")
        assert feature[keys.CLASS_LABEL].int64_list.value[0] == 0
        c = convert_image(data, options)
        assert feature[keys.IMAGE_ENCODED].bytes_list.value[0] == c.encoded
