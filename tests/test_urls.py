"""URL lists: the downloader against a misbehaving server on 127.0.0.1, the list formats, conversions with
every failure accounted for by reason, identical bytes from two runs, and appends with --retry-failed."""

from __future__ import annotations

import glob
import json
import os
import signal
import socket
import time

import pytest
from helpers.cli import run_in_process
from helpers.image_server import ImageServer
from helpers.processes import kill_when

from img2tfrecord import tfrecord_codec
from img2tfrecord.readers import datasource
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas.example_proto import Example
from img2tfrecord.sources import downloads, url_lists
from img2tfrecord.verification.output_checks import verify

FAST = downloads.DownloadOptions(timeout_s=0.5, retries=2, backoff_s=0.01, max_wait_s=0.05)

# route -> the reason its URL is rejected with ("" for a record)
ROUTES = {
    "/img/1.jpg": "",
    "/moved/3.jpg": "",
    "/limited/7": "",  # 429 with Retry-After, then the image
    "/flaky/8": "",  # 500, then the image
    "/slow/4.jpg": downloads.TIMEOUT,
    "/missing": downloads.HTTP_404,
    "/forbidden": downloads.HTTP_STATUS,
    "/short": downloads.CONNECTION,
    "/loop": downloads.REDIRECTS,
    "/huge": downloads.TOO_LARGE,
    "/html": downloads.NOT_AN_IMAGE,
    "/optout/noai": downloads.OPTED_OUT,
    "/optout/noimageindex": downloads.OPTED_OUT,
    "/reset": downloads.CONNECTION,
}


@pytest.fixture(scope="module")
def server():
    with ImageServer(slow_s=1.2) as s:
        yield s


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch):
    monkeypatch.setenv(downloads.BACKOFF_ENV, "0.02")


def _records(output: str) -> dict:
    """URL -> parsed record of every shard of ``output``."""
    found = {}
    for path in sorted(glob.glob(os.path.join(output, "*.tfrecord"))):
        with open(path, "rb") as f:
            for record in tfrecord_codec.read_records(f):
                example = Example.FromString(bytes(record.data) if hasattr(record, "data") else bytes(record))
                feature = example.features.feature
                found[feature[keys.SOURCE_URL].bytes_list.value[0].decode()] = feature
    return found


def _errors(output: str) -> dict:
    with open(os.path.join(output, "errors.jsonl")) as f:
        return {row["path"]: row for row in map(json.loads, f)}


def test_the_downloader_gives_each_misbehaviour_its_reason_within_bounds(server):
    d = downloads.Downloader(FAST, max_bytes=1024 * 1024)
    try:
        for route, reason in ROUTES.items():
            if reason == downloads.NOT_AN_IMAGE:
                assert d.fetch(server.url + route).startswith(b"<!doctype")  # the converter decides by decoding
                continue
            if not reason:
                assert d.fetch(server.url + route)[:2] == b"\xff\xd8", route
                continue
            with pytest.raises(downloads.DownloadError) as e:
                d.fetch(server.url + route)
            assert e.value.reason == reason, route
    finally:
        d.close()
    assert server.hits["/missing"] == 1 and server.hits["/forbidden"] == 1  # no retry for a 4xx
    assert server.hits["/reset"] == 3 and server.hits["/loop"] == FAST.max_redirects + 1


def test_opt_out_directives_for_another_agent_do_not_apply():
    assert downloads.opted_out(["noindex, nofollow"], downloads.DEFAULT_OPT_OUT) == "noindex"
    assert downloads.opted_out(["otherbot: noai"], downloads.DEFAULT_OPT_OUT) is None
    assert downloads.opted_out(["img2tfrecord: noimageai"], downloads.DEFAULT_OPT_OUT) == "noimageai"
    assert downloads.opted_out(["noai"], url_lists.parse_opt_out("none")) is None


def test_url_lists_are_told_from_manifests_by_name_and_columns(tmp_path):
    (tmp_path / "a.txt").write_text("# comment\nhttp://x/1.jpg\n\nhttp://x/2.jpg\n")
    (tmp_path / "urls.csv").write_text("url,caption,width\nhttp://x/1.jpg,a cat,3\n")
    (tmp_path / "manifest.csv").write_text("path,label\n1.jpg,cat\n")
    (tmp_path / "both.jsonl").write_text('{"url": "http://x/1.jpg", "path": "1.jpg"}\n')
    assert url_lists.is_url_list(str(tmp_path / "a.txt"))
    assert url_lists.is_url_list(str(tmp_path / "urls.csv"))
    assert not url_lists.is_url_list(str(tmp_path / "manifest.csv"))
    assert not url_lists.is_url_list(str(tmp_path / "both.jsonl"))
    cols = url_lists.columns(url_lists.header(str(tmp_path / "urls.csv")), "url", None, None, "urls.csv")
    assert cols == url_lists.Columns("url", "caption", None)
    (row,) = url_lists.url_rows(str(tmp_path / "urls.csv"), cols)
    assert (row.url, row.caption, json.loads(row.extra)) == ("http://x/1.jpg", "a cat", {"width": "3"})
    assert [r.url for r in url_lists.url_rows(str(tmp_path / "a.txt"), url_lists.Columns("url", None, None))] == [
        "http://x/1.jpg",
        "http://x/2.jpg",
    ]


