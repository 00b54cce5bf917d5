"""Archives with hostile members: nothing is written or read outside the archive, every such member is reported.

Members named ``../x``, ``/etc/x`` or with control characters, symbolic and
hard links, devices and FIFOs: each is an ``errors.jsonl`` row with its reason,
the good members are converted with the default command (analysis on), and the
accounting holds exactly.
"""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
import zipfile

import images as I
import pytest
from conftest import convert
from helpers.datasets import UTF8_FLAG, write_zip_raw_names

from img2tfrecord.model import MemberEntry
from img2tfrecord.readers import datasource
from img2tfrecord.readers.records import read_manifest
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import output_files
from img2tfrecord.sources import archives

GOOD = {"cat/ok1.jpg": I.jpeg(40, 30), "cat/ok2.jpg": I.jpeg(30, 40), "dog/ok3.png": I.png(20, 20)}
NAMES = {  # member name -> the reason its row must give
    "../evil.jpg": "bad_name",
    "cat/../../evil2.jpg": "bad_name",
    "/etc/evil3.jpg": "bad_name",
    "cat/esc\x1b.jpg": "bad_name",
    "cat/del\x7f.jpg": "bad_name",
}


def _tar(path: str) -> dict:
    """A tar of the good members, the hostile names, and link/device/FIFO entries; -> member -> reason."""
    expected = dict(NAMES)
    with tarfile.open(path, "w") as t:
        for name, data in {**GOOD, **{n: I.jpeg(10, 10) for n in NAMES}}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        for name, kind, target in (
            ("cat/passwd.jpg", tarfile.SYMTYPE, "/etc/passwd"),
            ("cat/up.jpg", tarfile.SYMTYPE, "../../outside.jpg"),
            ("dog/hard.jpg", tarfile.LNKTYPE, "cat/ok1.jpg"),
            ("dog/zero.jpg", tarfile.CHRTYPE, ""),
            ("dog/pipe.jpg", tarfile.FIFOTYPE, ""),
        ):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, target
            if kind == tarfile.CHRTYPE:
                info.devmajor, info.devminor = 1, 5  # /dev/zero
            t.addfile(info)
            expected[name] = "unsupported_member"
    return expected


def _zip(path: str) -> dict:
    expected = dict(NAMES)
    with zipfile.ZipFile(path, "w") as z:
        for name, data in {**GOOD, **{n: I.jpeg(10, 10) for n in NAMES}}.items():
            z.writestr(name, data)
        link = zipfile.ZipInfo("cat/link.jpg")
        link.create_system = 3  # unix: the mode in external_attr says "symbolic link"
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        z.writestr(link, "/etc/passwd")
        expected["cat/link.jpg"] = "unsupported_member"
    return expected


@pytest.mark.parametrize("kind", ["tar", "zip"])
def test_hostile_members_are_rows_and_nothing_leaves_the_archive(tmp_path, kind):
    src = tmp_path / "in"
    src.mkdir()
    archive = str(src / f"data.{kind}")
    expected = _tar(archive) if kind == "tar" else _zip(archive)
    (tmp_path / "work").mkdir()
    out = str(tmp_path / "work" / "out")
    before = sorted(os.listdir(tmp_path))
    proc = convert(archive, out, "--image-size", "32", analyze=True)  # the default command: the analysis runs too
    assert proc.returncode == 0, proc.stderr[-3000:]

    assert sorted(os.listdir(tmp_path)) == before and os.listdir(tmp_path / "work") == ["out"], "written outside"
    assert not os.path.exists("/etc/evil3.jpg")
    for root, _, files in os.walk(tmp_path):
        assert not {"evil.jpg", "evil2.jpg", "evil3.jpg", "outside.jpg"} & set(files), root

    with open(os.path.join(out, output_files.ERRORS_FILE), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    reasons = {row["path"].split("!/", 1)[1]: row["reason"] for row in rows}
    assert reasons == {archives.normalise_member_name(n): r for n, r in expected.items()}
    assert all(row["error"] for row in rows)

    doc = read_manifest(out)
    acc = doc.accounting
    assert acc.written == len(GOOD) and acc.inputs == acc.written + acc.rejected
    assert acc.rejected == len(expected)
    names = [r[keys.FILENAME].decode() for r in datasource.iter_split(out, "train", decode=False)]
    assert sorted(names) == sorted(GOOD)
    passwd = open("/etc/passwd", "rb").read()[:32]
    assert all(passwd not in r[keys.IMAGE_ENCODED] for r in datasource.iter_split(out, "train", decode=False))
    assert doc.statistics["num_examples"] == len(GOOD)  # the analysis ran over exactly the good members
    assert os.path.exists(os.path.join(out, output_files.SUCCESS_FILE))


# -- zip member names ------------------------------------------------------------------------------


def test_zip_member_names_are_utf8_when_their_bytes_are_whatever_the_flag_says(tmp_path):
    path = str(tmp_path / "names.zip")
    image = I.jpeg(8, 8)
    write_zip_raw_names(
        path,
        {
            "chats/chaton_été_猫.jpg".encode(): image,  # UTF-8 bytes, flag clear: what zip -r on Linux writes
            "chats/caf\x82.jpg".encode("latin-1"): image,  # cp437 0x82 is é, and not UTF-8: read as cp437
            b"chats/plain.jpg": image,
        },
    )
    with zipfile.ZipFile(path) as z:
        assert not any(info.flag_bits & UTF8_FLAG for info in z.infolist())
        assert "chats/chaton_├⌐t├⌐_τî½.jpg" in z.namelist()  # what zipfile alone makes of it
        assert [archives.zip_member_name(info) for info in z.infolist()] == [
            "chats/chaton_été_猫.jpg",
            "chats/café.jpg",
            "chats/plain.jpg",
        ]
    entries = list(archives.list_archive(path, os.path.getsize(path), 1 << 20))
    assert sorted(e.name for e in entries if isinstance(e, MemberEntry)) == [
        "chats/café.jpg",
        "chats/chaton_été_猫.jpg",
        "chats/plain.jpg",
    ]
    # A flagged UTF-8 name (what zipfile writes) is taken as it is.
    flagged = str(tmp_path / "flagged.zip")
    with zipfile.ZipFile(flagged, "w") as z:
        z.writestr("chats/чай.jpg", image)
    with zipfile.ZipFile(flagged) as z:
        (info,) = z.infolist()
        assert info.flag_bits & UTF8_FLAG and archives.zip_member_name(info) == "chats/чай.jpg"
    # The directory every zip listing reads gives the same names.
    with open(path, "rb") as f:
        listed = dict(archives.read_zip_directory(f))
    assert set(listed) == {"chats/chaton_été_猫.jpg", "chats/café.jpg", "chats/plain.jpg"}
