"""Opening image bytes safely: format sniffing, pixel and time limits, and error reasons."""

from __future__ import annotations

import contextlib
import io
import struct
import time
import warnings
from typing import Iterator, List, Optional

from PIL import Image, UnidentifiedImageError

from img2tfrecord.images.options import NEVER_OPENED_FORMATS, ImageError


def _allow_pixels(max_pixels: int) -> None:
    """Raise Pillow's decompression-bomb limit to ``max_pixels`` when that is higher.

    Pillow warns past ``Image.MAX_IMAGE_PIXELS`` and refuses to open past
    twice that, before :func:`open_image` can apply ``max_pixels`` itself; without
    this a ``--max-pixels`` above Pillow's default could never let a larger
    image through. The limit is only ever raised (never lowered, never
    disabled), and every image is still checked against ``max_pixels``.
    """
    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and max_pixels > limit:
        Image.MAX_IMAGE_PIXELS = max_pixels


_clock = time.monotonic  # what the per-image time limit is measured with


class Deadline:
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

    def __init__(self, data: bytes, deadline: Deadline):
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


def open_image(data: bytes, max_pixels: int, deadline: Optional[Deadline] = None) -> Image.Image:
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
def decoding(data: bytes, source_format: str) -> Iterator[None]:
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
