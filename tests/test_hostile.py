"""Hostile inputs through the real ``img2tfrecord convert`` CLI.

One conversion of a corpus of every kind of bad, odd and dangerous input
(``hostile_output``), then a few targeted runs. For each file the test knows
the outcome: the right record (format, size, kept bytes or the right pixels,
decodable by TensorFlow) or one line of ``errors.jsonl`` with the right
reason; junk is skipped and counted; and ``inputs = written + rejected``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from typing import Dict, Tuple

import images as I
import numpy as np
import pytest
from conftest import ROOT, SRC, built_once, convert
from helpers.cli import FAST
from helpers.datasets import ODD_CLASS, Record, Rejected, hostile_corpus
from helpers.outputs import read_records
from helpers.shared_outputs import converted_once, run_unprivileged
from PIL import Image

from img2tfrecord.images.convert import convert_image
from img2tfrecord.images.options import ImageError, ImageOptions
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import output_files

tf = pytest.importorskip("tensorflow")

ONE = ("--processes", "1")  # where the number of conversion processes is not the point


JUNK = (  # skipped and counted, never errors
    ".DS_Store",
    "good/Thumbs.db",
    "good/desktop.ini",
    "good/._plain.jpg",
    "good/.partial.jpg",
    "__MACOSX/good/._plain.jpg",
    ".hidden/secret.jpg",
    "only_junk/.DS_Store",
    "good/@eaDir/plain.jpg/SYNOPHOTO_THUMB_M.jpg",
    "$RECYCLE.BIN/good/deleted.jpg",
)


def _write(root: str, relpath: str, data: bytes) -> None:
    path = os.path.join(root, relpath)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


@pytest.fixture(scope="module")
def hostile_input(tmp_path_factory):
    """(root, relpath -> (bytes, expected outcome)); the corpus is written once per session for the xdist workers."""
    expected = hostile_corpus()

    def build(root: str) -> None:
        for relpath, (data, _) in expected.items():
            _write(root, relpath, data)
        for relpath in JUNK:
            _write(root, relpath, b"junk")
        os.makedirs(os.path.join(root, "empty_class"))
        links = os.path.join(root, "links")
        os.makedirs(links)
        os.symlink("..", os.path.join(links, "loop"))  # a link loop: links/loop/links/loop/...
        os.symlink(".", os.path.join(links, "self"))
        os.symlink("does-not-exist.jpg", os.path.join(links, "dangling.jpg"))
        os.symlink(os.path.join("..", "good", "plain.jpg"), os.path.join(links, "file_link.jpg"))
        special = os.path.join(root, "special")
        os.makedirs(special)
        os.mkfifo(os.path.join(special, "pipe.jpg"))  # a plain open() would block forever
        if os.path.exists("/proc/self/mem"):  # a regular file whose read fails with EIO, even for root
            os.symlink("/proc/self/mem", os.path.join(special, "proc_mem.jpg"))

    root = built_once(tmp_path_factory, "hostile-input", build)
    expected["links/file_link.jpg"] = expected["good/plain.jpg"]  # links to files are followed
    expected["special/pipe.jpg"] = (b"", Rejected("unreadable"))
    if os.path.lexists(os.path.join(root, "special", "proc_mem.jpg")):
        expected["special/proc_mem.jpg"] = (b"", Rejected("unreadable"))
    return root, expected


@pytest.fixture(scope="module")
def hostile_output(hostile_input, tmp_path_factory):
    """The corpus converted with the default runner and processes, as a user runs it; once per session."""
    root, _ = hostile_input
    start = time.monotonic()
    args = ("--num-shards", "2", "--max-file-mb", "1", "--decode-timeout-s", "20", *FAST)
    _, out, proc = converted_once(tmp_path_factory, "hostile-default", root, *args, runner=())
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert time.monotonic() - start < 240
    return out, proc


def _quadrants(img: Image.Image) -> Dict[str, Tuple[int, int, int]]:
    w, h = img.size
    points = {
        "tl": (w // 4, h // 4),
        "tr": (3 * w // 4, h // 4),
        "bl": (w // 4, 3 * h // 4),
        "br": (3 * w // 4, 3 * h // 4),
    }
    rgb = img.convert("RGB")
    return {k: rgb.getpixel(p) for k, p in points.items()}


def test_every_hostile_file_is_a_record_or_an_error_line(hostile_input, hostile_output):
    root, expected = hostile_input
    out, proc = hostile_output
    doc, records = read_records(out)
    errors = [json.loads(line) for line in open(os.path.join(out, output_files.ERRORS_FILE), encoding="utf-8")]

    by_name = {}
    for split_records in records.values():
        for r in split_records:
            name = r[keys.FILENAME].decode("utf-8")
            assert name not in by_name, f"{name!r} written twice"
            by_name[name] = r
    rejected = {}
    for e in errors:
        assert e["relpath"] not in rejected, f"{e['relpath']!r} rejected twice"
        assert e["error"] and e["path"] == os.path.join(root, e["relpath"])
        rejected[e["relpath"]] = e["reason"]

    want_records = {k: v for k, (_, v) in expected.items() if isinstance(v, Record)}
    want_errors = {k: v.reason for k, (_, v) in expected.items() if isinstance(v, Rejected)}
    assert sorted(by_name) == sorted(want_records)
    assert rejected == want_errors

    acc = doc.accounting
    assert acc.inputs == len(expected) == acc.written + acc.rejected
    assert acc.written == len(want_records) and acc.rejected == len(want_errors)
    assert acc.skipped == len(JUNK)
    reasons = sorted(set(want_errors.values()))
    assert acc.rejected_by_reason == {r: list(want_errors.values()).count(r) for r in reasons}
    assert doc.options["decode_timeout_s"] == 20
    assert ODD_CLASS in doc.labels
    with open(os.path.join(out, output_files.LABELS_FILE), encoding="utf-8") as f:
        assert f.read() == "".join(name + "\n" for name in doc.labels)
    assert os.path.exists(os.path.join(out, output_files.SUCCESS_FILE))
    assert not [n for n in os.listdir(out) if n.startswith(output_files.TEMP_PREFIXES)]


def test_hostile_records_hold_the_right_image(hostile_input, hostile_output):
    _, expected = hostile_input
    out, _ = hostile_output
    _, records = read_records(out)
    for split_records in records.values():
        for r in split_records:
            name = r[keys.FILENAME].decode("utf-8")
            data, want = expected[name]
            encoded = r[keys.IMAGE_ENCODED]
            assert r[keys.IMAGE_FORMAT].decode() == want.fmt, name
            assert (r[keys.IMAGE_WIDTH], r[keys.IMAGE_HEIGHT]) == want.size, name
            assert r[keys.IMAGE_CHANNELS] == 3
            assert (encoded == data) == want.kept, name
            # TensorFlow decodes every stored image to the declared shape.
            decoded = tf.io.decode_image(encoded, channels=3, expand_animations=False)
            assert tuple(decoded.shape) == (want.size[1], want.size[0], 3), name
            if want.colors:
                got = _quadrants(Image.fromarray(decoded.numpy()))
                for corner, color in want.colors.items():
                    assert np.abs(np.subtract(got[corner], color)).max() <= want.tol, (name, corner, got[corner], color)


def test_file_names_are_escaped_in_errors_jsonl(hostile_output):
    out, _ = hostile_output
    raw = open(os.path.join(out, output_files.ERRORS_FILE), "rb").read()
    lines = raw.split(b"\n")
    assert lines[-1] == b""
    for line in lines[:-1]:
        assert line.isascii() and b"\r" not in line and b"\t" not in line
        json.loads(line)


def test_launch_warns_about_what_is_not_an_input(hostile_output):
    _, proc = hostile_output
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("WARNING")]
    empty = next(w for w in warnings if "empty class folder" in w)
    assert "'empty_class'" in empty and "'only_junk'" in empty
    links = next(w for w in warnings if "link(s) to folders are not followed" in w)
    assert "'links/loop'" in links and "'links/self'" in links
    assert any("broken link" in w and "'links/dangling.jpg'" in w for w in warnings)


def test_summary_counts_junk_and_reasons(hostile_input, hostile_output):
    _, expected = hostile_input
    _, proc = hostile_output
    assert f"{len(JUNK)} junk files skipped" in proc.stdout
    for reason in ("too_many_pixels", "truncated", "unreadable", "not_an_image", "file_too_large"):
        assert f"  {reason}: " in proc.stdout


# -- targeted runs ---------------------------------------------------------------------------------


def test_resize_of_extreme_shapes_orientations_and_animations(tmp_path):
    root = str(tmp_path / "in")
    files = {
        "shapes/one_pixel.png": I.png(1, 1, I.RED),
        "shapes/tall.png": I.png(1, 20000, I.RED),
        "shapes/wide.jpg": I.jpeg(20000, 2, I.RED),
        "shapes/wide_big.jpg": I.jpeg(8000, 200),
        "animated/two_frames.gif": I.gif_animated(64, 48),
        "animated/two_frames.webp": I.webp_animated(64, 48),
        "animated/two_frames.png": I.apng(64, 48),
        "colour/ycck.jpg": I.ycck_jpeg(64, 48),
        "colour/cmyk.jpg": I.cmyk_jpeg(64, 48),
        **{f"exif/{o}.jpg": I.jpeg(64, 48, exif_orientation=o) for o in (3, 6, 8)},
    }
    for relpath, data in files.items():
        _write(root, relpath, data)
    out = str(tmp_path / "out")
    for resize in ("fit", "fill"):
        target = f"{out}-{resize}"
        proc = convert(root, target, "--image-size", "32x24", "--resize", resize, *FAST, *ONE)
        assert proc.returncode == 0, proc.stderr[-3000:]
        doc, records = read_records(target)
        assert doc.accounting.written == len(files) and doc.accounting.rejected == 0
        for r in records["train"]:
            name = r[keys.FILENAME].decode()
            decoded = tf.io.decode_image(r[keys.IMAGE_ENCODED], channels=3, expand_animations=False).numpy()
            assert decoded.shape == (24, 32, 3), name
            if name.startswith(("animated/", "colour/", "exif/")) and resize == "fill":
                got = _quadrants(Image.fromarray(decoded))
                for corner, color in I.QUADRANTS.items():
                    assert np.abs(np.subtract(got[corner], color)).max() <= 40, (name, corner, got[corner])


def test_names_that_are_not_utf8_become_bad_name_rows(tmp_path):
    root = str(tmp_path / "in")
    _write(root, "cat/fine.jpg", I.jpeg(8, 8))
    _write(root, "dog/fine.jpg", I.jpeg(8, 8))
    os.makedirs(os.path.join(os.fsencode(root), b"r\xe9sum\xe9"))
    os.makedirs(os.path.join(os.fsencode(root), b"__MACOSX"))
    open(os.path.join(os.fsencode(root), b"__MACOSX", b"._\xff.jpg"), "wb").close()  # junk: skipped
    for folder, name in ((b"cat", b"caf\xe9 latin-1.jpg"), (b"r\xe9sum\xe9", b"a.jpg")):
        with open(os.path.join(os.fsencode(root), folder, name), "wb") as f:
            f.write(I.jpeg(8, 8))
    out = str(tmp_path / "out")
    proc = convert(root, out, *FAST, *ONE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 file name(s) are not valid UTF-8" in proc.stderr
    errors = [json.loads(line) for line in open(os.path.join(out, output_files.ERRORS_FILE), encoding="utf-8")]
    assert sorted((e["relpath"], e["reason"]) for e in errors) == [
        ("cat/caf\\xe9 latin-1.jpg", "bad_name"),
        ("r\\xe9sum\\xe9/a.jpg", "bad_name"),
    ]
    assert all(e["path"].endswith(e["relpath"]) and "convmv" in e["error"] for e in errors)
    doc, records = read_records(out)
    assert doc.labels == ("cat", "dog")  # a class folder whose name is not text is no class
    assert doc.accounting.inputs == 4 and doc.accounting.written == 2 and doc.accounting.rejected == 2
    assert doc.accounting.skipped == 1
    assert sorted(r[keys.FILENAME].decode() for r in records["train"]) == ["cat/fine.jpg", "dog/fine.jpg"]
    assert os.path.exists(os.path.join(out, output_files.SUCCESS_FILE))


def test_class_folder_with_a_line_break_stops_the_run_at_launch(tmp_path):
    root = str(tmp_path / "in")
    _write(root, "good/a.jpg", I.jpeg(8, 8))
    _write(root, "two\nlines/b.jpg", I.jpeg(8, 8))
    proc = convert(root, str(tmp_path / "out"), *FAST)
    assert proc.returncode == 2 and "line break" in proc.stderr, proc.stderr[-3000:]


def test_output_through_a_file_exits_2_with_one_line(tmp_path):
    root = str(tmp_path / "in")
    _write(root, "cat/a.jpg", I.jpeg(8, 8))
    blocker = tmp_path / "a_file"
    blocker.write_bytes(b"")
    proc = convert(root, str(blocker / "out"), *FAST)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("img2tfrecord:")]
    assert len(lines) == 1 and "is not writable" in lines[0] and "Not a directory" in lines[0], proc.stderr


@pytest.fixture(scope="module")
def unprivileged(tmp_path_factory):
    """Conversions in one fresh process with permission bits in force (``run_unprivileged``): into a folder it
    may not write (``locked/out``), of an input holding a file it may not read (to ``out``), of an input whose
    ``dog`` class folder it may not list (its ``--plan --json``, then converted to ``classes-out`` within an
    error budget) and of an input folder it may not list at all (``shut``)."""
    base = tmp_path_factory.mktemp("unprivileged")
    _write(str(base / "in"), "cat/a.jpg", I.jpeg(8, 8))
    _write(str(base / "secret"), "cat/a.jpg", I.jpeg(8, 8))
    _write(str(base / "secret"), "cat/secret.jpg", I.jpeg(8, 8))
    for relpath in ("cat/a.jpg", "cat/b.jpg", "dog/c.jpg", "dog/d.jpg", "emu/e.jpg"):
        _write(str(base / "classes"), relpath, I.jpeg(8, 8))
    _write(str(base / "shut"), "cat/a.jpg", I.jpeg(8, 8))
    os.chmod(base / "secret" / "cat" / "secret.jpg", 0)
    shut = [base / "locked", base / "classes" / "dog", base / "shut"]
    (base / "locked").mkdir()
    for folder in shut:
        folder.chmod(0o555 if folder.name == "locked" else 0)
    classes = ("convert", "--input", str(base / "classes"), "--output", str(base / "classes-out"), *FAST, *ONE)
    try:
        found = run_unprivileged(
            str(base),
            ("convert", "--input", str(base / "in"), "--output", str(base / "locked" / "out"), *FAST, *ONE),
            ("convert", "--input", str(base / "secret"), "--output", str(base / "out"), *FAST, *ONE),
            (*classes, "--plan", "--json"),
            (*classes, "--max-error-rate", "0.1"),
            ("convert", "--input", str(base / "shut"), "--output", str(base / "shut-out"), *FAST, *ONE),
        )
    finally:
        for folder in shut:
            folder.chmod(0o755)
    return base, dict(zip(("locked", "unreadable", "plan", "classes", "shut"), found))


def test_read_only_output_folder_exits_2(unprivileged):
    base, found = unprivileged
    proc = found["locked"]
    assert proc.returncode == 2 and "is not writable: Permission denied" in proc.stderr, proc.stderr[-3000:]
    assert os.listdir(base / "locked") == []


def test_a_folder_that_cannot_be_listed_is_an_error_row_and_its_class_stays(unprivileged, tmp_path):
    """A class folder that cannot be listed is one rejected input (``unlistable``, with its path) in ``--plan``
    and the run, counted against the error budget, and still a class: once readable, an append converts its
    files under the same label id, without --allow-new-classes."""
    base, found = unprivileged
    dog = str(base / "classes" / "dog")
    plan = json.loads(found["plan"].stdout)
    assert plan["classes"] == ["cat", "dog", "emu"] and plan["inputs"] == 4
    assert plan["rejected"]["by_reason"] == {"unlistable": 1}
    assert [(r["path"], r["relpath"]) for r in plan["rejected"]["examples"]] == [(dog, "dog/")]
    assert plan["local_checks"] == {"unlistable": ["dog"]}  # and not an "empty class folder"
    proc = found["classes"]
    assert proc.returncode == 3, proc.stderr[-3000:]  # 1 of 4 inputs rejected, over 0.1
    assert "1 folder(s) cannot be listed ('dog')" in proc.stderr and "empty class folder" not in proc.stderr
    assert "  unlistable: 1" in proc.stdout and proc.stderr.strip().splitlines()[-1].startswith(
        "img2tfrecord: error budget exceeded: 1 of 4 inputs rejected"
    )
    out = str(base / "classes-out")
    errors = [json.loads(line) for line in open(os.path.join(out, output_files.ERRORS_FILE))]
    assert [(e["path"], e["relpath"], e["reason"]) for e in errors] == [(dog, "dog/", "unlistable")]
    assert "folder cannot be listed (permission denied)" in errors[0]["error"]
    labels = open(os.path.join(out, output_files.LABELS_FILE)).read().split()
    assert labels == ["cat", "dog", "emu"]
    moved = str(tmp_path / "classes-out")  # appended to a copy: other tests read the module's outputs
    shutil.copytree(out, moved)
    appended = convert(str(base / "classes"), moved, *FAST, *ONE, "--append")
    assert appended.returncode == 0, appended.stderr[-3000:]
    doc = json.load(open(os.path.join(moved, output_files.MANIFEST_FILE)))
    assert doc["labels"] == labels and doc["splits"]["train"]["examples_per_class"]["dog"] == 2
    assert doc["accounting"]["rejected_by_reason"] == {}  # the folder was tried again: its files are in


def test_an_input_folder_that_cannot_be_listed_is_one_line_exit_2(unprivileged):
    base, found = unprivileged
    proc = found["shut"]
    shut = str(base / "shut")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        f"img2tfrecord: error: --input {shut}: permission denied: the folder {shut} cannot be listed; "
        "check its permissions"
    ]
    assert not os.path.exists(base / "shut-out")


def test_permission_denied_file_is_an_unreadable_error(unprivileged):
    base, found = unprivileged
    proc = found["unreadable"]
    out = str(base / "out")
    assert proc.returncode == 0, proc.stderr[-3000:]
    errors = [json.loads(line) for line in open(os.path.join(out, output_files.ERRORS_FILE))]
    assert [(e["relpath"], e["reason"]) for e in errors] == [("cat/secret.jpg", "unreadable")]
    assert "Permission denied" in errors[0]["error"]


# -- limits, without the CLI -----------------------------------------------------------------------


def test_launch_scan_of_a_split_layout(tmp_path):
    from img2tfrecord.pipeline.inputs import scan_local_input

    root = str(tmp_path / "in")
    for relpath in ("train/cat/a.jpg", "train/dog/b.jpg", "val/cat/c.jpg", "train/@eaDir/a.jpg/thumb.jpg"):
        _write(root, relpath, b"x")
    os.makedirs(os.path.join(root, "val", "dog"))
    os.makedirs(os.path.join(root, "__MACOSX"))
    open(os.path.join(os.fsencode(root), b"__MACOSX", b"._\xff.jpg"), "wb").close()  # junk: skipped, name unread
    open(os.path.join(os.fsencode(root), b"train", b"cat", b"\xfe.jpg"), "wb").close()  # an input, rejected later
    report = scan_local_input(root + "/", root + "/**", "split")
    assert report.files == 4
    assert report.empty_class_folders == ["val/dog"]
    assert report.bad_names == ["train/cat/\\xfe.jpg"]


def test_beam_listing_does_not_follow_folder_links(tmp_path):
    """What the pipeline's MatchFiles sees: link loops are not followed, so listing ends."""
    from apache_beam.io.filesystems import FileSystems

    root = tmp_path / "in"
    (root / "cat").mkdir(parents=True)
    (root / "cat" / "a.jpg").write_bytes(I.jpeg(8, 8))
    os.symlink("..", root / "cat" / "loop")
    os.symlink(str(root), root / "cat" / "root")
    os.symlink("a.jpg", root / "cat" / "b.jpg")
    start = time.monotonic()
    found = FileSystems.match([f"{root}/**"])[0].metadata_list
    assert time.monotonic() - start < 5
    assert sorted(os.path.relpath(m.path, root) for m in found) == ["cat/a.jpg", "cat/b.jpg"]


