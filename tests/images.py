"""Image bytes for tests, made with Pillow at test time.

The default content is four coloured quadrants (red top-left, green
top-right, blue bottom-left, yellow bottom-right), so any flip, rotation or
crop shows in which colour ends up where. Grayscale modes use four distinct
gray levels in the same places.
"""

from __future__ import annotations

import io
import struct
import zlib
from typing import Optional, Sequence, Tuple, Union

import numpy as np
from PIL import Image

RED = (255, 0, 0)
GREEN = (0, 255, 0)
BLUE = (0, 0, 255)
YELLOW = (255, 255, 0)
WHITE = (255, 255, 255)
BLACK = (0, 0, 0)

# Corner -> colour of the default pattern, and the gray level used for 1-channel modes.
QUADRANTS = {"tl": RED, "tr": GREEN, "bl": BLUE, "br": YELLOW}
GRAY_QUADRANTS = {"tl": 230, "tr": 160, "bl": 90, "br": 20}
# 16-bit levels of the I;16 pattern; their top bytes are 0x12, 0x56, 0x9A, 0xDE.
GRAY16_QUADRANTS = {"tl": 0x1234, "tr": 0x5678, "bl": 0x9ABC, "br": 0xDEF0}

# EXIF orientation -> Pillow transpose that turns the stored pixels upright.
UPRIGHT = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
# The inverse of each: how to store an upright picture under that orientation.
_STORE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_270,
}

Pattern = Union[None, int, Tuple[int, ...], Image.Image]


def quadrants(w: int, h: int, colors=None, mode: str = "RGB") -> Image.Image:
    """``w`` x ``h`` image split into four blocks; the top-left block is ``colors['tl']``."""
    if colors is None:
        colors = GRAY_QUADRANTS if mode in ("L", "LA", "1") else QUADRANTS
    img = Image.new(mode, (w, h), colors["br"])
    hw, hh = w // 2, h // 2
    img.paste(colors["tl"], (0, 0, hw, hh))
    img.paste(colors["tr"], (hw, 0, w, hh))
    img.paste(colors["bl"], (0, hh, hw, h))
    return img


def picture(w: int, h: int, pattern: Pattern = None, mode: str = "RGB") -> Image.Image:
    """The pixels of a test image: quadrants (``pattern=None``), one colour, or a given image."""
    if isinstance(pattern, Image.Image):
        img = pattern if pattern.size == (w, h) else pattern.resize((w, h))
        return img if img.mode == mode else img.convert(mode)
    if pattern is None:
        base_mode = "L" if mode in ("L", "LA", "1") else "RGB"
        img = quadrants(w, h, mode=base_mode)
    else:
        base_mode = "L" if isinstance(pattern, int) else "RGB"
        img = Image.new(base_mode, (w, h), pattern)
    return img if img.mode == mode else img.convert(mode)


