"""Decode, normalise, resize and encode one image with Pillow.

Pure functions on bytes, no Beam and no TensorFlow: the DoFn in
``convert.py`` wraps :func:`convert_image` and turns :class:`ImageError`
into a row of the error report.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import operator
import struct
import time
import warnings
import zlib
from typing import Iterator, List, Optional, Tuple

from PIL import Image, UnidentifiedImageError

RESIZE_MODES = ("stretch", "fit", "fill")
FORMATS = ("keep", "jpeg", "png", "raw")  # raw: uint8 pixels, row-major height x width x channels
LOSSLESS_FORMATS = frozenset({"png", "raw"})  # stored formats whose decoded pixels are the encoded ones
# Formats whose original bytes may be stored as they are (TensorFlow decodes them).
# MPO is how Pillow names a JPEG carrying extra pictures (many phone and camera
# photos): the file is a JPEG whose first picture is the one decoded.
KEEPABLE_FORMATS = {"JPEG": "jpeg", "MPO": "jpeg", "PNG": "png"}
DEFAULT_MAX_PIXELS = 89_478_485  # Pillow's own decompression-bomb threshold
DEFAULT_MAX_FILE_MB = 64.0
DEFAULT_DECODE_TIMEOUT_S = 30.0
# Formats Pillow can read that are never opened: EPS is a PostScript program, which
# Pillow hands to Ghostscript to get pixels. Inputs are data and are never run.
NEVER_OPENED_FORMATS = frozenset({"EPS"})
_RESAMPLE = Image.Resampling.BICUBIC
_REDUCING_GAP = 2.0  # resize via Image.reduce() first when shrinking a lot (much faster, same look)
_PAD_COLOR = 0  # --resize fit pads with black
_ALPHA_BACKGROUND = 255  # transparent pixels are composited onto white
_TRANSPOSED_ORIENTATIONS = (5, 6, 7, 8)  # EXIF orientations that swap width and height
_LEVELS = tuple(range(256))
_SQUARED_LEVELS = tuple(k * k for k in _LEVELS)


class ImageError(Exception):
    """An input that cannot become a record. ``reason`` is a short stable category."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclasses.dataclass(frozen=True)
class ImageOptions:
    """How every image is converted; fixed for a run."""

    size: Optional[Tuple[int, int]] = None  # (width, height); None keeps each image's size
    resize: str = "fill"
    channels: int = 3
    format: str = "keep"
    quality: int = 90
    max_pixels: int = DEFAULT_MAX_PIXELS
    max_file_bytes: int = int(DEFAULT_MAX_FILE_MB * 1024 * 1024)
    decode_timeout_s: float = DEFAULT_DECODE_TIMEOUT_S  # per image: see _Deadline

    def __post_init__(self):
        if self.resize not in RESIZE_MODES:
            raise ValueError(f"resize must be one of {', '.join(RESIZE_MODES)}, got {self.resize!r}")
        if self.format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {self.format!r}")
        if self.channels not in (1, 3):
            raise ValueError(f"channels must be 1 or 3, got {self.channels!r}")
        if self.size is not None and (self.size[0] <= 0 or self.size[1] <= 0):
            raise ValueError(f"image size must be positive, got {self.size[0]}x{self.size[1]}")
        if not 1 <= self.quality <= 100:
            raise ValueError(f"quality must be between 1 and 100, got {self.quality}")
        if self.max_pixels <= 0:
            raise ValueError(f"max_pixels must be positive, got {self.max_pixels}")
        if self.max_file_bytes <= 0:
            raise ValueError(f"max_file_bytes must be positive, got {self.max_file_bytes}")
        if not self.decode_timeout_s > 0:
            raise ValueError(f"decode_timeout_s must be positive, got {self.decode_timeout_s}")

    @property
    def mode(self) -> str:
        return "RGB" if self.channels == 3 else "L"


@dataclasses.dataclass(frozen=True)
class ConvertedImage:
    encoded: bytes
    format: str  # "jpeg" / "png" / "raw"
    height: int
    width: int
    channels: int
    # The pixels that were encoded (RGB/L, width x height), kept only when asked for
    # (convert_image(..., keep_pixels=True)) and only when the image was encoded here;
    # None when the original file is stored byte for byte. See pixel_sums.
    pixels: Optional[Image.Image] = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.encoded).hexdigest()


def _orientation(img: Image.Image) -> int:
    try:
        value = img.getexif().get(0x0112, 1)
        return int(value) if value in range(1, 9) else 1
    except Exception:  # broken EXIF never rejects an otherwise good image
        return 1


