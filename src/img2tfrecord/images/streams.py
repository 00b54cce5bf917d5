"""Checks that a JPEG or PNG stream can be stored byte for byte: TensorFlow's decoders read it as Pillow does."""

from __future__ import annotations

import re
import struct
import zlib

_SOF_MARKERS = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
_PROGRESSIVE_SOF = frozenset({0xC2, 0xC6, 0xCA, 0xCE})
_SKIPPED_SEGMENTS = frozenset({0xFE} | set(range(0xE0, 0xF0)))  # COM, APP0-APP15
# The first 0xFF that starts a marker: not stuffing (00), a restart marker (D0-D7) or a fill byte (FF).
_NEXT_MARKER = re.compile(rb"\xff(?![\x00\xd0-\xd7\xff])")


def jpeg_can_be_kept(data: bytes) -> bool:
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
    # Skip the entropy-coded data: there 0xFF is followed by 0x00 (stuffing), a restart marker or fill bytes.
    found = _NEXT_MARKER.search(data, pos)
    if found is None or found.start() + 1 >= n:
        return False
    pos = found.start()
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


def png_can_be_kept(data: bytes) -> bool:
    """True when libpng reads a PNG as Pillow did: chunk types, critical CRCs and the IEND chunk.

    Pillow does not check the CRC of image data (IDAT), passes over chunk
    types that are not four letters and does not need the closing IEND;
    libpng refuses all three.
    """
    view = memoryview(data)
    pos = 8
    while pos + 12 <= len(data):
        length, kind = struct.unpack(">I4s", view[pos : pos + 8])
        end = pos + 8 + length
        if end + 4 > len(data) or not kind.isalpha():
            return False
        if not kind[0] & 0x20:  # a critical chunk (upper-case first letter): its CRC must match
            if zlib.crc32(view[pos + 4 : end]) != struct.unpack(">I", view[end : end + 4])[0]:
                return False
        if kind == b"IEND":
            return True
        pos = end + 4
    return False
