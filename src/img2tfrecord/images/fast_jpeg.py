"""The common case fast: a JPEG shrunk (or grown) to a fixed size, through libjpeg-turbo and OpenCV.

libjpeg-turbo (``simplejpeg``) decodes at the same reduced DCT scale Pillow's ``draft`` picks (the
same pixels), and OpenCV resizes: an axis that shrinks by a factor ``s`` is first low-passed with a
Gaussian of sigma ``(s - 1) / 2`` (scikit-image's antialiasing rule), then sampled bilinearly;
enlarging on both axes is bicubic. Everything else — other formats and colour modes, ``--resample
bicubic``, keeping the stored bytes — stays on Pillow (``images/convert.py``), which also reads the
header first: the format, the pixel limit and the EXIF orientation are checked there before this
decodes anything. A JPEG libjpeg-turbo refuses (truncated, corrupt) goes back to Pillow's path, so
its rejection reason is Pillow's.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import cv2
import numpy as np
import simplejpeg

from img2tfrecord.images.geometry import TRANSPOSED_ORIENTATIONS, target_size
from img2tfrecord.images.options import ImageOptions

_PAD_COLOR = 0  # --resize fit pads with black, as Pillow's path does

cv2.setNumThreads(1)  # one image per process: the conversion pool already uses every core


class FastResult(NamedTuple):
    """The stored pixels (H x W x C uint8, C = 1 or 3) and what was done to the file's pixels."""

    pixels: np.ndarray
    draft: int
    decoded_size: Tuple[int, int]
    scale: Tuple[float, float]
    offset: Tuple[float, float]


def encode_jpeg(pixels: np.ndarray, quality: int) -> bytes:
    """H x W x C (1 or 3) uint8 pixels as a baseline JPEG: accurate DCT, 4:2:0 chroma as Pillow's default."""
    if pixels.ndim == 2 or pixels.shape[2] == 1:
        gray = pixels.reshape(pixels.shape[0], pixels.shape[1], 1)
        return simplejpeg.encode_jpeg(gray, quality=quality, colorspace="GRAY", colorsubsampling="Gray")
    return simplejpeg.encode_jpeg(pixels, quality=quality, colorspace="RGB", colorsubsampling="420")


def draft_scale(source: Tuple[int, int], wanted: Tuple[int, int]) -> int:
    """The reduced scale Pillow's JPEG ``draft`` picks for ``wanted`` (width, height): 8, 4, 2 or 1."""
    ratio = min(source[0] // max(1, wanted[0]), source[1] // max(1, wanted[1]))
    return next((s for s in (8, 4, 2) if ratio >= s), 1)


def _orient(pixels: np.ndarray, orientation: int) -> np.ndarray:
    """The pixels as Pillow's transpose for EXIF ``orientation`` leaves them (images/geometry.orient_point)."""
    if orientation == 2:
        pixels = pixels[:, ::-1]
    elif orientation == 3:
        pixels = pixels[::-1, ::-1]
    elif orientation == 4:
        pixels = pixels[::-1]
    elif orientation == 5:
        pixels = pixels.swapaxes(0, 1)
    elif orientation == 6:
        pixels = np.rot90(pixels, -1)
    elif orientation == 7:
        pixels = np.rot90(pixels.swapaxes(0, 1), 2)
    elif orientation == 8:
        pixels = np.rot90(pixels, 1)
    return np.ascontiguousarray(pixels)


_NO_BLUR = 0.01  # a sigma whose kernel is one pixel wide: that axis is left as it is


def _resize(pixels: np.ndarray, size: Tuple[int, int]) -> np.ndarray:
    h, w = pixels.shape[:2]
    if (w, h) == size:
        return pixels
    sx, sy = w / size[0], h / size[1]  # > 1: the axis shrinks
    if sx <= 1 and sy <= 1:
        out = cv2.resize(pixels, size, interpolation=cv2.INTER_CUBIC)
    else:
        sigma_x, sigma_y = max(_NO_BLUR, (sx - 1) / 2), max(_NO_BLUR, (sy - 1) / 2)
        blurred = cv2.GaussianBlur(pixels, (0, 0), sigmaX=sigma_x, sigmaY=sigma_y)
        out = cv2.resize(blurred, size, interpolation=cv2.INTER_LINEAR)
    return out.reshape(size[1], size[0], *pixels.shape[2:])  # OpenCV drops a single channel's axis


def convert_pixels(
    data: bytes, options: ImageOptions, source_size: Tuple[int, int], orientation: int
) -> Optional[FastResult]:
    """Decode, orient and resize one JPEG to ``options.size``; None when libjpeg-turbo refuses it
    (the caller then takes Pillow's path, which names the reason)."""
    assert options.size is not None
    w, h = options.size
    swapped = orientation in TRANSPOSED_ORIENTATIONS
    oriented = (source_size[1], source_size[0]) if swapped else source_size
    if options.resize == "fit":
        w, h = target_size(oriented, options.size, "fit")  # what draft is asked for, as Pillow's path asks it
    draft = draft_scale(source_size, (h, w) if swapped else (w, h))
    try:
        decoded = simplejpeg.decode_jpeg(
            data,
            colorspace="RGB" if options.channels == 3 else "GRAY",
            min_width=-(-source_size[0] // draft),
            min_height=-(-source_size[1] // draft),
            min_factor=draft,
            strict=True,
        )
    except (ValueError, RuntimeError):
        return None
    decoded_size = (decoded.shape[1], decoded.shape[0])
    if decoded_size != (-(-source_size[0] // draft), -(-source_size[1] // draft)):
        return None  # a scale Pillow would not decode at: let Pillow do it
    pixels = _orient(decoded, orientation)
    sh, sw = pixels.shape[:2]
    tw, th = options.size
    if (sw, sh) == (tw, th):
        return FastResult(pixels, draft, decoded_size, (1.0, 1.0), (0.0, 0.0))
    if options.resize == "stretch":
        return FastResult(_resize(pixels, (tw, th)), draft, decoded_size, (tw / sw, th / sh), (0.0, 0.0))
    if options.resize == "fill":  # keep the aspect, centre-crop the overflow to whole pixels (within half a pixel
        # of Pillow's fractional crop; the transform is that of the crop made, so boxes follow it exactly)
        scale = max(tw / sw, th / sh)
        cw, ch = max(1, min(sw, round(tw / scale))), max(1, min(sh, round(th / scale)))
        left, top = (sw - cw) // 2, (sh - ch) // 2
        content = _resize(pixels[top : top + ch, left : left + cw], (tw, th))
        kx, ky = tw / cw, th / ch
        return FastResult(content, draft, decoded_size, (kx, ky), (-left * kx, -top * ky))
    fw, fh = target_size((sw, sh), (tw, th), "fit")  # fit: keep the aspect, pad to the target size
    canvas = np.full((th, tw, *pixels.shape[2:]), _PAD_COLOR, dtype=np.uint8)
    x0, y0 = (tw - fw) // 2, (th - fh) // 2
    canvas[y0 : y0 + fh, x0 : x0 + fw] = _resize(pixels, (fw, fh))
    return FastResult(canvas, draft, decoded_size, (fw / sw, fh / sh), (float(x0), float(y0)))
