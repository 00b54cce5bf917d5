"""``convert_image`` on real images made by Pillow in the test (see ``tests/images.py``)."""

from __future__ import annotations

import hashlib
import io

import images as I
import numpy as np
import pytest
from PIL import Image

from img2tfrecord.images.convert import convert_image
from img2tfrecord.images.options import ConvertedImage, ImageError, ImageOptions

KEEP = ImageOptions()
CORNERS = ("tl", "tr", "bl", "br")


@pytest.fixture(autouse=True)
def _restore_pillow_limit(monkeypatch):
    # convert_image may raise Pillow's process-wide decompression-bomb limit; undo it per test.
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", Image.MAX_IMAGE_PIXELS)


def decode(c: ConvertedImage) -> Image.Image:
    """The stored image decoded by Pillow, checked against the declared format, size and channels."""
    img = Image.open(io.BytesIO(c.encoded))
    img.load()
    assert img.format == {"jpeg": "JPEG", "png": "PNG"}[c.format]
    assert img.size == (c.width, c.height)
    assert img.mode == {1: "L", 3: "RGB"}[c.channels]
    assert c.sha256 == hashlib.sha256(c.encoded).hexdigest()
    return img


def quadrant_pixels(img: Image.Image):
    """Pixel at the centre of each quadrant: {'tl': ..., 'tr': ..., 'bl': ..., 'br': ...}."""
    w, h = img.size
    points = {
        "tl": (w // 4, h // 4),
        "tr": (3 * w // 4, h // 4),
        "bl": (w // 4, 3 * h // 4),
        "br": (3 * w // 4, 3 * h // 4),
    }
    return {k: img.getpixel(p) for k, p in points.items()}


def assert_close(actual, expected, tol):
    a = np.atleast_1d(np.asarray(actual, dtype=int))
    e = np.atleast_1d(np.asarray(expected, dtype=int))
    assert a.shape == e.shape and np.abs(a - e).max() <= tol, f"{actual} != {expected} (tolerance {tol})"


def assert_quadrants(img: Image.Image, colors=I.QUADRANTS, tol=0):
    got = quadrant_pixels(img)
    for corner in CORNERS:
        assert_close(got[corner], colors[corner], tol)


def gray(rgb):
    r, g, b = rgb
    return (r * 299 + g * 587 + b * 114) // 1000


# -- orientation ---------------------------------------------------------------------------------


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_gives_upright_image(orientation):
    data = I.jpeg(80, 40, exif_orientation=orientation, quality=95)
    stored = Image.open(io.BytesIO(data))
    assert stored.size == (80, 40)
    assert stored.getexif().get(0x0112) == orientation
    if orientation != 1:  # the stored pixels really are turned: only the orientation makes them upright
        raw = quadrant_pixels(stored.convert("RGB"))
        assert any(np.abs(np.subtract(raw[k], I.QUADRANTS[k])).max() > 100 for k in CORNERS)

    expected_size = (40, 80) if orientation >= 5 else (80, 40)
    for options in (KEEP, ImageOptions(format="png"), ImageOptions(channels=1, format="png")):
        c = convert_image(data, options)
        img = decode(c)
        assert img.size == expected_size, (orientation, options)
        if options.channels == 1:
            assert_quadrants(img, {k: gray(v) for k, v in I.QUADRANTS.items()}, tol=12)
        else:
            assert_quadrants(img, tol=12)
    keep = convert_image(data, KEEP)
    assert keep.format == "jpeg"
    assert (keep.encoded == data) == (orientation == 1)


@pytest.mark.parametrize("orientation", [3, 6, 8])
@pytest.mark.parametrize("resize", ["stretch", "fit", "fill"])
def test_orientation_with_resize_on_draft_path(orientation, resize):
    # A big JPEG with a target size is decoded at reduced scale (draft) before turning.
    data = I.jpeg(960, 480, exif_orientation=orientation)
    upright = (480, 960) if orientation >= 5 else (960, 480)
    size = (upright[0] // 8, upright[1] // 8)  # same aspect: every resize mode gives the plain picture
    c = convert_image(data, ImageOptions(size=size, resize=resize))
    img = decode(c)
    assert img.size == size
    assert_quadrants(img, tol=16)


# -- mode normalisation --------------------------------------------------------------------------


def test_rgba_is_composited_on_white():
    data = I.png(40, 30, mode="RGBA")
    c = convert_image(data, KEEP)
    assert c.format == "png" and c.encoded != data
    px = quadrant_pixels(decode(c))
    assert px["tl"] == I.RED  # opaque
    assert px["bl"] == I.BLUE  # opaque
    assert px["br"] == I.WHITE  # fully transparent yellow -> white background
    assert_close(px["tr"], (127, 255, 127), 1)  # green at alpha 128 over white

    gray_img = decode(convert_image(data, ImageOptions(channels=1)))
    g = quadrant_pixels(gray_img)
    assert g["br"] == 255 and g["tl"] == gray(I.RED)


def test_la_is_composited_on_white():
    c = convert_image(I.png(40, 30, mode="LA"), KEEP)
    px = quadrant_pixels(decode(c))
    assert px["tl"] == (230,) * 3 and px["tr"] == (160,) * 3 and px["bl"] == (90,) * 3
    assert px["br"] == I.WHITE  # transparent
    one = quadrant_pixels(decode(convert_image(I.png(40, 30, mode="LA"), ImageOptions(channels=1))))
    assert one == {"tl": 230, "tr": 160, "bl": 90, "br": 255}


def test_palette_with_transparency():
    data = I.png(40, 30, mode="P")
    src = Image.open(io.BytesIO(data))
    assert src.mode == "P" and "transparency" in src.info
    px = quadrant_pixels(decode(convert_image(data, KEEP)))
    assert px == {"tl": I.RED, "tr": I.GREEN, "bl": I.BLUE, "br": I.WHITE}


def test_palette_without_transparency_gif_first_frame():
    data = I.gif_animated(40, 30)
    src = Image.open(io.BytesIO(data))
    assert src.format == "GIF" and src.n_frames == 2
    c = convert_image(data, KEEP)
    assert c.format == "png"
    assert_quadrants(decode(c))  # the first frame, not the solid blue second one


@pytest.mark.parametrize("channels", [1, 3])
def test_16bit_png_keeps_top_byte(channels):
    data = I.png(40, 30, mode="I;16")
    assert Image.open(io.BytesIO(data)).mode == "I;16"
    c = convert_image(data, ImageOptions(channels=channels))
    img = decode(c)
    expected = {k: v >> 8 for k, v in I.GRAY16_QUADRANTS.items()}  # 0x12, 0x56, 0x9A, 0xDE
    if channels == 3:
        expected = {k: (v,) * 3 for k, v in expected.items()}
    assert quadrant_pixels(img) == expected


def test_dark_16bit_png_stays_dark():
    # Every value fits in the low byte: a 16-bit image this dark is (nearly) black, not bright.
    arr = np.array([[16, 128], [200, 255]], dtype=np.uint16).repeat(10, 0).repeat(10, 1)
    data = I.save(Image.fromarray(arr), "PNG")
    img = decode(convert_image(data, ImageOptions(channels=1)))
    assert np.asarray(img).max() == 0
    arr[0, 0] = 0xFF00  # one bright pixel: still the top byte everywhere
    img = decode(convert_image(I.save(Image.fromarray(arr), "PNG"), ImageOptions(channels=1)))
    assert img.getpixel((0, 0)) == 0xFF and img.getpixel((19, 19)) == 0


def test_cmyk_jpeg_becomes_rgb_jpeg():
    data = I.cmyk_jpeg(40, 30)
    assert Image.open(io.BytesIO(data)).mode == "CMYK"
    c = convert_image(data, KEEP)
    assert c.format == "jpeg" and c.channels == 3 and c.encoded != data
    assert_quadrants(decode(c), tol=12)


def test_one_bit_png():
    data = I.png(40, 30, mode="1")
    img = decode(convert_image(data, KEEP))
    assert img.mode == "RGB"
    assert quadrant_pixels(img) == {"tl": I.WHITE, "tr": I.BLACK, "bl": I.WHITE, "br": I.BLACK}
    one = decode(convert_image(data, ImageOptions(channels=1)))
    assert quadrant_pixels(one) == {"tl": 255, "tr": 0, "bl": 255, "br": 0}


def test_32bit_integer_tiff():
    data = I.tiff_int32(40, 30, [0, 1000, 30000, 65535])
    assert Image.open(io.BytesIO(data)).mode == "I"
    img = decode(convert_image(data, ImageOptions(channels=1)))
    assert quadrant_pixels(img) == {"tl": 0, "tr": 1000 >> 8, "bl": 30000 >> 8, "br": 255}


def test_float_tiff():
    data = I.tiff_float(40, 30, [0.0, 0.25, 0.5, 1.0])
    assert Image.open(io.BytesIO(data)).mode == "F"
    img = decode(convert_image(data, KEEP))
    px = quadrant_pixels(img)
    for corner, value in zip(CORNERS, [0.0, 0.25, 0.5, 1.0]):
        assert_close(px[corner], (round(value * 255),) * 3, 1)


@pytest.mark.parametrize("make", [I.tiff, I.webp, I.bmp], ids=["tiff", "webp", "bmp"])
def test_other_formats_become_png(make):
    data = make(40, 30)
    c = convert_image(data, KEEP)
    assert c.format == "png" and (c.width, c.height, c.channels) == (40, 30, 3)
    assert_quadrants(decode(c))


def test_mpo_camera_jpeg_is_kept_as_jpeg():
    # Phone and camera photos often carry a second picture (MPO); they are still JPEG files.
    first, second = I.picture(64, 48), Image.new("RGB", (64, 48), I.BLUE)
    data = I.save(first, "MPO", save_all=True, append_images=[second])
    assert Image.open(io.BytesIO(data)).format == "MPO"
    c = convert_image(data, KEEP)
    assert c.format == "jpeg" and c.encoded == data
    small = convert_image(data, ImageOptions(size=(32, 24)))
    assert small.format == "jpeg"
    assert_quadrants(decode(small), tol=16)


def test_channels_1_gives_l():
    c = convert_image(I.jpeg(40, 30, quality=95), ImageOptions(channels=1))
    assert c.channels == 1 and c.format == "jpeg"
    img = decode(c)
    assert_quadrants(img, {k: gray(v) for k, v in I.QUADRANTS.items()}, tol=6)


# -- resize --------------------------------------------------------------------------------------


@pytest.mark.parametrize("resize", ["stretch", "fit", "fill"])
@pytest.mark.parametrize("size", [(32, 32), (50, 20), (17, 61), (400, 300)])
@pytest.mark.parametrize("make", [I.png, I.jpeg], ids=["png", "jpeg"])
def test_resize_gives_exact_size(resize, size, make):
    c = convert_image(make(120, 80), ImageOptions(size=size, resize=resize))
    assert (c.width, c.height) == size
    assert decode(c).size == size


def test_stretch_keeps_quadrants_in_place():
    img = decode(convert_image(I.png(120, 80), ImageOptions(size=(30, 70), resize="stretch", format="png")))
    assert img.size == (30, 70)
    assert_quadrants(img, tol=2)


@pytest.mark.parametrize("channels", [1, 3])
def test_fit_pads_with_black_and_keeps_aspect(channels):
    data = I.png(300, 100, I.RED)
    img = decode(convert_image(data, ImageOptions(size=(60, 60), resize="fit", channels=channels)))
    arr = np.asarray(img).astype(int)
    if channels == 1:
        arr = arr[..., None]
    assert arr.shape == (60, 60, channels)
    red = (gray(I.RED),) if channels == 1 else I.RED
    # 300x100 scaled by 0.2 -> 60x20 content, centred: rows 20..39; rows above and below are black
    assert (arr[:20] == 0).all() and (arr[40:] == 0).all()
    assert (np.abs(arr[21:39] - np.array(red)) <= 2).all()
    # and in the other direction: a tall image gets black columns
    tall = decode(convert_image(I.png(50, 100, I.RED), ImageOptions(size=(40, 40), resize="fit", channels=channels)))
    arr = np.asarray(tall).astype(int)
    assert (arr[:, :10] == 0).all() and (arr[:, 30:] == 0).all()
    content = arr[:, 11:29].reshape(40, 18, -1).sum(axis=-1)
    assert (content > 50).all()


def test_fit_on_jpeg_draft_path_pads_too():
    data = I.jpeg(1600, 400, I.RED)
    img = decode(convert_image(data, ImageOptions(size=(100, 100), resize="fit", format="png")))
    arr = np.asarray(img).astype(int)
    assert img.size == (100, 100)
    assert (arr[:37] == 0).all() and (arr[63:] == 0).all()
    assert_close(arr[50, 50], I.RED, 6)


def test_fill_crops_the_centre():
    # Four vertical stripes; the centre square of the 400x200 image is exactly the two blue stripes.
    src = I.stripes(400, 200, [I.RED, I.BLUE, I.BLUE, I.GREEN])
    img = decode(convert_image(I.png(400, 200, src), ImageOptions(size=(50, 50), resize="fill")))
    arr = np.asarray(img).astype(int)
    assert img.size == (50, 50)
    # The resampling filter may blend a trace of the neighbour stripe into the outermost columns.
    assert (np.abs(arr[:, 1:-1] - np.array(I.BLUE)) <= 3).all(), "fill must crop away the red and green sides"
    assert (np.abs(arr - np.array(I.BLUE)) <= 40).all()
    # a tall image loses its top and bottom
    src = I.stripes(100, 400, [I.RED, I.BLUE, I.BLUE, I.GREEN], vertical=False)
    img = decode(convert_image(I.png(100, 400, src), ImageOptions(size=(20, 40), resize="fill")))
    arr = np.asarray(img).astype(int)
    assert (np.abs(arr[1:-1] - np.array(I.BLUE)) <= 3).all()
    assert (np.abs(arr - np.array(I.BLUE)) <= 40).all()


def test_stretch_does_not_crop():
    src = I.stripes(400, 200, [I.RED, I.BLUE, I.BLUE, I.GREEN])
    img = decode(convert_image(I.png(400, 200, src), ImageOptions(size=(40, 40), resize="stretch")))
    assert_close(img.getpixel((2, 20)), I.RED, 3)
    assert_close(img.getpixel((37, 20)), I.GREEN, 3)


def test_draft_jpeg_with_size():
    data = I.jpeg(1600, 1200)
    for size, resize in [((100, 75), "stretch"), ((64, 64), "fill"), ((80, 40), "fit"), ((200, 150), "fill")]:
        c = convert_image(data, ImageOptions(size=size, resize=resize))
        img = decode(c)
        assert img.size == size and c.format == "jpeg"
        if resize == "stretch":
            assert_quadrants(img, tol=16)


def test_same_size_is_not_resampled():
    data = I.png(40, 30)
    c = convert_image(data, ImageOptions(size=(40, 30)))
    assert c.format == "png"
    assert np.array_equal(np.asarray(decode(c)), np.asarray(Image.open(io.BytesIO(data))))


# -- format keep / jpeg / png --------------------------------------------------------------------


@pytest.mark.parametrize(
    "data,options",
    [
        (I.jpeg(64, 48), KEEP),
        (I.png(64, 48), KEEP),
        (I.jpeg(64, 48, mode="L"), ImageOptions(channels=1)),
        (I.png(64, 48, mode="L"), ImageOptions(channels=1)),
        (I.jpeg(64, 48, exif_orientation=1), KEEP),
    ],
    ids=["jpeg", "png", "gray-jpeg", "gray-png", "jpeg-orientation-1"],
)
def test_keep_stores_original_bytes(data, options):
    c = convert_image(data, options)
    assert c.encoded == data
    assert c.sha256 == hashlib.sha256(data).hexdigest()
    assert (c.width, c.height) == (64, 48)
    assert c.channels == options.channels
    assert c.format == Image.open(io.BytesIO(data)).format.lower()


@pytest.mark.parametrize(
    "data,options,fmt,mode",
    [
        (I.jpeg(64, 48, exif_orientation=6), KEEP, "jpeg", "RGB"),
        (I.png(64, 48, mode="RGBA"), KEEP, "png", "RGB"),
        (I.png(64, 48, mode="L"), KEEP, "png", "RGB"),
        (I.jpeg(64, 48, mode="L"), KEEP, "jpeg", "RGB"),
        (I.png(64, 48), ImageOptions(channels=1), "png", "L"),
        (I.jpeg(64, 48), ImageOptions(channels=1), "jpeg", "L"),
        (I.jpeg(64, 48), ImageOptions(size=(32, 24)), "jpeg", "RGB"),
        (I.png(64, 48, mode="P"), KEEP, "png", "RGB"),
        (I.cmyk_jpeg(64, 48), KEEP, "jpeg", "RGB"),
        (I.webp(64, 48), KEEP, "png", "RGB"),
    ],
    ids=[
        "exif-rotated",
        "rgba",
        "gray-png-to-rgb",
        "gray-jpeg-to-rgb",
        "rgb-png-to-l",
        "rgb-jpeg-to-l",
        "resized",
        "palette",
        "cmyk",
        "webp",
    ],
)
def test_keep_reencodes_when_something_changes(data, options, fmt, mode):
    c = convert_image(data, options)
    assert c.encoded != data
    assert c.format == fmt
    img = decode(c)
    assert img.mode == mode


SOURCES = {
    "jpeg": lambda: I.jpeg(64, 48),
    "jpeg-gray": lambda: I.jpeg(64, 48, mode="L"),
    "jpeg-rotated": lambda: I.jpeg(64, 48, exif_orientation=8),
    "png": lambda: I.png(64, 48),
    "png-rgba": lambda: I.png(64, 48, mode="RGBA"),
    "png-16": lambda: I.png(64, 48, mode="I;16"),
    "gif": lambda: I.gif_animated(64, 48),
    "bmp": lambda: I.bmp(64, 48),
}


@pytest.mark.parametrize("fmt", ["keep", "jpeg", "png"])
@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("source", sorted(SOURCES))
def test_output_decodes_as_declared(source, channels, fmt):
    import tensorflow as tf

    c = convert_image(SOURCES[source](), ImageOptions(channels=channels, format=fmt))
    if fmt != "keep":
        assert c.format == fmt
    decode(c)  # Pillow: format, size, mode
    pixels = tf.io.decode_image(c.encoded, expand_animations=False)
    assert tuple(pixels.shape) == (c.height, c.width, c.channels)
    assert pixels.dtype == tf.uint8


def _noise_jpeg(subsampling: int, progressive: bool = False) -> bytes:
    return I.save(
        I.noise(61, 47, seed=subsampling), "JPEG", quality=87, subsampling=subsampling, progressive=progressive
    )


PIXEL_SUM_SOURCES = {
    **SOURCES,
    "jpeg-noise-444": lambda: _noise_jpeg(0),
    "jpeg-noise-422": lambda: _noise_jpeg(1),
    "jpeg-noise-420-progressive": lambda: _noise_jpeg(2, progressive=True),
    "png-16-rgb-kept": lambda: I.png16_rgb(37, 29),
}


@pytest.mark.parametrize("fmt", ["keep", "jpeg", "png", "raw"])
@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("source", sorted(PIXEL_SUM_SOURCES))
def test_pixel_sums_are_those_of_the_pixels_load_decodes(source, channels, fmt):
    """The worker's exact sums (Pillow) equal NumPy sums over the pixels TensorFlow decodes for a reader."""
    import tensorflow as tf

    from img2tfrecord.images.statistics import pixel_sums
    from img2tfrecord.readers.tfdata import decode_encoded

    c = convert_image(PIXEL_SUM_SOURCES[source](), ImageOptions(channels=channels, format=fmt, size=None))
    if c.format == "raw":
        pixels = np.frombuffer(c.encoded, np.uint8).reshape(c.height, c.width, c.channels)
    else:
        pixels = decode_encoded(tf.constant(c.encoded), channels).numpy()
    assert pixels.shape == (c.height, c.width, channels)
    flat = pixels.reshape(-1, channels).astype(np.int64)
    sums, squares = pixel_sums(c)
    assert sums == flat.sum(0).tolist()
    assert squares == (flat * flat).sum(0).tolist()

    # With the encoded pixels kept (how the converter calls it): exact wherever the format is
    # lossless or the original file is stored; a re-encoded JPEG gives its encoder's input.
    data = PIXEL_SUM_SOURCES[source]()
    kept = convert_image(data, ImageOptions(channels=channels, format=fmt, size=None), keep_pixels=True)
    assert kept.encoded == c.encoded
    assert kept.pixels is not None or kept.encoded == data  # none kept only for an original stored as it is
    assert kept.pixels is not None or fmt == "keep"  # any other format is always encoded here
    assert pixel_sums(kept, exact=True) == (sums, squares)
    if kept.format == "jpeg" and kept.pixels is not None:
        encoder_input = np.asarray(kept.pixels).reshape(-1, channels).astype(np.int64)
        assert pixel_sums(kept) == (encoder_input.sum(0).tolist(), (encoder_input * encoder_input).sum(0).tolist())
    else:
        assert pixel_sums(kept) == (sums, squares)


def test_pixel_sums_reject_a_stored_image_that_is_not_what_it_claims():
    from img2tfrecord.images.statistics import pixel_sums

    gray = convert_image(I.jpeg(16, 12, mode="L"), ImageOptions(channels=1, format="jpeg"))
    with pytest.raises(ImageError, match="decodes as L 16x12, not RGB 16x12"):
        pixel_sums(ConvertedImage(gray.encoded, "jpeg", 12, 16, 3))


def test_jpeg_quality_is_used():
    src = I.noise(64, 64)
    data = I.png(64, 64, src)
    low = convert_image(data, ImageOptions(format="jpeg", quality=10))
    high = convert_image(data, ImageOptions(format="jpeg", quality=95))
    assert len(low.encoded) < len(high.encoded)


# -- bad inputs ----------------------------------------------------------------------------------

BAD = {
    "empty": (I.empty, "empty_file"),
    "truncated-jpeg": (I.truncated_jpeg, "truncated"),
    "truncated-png": (I.truncated_png, "truncated"),
    "corrupt-jpeg-scan": (I.corrupt_jpeg, "corrupt"),
    "text-as-jpg": (I.text_as_jpg, "not_an_image"),
    "png-bomb": (I.png_bomb, "too_many_pixels"),
    "png-bomb-over-warning-limit": (lambda: I.png_bomb(10000, 10000), "too_many_pixels"),
}
OPTION_VARIANTS = [
    KEEP,
    ImageOptions(format="jpeg"),
    ImageOptions(format="png", channels=1),
    ImageOptions(size=(16, 16), resize="fit"),
]


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_raises_image_error_with_reason(name):
    make, reason = BAD[name]
    data = make()
    for options in OPTION_VARIANTS:
        with pytest.raises(ImageError) as info:
            convert_image(data, options)
        assert info.value.reason == reason, (name, options, info.value.message)
        assert info.value.message and str(info.value) == info.value.message


def test_bad_inputs_are_what_they_claim():
    assert I.png_bomb()[:8] == b"\x89PNG\r\n\x1a\n" and len(I.png_bomb()) < 200
    assert Image.open(io.BytesIO(I.png_bomb(300, 200))).size == (300, 200)  # header (and its CRC) is valid
    assert Image.open(io.BytesIO(I.corrupt_jpeg())).size == (64, 48)  # the header still parses
    assert len(I.truncated_jpeg()) == len(I.jpeg(64, 48, I.noise(64, 48))) // 2


def test_file_too_large():
    data = I.jpeg(64, 48)
    with pytest.raises(ImageError) as info:
        convert_image(data, ImageOptions(max_file_bytes=len(data) - 1))
    assert info.value.reason == "file_too_large"
    assert convert_image(data, ImageOptions(max_file_bytes=len(data))).encoded == data


def test_too_many_pixels_by_option():
    data = I.png(100, 100)
    with pytest.raises(ImageError) as info:
        convert_image(data, ImageOptions(max_pixels=100 * 100 - 1))
    assert info.value.reason == "too_many_pixels"
    assert convert_image(data, ImageOptions(max_pixels=100 * 100)).width == 100


def test_max_pixels_above_pillow_limit_is_honoured():
    # 100M pixels: over Pillow's default bomb limit but allowed by the option; the file
    # then fails for what it is (no pixel data), not for its size.
    bomb = I.png_bomb(10000, 10000)
    with pytest.raises(ImageError) as info:
        convert_image(bomb, ImageOptions(max_pixels=200_000_000))
    assert info.value.reason == "truncated"
    bigger = I.png_bomb(15000, 15000)  # past twice Pillow's default limit
    with pytest.raises(ImageError) as info:
        convert_image(bigger, ImageOptions(max_pixels=300_000_000))
    assert info.value.reason == "truncated"
    with pytest.raises(ImageError) as info:
        convert_image(bigger, ImageOptions())
    assert info.value.reason == "too_many_pixels"


def test_too_wide_for_jpeg_is_an_image_error():
    data = I.png(70000, 2, I.RED)
    with pytest.raises(ImageError) as info:
        convert_image(data, ImageOptions(format="jpeg"))
    assert info.value.reason == "cannot_encode"
    assert convert_image(data, ImageOptions(format="png")).width == 70000


def test_damaged_files_never_raise_anything_else():
    rng = np.random.default_rng(5)
    sources = [
        I.jpeg(48, 32, I.noise(48, 32)),
        I.save(I.noise(48, 32), "JPEG", progressive=True),
        I.png(48, 32, I.noise(48, 32)),
        I.png(48, 32, mode="RGBA"),
        I.gif_animated(48, 32),
        I.webp(48, 32),
        I.tiff(48, 32),
        I.bmp(48, 32),
        I.cmyk_jpeg(48, 32),
    ]
    outcomes = set()
    for data in sources:
        variants = [data[:cut] for cut in range(1, len(data), max(1, len(data) // 25))]
        for _ in range(10):
            damaged = bytearray(data)
            pos = int(rng.integers(0, len(damaged) - 8))
            damaged[pos : pos + 8] = rng.integers(0, 256, 8, dtype=np.uint8).tobytes()
            variants.append(bytes(damaged))
        for variant in variants:
            for options in (KEEP, ImageOptions(size=(8, 8), format="png")):
                try:
                    c = convert_image(variant, options)
                except ImageError as e:
                    assert e.reason in {"truncated", "corrupt", "not_an_image", "too_many_pixels"}, e.reason
                    outcomes.add(e.reason)
                else:
                    assert isinstance(c, ConvertedImage) and c.encoded
    assert {"truncated", "not_an_image"} <= outcomes


# -- options -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"resize": "crop"},
        {"format": "gif"},
        {"format": "JPEG"},
        {"channels": 2},
        {"channels": 4},
        {"channels": 0},
        {"size": (0, 10)},
        {"size": (10, -1)},
        {"quality": 0},
        {"quality": 101},
        {"max_pixels": 0},
        {"max_file_bytes": -1},
    ],
)
def test_image_options_reject_bad_values(kwargs):
    with pytest.raises(ValueError):
        ImageOptions(**kwargs)


def test_image_options_accept_good_values():
    o = ImageOptions(size=(1, 1), resize="fit", channels=1, format="png", quality=1, max_pixels=1, max_file_bytes=1)
    assert o.mode == "L"
    assert ImageOptions(quality=100, resize="stretch", format="jpeg").mode == "RGB"


# --resample fast: JPEGs through libjpeg-turbo and OpenCV; everything else, and --resample bicubic, on Pillow.


def _psnr(a, b) -> float:
    import math

    import numpy as np

    mse = float(np.mean((np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)) ** 2))
    return 99.0 if mse == 0 else 10 * math.log10(255.0**2 / mse)


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("resize", ["stretch", "fit", "fill"])
@pytest.mark.parametrize("channels", [3, 1])
def test_fast_and_bicubic_resampling_agree_on_orientation_crop_and_padding(orientation, resize, channels):
    """The two paths store the same picture (to a filter's difference): a wrong turn, crop or pad would not be."""
    smooth = I.noise(30, 20, seed=orientation).resize((300, 200), Image.Resampling.BICUBIC)  # not symmetric
    data = I.jpeg(300, 200, smooth, exif_orientation=orientation)
    stored = {}
    for resample in ("fast", "bicubic"):
        options = ImageOptions(size=(96, 64), resize=resize, channels=channels, format="png", resample=resample)
        image = convert_image(data, options, keep_pixels=True)
        assert (image.width, image.height, image.format) == (96, 64, "png")
        stored[resample] = Image.open(io.BytesIO(image.encoded))
        assert stored[resample].mode == ("RGB" if channels == 3 else "L")
        assert image.pixels.tobytes() == stored[resample].tobytes()  # the kept pixels are the stored ones
    assert _psnr(stored["fast"], stored["bicubic"]) > 28  # a wrong turn, flip or shift: about 13 dB


def test_fast_resampling_shrinks_without_aliasing():
    """A fine checkerboard shrunk 4x averages to grey: sampled without low-passing it would stay black or white."""
    board = Image.new("L", (400, 400))
    board.putdata([255 * ((x + y) % 2) for y in range(400) for x in range(400)])
    data = I.save(board.convert("RGB"), "JPEG", quality=100, subsampling=0)
    image = convert_image(data, ImageOptions(size=(100, 100), resize="stretch", format="png", resample="fast"))
    values = list(Image.open(io.BytesIO(image.encoded)).convert("L").getdata())
    assert 110 < sum(values) / len(values) < 145 and max(values) - min(values) < 40


def test_jpeg_output_of_the_fast_path_decodes_as_tensorflow_reads_it():
    import tensorflow as tf

    data = I.jpeg(640, 480, I.noise(640, 480))
    for channels in (3, 1):
        image = convert_image(data, ImageOptions(size=(224, 160), channels=channels, format="jpeg", resample="fast"))
        decoded = tf.io.decode_jpeg(image.encoded, channels=channels)
        assert tuple(decoded.shape) == (160, 224, channels)


def test_cmyk_and_non_jpeg_inputs_take_pillows_path_with_the_same_result_for_either_resample():
    for data in (I.cmyk_jpeg(120, 80), I.png(120, 80), I.webp(120, 80)):
        outs = {
            resample: convert_image(data, ImageOptions(size=(60, 40), format="png", resample=resample)).encoded
            for resample in ("fast", "bicubic")
        }
        assert outs["fast"] == outs["bicubic"]


def test_a_truncated_jpeg_is_rejected_as_truncated_by_either_resample():
    for resample in ("fast", "bicubic"):
        with pytest.raises(ImageError) as raised:
            convert_image(I.truncated_jpeg(640, 480), ImageOptions(size=(64, 64), format="jpeg", resample=resample))
        assert raised.value.reason == "truncated"


def test_the_fast_path_stores_the_same_bytes_whether_the_pixels_are_kept_or_not():
    """The analysed split keeps its pixels: its records must still equal those of a run without the analysis."""
    data = I.jpeg(500, 375, I.noise(50, 37).resize((500, 375)))
    for fmt in ("jpeg", "png", "raw"):
        options = ImageOptions(size=(224, 224), format=fmt, resample="fast")
        kept, plain = convert_image(data, options, keep_pixels=True), convert_image(data, options)
        assert kept.encoded == plain.encoded and kept.pixels is not None and plain.pixels is None
