"""Writing inputs: trees, zips, tars, small datasets, junk, old outputs, the hostile corpus, clips, photos."""

from __future__ import annotations

import io
import os
import struct
import tarfile
import zipfile
from dataclasses import dataclass
from typing import Dict, Optional, Tuple, Union

import images as I
import numpy as np
from PIL import Image


def dataset_files():
    """relpath -> bytes of a small class-folder dataset: JPEG and PNG, several sizes, one nested file."""
    files = {}
    for ci, name in enumerate(("cat", "dog", "emu")):
        for i in range(5):
            rel = f"{name}/{name}_{i}.{'png' if i % 2 else 'jpg'}"
            files[rel] = I.png(12 + i, 10 + ci) if i % 2 else I.jpeg(16 + 2 * i, 12 + ci)
    files["dog/sub/deep.jpg"] = I.jpeg(20, 14)
    return files


JUNK = {".DS_Store": b"junk", "cat/Thumbs.db": b"junk", "__MACOSX/cat/._cat_0.jpg": b"junk"}


def write_tree(root, files):
    for rel, data in files.items():
        path = os.path.join(root, *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)


def write_zip(path, files, top=""):
    with zipfile.ZipFile(path, "w") as z:
        if top:
            z.writestr(top + "/", b"")  # a directory entry
        for i, (rel, data) in enumerate(sorted(files.items())):
            z.writestr(top + ("/" if top else "") + rel, data, zipfile.ZIP_DEFLATED if i % 2 else zipfile.ZIP_STORED)


def write_tar(path, files, top="", mode="w"):
    with tarfile.open(path, mode) as t:
        for rel, data in sorted(files.items()):
            info = tarfile.TarInfo((top + "/" if top else "") + rel)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


def write_old_output(folder: str) -> None:
    """What a finished run and a killed run leave in an output folder (the names matter, not the bytes)."""
    write_tree(
        folder,
        {
            "done/dataset.json": b"{}",
            "done/labels.txt": b"cat\ndog\n",
            "done/_SUCCESS": b"",
            "done/train-00000-of-00001.tfrecord": b"\0" * 40,
            "done/index/train-00000-of-00001.tfrecord.idx": b"0 40\n",
            "killed/.tmp-run-0123456789abcdef/shards/train/part": b"\0" * 8,
            "killed/errors.jsonl": b"",
        },
    )


_EOCD = struct.Struct("<4s4H2LH")  # end of central directory
_CENTRAL = struct.Struct("<4s6H3L5H2L")  # central directory file header
_LOCAL = struct.Struct("<4s5H3L2H")  # local file header
UTF8_FLAG = 0x800


def write_zip_raw_names(path: str, members: dict) -> None:
    """A zip whose member names are the given bytes, with the UTF-8 flag clear (``zip -r`` on Linux).

    ``zipfile`` writes non-ASCII names as flagged UTF-8, so each member is written under an ASCII
    name of the same length, and the names and flags are then patched in both headers.
    """
    raw_names = list(members)
    with zipfile.ZipFile(path, "w") as z:
        for i, raw in enumerate(raw_names):
            z.writestr(f"{i:0{len(raw)}d}", members[raw], zipfile.ZIP_DEFLATED if i % 2 else zipfile.ZIP_STORED)
    data = bytearray(open(path, "rb").read())
    eocd = data.rindex(b"PK\x05\x06")
    entries, directory = _EOCD.unpack_from(data, eocd)[4], _EOCD.unpack_from(data, eocd)[6]
    at = directory
    for _ in range(entries):
        fields = list(_CENTRAL.unpack_from(data, at))
        name_len, extra_len, comment_len, local = fields[10], fields[11], fields[12], fields[16]
        index = int(bytes(data[at + _CENTRAL.size : at + _CENTRAL.size + name_len]))
        raw = raw_names[index]
        assert len(raw) == name_len
        fields[3] &= ~UTF8_FLAG
        _CENTRAL.pack_into(data, at, *fields)
        data[at + _CENTRAL.size : at + _CENTRAL.size + name_len] = raw
        local_fields = list(_LOCAL.unpack_from(data, local))
        local_fields[2] &= ~UTF8_FLAG
        _LOCAL.pack_into(data, local, *local_fields)
        data[local + _LOCAL.size : local + _LOCAL.size + name_len] = raw
        at += _CENTRAL.size + name_len + extra_len + comment_len
    with open(path, "wb") as f:
        f.write(bytes(data))