def _apply_orientation(img: Image.Image, orientation: int) -> Image.Image:
    method = {
        2: Image.Transpose.FLIP_LEFT_RIGHT,
        3: Image.Transpose.ROTATE_180,
        4: Image.Transpose.FLIP_TOP_BOTTOM,
        5: Image.Transpose.TRANSPOSE,
        6: Image.Transpose.ROTATE_270,
        7: Image.Transpose.TRANSVERSE,
        8: Image.Transpose.ROTATE_90,
    }.get(orientation)
    return img.transpose(method) if method is not None else img


def _to_8bit(img: Image.Image) -> Image.Image:
    """16/32-bit integer and float greyscale to 8-bit L, keeping the full range visible.

    16-bit images (``I;16*``) keep their top byte whatever their values, so a
    dark 16-bit image stays dark; a 32-bit ``I`` image, whose real bit depth
    is unknown, is taken as 8-bit, 16-bit or scaled by its maximum.
    """
    import numpy as np  # numpy ships with TensorFlow; only deep images need it

    if img.mode.startswith("I;16"):
        arr = np.asarray(img.convert("I")).astype(np.int64) >> 8
        return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), mode="L")
    arr = np.asarray(img)
    if img.mode == "F":
        arr = arr.astype(np.float64)
        finite = arr[np.isfinite(arr)]
        hi = float(finite.max()) if finite.size else 1.0
        scale = 255.0 if hi <= 1.0 else 255.0 / hi if hi > 255.0 else 1.0
        arr = np.nan_to_num(arr, nan=0.0, posinf=255.0 / scale, neginf=0.0) * scale
    else:
        arr = arr.astype(np.int64)
        hi = int(arr.max()) if arr.size else 0
        if hi > 255:  # 16-bit data (also 'I' holding 16-bit values): keep the top 8 bits
            arr = arr >> 8 if hi <= 65535 else arr * 255 // hi
    return Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8), mode="L")


def normalise_mode(img: Image.Image, mode: str) -> Image.Image:
    """Any Pillow mode to ``RGB`` or ``L``: alpha composited onto white, deep images scaled."""
    if img.mode == mode and "transparency" not in img.info:  # an RGB/L PNG may name a transparent colour
        return img
    if img.mode in ("I", "I;16", "I;16L", "I;16B", "I;16N", "F"):
        gray = _to_8bit(img)
        level = img.info.get("transparency")
        if isinstance(level, int) and img.mode != "F":  # 16-bit PNG tRNS: pixels of that level are transparent
            import numpy as np

            pixels = np.array(gray)
            pixels[np.asarray(img.convert("I")) == level] = _ALPHA_BACKGROUND
            gray = Image.fromarray(pixels, mode="L")
        return gray if mode == "L" else gray.convert(mode)
    key = img.info.get("transparency")
    if img.mode == "RGB" and isinstance(key, tuple) and max(key) > 255:
        # A 16-bit RGB PNG is read as 8-bit RGB (top bytes) but keeps its 16-bit tRNS colour.
        img.info["transparency"] = tuple(v >> 8 for v in key)
    has_alpha = img.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (
        img.mode == "P" and "transparency" in img.info
    ) or (img.mode in ("RGB", "L") and "transparency" in img.info)
    if has_alpha:
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (_ALPHA_BACKGROUND,) * 3 + (255,))
        img = Image.alpha_composite(background, rgba).convert("RGB")
        return img if mode == "RGB" else img.convert(mode)
    if img.mode in ("1", "P", "CMYK", "YCbCr", "LAB", "HSV", "RGBX", "L", "RGB"):
        return img.convert(mode)
    return img.convert("RGB").convert(mode) if mode == "L" else img.convert(mode)


def target_size(src: Tuple[int, int], size: Tuple[int, int], resize: str) -> Tuple[int, int]:
    """Size of the resized content before padding (fit) or after cropping (fill/stretch)."""
    if resize != "fit":
        return size
    sw, sh = src
    w, h = size
    scale = min(w / sw, h / sh)
    return max(1, round(sw * scale)), max(1, round(sh * scale))