def stripes(w: int, h: int, colors: Sequence[Tuple[int, int, int]], vertical: bool = True) -> Image.Image:
    """Equal stripes of ``colors``, left to right (``vertical``) or top to bottom."""
    img = Image.new("RGB", (w, h))
    n = len(colors)
    for i, color in enumerate(colors):
        if vertical:
            img.paste(color, (w * i // n, 0, w * (i + 1) // n, h))
        else:
            img.paste(color, (0, h * i // n, w, h * (i + 1) // n))
    return img


def save(img: Image.Image, fmt: str, **params) -> bytes:
    out = io.BytesIO()
    img.save(out, format=fmt, **params)
    return out.getvalue()


def exif_bytes(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def stored_for_orientation(upright: Image.Image, orientation: int) -> Image.Image:
    """The pixels a camera stores so that ``orientation`` turns them into ``upright``."""
    method = _STORE.get(orientation)
    return upright.transpose(method) if method is not None else upright.copy()


def jpeg(
    w: int,
    h: int,
    pattern: Pattern = None,
    mode: str = "RGB",
    exif_orientation: Optional[int] = None,
    quality: int = 90,
) -> bytes:
    """A JPEG whose pixel array is ``w`` x ``h``.

    With ``exif_orientation`` the stored pixels are the pattern turned so that
    applying the orientation gives the upright pattern (red top-left): for
    orientations 5-8 the upright image is ``h`` x ``w``. ``mode`` may be RGB,
    L or CMYK.
    """
    params = {"quality": quality}
    if exif_orientation is not None:
        swap = exif_orientation in (5, 6, 7, 8)
        upright = picture(h, w, pattern, mode) if swap else picture(w, h, pattern, mode)
        img = stored_for_orientation(upright, exif_orientation)
        params["exif"] = exif_bytes(exif_orientation)
    else:
        img = picture(w, h, pattern, mode)
    assert img.size == (w, h)
    return save(img, "JPEG", **params)


def png(w: int, h: int, pattern: Pattern = None, mode: str = "RGB") -> bytes:
    """A PNG in ``mode``: RGB, RGBA, LA, P, L, I;16 or 1.

    * RGBA: quadrants, the bottom-right block fully transparent and the
      top-right block half transparent (alpha 128).
    * LA: gray quadrants, bottom-right block fully transparent.
    * P: an adaptive palette of the quadrants with the bottom-right colour
      (index of yellow) declared transparent.
    * I;16: 16-bit grayscale with the levels of ``GRAY16_QUADRANTS``.
    * 1: a 1-bit image, white left half and black right half.
    """
    if mode == "RGBA":
        img = picture(w, h, pattern, "RGBA")
        alpha = Image.new("L", (w, h), 255)
        alpha.paste(128, (w // 2, 0, w, h // 2))
        alpha.paste(0, (w // 2, h // 2, w, h))
        img.putalpha(alpha)
        return save(img, "PNG")
    if mode == "LA":
        img = picture(w, h, pattern, "L").convert("LA")
        alpha = Image.new("L", (w, h), 255)
        alpha.paste(0, (w // 2, h // 2, w, h))
        img.putalpha(alpha)
        return save(img, "PNG")
    if mode == "P":
        img = picture(w, h, pattern, "RGB").convert("P", palette=Image.Palette.ADAPTIVE, colors=4)
        transparent = img.getpixel((w - 1, h - 1))
        return save(img, "PNG", transparency=transparent)
    if mode == "I;16":
        return save(gray16(w, h), "PNG")
    if mode == "1":
        img = Image.new("1", (w, h), 0)
        img.paste(1, (0, 0, w // 2, h))
        return save(img, "PNG")
    return save(picture(w, h, pattern, mode), "PNG")


def gray16(w: int, h: int) -> Image.Image:
    arr = np.empty((h, w), dtype=np.uint16)
    hw, hh = w // 2, h // 2
    arr[:hh, :hw] = GRAY16_QUADRANTS["tl"]
    arr[:hh, hw:] = GRAY16_QUADRANTS["tr"]
    arr[hh:, :hw] = GRAY16_QUADRANTS["bl"]
    arr[hh:, hw:] = GRAY16_QUADRANTS["br"]
    img = Image.fromarray(arr)
    assert img.mode == "I;16"
    return img


def cmyk_jpeg(w: int, h: int, pattern: Pattern = None, quality: int = 95) -> bytes:
    return jpeg(w, h, pattern, mode="CMYK", quality=quality)


def gif_animated(w: int, h: int) -> bytes:
    """Two frames: the quadrants first, then a solid blue frame."""
    first = picture(w, h).convert("P", palette=Image.Palette.ADAPTIVE, colors=8)
    second = Image.new("RGB", (w, h), BLUE).convert("P", palette=Image.Palette.ADAPTIVE, colors=8)
    return save(first, "GIF", save_all=True, append_images=[second], duration=100, loop=0)


def tiff(w: int, h: int, pattern: Pattern = None, mode: str = "RGB") -> bytes:
    return save(picture(w, h, pattern, mode), "TIFF")


def tiff_float(w: int, h: int, values: Sequence[float]) -> bytes:
    """A 32-bit float TIFF (mode F) with ``values`` in the four quadrants (tl, tr, bl, br)."""
    arr = np.empty((h, w), dtype=np.float32)
    hw, hh = w // 2, h // 2
    arr[:hh, :hw], arr[:hh, hw:], arr[hh:, :hw], arr[hh:, hw:] = values
    img = Image.fromarray(arr)
    assert img.mode == "F"
    return save(img, "TIFF")


def tiff_int32(w: int, h: int, values: Sequence[int]) -> bytes:
    """A 32-bit integer TIFF (mode I) with ``values`` in the four quadrants (tl, tr, bl, br)."""
    arr = np.empty((h, w), dtype=np.int32)
    hw, hh = w // 2, h // 2
    arr[:hh, :hw], arr[:hh, hw:], arr[hh:, :hw], arr[hh:, hw:] = values
    img = Image.fromarray(arr)
    assert img.mode == "I"
    return save(img, "TIFF")


def webp(w: int, h: int, pattern: Pattern = None, lossless: bool = True) -> bytes:
    return save(picture(w, h, pattern), "WEBP", lossless=lossless)


def bmp(w: int, h: int, pattern: Pattern = None) -> bytes:
    return save(picture(w, h, pattern), "BMP")


# -- bad inputs ---------------------------------------------------------------------------------


def empty() -> bytes:
    return b""


def truncated_jpeg(w: int = 64, h: int = 48) -> bytes:
    """A JPEG cut in half."""
    data = jpeg(w, h, noise(w, h))
    return data[: len(data) // 2]


def truncated_png(w: int = 64, h: int = 48) -> bytes:
    """A PNG cut in half (inside the image data)."""
    data = png(w, h, noise(w, h))
    return data[: len(data) // 2]


def corrupt_jpeg(w: int = 64, h: int = 48) -> bytes:
    """A JPEG whose entropy-coded scan has a run of 0xFF 0xD9-style garbage in the middle.

    Bytes inside the scan (after the start-of-scan marker) are replaced with
    an invalid marker sequence, so the header parses but the data does not.
    """
    data = bytearray(jpeg(w, h, noise(w, h)))
    sos = data.index(b"\xff\xda")
    middle = sos + (len(data) - sos) // 2
    data[middle : middle + 16] = b"\xff\xd8\xff\xd8" * 4  # start-of-image markers cannot appear in a scan
    return bytes(data)


def text_as_jpg() -> bytes:
    """What a text file renamed to ``.jpg`` contains."""
    return b"This is not an image, just some notes saved with the wrong extension.\n" * 5


def png_bomb(w: int = 50000, h: int = 50000) -> bytes:
    """A tiny PNG whose IHDR declares ``w`` x ``h`` pixels (CRC fixed, so the header is valid)."""
    data = bytearray(png(8, 8, WHITE))
    assert data[12:16] == b"IHDR"
    data[16:24] = struct.pack(">II", w, h)
    crc = zlib.crc32(bytes(data[12:29])) & 0xFFFFFFFF  # chunk type + 13 data bytes
    data[29:33] = struct.pack(">I", crc)
    return bytes(data)


def noise(w: int, h: int, seed: int = 0) -> Image.Image:
    """Random RGB pixels: compress badly, so half a file is still deep inside the image data."""
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8))


# -- hostile inputs ------------------------------------------------------------------------------


def gif(w: int, h: int, pattern: Pattern = None) -> bytes:
    return save(picture(w, h, pattern).convert("P", palette=Image.Palette.ADAPTIVE, colors=8), "GIF")


def truncated(data: bytes, fraction: float = 0.5) -> bytes:
    """The first ``fraction`` of ``data``: a download or copy that stopped early."""
    return data[: max(1, int(len(data) * fraction))]


def corrupted(data: bytes, at: float = 0.6, length: int = 64, seed: int = 0) -> bytes:
    """``data`` with ``length`` random bytes written over it from ``at`` (a fraction of its length)."""
    rng = np.random.default_rng(seed)
    out = bytearray(data)
    start = int(len(out) * at)
    out[start : start + length] = rng.integers(0, 256, min(length, len(out) - start), dtype=np.uint8).tobytes()
    return bytes(out)


def html_as_jpg() -> bytes:
    """A web page saved under an image name (a common scraping accident)."""
    return b"<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head><body>gone</body></html>\n"


def eps() -> bytes:
    """A tiny Encapsulated PostScript file: a program, which Pillow would hand to Ghostscript."""
    return (
        b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\n"
        b"newpath 0 0 moveto 8 0 lineto 8 8 lineto closepath fill\nshowpage\n%%EOF\n"
    )


def png_chunks(width: int, height: int, bit_depth: int, color_type: int, raw: bytes, extra=()) -> bytes:
    """A PNG written chunk by chunk, for what Pillow cannot save (16-bit colour with alpha).

    ``raw`` is the unfiltered pixel rows; each row gets filter byte 0.
    ``extra`` is ``(type, data)`` chunks placed before IDAT (PLTE, tRNS, ...).
    """

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    row = len(raw) // height
    rows = b"".join(b"\x00" + raw[i * row : (i + 1) * row] for i in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    body = (
        [chunk(b"IHDR", ihdr)]
        + [chunk(k, v) for k, v in extra]
        + [chunk(b"IDAT", zlib.compress(rows)), chunk(b"IEND", b"")]
    )
    return b"\x89PNG\r\n\x1a\n" + b"".join(body)


def png16_rgba(w: int, h: int) -> bytes:
    """16-bit RGBA quadrants; the bottom-right block fully transparent."""
    rgb = np.asarray(picture(w, h), dtype=np.uint16) * 257
    alpha = np.full((h, w, 1), 65535, dtype=np.uint16)
    alpha[h // 2 :, w // 2 :] = 0
    return png_chunks(w, h, 16, 6, np.concatenate([rgb, alpha], -1).astype(">u2").tobytes())


def png16_rgb(w: int, h: int, seed: int = 0) -> bytes:
    """16-bit RGB noise, no alpha: Pillow reads it as 8-bit RGB (the top bytes), so keep stores it as it is."""
    rng = np.random.default_rng(seed)
    return png_chunks(w, h, 16, 2, rng.integers(0, 65536, (h, w, 3), dtype=np.uint16).astype(">u2").tobytes())


def png16_gray_trns(w: int, h: int) -> bytes:
    """16-bit grayscale (``GRAY16_QUADRANTS``) whose bottom-right level is declared transparent (tRNS)."""
    arr = np.asarray(gray16(w, h), dtype=np.uint16)
    trns = struct.pack(">H", GRAY16_QUADRANTS["br"])
    return png_chunks(w, h, 16, 0, arr.astype(">u2").tobytes(), extra=[(b"tRNS", trns)])


def png_rgb_trns(w: int, h: int, bit_depth: int = 8) -> bytes:
    """RGB quadrants (8 or 16 bits) whose bottom-right colour, yellow, is declared transparent (tRNS)."""
    scale = 257 if bit_depth == 16 else 1
    rgb = np.asarray(picture(w, h), dtype=np.uint16) * scale
    trns = struct.pack(">HHH", *(c * scale for c in YELLOW))
    dtype = ">u2" if bit_depth == 16 else np.uint8
    return png_chunks(w, h, bit_depth, 2, rgb.astype(dtype).tobytes(), extra=[(b"tRNS", trns)])


def ycck_jpeg(w: int, h: int, quality: int = 95) -> bytes:
    """An Adobe YCCK JPEG (4 components, APP14 transform 2) of the quadrants, as Photoshop writes CMYK.

    Pillow cannot write YCCK, so the Y, Cb, Cr of the picture (and K = 0) are
    saved as the four components of a CMYK JPEG and the Adobe transform flag is
    set to 2: libjpeg then converts YCC to CMY while decoding.
    """
    rgb = np.asarray(picture(w, h), dtype=np.float64)
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    y = 0.299 * r + 0.587 * g + 0.114 * b
    cb = 128 - 0.168736 * r - 0.331264 * g + 0.5 * b
    cr = 128 + 0.5 * r - 0.418688 * g - 0.081312 * b
    components = np.stack([y, cb, cr, np.zeros_like(y)], -1)
    img = Image.fromarray(np.clip(np.round(components), 0, 255).astype(np.uint8), mode="CMYK")
    data = bytearray(save(img, "JPEG", quality=quality))
    transform = data.index(b"Adobe") + 11  # 'Adobe', version, flags0, flags1, then the transform byte
    assert data[transform] == 0
    data[transform] = 2
    return bytes(data)


def jpeg_broken_exif(w: int, h: int) -> bytes:
    """A JPEG whose APP1 Exif segment holds garbage after the Exif header."""
    data = jpeg(w, h)
    garbage = b"Exif\x00\x00" + b"MM\x00\x2a\x00\x00\x00\x08\x00\xff" + bytes(range(256)) * 2
    return data[:2] + b"\xff\xe1" + struct.pack(">H", len(garbage) + 2) + garbage + data[2:]


def jpeg_exif_value(w: int, h: int, value) -> bytes:
    """A JPEG whose EXIF orientation tag holds ``value`` (out of range or of the wrong type)."""
    exif = Image.Exif()
    exif[0x0112] = value
    return save(picture(w, h), "JPEG", exif=exif.tobytes())


def jpeg_bomb(w: int = 65500, h: int = 65500) -> bytes:
    """A small JPEG whose frame header declares ``w`` x ``h`` pixels."""
    data = bytearray(jpeg(16, 16, WHITE))
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", h, w)
    return bytes(data)


def gif_bomb(w: int = 65535, h: int = 65535) -> bytes:
    """A small GIF whose logical screen is ``w`` x ``h``."""
    data = bytearray(save(Image.new("P", (8, 8)), "GIF"))
    data[6:10] = struct.pack("<HH", w, h)
    return bytes(data)


def bmp_bomb(w: int = 40000, h: int = 40000) -> bytes:
    """A small BMP whose header declares ``w`` x ``h`` pixels."""
    data = bytearray(bmp(8, 8, WHITE))
    data[18:26] = struct.pack("<ii", w, h)
    return bytes(data)


def tiff_bomb(w: int = 60000, h: int = 60000) -> bytes:
    """A small TIFF whose ImageWidth / ImageLength tags declare ``w`` x ``h`` pixels."""
    data = bytearray(save(Image.new("L", (8, 8), 255), "TIFF"))
    little = data[:2] == b"II"
    fmt = "<" if little else ">"
    (ifd,) = struct.unpack(fmt + "I", data[4:8])
    (count,) = struct.unpack(fmt + "H", data[ifd : ifd + 2])
    for i in range(count):
        entry = ifd + 2 + 12 * i
        tag, kind = struct.unpack(fmt + "HH", data[entry : entry + 4])
        if tag in (256, 257):
            value = w if tag == 256 else h
            data[entry + 2 : entry + 4] = struct.pack(fmt + "H", 4)  # LONG
            data[entry + 4 : entry + 8] = struct.pack(fmt + "I", 1)
            data[entry + 8 : entry + 12] = struct.pack(fmt + "I", value)
    return bytes(data)


def webp_bomb(w: int = 16383, h: int = 16383) -> bytes:
    """A small lossless WebP whose bitstream header declares ``w`` x ``h`` pixels (WebP's largest)."""
    data = bytearray(webp(8, 8, WHITE))
    assert data[12:16] == b"VP8L" and data[20] == 0x2F
    bits = int.from_bytes(data[21:25], "little") & ~((1 << 28) - 1)  # keep the alpha and version bits
    data[21:25] = (bits | (w - 1) | ((h - 1) << 14)).to_bytes(4, "little")
    return bytes(data)


def webp_animated(w: int, h: int) -> bytes:
    """Two frames: the quadrants first, then solid blue."""
    first, second = picture(w, h), Image.new("RGB", (w, h), BLUE)
    return save(first, "WEBP", save_all=True, append_images=[second], duration=100, loop=0, lossless=True)


def apng(w: int, h: int) -> bytes:
    """An animated PNG of two frames: the quadrants first, then solid blue."""
    first, second = picture(w, h), Image.new("RGB", (w, h), BLUE)
    return save(first, "PNG", save_all=True, append_images=[second], duration=100, loop=0)


def png_bad_crc(w: int, h: int) -> bytes:
    """A PNG whose image data is intact but whose IDAT chunk CRC is wrong (libpng refuses it)."""
    data = bytearray(png(w, h))
    idat = data.index(b"IDAT")
    (length,) = struct.unpack(">I", data[idat - 4 : idat])
    data[idat + 4 + length] ^= 0xFF
    return bytes(data)