def test_parquet_lists_stream_their_rows(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.table({"url": ["http://x/1.jpg", "http://x/2.jpg"], "text": ["one", "two"], "score": [0.5, 0.25]})
    pq.write_table(table, tmp_path / "l.parquet")
    cols = url_lists.columns(url_lists.header(str(tmp_path / "l.parquet")), "url", None, None, "l")
    rows = list(url_lists.url_rows(str(tmp_path / "l.parquet"), cols))
    assert [(r.caption, json.loads(r.extra)) for r in rows] == [("one", {"score": 0.5}), ("two", {"score": 0.25})]


def _write_list(path, server, routes, extra_rows=()):
    with open(path, "w") as f:
        f.write("url,caption,source\n")
        for i, route in enumerate(routes):
            f.write(f"{server.url}{route},caption {i},s{i}\n")
        for row in extra_rows:
            f.write(row + "\n")


def test_a_conversion_accounts_for_every_url_and_two_runs_write_identical_bytes(server, tmp_path):
    listing = tmp_path / "urls.csv"
    _write_list(listing, server, list(ROUTES), [f"{server.url}/img/1.jpg,again,x"])
    common = ("--download-timeout", "0.5", "--max-file-mb", "1", "--no-analyze", "--seed", "3", "--max-error-rate", "1")
    outputs = []
    for name in ("a", "b"):
        out = str(tmp_path / name)
        proc = run_in_process("convert", "--input", str(listing), "--output", out, *common)
        assert proc.returncode == 0, proc.stderr
        outputs.append(out)
    records, errors = _records(outputs[0]), _errors(outputs[0])
    for route, reason in ROUTES.items():
        url = server.url + route
        if reason:
            assert errors[url]["reason"] == reason, route
        else:
            assert url in records, route
    assert [row["reason"] for path, row in errors.items() if path.endswith(":15")] == ["duplicate"]
    assert len(records) + len(errors) == len(ROUTES) + 1
    first = records[server.url + "/img/1.jpg"]
    assert first[keys.IMAGE_TEXT].bytes_list.value == [b"caption 0"]
    assert json.loads(first["metadata/json"].bytes_list.value[0]) == {"source": "s0"}
    assert "rejected by reason" in proc.stdout and "opted_out: 2" in proc.stdout
    shards = [sorted(glob.glob(os.path.join(out, "*.tfrecord"))) for out in outputs]
    assert [open(p, "rb").read() for p in shards[0]] == [open(p, "rb").read() for p in shards[1]]


def test_an_append_retries_failed_urls_only_with_retry_failed(server, tmp_path):
    listing = tmp_path / "urls.txt"
    listing.write_text("".join(f"{server.url}{r}\n" for r in ("/img/20.jpg", "/down/21.jpg", "/missing")))
    out = str(tmp_path / "out")
    args = (
        "--input",
        str(listing),
        "--output",
        out,
        "--no-analyze",
        "--download-retries",
        "0",
        "--max-error-rate",
        "1",
    )
    server.down = True
    try:
        assert run_in_process("convert", *args).returncode == 0
    finally:
        server.down = False
    assert {r["reason"] for r in _errors(out).values()} == {"server_error", "http_404"}
    again = run_in_process("convert", *args, "--append")
    assert again.returncode == 0 and not glob.glob(os.path.join(out, "*gen1*")), again.stdout
    listing.write_text(listing.read_text() + f"{server.url}/img/22.jpg\n")
    hits = server.hits["/missing"]
    retried = run_in_process("convert", *args, "--append", "--retry-failed")
    assert retried.returncode == 0, retried.stderr
    urls = set(_records(out))
    assert {server.url + "/down/21.jpg", server.url + "/img/22.jpg", server.url + "/img/20.jpg"} <= urls
    assert server.hits["/missing"] == hits  # a 404 is not downloaded again


def _shard_urls(path: str) -> list:
    with open(path, "rb") as f:
        return [
            Example.FromString(bytes(r.data)).features.feature[keys.SOURCE_URL].bytes_list.value[0].decode()
            for r in tfrecord_codec.read_records(f)
        ]


def test_a_sigkill_mid_download_then_resume_downloads_again_only_what_no_finished_shard_holds(server, tmp_path):
    routes = [f"/img/{100 + i}.jpg" for i in range(240)]
    listing = tmp_path / "urls.txt"
    listing.write_text("".join(f"{server.url}{r}\n" for r in routes))
    args = ["--input", str(listing), "--no-analyze", "--num-shards", "6", "--seed", "4", "--processes", "1"]
    args += ["--download-per-host", "2"]  # a shard at a time, slow enough to be killed with downloads in flight
    reference = str(tmp_path / "reference")
    assert run_in_process("convert", *args, "--output", reference).returncode == 0
    out = str(tmp_path / "out")
    done = os.path.join(out, ".tmp-run-*", "done", "*.json")
    before = dict(server.hits)

    def downloading_after_a_shard_finished() -> bool:
        return bool(glob.glob(done)) and sum(server.hits.values()) - sum(before.values()) < len(routes)

    server.delay_s = 0.02
    try:
        code = kill_when(["convert", *args, "--output", out], downloading_after_a_shard_finished, "mid-download")
        assert code == -signal.SIGKILL
        finished = sorted(os.path.basename(p)[: -len(".json")] for p in glob.glob(done))
        killed = dict(server.hits)
        for _ in range(100):  # the worker processes end with their parent; their last requests land
            time.sleep(0.05)
            if dict(server.hits) == killed:
                break
            killed = dict(server.hits)
    finally:
        server.delay_s = 0.0
    assert finished and sum(killed.values()) - sum(before.values()) < len(routes)
    resumed = run_in_process("convert", *args, "--output", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    names = sorted(n for n in os.listdir(reference) if n.endswith(".tfrecord"))
    assert names == sorted(n for n in os.listdir(out) if n.endswith(".tfrecord"))
    for name in names:  # byte-identical to the run that was not interrupted
        assert open(os.path.join(out, name), "rb").read() == open(os.path.join(reference, name), "rb").read(), name
    held = set()
    for name in finished:  # "train-00002": its shard file in the output
        split, shard = name.rsplit("-", 1)
        (path,) = glob.glob(os.path.join(out, f"{split}-{shard}-of-*.tfrecord"))
        held.update(_shard_urls(path))
    again = {r: server.hits[r] - killed.get(r, 0) for r in routes}
    assert held and all(again[url[len(server.url) :]] == 0 for url in held)  # finished shards: not downloaded again
    assert sum(again.values()) == len(routes) - len(held)  # the rest: once each


def test_plan_samples_a_few_urls_shows_their_reasons_and_writes_nothing(server, tmp_path):
    routes = ["/img/30.jpg", "/img/31.jpg", "/missing", "/forbidden", "/html", "/optout/noai"]
    with socket.socket() as s:  # a port nothing listens on: refused, not a time-out
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    listing = tmp_path / "urls.txt"
    listing.write_text("".join(f"{server.url}{r}\n" for r in routes) + f"http://127.0.0.1:{closed}/a.jpg\n")
    before = dict(server.hits)
    out = str(tmp_path / "out")
    proc = run_in_process("convert", "--input", str(listing), "--output", out, "--no-analyze", "--plan")
    assert proc.returncode == 0, proc.stderr
    assert not os.path.exists(out)
    reasons = (downloads.HTTP_404, downloads.HTTP_STATUS, downloads.NOT_AN_IMAGE, downloads.OPTED_OUT)
    for reason in (*reasons, downloads.CONNECTION):
        assert f"{reason} 1" in proc.stdout, (reason, proc.stdout)
    assert "not image names" not in proc.stdout  # a URL's name says nothing: its content decides
    sampled = {r: server.hits[r] - before.get(r, 0) for r in routes}
    assert all(1 <= n <= 2 for n in sampled.values()), sampled  # a few requests each, bounded


def test_captions_and_urls_are_in_the_feature_spec_and_read_back(server, tmp_path):
    listing = tmp_path / "urls.csv"
    _write_list(listing, server, ["/img/40.jpg", "/img/41.jpg"])
    out = str(tmp_path / "out")
    assert run_in_process("convert", "--input", str(listing), "--output", out, "--no-analyze").returncode == 0
    spec = json.loads(open(os.path.join(out, "dataset.json")).read())["feature_spec"]
    assert spec[keys.IMAGE_TEXT]["dtype"] == spec[keys.SOURCE_URL]["dtype"] == "string"
    assert verify(out).ok
    rows = {r[keys.SOURCE_URL]: r[keys.IMAGE_TEXT] for r in datasource.SplitDataSource(out, "train", decode=False)}
    assert rows == {
        f"{server.url}/img/40.jpg".encode(): b"caption 0",
        f"{server.url}/img/41.jpg".encode(): b"caption 1",
    }


@pytest.mark.parametrize("file_format", ["webdataset", "parquet"])
def test_the_caption_is_a_txt_member_or_a_text_column(server, tmp_path, file_format):
    listing = tmp_path / "urls.csv"
    _write_list(listing, server, ["/img/50.jpg"])
    out = str(tmp_path / "out")
    args = ("--input", str(listing), "--output", out, "--no-analyze", "--file-format", file_format)
    assert run_in_process("convert", *args).returncode == 0
    (shard,) = [os.path.join(out, n) for n in os.listdir(out) if n.startswith("train-")]
    if file_format == "webdataset":
        import tarfile

        with tarfile.open(shard) as tar:
            (member,) = [m for m in tar.getmembers() if m.name.endswith(".txt")]
            assert tar.extractfile(member).read() == b"caption 0"
    else:
        import pyarrow.parquet as pq

        assert pq.read_table(shard).column("text").to_pylist() == ["caption 0"]
    assert verify(out).ok
    (row,) = datasource.SplitDataSource(out, "train", decode=False)
    assert row[keys.IMAGE_TEXT] == b"caption 0"
