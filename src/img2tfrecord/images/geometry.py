"""Where a source pixel lands in the stored image: the transform ``convert_image`` applied, and boxes through it.

``convert_image`` records what it did to the pixels as an
:class:`ImageTransform` (JPEG reduced-scale decoding, EXIF orientation,
stretch/fit/fill scaling, crop and padding); :func:`map_box` sends a box
through the same steps, so boxes and pixels cannot drift apart. Coordinates
are continuous pixel edges: a box ``(0, 0, 1, 1)`` is the top-left pixel.
Pure functions, no Pillow.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

TRANSPOSED_ORIENTATIONS = (5, 6, 7, 8)  # EXIF orientations that swap width and height
_MIN_KEPT_EDGE = 1e-6  # a box thinner than this (stored pixels) after clipping is gone
# Why a box of an annotation is not stored as given, as counted in a split's ``dropped_boxes``.
BOX_OUTSIDE_IMAGE = "box_outside_image"  # no part of it is inside the source image: dropped
CLIPPED_TO_IMAGE = "clipped_to_image"  # partly outside the source image: kept, clipped to it, marked truncated


class ImageTransform(NamedTuple):
    """What ``convert_image`` did to one image, from the file's pixels to the stored ones."""

    source_size: Tuple[int, int]  # (width, height) of the file's pixels, before orientation
    draft: int  # JPEG reduced-scale decoding: decoded pixel = source pixel / draft (1, 2, 4 or 8)
    decoded_size: Tuple[int, int]  # (width, height) decoded, before orientation
    orientation: int  # EXIF orientation 1..8 applied to the decoded pixels
    scale: Tuple[float, float]  # oriented decoded pixels -> stored pixels
    offset: Tuple[float, float]  # added after scaling: minus the crop (fill), plus the padding (fit)
    size: Tuple[int, int]  # (width, height) stored

    @property
    def oriented_size(self) -> Tuple[int, int]:
        """(width, height) of the source after orientation."""
        w, h = self.source_size
        return (h, w) if self.orientation in TRANSPOSED_ORIENTATIONS else (w, h)


def identity(size: Tuple[int, int]) -> ImageTransform:
    """The transform of an image stored as it is."""
    return ImageTransform(size, 1, size, 1, (1.0, 1.0), (0.0, 0.0), size)


def orient_point(x: float, y: float, size: Tuple[int, int], orientation: int) -> Tuple[float, float]:
    """A point of a ``size`` (width, height) image, where Pillow's transpose for ``orientation`` puts it."""
    w, h = size
    if orientation == 2:  # FLIP_LEFT_RIGHT
        return w - x, y
    if orientation == 3:  # ROTATE_180
        return w - x, h - y
    if orientation == 4:  # FLIP_TOP_BOTTOM
        return x, h - y
    if orientation == 5:  # TRANSPOSE
        return y, x
    if orientation == 6:  # ROTATE_270: a quarter turn clockwise
        return h - y, x
    if orientation == 7:  # TRANSVERSE
        return h - y, w - x
    if orientation == 8:  # ROTATE_90: a quarter turn counter-clockwise
        return y, w - x
    return x, y


def map_point(t: ImageTransform, x: float, y: float) -> Tuple[float, float]:
    """A point in source pixels -> the same point in stored pixels (may lie outside the stored image)."""
    ox, oy = orient_point(x / t.draft, y / t.draft, t.decoded_size, t.orientation)
    return ox * t.scale[0] + t.offset[0], oy * t.scale[1] + t.offset[1]


class MappedBox(NamedTuple):
    """A box in stored pixels, and whether clipping to the stored image cut it."""

    xmin: float
    ymin: float
    xmax: float
    ymax: float
    clipped: bool
    kept_fraction: float  # its clipped area over its area before clipping


class SourceBox(NamedTuple):
    """A box clipped to its source image, and the fraction of its area inside the image."""

    xmin: float
    ymin: float
    xmax: float
    ymax: float
    clipped: bool  # part of it was outside the image (:data:`CLIPPED_TO_IMAGE`)
    kept_fraction: float


def clip_to_source(size: Tuple[int, int], xmin: float, ymin: float, xmax: float, ymax: float) -> Optional[SourceBox]:
    """A box of an image of ``size`` (width, height), clipped to it; None when no part of it is inside.

    The rule for annotations: a box wholly outside is dropped
    (:data:`BOX_OUTSIDE_IMAGE`); one partly outside is kept as its part
    inside the image (:data:`CLIPPED_TO_IMAGE`). A box along an edge is inside.
    """
    w, h = size
    x0, y0, x1, y1 = max(0.0, xmin), max(0.0, ymin), min(float(w), xmax), min(float(h), ymax)
    if x1 <= x0 or y1 <= y0:
        return None
    area = (xmax - xmin) * (ymax - ymin)
    kept = (x1 - x0) * (y1 - y0) / area if area > 0 else 0.0
    return SourceBox(x0, y0, x1, y1, (x0, y0, x1, y1) != (xmin, ymin, xmax, ymax), kept)


def map_box(t: ImageTransform, xmin: float, ymin: float, xmax: float, ymax: float) -> Optional[MappedBox]:
    """A source box in stored pixels, clipped to the stored image; None when nothing of it is left."""
    x0, y0 = map_point(t, xmin, ymin)
    x1, y1 = map_point(t, xmax, ymax)
    x0, x1 = min(x0, x1), max(x0, x1)
    y0, y1 = min(y0, y1), max(y0, y1)
    w, h = t.size
    cx0, cy0, cx1, cy1 = max(0.0, x0), max(0.0, y0), min(float(w), x1), min(float(h), y1)
    if cx1 - cx0 < _MIN_KEPT_EDGE or cy1 - cy0 < _MIN_KEPT_EDGE:
        return None
    area = (x1 - x0) * (y1 - y0)
    kept = (cx1 - cx0) * (cy1 - cy0) / area if area > 0 else 0.0
    clipped = (cx0, cy0, cx1, cy1) != (x0, y0, x1, y1)
    return MappedBox(cx0, cy0, cx1, cy1, clipped, kept)


def target_size(src: Tuple[int, int], size: Tuple[int, int], resize: str) -> Tuple[int, int]:
    """Size of the resized content before padding (fit) or after cropping (fill/stretch)."""
    if resize != "fit":
        return size
    sw, sh = src
    w, h = size
    scale = min(w / sw, h / sh)
    return max(1, round(sw * scale)), max(1, round(sh * scale))


def resize_transform(
    decoded: Tuple[int, int], size: Tuple[int, int], resize: str, fit_content: Tuple[int, int]
) -> Tuple[Tuple[float, float], Tuple[float, float]]:
    """``(scale, offset)`` of ``images.convert.resize_image`` from an oriented ``decoded`` (w, h) image to ``size``.

    ``fit_content`` is the content size ``target_size`` gives for ``fit``;
    the crop of ``fill`` is computed exactly as ``resize_image`` computes it.
    """
    sw, sh = decoded
    w, h = size
    if decoded == size:
        return (1.0, 1.0), (0.0, 0.0)
    if resize == "stretch":
        return (w / sw, h / sh), (0.0, 0.0)
    if resize == "fill":
        scale = max(w / sw, h / sh)
        cw, ch = min(sw, w / scale), min(sh, h / scale)
        left, top = max(0.0, (sw - cw) / 2), max(0.0, (sh - ch) / 2)
        kx, ky = w / cw, h / ch
        return (kx, ky), (-left * kx, -top * ky)
    fw, fh = fit_content
    return (fw / sw, fh / sh), (float((w - fw) // 2), float((h - fh) // 2))