def resize_image(img: Image.Image, size: Tuple[int, int], resize: str) -> Image.Image:
    if img.size == size:
        return img
    w, h = size
    sw, sh = img.size
    if resize == "stretch":
        return img.resize(size, _RESAMPLE, reducing_gap=_REDUCING_GAP)
    if resize == "fill":  # keep aspect, centre-crop the overflow
        scale = max(w / sw, h / sh)
        cw, ch = min(sw, w / scale), min(sh, h / scale)  # min(): float error must not leave the image
        left, top = max(0.0, (sw - cw) / 2), max(0.0, (sh - ch) / 2)
        return img.resize(size, _RESAMPLE, box=(left, top, left + cw, top + ch), reducing_gap=_REDUCING_GAP)
    # fit: keep aspect, pad to the target size
    fw, fh = target_size(img.size, size, "fit")
    content = img.resize((fw, fh), _RESAMPLE, reducing_gap=_REDUCING_GAP)
    fill = _PAD_COLOR if img.mode == "L" else (_PAD_COLOR,) * 3
    canvas = Image.new(img.mode, size, fill)
    canvas.paste(content, ((w - fw) // 2, (h - fh) // 2))
    return canvas


def _encode(img: Image.Image, fmt: str, quality: int) -> bytes:
    if fmt == "raw":  # the normalised RGB/L pixels, row-major H x W x C
        return img.tobytes()
    out = io.BytesIO()
    if fmt == "jpeg":
        img.save(out, format="JPEG", quality=quality)
    else:
        img.save(out, format="PNG", compress_level=6)
    return out.getvalue()


def _allow_pixels(max_pixels: int) -> None:
    """Raise Pillow's decompression-bomb limit to ``max_pixels`` when that is higher.

    Pillow warns past ``Image.MAX_IMAGE_PIXELS`` and refuses to open past
    twice that, before :func:`_open` can apply ``max_pixels`` itself; without
    this a ``--max-pixels`` above Pillow's default could never let a larger
    image through. The limit is only ever raised (never lowered, never
    disabled), and every image is still checked against ``max_pixels``.
    """
    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and max_pixels > limit:
        Image.MAX_IMAGE_PIXELS = max_pixels


_clock = time.monotonic  # what the per-image time limit is measured with


class _Deadline:
    """The per-image time limit (``--decode-timeout-s``), enforced cooperatively.

    Pillow's C decoders run without the GIL and cannot be interrupted from
    Python: a watchdog thread could notice an overrun but never stop it, and a
    process per decode would cost a start-up and a copy of every image both
    ways. Instead the limit is checked wherever control comes back to Python:
    on every read Pillow makes from the file (:class:`_TimedReader`; headers are
    parsed with small reads, and the JPEG, PNG, GIF and BMP decoders are fed
    64 KiB at a time; WebP and compressed TIFF decode in one call) and between
    decode, orientation, resize and encode. Work on an image stops at the first
    check after the limit, with reason ``decode_timeout``. What runs between
    two checks is bounded up front: the file size (``--max-file-mb``) and the
    declared pixel count (``--max-pixels``) are checked before a pixel is
    decoded, and a JPEG to be shrunk is decoded at reduced scale (``draft``).
    The time is wall-clock time on the worker, so a busy worker counts too.
    """

    def __init__(self, seconds: float):
        self.seconds = seconds
        self._end = _clock() + seconds

    def check(self, stage: str) -> None:
        if _clock() > self._end:
            raise ImageError(
                "decode_timeout", f"{stage} took longer than the limit of {self.seconds:g} s (--decode-timeout-s)"
            )


class _TimedReader(io.BytesIO):
    """The file's bytes as Pillow reads them, checking the time limit on every read."""

    def __init__(self, data: bytes, deadline: _Deadline):
        super().__init__(data)
        self._deadline = deadline

    def read(self, size: Optional[int] = -1) -> bytes:
        self._deadline.check("decoding")
        return super().read(size)

    def readline(self, size: Optional[int] = -1) -> bytes:
        self._deadline.check("decoding")
        return super().readline(size)


# File signatures of the formats a dataset is made of; a file that starts like one
# of them but that Pillow cannot identify is a broken image, not "not an image".
_SIGNATURES = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
)
_POSTSCRIPT_SIGNATURES = (b"%!PS", b"\xc5\xd0\xd3\xc6")  # PostScript / EPS, DOS EPS binary header


def _signature(data: bytes) -> Optional[str]:
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    return next((name for magic, name in _SIGNATURES if data.startswith(magic)), None)


def _declares_more_data(data: bytes) -> bool:
    """True when the file's own header says it is longer than it is (RIFF/WebP)."""
    if data[:4] == b"RIFF" and len(data) >= 8:
        return struct.unpack("<I", data[4:8])[0] + 8 > len(data)
    return False


def _read_error_reason(e: Exception, data: bytes = b"") -> str:
    # Pillow says "image file is truncated" / "Truncated File Read" when the data
    # ends early; a decoder failing on bad data is "broken data stream" (corrupt).
    if "truncated" in str(e).lower() or _declares_more_data(data):
        return "truncated"
    return "corrupt"


_OPENABLE: Optional[List[str]] = None


def _openable_formats(data: bytes) -> List[str]:
    """The formats Pillow may try, the one the file's signature names first (the rest are not tried then)."""
    global _OPENABLE  # pylint: disable=global-statement
    if _OPENABLE is None:
        Image.init()
        _OPENABLE = [name for name in Image.ID if name not in NEVER_OPENED_FORMATS]
    likely = _signature(data)
    if likely is None or likely not in _OPENABLE:
        return _OPENABLE
    return [likely] + [name for name in _OPENABLE if name != likely]


def _open(data: bytes, max_pixels: int, deadline: Optional[_Deadline] = None) -> Image.Image:
    if not data:
        raise ImageError("empty_file", "file is empty (0 bytes)")
    _allow_pixels(max_pixels)
    fp = _TimedReader(data, deadline) if deadline is not None else io.BytesIO(data)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(fp, formats=_openable_formats(data))
    except ImageError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise ImageError("too_many_pixels", f"{e} (--max-pixels is {max_pixels})") from None
    except UnidentifiedImageError:
        if data.startswith(_POSTSCRIPT_SIGNATURES):
            raise ImageError("not_an_image", "PostScript/EPS is a program, not image data; it is never run") from None
        fmt = _signature(data)
        if fmt is not None:
            raise ImageError(
                "truncated" if _declares_more_data(data) else "corrupt",
                f"starts like a {fmt} file but its header cannot be read",
            ) from None
        raise ImageError("not_an_image", "not a recognised image format") from None
    except Exception as e:  # a broken header can raise nearly anything
        raise ImageError(_read_error_reason(e, data), f"cannot read image header: {type(e).__name__}: {e}") from None
    w, h = img.size
    if w <= 0 or h <= 0:
        raise ImageError("corrupt", f"invalid image dimensions {w}x{h}")
    if w * h > max_pixels:
        raise ImageError(
            "too_many_pixels", f"{w}x{h} = {w * h} pixels exceeds the limit of {max_pixels} (--max-pixels)"
        )
    return img


@contextlib.contextmanager
def _decoding(data: bytes, source_format: str) -> Iterator[None]:
    """Turn whatever decoding an image raises into :class:`ImageError`: bad data is never a crash."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            yield
    except ImageError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise ImageError("too_many_pixels", str(e)) from None
    except OSError as e:
        raise ImageError(_read_error_reason(e, data), f"cannot decode {source_format or 'image'}: {e}") from None
    except MemoryError:
        raise ImageError("too_many_pixels", "out of memory while decoding") from None
    except Exception as e:
        raise ImageError("corrupt", f"cannot decode {source_format or 'image'}: {type(e).__name__}: {e}") from None


# What decoders other than Pillow need. The original bytes of a JPEG or PNG are
# stored (--format keep) only when TensorFlow's decoders (libjpeg-turbo, libpng)
# will read them too; a file Pillow decoded that they would refuse is stored
# re-encoded instead, so whether an input becomes a record never depends on
# the format option.
_SOF_MARKERS = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
_PROGRESSIVE_SOF = frozenset({0xC2, 0xC6, 0xCA, 0xCE})
_SKIPPED_SEGMENTS = frozenset({0xFE} | set(range(0xE0, 0xF0)))  # COM, APP0-APP15


def _jpeg_can_be_kept(data: bytes) -> bool:
    """True when every marker segment of a JPEG is whole and it reaches its end-of-image marker cleanly.

    Pillow stops reading once it has every scan line of a single-scan
    (baseline) JPEG; ``tf.io.decode_jpeg`` goes on to the end-of-image marker
    and fails on what it meets there: a cut-off or bogus segment, another
    scan, the end of the data. Multi-scan (progressive) files are read to the
    end by Pillow already. Header segments must have a plausible length.
    """
    n = len(data)
    pos, frame_components, progressive = 2, None, False
    while True:
        if pos >= n or data[pos] != 0xFF:
            return False
        while pos < n and data[pos] == 0xFF:  # fill bytes
            pos += 1
        if pos + 2 >= n:
            return False
        marker = data[pos]
        length = (data[pos + 1] << 8) | data[pos + 2]
        if marker in (0x01, 0xD8, 0xD9) or 0xD0 <= marker <= 0xD7 or length < 2 or pos + 1 + length > n:
            return False
        if marker in _SOF_MARKERS and pos + 8 < n:
            frame_components, progressive = data[pos + 8], marker in _PROGRESSIVE_SOF
        pos += 1 + length
        if marker == 0xDA:
            break
    if frame_components is None or progressive or data[pos - length + 2] < frame_components:
        return True  # several scans: Pillow has read the file to its end
    # Skip the entropy-coded data: 0xFF is followed by 0x00 (stuffing), a restart marker or fill bytes.
    while True:
        pos = data.find(b"\xff", pos)
        if pos < 0 or pos + 1 >= n:
            return False
        following = data[pos + 1]
        if following == 0x00 or 0xD0 <= following <= 0xD7 or following == 0xFF:
            pos += 1 if following == 0xFF else 2
            continue
        break
    # After the one scan: comment and application segments may come, then the end-of-image marker.
    while True:
        marker = data[pos + 1]
        if marker == 0xD9:
            return True
        if marker not in _SKIPPED_SEGMENTS or pos + 4 > n:
            return False
        length = (data[pos + 2] << 8) | data[pos + 3]
        pos += 2 + length
        if length < 2 or pos + 2 > n or data[pos] != 0xFF:
            return False


def _png_can_be_kept(data: bytes) -> bool:
    """True when libpng reads a PNG as Pillow did: chunk types, critical CRCs and the IEND chunk.

    Pillow does not check the CRC of image data (IDAT), passes over chunk
    types that are not four letters and does not need the closing IEND;
    libpng refuses all three.
    """
    view = memoryview(data)
    pos = 8
    while pos + 12 <= len(data):
        length, kind = struct.unpack(">I4s", view[pos: pos + 8])
        end = pos + 8 + length
        if end + 4 > len(data) or not kind.isalpha():
            return False
        if not kind[0] & 0x20:  # a critical chunk (upper-case first letter): its CRC must match
            if zlib.crc32(view[pos + 4: end]) != struct.unpack(">I", view[end: end + 4])[0]:
                return False
        if kind == b"IEND":
            return True
        pos = end + 4
    return False


def convert_image(data: bytes, options: ImageOptions, keep_pixels: bool = False) -> ConvertedImage:
    """Turn one file's bytes into the image stored in a record, or raise :class:`ImageError`.

    With ``options.format == "keep"`` a JPEG/PNG that needs no orientation,
    mode or size change is stored byte for byte (it is still fully decoded
    once, at reduced scale where the codec allows, so truncated or corrupt
    files are rejected; one that Pillow decodes but TensorFlow's decoder would
    refuse as it is, is re-encoded). Images that must change are re-encoded in
    their own format (JPEG stays JPEG, anything else becomes PNG).

    Every failure is an :class:`ImageError`; the work on one image is limited
    in file size, pixels and time (``max_file_bytes``, ``max_pixels``,
    ``decode_timeout_s``: see :class:`_Deadline`).

    ``keep_pixels``: the result also holds the pixels that were encoded
    (``ConvertedImage.pixels``), for :func:`pixel_sums`.
    """
    if len(data) > options.max_file_bytes:
        raise ImageError(
            "file_too_large",
            f"file is {len(data)} bytes, over the limit of {options.max_file_bytes} bytes (--max-file-mb)",
        )
    deadline = _Deadline(options.decode_timeout_s)
    img = _open(data, options.max_pixels, deadline)
    source_format = img.format or ""
    is_jpeg = KEEPABLE_FORMATS.get(source_format) == "jpeg"
    with _decoding(data, source_format):
        if not is_jpeg:
            # Only JPEG decodes at reduced scale (draft), so any other format is
            # decoded now: getexif() decodes a PNG to look for EXIF after its pixels,
            # and a decode error there must not pass for broken EXIF (Pillow does not
            # decode again after a failed load, the image would look valid).
            img.load()
        orientation = _orientation(img)
    swap = orientation in _TRANSPOSED_ORIENTATIONS

    keep_original = (
        options.format == "keep"
        and options.size is None
        and orientation == 1
        and source_format in KEEPABLE_FORMATS
        and img.mode == options.mode
        and "transparency" not in img.info
    )
    with _decoding(data, source_format):
        if keep_original:
            width, height = img.size
            # Validate the whole stream cheaply: JPEG decodes at 1/8 scale.
            img.draft(img.mode, (max(1, img.width // 8), max(1, img.height // 8)))
            img.load()
            if _png_can_be_kept(data) if source_format == "PNG" else _jpeg_can_be_kept(data):
                return ConvertedImage(
                    encoded=data,
                    format=KEEPABLE_FORMATS[source_format],
                    height=height,
                    width=width,
                    channels=options.channels,
                )
            if img.size != (width, height):  # decoded at reduced scale: decode again, whole
                img = _open(data, options.max_pixels, deadline)
        if options.size is not None and is_jpeg:
            w, h = options.size
            if options.resize == "fit":
                ow, oh = img.size if not swap else img.size[::-1]
                w, h = target_size((ow, oh), options.size, "fit")
            img.draft(options.mode, (h, w) if swap else (w, h))
        img.load()
        deadline.check("decoding")
        # Animated GIF/WebP/PNG: the frame loaded is the first one.
        img = _apply_orientation(img, orientation)
        img = normalise_mode(img, options.mode)
        if options.size is not None:
            deadline.check("decoding and orienting")
            img = resize_image(img, options.size, options.resize)
    deadline.check("decoding and resizing")

    if options.format == "keep":
        fmt = "jpeg" if is_jpeg else "png"
    else:
        fmt = options.format
    try:
        encoded = _encode(img, fmt, options.quality)
    except MemoryError:
        raise ImageError("too_many_pixels", "out of memory while encoding") from None
    except Exception as e:  # e.g. JPEG cannot hold more than 65500 pixels a side
        raise ImageError(
            "cannot_encode", f"cannot encode {img.width}x{img.height} as {fmt}: {type(e).__name__}: {e}"
        ) from None
    return ConvertedImage(
        encoded=encoded,
        format=fmt,
        height=img.height,
        width=img.width,
        channels=options.channels,
        pixels=img if keep_pixels else None,
    )


def pixel_sums(image: ConvertedImage, exact: bool = False) -> Tuple[List[int], List[int]]:
    """Per-channel sum and sum of squares of a stored image's uint8 pixels, as exact integers.

    Where the pixels come from:

    * PNG and raw pixels are lossless: the pixels that were encoded
      (``image.pixels``) are the stored ones, and are used when kept.
    * An image re-encoded as JPEG (lossy): by default the pixels given to
      the JPEG encoder, which costs a histogram; the stored image differs
      from them by the JPEG loss (on photo-like 224x224 images at quality
      90: mean within 1e-5 and std within 0.5% of the decoded images', on
      [0, 1]; std up to 5% on tiny images with hard colour edges). With
      ``exact`` the stored bytes are decoded again, as a reader decodes
      them: about 0.3 ms more per 224x224 image, some 9% of its conversion.
    * An original JPEG or PNG stored byte for byte (no pixels kept): its
      bytes are decoded.

    Decoding is Pillow's full decode: for JPEG, libjpeg's accurate integer
    DCT with fancy upsampling, bit for bit what
    ``tf.io.decode_jpeg(..., dct_method="INTEGER_ACCURATE")`` returns, which
    is how ``img2tfrecord.load`` and the exported tf.Transform graph decode.
    The sums come from Pillow's histogram (256 counts per channel), so no
    pixel array is built.
    """
    mode = "RGB" if image.channels == 3 else "L"
    if image.pixels is not None and (image.format in LOSSLESS_FORMATS or not exact):
        img = image.pixels
        if img.mode != mode or img.size != (image.width, image.height):
            raise ValueError(f"the kept pixels are {img.mode} {img.width}x{img.height}, not {mode} {image.width}x{image.height}")
    elif image.format == "raw":
        img = Image.frombuffer(mode, (image.width, image.height), image.encoded, "raw", mode, 0, 1)
    else:
        with _decoding(image.encoded, image.format):
            img = Image.open(io.BytesIO(image.encoded), formats=["JPEG", "PNG"])
            img.load()
        if img.mode != mode or img.size != (image.width, image.height):
            raise ImageError(
                "corrupt", f"the stored image decodes as {img.mode} {img.width}x{img.height}, "
                f"not {mode} {image.width}x{image.height}",
            )
    histogram = img.histogram()
    sums, squares = [], []
    for band in range(image.channels):
        counts = histogram[band * 256: (band + 1) * 256]
        sums.append(sum(map(operator.mul, _LEVELS, counts)))
        squares.append(sum(map(operator.mul, _SQUARED_LEVELS, counts)))
    return sums, squares
