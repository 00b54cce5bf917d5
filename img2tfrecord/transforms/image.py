"""Decode, normalise, resize and encode one image with Pillow.

Pure functions on bytes, no Beam and no TensorFlow: the DoFn in
``convert.py`` wraps :func:`convert_image` and turns :class:`ImageError`
into a row of the error report.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import warnings
from typing import Optional, Tuple

from PIL import Image, ImageOps, UnidentifiedImageError

RESIZE_MODES = ("stretch", "fit", "fill")
FORMATS = ("keep", "jpeg", "png")
# Formats whose original bytes may be stored as they are (TensorFlow decodes them).
# MPO is how Pillow names a JPEG carrying extra pictures (many phone and camera
# photos): the file is a JPEG whose first picture is the one decoded.
KEEPABLE_FORMATS = {"JPEG": "jpeg", "MPO": "jpeg", "PNG": "png"}
DEFAULT_MAX_PIXELS = 89_478_485  # Pillow's own decompression-bomb threshold
DEFAULT_MAX_FILE_MB = 64.0
_RESAMPLE = Image.Resampling.BICUBIC
_REDUCING_GAP = 2.0  # resize via Image.reduce() first when shrinking a lot (much faster, same look)
_PAD_COLOR = 0  # --resize fit pads with black
_ALPHA_BACKGROUND = 255  # transparent pixels are composited onto white
_TRANSPOSED_ORIENTATIONS = (5, 6, 7, 8)  # EXIF orientations that swap width and height


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

    @property
    def mode(self) -> str:
        return "RGB" if self.channels == 3 else "L"


@dataclasses.dataclass(frozen=True)
class ConvertedImage:
    encoded: bytes
    format: str  # "jpeg" / "png"
    height: int
    width: int
    channels: int

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
    if img.mode == mode:
        return img
    if img.mode in ("I", "I;16", "I;16L", "I;16B", "I;16N", "F"):
        img = _to_8bit(img)
        return img if mode == "L" else img.convert(mode)
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


def _read_error_reason(e: Exception) -> str:
    # Pillow says "image file is truncated" / "Truncated File Read" when the data
    # ends early; a decoder failing on bad data is "broken data stream" (corrupt).
    return "truncated" if "truncated" in str(e).lower() else "corrupt"


def _open(data: bytes, max_pixels: int) -> Image.Image:
    if not data:
        raise ImageError("empty_file", "file is empty (0 bytes)")
    _allow_pixels(max_pixels)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise ImageError("too_many_pixels", str(e)) from None
    except UnidentifiedImageError:
        raise ImageError("not_an_image", "not a recognised image format") from None
    except Exception as e:  # a broken header can raise nearly anything
        raise ImageError(_read_error_reason(e), f"cannot read image header: {type(e).__name__}: {e}") from None
    w, h = img.size
    if w <= 0 or h <= 0:
        raise ImageError("corrupt", f"invalid image dimensions {w}x{h}")
    if w * h > max_pixels:
        raise ImageError(
            "too_many_pixels", f"{w}x{h} = {w * h} pixels exceeds the limit of {max_pixels} (--max-pixels)"
        )
    return img


def convert_image(data: bytes, options: ImageOptions) -> ConvertedImage:
    """Turn one file's bytes into the image stored in a record, or raise :class:`ImageError`.

    With ``options.format == "keep"`` a JPEG/PNG that needs no orientation,
    mode or size change is stored byte for byte (it is still fully decoded
    once, at reduced scale where the codec allows, so truncated or corrupt
    files are rejected). Images that must change are re-encoded in their own
    format (JPEG stays JPEG, anything else becomes PNG).
    """
    if len(data) > options.max_file_bytes:
        raise ImageError(
            "file_too_large",
            f"file is {len(data)} bytes, over the limit of {options.max_file_bytes} bytes (--max-file-mb)",
        )
    img = _open(data, options.max_pixels)
    source_format = img.format or ""
    is_jpeg = KEEPABLE_FORMATS.get(source_format) == "jpeg"
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
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            if keep_original:
                width, height = img.size
                # Validate the whole stream cheaply: JPEG decodes at 1/8 scale.
                img.draft(img.mode, (max(1, img.width // 8), max(1, img.height // 8)))
                img.load()
                return ConvertedImage(
                    encoded=data,
                    format=KEEPABLE_FORMATS[source_format],
                    height=height,
                    width=width,
                    channels=options.channels,
                )
            if options.size is not None and is_jpeg:
                w, h = options.size
                if options.resize == "fit":
                    ow, oh = img.size if not swap else img.size[::-1]
                    w, h = target_size((ow, oh), options.size, "fit")
                img.draft(options.mode, (h, w) if swap else (w, h))
            img.load()
            # Animated GIF/WebP/PNG: the frame loaded is the first one.
            img = _apply_orientation(img, orientation)
            img = normalise_mode(img, options.mode)
            if options.size is not None:
                img = resize_image(img, options.size, options.resize)
    except ImageError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise ImageError("too_many_pixels", str(e)) from None
    except OSError as e:
        raise ImageError(_read_error_reason(e), f"cannot decode {source_format or 'image'}: {e}") from None
    except MemoryError:
        raise ImageError("too_many_pixels", "out of memory while decoding") from None
    except Exception as e:
        raise ImageError("corrupt", f"cannot decode {source_format or 'image'}: {type(e).__name__}: {e}") from None

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
    )