def test_decode_timeout_stops_work_on_a_slow_image():
    # 6 MP of noise as JPEG (several MB, fed to the decoder 64 KiB at a time) to PNG takes over a second;
    # with a 20 ms limit the work stops at a read during the decode.
    data = I.jpeg(3000, 2000, I.noise(3000, 2000))
    slow = ImageOptions(format="png")
    start = time.monotonic()
    convert_image(data, slow)
    full = time.monotonic() - start
    start = time.monotonic()
    with pytest.raises(ImageError) as info:
        convert_image(data, ImageOptions(format="png", decode_timeout_s=0.02))
    limited = time.monotonic() - start
    assert info.value.reason == "decode_timeout" and "--decode-timeout-s" in info.value.message
    assert limited < full / 4, (limited, full)


class Decoded(BaseException):
    """Raised by a patched decoder: a BaseException, so no error mapping can hide it."""


def test_bombs_are_never_decoded(monkeypatch):
    from PIL import ImageFile, WebPImagePlugin

    def no_decode(self):
        raise Decoded(f"a {self.size} {self.format} image was decoded")

    monkeypatch.setattr(ImageFile.ImageFile, "load", no_decode)
    monkeypatch.setattr(WebPImagePlugin.WebPImageFile, "load", no_decode)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", Image.MAX_IMAGE_PIXELS)
    for bomb in (I.png_bomb(), I.jpeg_bomb(), I.gif_bomb(), I.bmp_bomb(), I.tiff_bomb(), I.webp_bomb()):
        for options in (ImageOptions(), ImageOptions(size=(32, 32), format="png")):
            with pytest.raises(ImageError) as info:
                convert_image(bomb, options)
            assert info.value.reason == "too_many_pixels"