def make_images(root: str, classes: int, per_class: int, size=(96, 72), bad: int = 0) -> dict:
    """relpath -> bytes: noisy JPEGs (slow enough to convert), and ``bad`` truncated ones per class."""
    files = {}
    w, h = size
    for c in range(classes):
        for i in range(per_class):
            data = I.jpeg(w, h, I.noise(max(1, w // 10), max(1, h // 10), seed=c * 1000 + i).resize((w, h)))
            files[f"class{c}/img_{i:04d}.jpg"] = data
        for i in range(bad):
            files[f"class{c}/broken_{i}.jpg"] = I.truncated_jpeg()
    for relpath, data in files.items():
        path = os.path.join(root, relpath)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return files


WHITE_BR = {**I.QUADRANTS, "br": I.WHITE}  # the bottom-right block was transparent


@dataclass(frozen=True)
class Record:
    fmt: str
    size: Tuple[int, int]  # (width, height) of the stored image
    kept: bool = False  # the original bytes are stored
    colors: Optional[Dict[str, Union[int, Tuple[int, int, int]]]] = None  # quadrant centres, RGB
    tol: int = 24  # JPEG: encoded by the test, then again by the conversion


@dataclass(frozen=True)
class Rejected:
    reason: str


def gray3(level: int) -> Tuple[int, int, int]:
    return (level, level, level)


def _noise_png(w: int, h: int) -> bytes:
    return I.png(w, h, I.noise(w, h))


def _corrupt_bmp_header() -> bytes:
    data = bytearray(I.bmp(64, 48, I.noise(64, 48)))
    data[28:30] = (7).to_bytes(2, "little")  # 7 bits per pixel does not exist
    return bytes(data)


def _webp_bad_version() -> bytes:
    data = bytearray(I.webp(64, 48, I.noise(64, 48)))
    data[24] |= 0xE0  # VP8L version bits must be 0
    return bytes(data)


NAMES = (
    "café ☕ 日本語.jpg",
    "emoji 👍🏽 family 👨‍👩‍👧.jpg",
    "  leading and trailing spaces  .jpg",
    "line\nbreak.jpg",
    "carriage\rreturn.jpg",
    "tab\there.jpg",
    "[glob]*?{a,b}.jpg",
    "-rf --help.jpg",
    "q\"uote'back\\slash.jpg",
    "%2F%00 not escapes.jpg",
    "n" * 251 + ".jpg",  # 255 bytes, the longest name most filesystems allow
)


def hostile_corpus() -> Dict[str, Tuple[bytes, Union[Record, Rejected]]]:
    """relpath -> (bytes, expected outcome) of every regular file of the corpus."""
    q, g = I.QUADRANTS, I.GRAY_QUADRANTS
    files: Dict[str, Tuple[bytes, Union[Record, Rejected]]] = {
        # Good files, kept byte for byte.
        "good/plain.jpg": (I.jpeg(40, 30), Record("jpeg", (40, 30), kept=True, colors=q)),
        "good/plain.png": (I.png(40, 30), Record("png", (40, 30), kept=True, colors=q, tol=0)),
        # Colour spaces, bit depths, transparency, deep and float pixels.
        "formats/cmyk.jpg": (I.cmyk_jpeg(40, 30), Record("jpeg", (40, 30), colors=q)),
        "formats/ycck.jpg": (I.ycck_jpeg(40, 30), Record("jpeg", (40, 30), colors=q)),
        "formats/rgba16.png": (I.png16_rgba(40, 30), Record("png", (40, 30), colors=WHITE_BR, tol=1)),
        "formats/rgb_trns.png": (I.png_rgb_trns(40, 30), Record("png", (40, 30), colors=WHITE_BR, tol=0)),
        "formats/rgb16_trns.png": (I.png_rgb_trns(40, 30, 16), Record("png", (40, 30), colors=WHITE_BR, tol=0)),
        "formats/gray16_trns.png": (
            I.png16_gray_trns(40, 30),
            Record(
                "png", (40, 30), colors={"tl": gray3(0x12), "tr": gray3(0x56), "bl": gray3(0x9A), "br": I.WHITE}, tol=0
            ),
        ),
        "formats/palette_trns.png": (I.png(40, 30, mode="P"), Record("png", (40, 30), colors=WHITE_BR, tol=0)),
        "formats/la.png": (
            I.png(40, 30, mode="LA"),
            Record("png", (40, 30), colors={**{k: gray3(v) for k, v in g.items()}, "br": I.WHITE}, tol=0),
        ),
        "formats/bilevel.png": (
            I.png(40, 30, mode="1"),
            Record("png", (40, 30), colors={"tl": I.WHITE, "tr": I.BLACK, "bl": I.WHITE, "br": I.BLACK}, tol=0),
        ),
        "formats/int32.tif": (
            I.tiff_int32(40, 30, [0, 100, 200, 255]),
            Record(
                "png", (40, 30), colors={"tl": gray3(0), "tr": gray3(100), "bl": gray3(200), "br": gray3(255)}, tol=0
            ),
        ),
        "formats/float.tif": (
            I.tiff_float(40, 30, [0.0, 0.25, 0.5, 1.0]),
            Record(
                "png", (40, 30), colors={"tl": gray3(0), "tr": gray3(64), "bl": gray3(128), "br": gray3(255)}, tol=1
            ),
        ),
        "formats/still.gif": (I.gif(40, 30), Record("png", (40, 30), colors=q, tol=0)),
        "formats/lossless.webp": (I.webp(40, 30), Record("png", (40, 30), colors=q, tol=0)),
        "formats/plain.bmp": (I.bmp(40, 30), Record("png", (40, 30), colors=q, tol=0)),
        "formats/plain.tif": (I.tiff(40, 30), Record("png", (40, 30), colors=q, tol=0)),
        # Animations: the first frame (quadrants), never the second (blue).
        "animated/two_frames.gif": (I.gif_animated(40, 30), Record("png", (40, 30), colors=q, tol=0)),
        "animated/two_frames.webp": (I.webp_animated(40, 30), Record("png", (40, 30), colors=q, tol=0)),
        # An APNG is a valid PNG: kept as it is, PNG decoders that ignore animation see frame one.
        "animated/two_frames.png": (I.apng(40, 30), Record("png", (40, 30), kept=True, colors=q, tol=0)),
        # EXIF: turned upright; broken or out-of-range EXIF is ignored.
        **{
            f"exif/orientation_{o}.jpg": (
                I.jpeg(40, 30, exif_orientation=o),
                Record("jpeg", (30, 40) if o >= 5 else (40, 30), kept=o == 1, colors=q),
            )
            for o in range(1, 9)
        },
        "exif/broken.jpg": (I.jpeg_broken_exif(40, 30), Record("jpeg", (40, 30), kept=True, colors=q)),
        "exif/orientation_9.jpg": (I.jpeg_exif_value(40, 30, 9), Record("jpeg", (40, 30), kept=True, colors=q)),
        "exif/orientation_0.jpg": (I.jpeg_exif_value(40, 30, 0), Record("jpeg", (40, 30), kept=True, colors=q)),
        # Extreme shapes.
        "shapes/one_pixel.png": (I.png(1, 1, I.RED), Record("png", (1, 1), kept=True)),
        "shapes/one_pixel.jpg": (I.jpeg(1, 1, I.RED), Record("jpeg", (1, 1), kept=True)),
        "shapes/tall.png": (I.png(1, 20000, I.RED), Record("png", (1, 20000), kept=True)),
        "shapes/wide.png": (I.png(20000, 1, I.RED), Record("png", (20000, 1), kept=True)),
        "shapes/wide.jpg": (I.jpeg(20000, 2, I.RED), Record("jpeg", (20000, 2), kept=True)),
        # Extensions that lie: the content decides.
        "lies/png_named.jpg": (I.png(40, 30), Record("png", (40, 30), kept=True, colors=q, tol=0)),
        "lies/jpeg_named.png": (I.jpeg(40, 30), Record("jpeg", (40, 30), kept=True, colors=q)),
        "lies/webp_named.gif": (I.webp(40, 30), Record("png", (40, 30), colors=q, tol=0)),
        "lies/no_extension": (I.jpeg(40, 30), Record("jpeg", (40, 30), kept=True, colors=q)),
        "lies/SHOUTING.JPEG": (I.jpeg(40, 30), Record("jpeg", (40, 30), kept=True, colors=q)),
        # Pixel data damaged in a format without checksums decodes: a record (documented).
        "damaged/pixels.bmp": (I.corrupted(I.bmp(64, 48, I.noise(64, 48))), Record("png", (64, 48))),
        # Decoded whole, but TensorFlow's decoders would refuse the file as it is: stored re-encoded.
        "damaged/bad_crc.png": (I.png_bad_crc(40, 30), Record("png", (40, 30), colors=q, tol=0)),
        "damaged/no_iend.png": (I.png(40, 30)[:-12], Record("png", (40, 30), colors=q, tol=0)),
        "damaged/bogus_end.jpg": (I.jpeg(40, 30)[:-2] + b"\xff\xdb", Record("jpeg", (40, 30), colors=q)),
        # Empty, truncated and corrupt files of every format.
        "broken/empty.jpg": (I.empty(), Rejected("empty_file")),
        "broken/empty.png": (I.empty(), Rejected("empty_file")),
        "broken/truncated.jpg": (I.truncated_jpeg(), Rejected("truncated")),
        "broken/truncated.png": (I.truncated_png(), Rejected("truncated")),
        "broken/truncated.gif": (I.truncated(I.gif(64, 48, I.noise(64, 48))), Rejected("truncated")),
        "broken/truncated.tif": (I.truncated(I.tiff(64, 48, I.noise(64, 48))), Rejected("truncated")),
        "broken/truncated.webp": (I.truncated(I.save(I.noise(64, 48), "WEBP")), Rejected("truncated")),
        "broken/truncated.bmp": (I.truncated(I.bmp(64, 48, I.noise(64, 48))), Rejected("truncated")),
        "broken/corrupt.jpg": (I.corrupt_jpeg(), Rejected("corrupt")),
        "broken/corrupt.png": (I.corrupted(_noise_png(64, 48)), Rejected("corrupt")),
        "broken/corrupt.gif": (I.corrupted(I.gif(64, 48, I.noise(64, 48))), Rejected("corrupt")),
        "broken/bad_header.bmp": (_corrupt_bmp_header(), Rejected("corrupt")),
        "broken/bad_header.webp": (_webp_bad_version(), Rejected("corrupt")),
        "broken/notes.jpg": (I.text_as_jpg(), Rejected("not_an_image")),
        "broken/page.jpg": (I.html_as_jpg(), Rejected("not_an_image")),
        "broken/program.jpg": (I.eps(), Rejected("not_an_image")),
        "broken/drawing.png": (
            b'<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"/>',
            Rejected("not_an_image"),
        ),
        "broken/random.png": (
            np.random.default_rng(1).integers(0, 256, 1000, dtype=np.uint8).tobytes(),
            Rejected("not_an_image"),
        ),
        # Decompression bombs: huge declared dimensions, tiny files.
        "bombs/png.png": (I.png_bomb(), Rejected("too_many_pixels")),
        "bombs/jpeg.jpg": (I.jpeg_bomb(), Rejected("too_many_pixels")),
        "bombs/gif.gif": (I.gif_bomb(), Rejected("too_many_pixels")),
        "bombs/bmp.bmp": (I.bmp_bomb(), Rejected("too_many_pixels")),
        "bombs/tiff.tif": (I.tiff_bomb(), Rejected("too_many_pixels")),
        "bombs/webp.webp": (I.webp_bomb(), Rejected("too_many_pixels")),
        # Over --max-file-mb 1 (a valid image).
        "big/noise.png": (_noise_png(700, 600), Rejected("file_too_large")),
        # Not inside a class folder.
        "stray.jpg": (I.jpeg(8, 8), Rejected("no_class_folder")),
    }
    for name in NAMES:
        files[f"names/{name}"] = (I.jpeg(8, 8, I.BLUE), Record("jpeg", (8, 8), kept=True))
    files[f"{ODD_CLASS}/a.jpg"] = (I.jpeg(8, 8, I.BLUE), Record("jpeg", (8, 8), kept=True))
    return files


ODD_CLASS = 'a "quoted" class, ünïcödé\ttab & \\ {json}'  # becomes a label: labels.txt and dataset.json


FRAME_STEP = 20


def frame(index: int, clip: int) -> bytes:
    """A 12x10 PNG whose red channel is the frame index * FRAME_STEP, green the clip number * 40."""
    return I.save(Image.new("RGB", (12, 10), (index * FRAME_STEP, clip * 40, 90)), "PNG")


def clip_dataset():
    """relpath -> bytes; clips of 3, 12 and 5 frames named frame_1 .. frame_N (natural order != text order)."""
    files = {}
    lengths = {"run/clip_a": 3, "run/clip_b": 12, "walk/clip_c": 5, "walk/clip_d": 1}
    for n, (clip, count) in enumerate(sorted(lengths.items())):
        for i in range(1, count + 1):
            files[f"{clip}/frame_{i}.png"] = frame(i, n)
    return files, lengths


def photos(root: str, per_class: int = 3) -> dict:
    """A small class-folder dataset under ``root``; -> relpath -> bytes."""
    files = {
        f"{name}/{name}_{i:03d}.{'png' if i % 2 else 'jpg'}": (I.png(12 + i, 10) if i % 2 else I.jpeg(14 + i, 12))
        for name in ("cat", "dog")
        for i in range(per_class)
    }
    write_tree(root, files)
    return files
