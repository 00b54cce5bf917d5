"""Decode, orient, normalise, resize and encode one image with Pillow: :func:`convert_image`.

Pure functions on bytes; every failure is an :class:`ImageError`, which the
converter turns into a row of the error report.
"""

from __future__ import annotations

import io
from typing import Optional, Tuple

from PIL import Image

from img2tfrecord.images.decode import Deadline, decoding, open_image
from img2tfrecord.images.geometry import (
    TRANSPOSED_ORIENTATIONS,
    ImageTransform,
    identity,
    resize_transform,
    target_size,
)
from img2tfrecord.images.options import (
    FAST_JPEG_MODES,
    KEEPABLE_FORMATS,
    RESAMPLE_FAST,
    ConvertedImage,
    ImageError,
    ImageOptions,
)
from img2tfrecord.images.streams import jpeg_can_be_kept, png_can_be_kept

_RESAMPLE = Image.Resampling.BICUBIC
_REDUCING_GAP = 2.0  # resize via Image.reduce() first when shrinking a lot (much faster, same look)
_PAD_COLOR = 0  # --resize fit pads with black
_ALPHA_BACKGROUND = 255  # transparent pixels are composited onto white


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
    has_alpha = (
        img.mode in ("RGBA", "LA", "PA", "RGBa", "La")
        or (img.mode == "P" and "transparency" in img.info)
        or (img.mode in ("RGB", "L") and "transparency" in img.info)
    )
    if has_alpha:
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (_ALPHA_BACKGROUND,) * 3 + (255,))
        img = Image.alpha_composite(background, rgba).convert("RGB")
        return img if mode == "RGB" else img.convert(mode)
    if img.mode in ("1", "P", "CMYK", "YCbCr", "LAB", "HSV", "RGBX", "L", "RGB"):
        return img.convert(mode)
    return img.convert("RGB").convert(mode) if mode == "L" else img.convert(mode)


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
    ``decode_timeout_s``: see :class:`Deadline`).

    ``keep_pixels``: the result also holds the pixels that were encoded
    (``ConvertedImage.pixels``), for :func:`pixel_sums`. ``ConvertedImage.transform``
    says where each source pixel went (``images.geometry``), for boxes.
    """
    if len(data) > options.max_file_bytes:
        raise ImageError(
            "file_too_large",
            f"file is {len(data)} bytes, over the limit of {options.max_file_bytes} bytes (--max-file-mb)",
        )
    deadline = Deadline(options.decode_timeout_s)
    img = open_image(data, options.max_pixels, deadline)
    source_format = img.format or ""
    is_jpeg = KEEPABLE_FORMATS.get(source_format) == "jpeg"
    with decoding(data, source_format):
        if not is_jpeg:
            # Only JPEG decodes at reduced scale (draft), so any other format is
            # decoded now: getexif() decodes a PNG to look for EXIF after its pixels,
            # and a decode error there must not pass for broken EXIF (Pillow does not
            # decode again after a failed load, the image would look valid).
            img.load()
        orientation = _orientation(img)
    swap = orientation in TRANSPOSED_ORIENTATIONS

    keep_original = (
        options.format == "keep"
        and options.size is None
        and orientation == 1
        and source_format in KEEPABLE_FORMATS
        and img.mode == options.mode
        and "transparency" not in img.info
    )
    source_size = img.size
    if options.size is not None and is_jpeg and options.resample == RESAMPLE_FAST and img.mode in FAST_JPEG_MODES:
        fast = _fast_jpeg(data, options, source_size, orientation, keep_pixels)
        if fast is not None:
            deadline.check("decoding and resizing")
            return fast
    draft = 1
    with decoding(data, source_format):
        if keep_original:
            width, height = img.size
            # Validate the whole stream cheaply: JPEG decodes at 1/8 scale.
            img.draft(img.mode, (max(1, img.width // 8), max(1, img.height // 8)))
            img.load()
            if png_can_be_kept(data) if source_format == "PNG" else jpeg_can_be_kept(data):
                return ConvertedImage(
                    encoded=data,
                    format=KEEPABLE_FORMATS[source_format],
                    height=height,
                    width=width,
                    channels=options.channels,
                    transform=identity((width, height)),
                )
            if img.size != (width, height):  # decoded at reduced scale: decode again, whole
                img = open_image(data, options.max_pixels, deadline)
        if options.size is not None and is_jpeg:
            w, h = options.size
            if options.resize == "fit":
                ow, oh = img.size if not swap else img.size[::-1]
                w, h = target_size((ow, oh), options.size, "fit")
            drafted = img.draft(options.mode, (h, w) if swap else (w, h))
            if drafted is not None and drafted[1][2] > 0:
                draft = round(source_size[0] / drafted[1][2])
        img.load()
        deadline.check("decoding")
        decoded_size = img.size
        # Animated GIF/WebP/PNG: the frame loaded is the first one.
        img = _apply_orientation(img, orientation)
        img = normalise_mode(img, options.mode)
        scale, offset = (1.0, 1.0), (0.0, 0.0)
        if options.size is not None:
            deadline.check("decoding and orienting")
            fit_content = target_size(img.size, options.size, "fit")
            scale, offset = resize_transform(img.size, options.size, options.resize, fit_content)
            img = resize_image(img, options.size, options.resize)
    deadline.check("decoding and resizing")
    transform = ImageTransform(source_size, draft, decoded_size, orientation, scale, offset, img.size)
    return _stored(img, options, is_jpeg, keep_pixels, transform)


def _fast_jpeg(
    data: bytes, options: ImageOptions, source_size: Tuple[int, int], orientation: int, keep_pixels: bool
) -> Optional[ConvertedImage]:
    """The image through libjpeg-turbo and OpenCV (``images/fast_jpeg.py``), or None to take Pillow's path."""
    from img2tfrecord.images import fast_jpeg  # OpenCV loads where images are converted, not where options parse

    fast = fast_jpeg.convert_pixels(data, options, source_size, orientation)
    if fast is None:
        return None
    height, width = fast.pixels.shape[:2]
    transform = ImageTransform(
        source_size, fast.draft, fast.decoded_size, orientation, fast.scale, fast.offset, (width, height)
    )
    pixels = fast.pixels[:, :, 0] if options.channels == 1 else fast.pixels
    if options.format in ("keep", "jpeg"):  # libjpeg-turbo encodes, whether the pixels are kept or not
        return ConvertedImage(
            encoded=fast_jpeg.encode_jpeg(fast.pixels, options.quality),
            format="jpeg",
            height=height,
            width=width,
            channels=options.channels,
            pixels=Image.fromarray(pixels, options.mode) if keep_pixels else None,
            transform=transform,
        )
    return _stored(Image.fromarray(pixels, options.mode), options, True, keep_pixels, transform)


def _stored(
    img: Image.Image, options: ImageOptions, is_jpeg: bool, keep_pixels: bool, transform: ImageTransform
) -> ConvertedImage:
    """The converted image: ``img`` encoded in the stored format."""
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
        transform=transform,
    )