def test_jpeg_is_decoded_at_reduced_scale(monkeypatch):
    """``draft`` before ``load``: a big JPEG to be shrunk (or only validated) is never decoded whole."""
    from PIL import ImageFile

    loaded = []
    real_load = ImageFile.ImageFile.load

    def spy(self):
        loaded.append(self.size)
        return real_load(self)

    monkeypatch.setattr(ImageFile.ImageFile, "load", spy)
    data = I.jpeg(4000, 3000, I.RED)
    convert_image(data, ImageOptions(size=(224, 224)))
    convert_image(data, ImageOptions())  # kept as it is: validated at 1/8 scale
    assert loaded and all(w * h <= 4000 * 3000 // 16 for w, h in loaded), loaded


def test_peak_memory_of_a_bomb_is_small():
    """In a fresh process: rejecting bombs of billions of pixels costs no pixel memory."""
    code = (
        "import resource, sys; sys.path.insert(0, 'tests'); import images as I\n"
        "from img2tfrecord.images.convert import convert_image\n"
        "from img2tfrecord.images.options import ImageError, ImageOptions\n"
        "bombs = [I.png_bomb(), I.jpeg_bomb(), I.gif_bomb(), I.bmp_bomb(), I.tiff_bomb(), I.webp_bomb()]\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "for b in bombs:\n"
        "    for o in (ImageOptions(), ImageOptions(size=(32, 32), format='png')):\n"
        "        try:\n"
        "            convert_image(b, o)\n"
        "        except ImageError:\n"
        "            pass\n"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=SRC),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    grown_kb = int(proc.stdout.strip().splitlines()[-1])
    assert grown_kb < 64 * 1024, f"peak RSS grew by {grown_kb} KB"
