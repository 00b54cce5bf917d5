"""``img2tfrecord report``: the real CLI on a dataset with planted duplicates and bad files.

The dataset is converted by the real ``convert``; its planted exact and near
duplicates sit in chosen splits (names picked with the converter's own
``assign_split``), so ``report.json`` is checked against exact expectations.
The page is then opened in a real headless Chromium driven over the DevTools
protocol (a small stdlib WebSocket client below): no console errors, no
network request, a screenshot, and the planted facts in the DOM.
"""

from __future__ import annotations

import base64
import collections
import itertools
import json
import os
import random
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from typing import Any, Dict, List, Optional

import images as I
import numpy as np
import pytest
from conftest import convert
from helpers.cli import run_in_process
from PIL import Image

from img2tfrecord import faults, worker_exit
from img2tfrecord.conversion.seeded_hashes import assign_split, parse_splits
from img2tfrecord.readers.records import read_manifest
from img2tfrecord.report import duplicates as dup
from img2tfrecord.report import facts, group_lines, html_page, near_search, page_classes, perceptual_hash, workers
from img2tfrecord.schemas import output_files

SEED = 5
WORKER_DIED_WARNING = "img2tfrecord report: warning: a worker process died; running its tasks again in a fresh pool"
SPLITS = "train=0.6,validation=0.2,test=0.2"
CLASSES = ("bird", "cat", "dog")
PHOTOS_PER_CLASS = 8


def photo(seed: int, w: int = 96, h: int = 80) -> Image.Image:
    """A smooth random picture (a 7x6 random grid, upscaled): any two seeds differ in about half their dHash bits."""
    rng = np.random.default_rng(1000 + seed)
    grid = Image.fromarray(rng.integers(0, 256, size=(6, 7, 3), dtype=np.uint8))
    return grid.resize((w, h), Image.Resampling.BICUBIC)


def brighter(image: Image.Image, amount: int) -> Image.Image:
    return Image.fromarray(np.clip(np.asarray(image, dtype=np.int16) + amount, 0, 255).astype(np.uint8))


class PlantedDataset:
    """Files to write (relpath -> bytes) and the groups, splits and rejects the report must find."""

    def __init__(self) -> None:
        self.splits = parse_splits(SPLITS)
        self.files: Dict[str, bytes] = {}
        self.exact: List[List[str]] = []
        self.near: List[List[str]] = []
        self.rejected = {"truncated": ["cat/broken.jpg"], "not_an_image": ["dog/notes.jpg"]}
        seeds = itertools.count()
        for cls in CLASSES:
            for i in range(PHOTOS_PER_CLASS):
                self.files[f"{cls}/img_{i:02d}.jpg"] = I.save(photo(next(seeds)), "JPEG", quality=90)
        # Exact duplicates: the same bytes under other names.
        leak = I.save(photo(next(seeds)), "JPEG", quality=90)
        self.exact.append(self._plant([("cat", "train"), ("cat", "test")], "leak", leak))
        twin = I.save(photo(next(seeds)), "JPEG", quality=90)  # also in another class: a label conflict
        self.exact.append(self._plant([("dog", "train"), ("dog", "validation"), ("bird", "train")], "twin", twin))
        same = I.save(photo(next(seeds)), "JPEG", quality=90)
        self.exact.append(self._plant([("bird", "train"), ("bird", "train")], "same", same))
        # Near duplicates: the same picture 3 levels brighter, or re-encoded at another quality.
        base = photo(next(seeds))
        self.near.append(
            self._plant([("cat", "train")], "bright", I.save(base, "JPEG", quality=90))
            + self._plant([("cat", "validation")], "bright", I.save(brighter(base, 3), "JPEG", quality=90))
        )
        base = photo(next(seeds))
        self.near.append(
            self._plant([("dog", "train")], "requal", I.save(base, "JPEG", quality=95))
            + self._plant([("dog", "test")], "requal", I.save(base, "JPEG", quality=60))
        )
        self.files["cat/broken.jpg"] = I.truncated_jpeg(80, 60)
        self.files["dog/notes.jpg"] = I.text_as_jpg()

    def split_of(self, relpath: str) -> str:
        return assign_split(relpath, SEED, self.splits)

    def _plant(self, places, stem: str, data: bytes) -> List[str]:
        names = []
        for cls, split in places:
            name = next(
                f"{cls}/{stem}_{i:03d}.jpg"
                for i in itertools.count()
                if f"{cls}/{stem}_{i:03d}.jpg" not in self.files and self.split_of(f"{cls}/{stem}_{i:03d}.jpg") == split
            )
            self.files[name] = data
            names.append(name)
        return names

    def good_files(self) -> List[str]:
        bad = {p for paths in self.rejected.values() for p in paths}
        return sorted(p for p in self.files if p not in bad)

    def class_counts(self) -> Dict[str, Dict[str, int]]:
        counts: Dict[str, Dict[str, int]] = {s: {c: 0 for c in CLASSES} for s, _ in self.splits}
        for path in self.good_files():
            counts[self.split_of(path)][path.split("/")[0]] += 1
        return counts


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """(PlantedDataset, converted output folder)."""
    data = PlantedDataset()
    base = tmp_path_factory.mktemp("report")
    source = base / "photos"
    for relpath, content in data.files.items():
        (source / relpath).parent.mkdir(parents=True, exist_ok=True)
        (source / relpath).write_bytes(content)
    out = str(base / "out")
    proc = convert(str(source), out, "--image-size", "64", "--splits", SPLITS, "--no-analyze", "--seed", str(SEED))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return data, out


def lines(json_path, document, kind: str) -> List[Dict[str, Any]]:
    """The rows of one of the JSON-lines files report.json names (beside it)."""
    entry = document["files"][kind]
    with open(os.path.join(os.path.dirname(json_path), entry["file"]), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    assert len(rows) == entry["lines"]
    return rows


@pytest.fixture(scope="module")
def reported(planted, tmp_path_factory):
    """(PlantedDataset, output folder, report.html path, report.json document, {lines kind: rows})."""
    data, out = planted
    target = tmp_path_factory.mktemp("report_files")
    proc = run_in_process(
        "report", out, "--output", str(target), "--seed", "3", "--thumbnails-per-class", "4", "--processes", "2"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    html_path = proc.stdout.strip().splitlines()[-1]
    assert html_path == str(target / "report.html")
    with open(target / "report.json", encoding="utf-8") as f:
        document = json.load(f)
    assert sorted(os.listdir(target)) == [
        "report-classes.jsonl",
        "report-duplicates.jsonl",
        "report-rejected.jsonl",
        "report.html",
        "report.json",
    ]
    rows = {kind: lines(target / "report.json", document, kind) for kind in ("classes", "duplicates", "rejected")}
    return data, out, html_path, document, rows


def _groups(groups, kind: str) -> List[List[str]]:
    return sorted(
        sorted(r["filename"] for c in g["contents"] for r in c["records"]) for g in groups if g["kind"] == kind
    )


# -- report.json ---------------------------------------------------------------------------------


def test_report_json_finds_the_planted_duplicate_groups(reported):
    data, _, _, document, rows = reported
    every = rows["duplicates"]
    assert _groups(every, "exact") == sorted(sorted(g) for g in data.exact)
    assert _groups(every, "near") == sorted(sorted(g) for g in data.near)
    top = document["duplicates"]["top_groups"]
    assert sorted(map(json.dumps, top)) == sorted(map(json.dumps, every)), "few groups: the page shows them all"
    for group in every:
        assert group["splits"] == dup.split_order(
            {data.split_of(r["filename"]) for c in group["contents"] for r in c["records"]}
        )
        if group["kind"] == "near":
            assert all(c["distance"] <= 6 for c in group["contents"])
    crossing = [g["crosses_splits"] for g in top]
    assert crossing == sorted(crossing, reverse=True), "groups that cross splits come first"
    assert crossing.count(False) == 1  # the two copies within train
    twin = next(g for g in every if len(g["classes"]) > 1)
    assert twin["classes"] == ["bird", "dog"]


def test_report_json_counts_pairs_across_splits(reported):
    _, _, _, document, _ = reported
    exact, near = document["duplicates"]["exact"], document["duplicates"]["near"]
    # leak: train-test; twin: dog train, dog validation, bird train; same: two in train.
    assert exact["pairs"] == {"train/validation": 2, "train/test": 1, "train/train": 2}
    assert exact["cross_split_pairs"] == 3
    assert (exact["groups"], exact["groups_crossing_splits"], exact["records"]) == (3, 2, 7)
    assert near["pairs"] == {"train/validation": 1, "train/test": 1}
    assert near["cross_split_pairs"] == 2
    assert (near["groups"], near["groups_crossing_splits"], near["records"]) == (2, 2, 4)
    assert document["duplicates"]["near_duplicate_distance"] == perceptual_hash.DEFAULT_NEAR_DUPLICATE_DISTANCE


def test_report_json_class_counts_sizes_shards_and_rejects(reported):
    data, out, _, document, rows = reported
    expected = data.class_counts()
    doc = read_manifest(out)
    assert list(document["splits"]) == ["train", "validation", "test"]
    assert [r["class"] for r in rows["classes"]] == list(CLASSES)
    for split, counts in expected.items():
        info = document["splits"][split]
        assert {r["class"]: r["examples"][split] for r in rows["classes"]} == counts
        assert {r["class"]: r["declared"][split] for r in rows["classes"]} == doc.splits[split].examples_per_class
        assert info["num_examples"] == info["declared_examples"] == sum(counts.values())
        nonzero = [n for n in counts.values()]
        assert info["imbalance"]["ratio"] == (round(max(nonzero) / min(nonzero), 3) if min(nonzero) else None)
        spread = info["classes"]
        assert (spread["classes"], spread["min"], spread["max"]) == (3, min(nonzero), max(nonzero))
        assert info["images"]["most_common"] == [{"width": 64, "height": 64, "count": sum(counts.values())}]
        assert info["images"]["aspect_ratio"]["median"] == 1.0
    assert document["read"]["records"] == len(data.good_files())
    for part in ("options", "accounting", "labels", "created", "tool_version", "input", "record_type", "labeled"):
        assert json.dumps(document["dataset"][part]) == json.dumps(doc.to_json()[part]), part  # values and key order
    assert document["read"]["complete"] is True and document["read"]["problems"] == []
    assert document["read"]["images_per_second"] > 0
    shards = {s["file"]: s for s in document["shards"]}
    for info in doc.splits.values():
        for shard in info.shards:
            assert shards[shard.file]["records"] == shard.num_records
            assert shards[shard.file]["bytes"] == shard.num_bytes == os.path.getsize(os.path.join(out, shard.file))
    rejected = document["rejected"]
    assert rejected["total"] == rejected["declared"] == 2
    assert rejected["by_reason"] == {r: len(paths) for r, paths in data.rejected.items()}
    assert {r: [e["path"] for e in items] for r, items in rejected["shown"].items()} == data.rejected
    assert sorted((e["reason"], e["path"]) for e in rows["rejected"]) == sorted(
        (r, p) for r, paths in data.rejected.items() for p in paths
    )
    assert all(e["error"] for e in rows["rejected"])
    samples = document["samples"]
    assert (samples["mode"], samples["per_class"]) == ("per_class", 4)
    assert collections.Counter(item["class"] for item in samples["items"]) == {c: 4 for c in CLASSES}


def test_sample_is_seeded_and_independent_of_processes(planted, tmp_path):
    _, out = planted
    picks = []
    for processes, seed in (("1", "3"), ("2", "3"), ("2", "4")):
        target = tmp_path / f"p{processes}s{seed}.html"
        proc = run_in_process("report", out, "--output", str(target), "--seed", seed, "--processes", processes)
        assert proc.returncode == 0, proc.stderr
        json_path = tmp_path / f"p{processes}s{seed}.json"
        document = json.load(open(json_path))
        picks.append(document["samples"])
        every = [lines(json_path, document, kind) for kind in ("classes", "duplicates", "rejected")]
        assert document["files"]["duplicates"]["file"] == f"p{processes}s{seed}-duplicates.jsonl"
        document["read"] = document["options"] = document["files"] = None
        picks.append([document, every])
    assert picks[0] == picks[2], "the same seed picks the same sample with 1 or 2 processes"
    assert picks[0] != picks[4], "another seed picks another sample"
    assert picks[1] == picks[3], "the whole report does not depend on the number of processes"


# -- bad input -----------------------------------------------------------------------------------


def _one_line_error(proc) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_incomplete_output_gives_a_report_that_says_so(planted, tmp_path):
    _, out = planted
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    os.remove(copy / output_files.SUCCESS_FILE)
    proc = run_in_process("report", str(copy), "--output", str(tmp_path / "r.html"))
    assert proc.returncode == 1
    assert "_SUCCESS" in _one_line_error(proc)
    assert proc.stdout.strip() == str(tmp_path / "r.html")
    assert json.load(open(tmp_path / "r.json"))["dataset"]["complete"] is False
    assert 'id="incomplete"' in (tmp_path / "r.html").read_text()
    assert sorted(os.listdir(tmp_path)) == [
        "copy",
        "r-classes.jsonl",
        "r-duplicates.jsonl",
        "r-rejected.jsonl",
        "r.html",
        "r.json",
    ], "no temporary file left"


def test_damaged_shard_gives_a_report_of_what_could_be_read(planted, tmp_path):
    data, out = planted
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    shard = read_manifest(str(copy)).splits["train"].shards[0].file
    content = (copy / shard).read_bytes()
    (copy / shard).write_bytes(content[: len(content) // 2])
    proc = run_in_process("report", str(copy), "--output", str(tmp_path / "r.html"))
    assert proc.returncode == 1
    assert shard in _one_line_error(proc)
    document = json.load(open(tmp_path / "r.json"))
    assert not document["read"]["complete"]
    assert any(shard in p and "cannot be read" in p for p in document["read"]["problems"])
    train = document["splits"]["train"]
    assert 0 < train["num_examples"] < train["declared_examples"]
    assert document["splits"]["test"]["num_examples"] == document["splits"]["test"]["declared_examples"]
    assert 'id="read-problems"' in (tmp_path / "r.html").read_text()


def _without_timings(json_path):
    """report.json and its lines files, without what differs between two runs: timings and file names."""
    document = json.load(open(json_path))
    every = [lines(json_path, document, kind) for kind in ("classes", "duplicates", "rejected")]
    document["read"] = document["options"] = document["files"] = None
    return document, every


def test_a_report_worker_killed_mid_shard_is_replaced_and_the_report_is_an_undisturbed_ones(
    reported, tmp_path, monkeypatch
):
    _, out, html_path, _, _ = reported
    monkeypatch.setenv(faults.ENV, "fail:scanning:kill")
    monkeypatch.setenv(faults.MARKER_ENV, str(tmp_path / "killed"))
    target = tmp_path / "r.html"
    args = ("--seed", "3", "--thumbnails-per-class", "4", "--processes", "2")
    proc = run_in_process("report", out, "--output", str(target), *args)
    assert proc.returncode == 0, proc.stderr
    assert os.path.exists(tmp_path / "killed")  # a worker was killed
    assert proc.stderr.strip().splitlines() == [WORKER_DIED_WARNING]
    assert _without_timings(tmp_path / "r.json") == _without_timings(html_path[: -len(".html")] + ".json")


def test_a_shard_whose_workers_die_twice_ends_the_report_in_one_line_naming_it(planted, tmp_path, monkeypatch):
    _, out = planted
    monkeypatch.setenv(faults.ENV, "fail:scanning:kill")  # without a marker: every worker that starts a shard
    stopped = []  # the workers of each pool the report stopped

    def stop_pool(executor, grace_s, stop=workers.stop_pool):
        stopped.append(worker_exit._workers(executor))
        stop(executor, grace_s)

    monkeypatch.setattr(workers, "stop_pool", stop_pool)
    proc = run_in_process("report", out, "--output", str(tmp_path / "r.html"), "--processes", "2")
    assert proc.returncode == 1
    warning, line = proc.stderr.strip().splitlines()  # the first death's warning, then the one error line
    assert warning == WORKER_DIED_WARNING and "Traceback" not in proc.stderr
    assert re.fullmatch(
        r"img2tfrecord report: error: a worker process died twice while reading \S+\.tfrecord\S* "
        r"\(out of memory, or a crash in an image decoder\)",
        line,
    ), line
    assert os.listdir(tmp_path) == [], "nothing written"
    assert len(stopped) == 2 and all(stopped) and not any(p.is_alive() for pool in stopped for p in pool)


def test_sequence_output_is_refused_in_one_line(tmp_path):
    source = tmp_path / "clips"
    for clip in ("run/a", "run/b", "walk/c"):
        for i in range(2):
            (source / clip).mkdir(parents=True, exist_ok=True)
            (source / clip / f"frame_{i}.png").write_bytes(I.png(12, 10, I.noise(12, 10, seed=i)))
    out = tmp_path / "out"
    proc = convert(str(source), str(out), "--sequence", "--no-analyze")
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = run_in_process("report", str(out), "--output", str(tmp_path / "r.html"))
    assert proc.returncode == 2
    assert "SequenceExample" in _one_line_error(proc)
    assert sorted(os.listdir(tmp_path)) == ["clips", "out"], "nothing written, not even the lines files"


def test_manifest_field_of_the_wrong_type_is_a_one_line_error_naming_it(planted, tmp_path):
    _, out = planted
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    doc = json.load(open(copy / output_files.MANIFEST_FILE))
    doc["splits"]["test"]["shards"][0]["num_records"] = -1
    (copy / output_files.MANIFEST_FILE).write_text(json.dumps(doc), encoding="utf-8")
    proc = run_in_process("report", str(copy), "--output", str(tmp_path / "r.html"))
    assert proc.returncode == 2
    assert _one_line_error(proc).endswith("dataset.json: splits.test.shards[0].num_records is -1, not a count")
    assert not (tmp_path / "r.html").exists()


def test_not_an_output_folder_and_bad_options_are_usage_errors(planted, tmp_path):
    _, out = planted
    page = str(tmp_path / "r.html")
    for args in (
        (str(tmp_path / "missing"), "--output", page),
        (str(tmp_path), "--output", page),  # a folder without dataset.json
        (out, "--output", page, "--near-duplicate-distance", "40"),
        (out, "--output", page, "--thumbnails-per-class", "-1"),
        (out, "--output", str(tmp_path / "no" / "such" / "r.html")),
    ):
        proc = run_in_process("report", *args)
        assert proc.returncode == 2, (args, proc.stderr)
        _one_line_error(proc)
    assert not os.path.exists(page)


# -- the pieces ----------------------------------------------------------------------------------


def test_near_pairs_match_brute_force():
    rng = random.Random(0)
    centres = [rng.getrandbits(64) for _ in range(30)]
    hashes = []
    for _ in range(600):  # clusters of nearby hashes, and flat-image zeros
        h = rng.choice(centres + [0])
        for _ in range(rng.randint(0, 9)):
            h ^= 1 << rng.randrange(64)
        hashes.append(h)
    for distance in (0, 3, 6, 10):
        brute = sorted(
            (i, j, perceptual_hash.hamming(hashes[i], hashes[j]))
            for i in range(len(hashes))
            for j in range(i + 1, len(hashes))
            if perceptual_hash.hamming(hashes[i], hashes[j]) <= distance
        )
        assert [tuple(p) for p in near_search.near_pairs(hashes, distance)] == brute


def _located(name: str, split: str, dhash: int) -> dup.Located:
    return dup.Located(split, "s.tfrecord", 0, 0, name, "c", f"sha-{name}", dhash)


def _flip(h: int, bits) -> int:
    for b in bits:
        h ^= 1 << b
    return h


def test_near_groups_do_not_chain():
    # a..d: each 6 bits from the one before, so a chain of pairs would join a and d, 18 bits apart.
    a = 0
    b = _flip(a, range(0, 6))
    c = _flip(b, range(6, 12))
    d = _flip(c, range(12, 18))
    items = [_located("a.jpg", "train", a), _located("b.jpg", "test", b), _located("c.jpg", "train", c)]
    items.append(_located("d.jpg", "validation", d))
    found = dup.find_duplicates(items, 6)
    near = [g for g in found.groups if g.match == dup.NEAR]
    assert sorted([c.records[0].filename for c in g.contents] for g in near) == [
        ["a.jpg", "b.jpg"],
        ["c.jpg", "d.jpg"],
    ]
    for g in near:
        assert [c.distance for c in g.contents] == [0, 6] and g.largest_distance == 6
    # Each group counts its own pair; the totals count all three, b-c between the groups too.
    assert {tuple(g.pairs.items()) for g in near} == {(("train/test", 1),), (("train/validation", 1),)}
    assert found.near_pairs == {"train/validation": 1, "train/test": 2}
    assert sorted(group_lines.group_json(g)["largest_distance"] for g in found.groups) == [6, 6]


def test_near_groups_hold_only_images_close_to_the_first():
    rng = random.Random(3)
    centres = [rng.getrandbits(64) for _ in range(12)]
    hashes = []
    for _ in range(400):  # dense clusters: pairs chain through them at distance 6
        h = rng.choice(centres)
        for _ in range(rng.randint(0, 8)):
            h ^= 1 << rng.randrange(64)
        hashes.append(h)
    items = [_located(f"{i:04d}.jpg", rng.choice(["train", "test"]), h) for i, h in enumerate(hashes)]
    found = dup.find_duplicates(items, 6)
    grouped = {}
    for g in (g for g in found.groups if g.match == dup.NEAR):
        first = g.contents[0].dhash
        assert all(perceptual_hash.hamming(first, c.dhash) == c.distance <= 6 for c in g.contents)
        assert g.largest_distance == max(c.distance for c in g.contents) <= 6
        for c in g.contents:
            assert c.sha256 not in grouped, "a content is in one group at most"
            grouped[c.sha256] = g
    assert len(grouped) > 50
    # find_duplicates orders contents by file name, as items are: near_pairs' positions are the items'.
    for pair in near_search.near_pairs(hashes, 6):
        # Two close images are never both left out: the first of them would have led a group.
        assert items[pair.first].sha256 in grouped or items[pair.second].sha256 in grouped


def _rule_reference(items, max_distance: int):
    """The documented grouping rule and pair counts, transcribed literally (every pair compared): the groups
    as (kind, [(sha256, distance, [file names])], pairs), and the exact and near pair totals."""
    by_sha: Dict[str, List[dup.Located]] = collections.defaultdict(list)
    for item in items:
        by_sha[item.sha256].append(item)

    def in_order(recs):
        rank = {s: i for i, s in enumerate(dup.split_order({r.split for r in recs}))}
        return sorted(recs, key=lambda r: (rank[r.split], r.filename, r.shard, r.index))

    def pairs_between(left, right, into):
        for a in left:
            for b in right:
                into[dup.pair_key(a.split, b.split)] += 1

    contents = sorted(((sha, in_order(recs)) for sha, recs in by_sha.items()), key=lambda c: (c[1][0].filename, c[0]))
    groups, exact_total, near_total = [], collections.Counter(), collections.Counter()
    for sha, recs in contents:
        if len(recs) > 1:
            pairs: collections.Counter = collections.Counter()
            for i, a in enumerate(recs):
                pairs_between([a], recs[i + 1 :], pairs)
            exact_total.update(pairs)
            groups.append(("exact", [(sha, 0, [r.filename for r in recs])], dict(pairs)))
    hashed = [(sha, recs) for sha, recs in contents if recs[0].dhash is not None]

    def close(i, j):
        return perceptual_hash.hamming(hashed[i][1][0].dhash, hashed[j][1][0].dhash) <= max_distance

    grouped: Dict[int, int] = {}
    for i in range(len(hashed)):
        for j in range(i + 1, len(hashed)):
            if close(i, j):
                pairs_between(hashed[i][1], hashed[j][1], near_total)
        if i in grouped:
            continue
        others = [j for j in range(len(hashed)) if j != i and j not in grouped and close(i, j)]
        if others:
            members = sorted([i, *others])
            grouped.update({m: i for m in members})
            pairs = collections.Counter()
            for x, m in enumerate(members):
                for n in members[x + 1 :]:
                    if close(m, n):
                        pairs_between(hashed[m][1], hashed[n][1], pairs)
            first = hashed[i][1][0].dhash
            groups.append(
                (
                    "near",
                    [
                        (
                            hashed[m][0],
                            perceptual_hash.hamming(first, hashed[m][1][0].dhash),
                            [r.filename for r in hashed[m][1]],
                        )
                        for m in members
                    ],
                    dict(pairs),
                )
            )
    return groups, dict(exact_total), dict(near_total)


def test_groups_follow_the_documented_rule_on_random_data():
    for trial in range(120):
        rng = random.Random(trial)
        centres = [rng.getrandbits(64) for _ in range(rng.randint(1, 5))] + [0]
        dhash_of: Dict[str, Optional[int]] = {}
        items = []
        for i in range(rng.randint(1, 90)):
            sha = f"{rng.randrange(rng.randint(1, 50)):064x}"
            if sha not in dhash_of:
                h = rng.choice(centres)
                for _ in range(rng.randint(0, 9)):
                    h ^= 1 << rng.randrange(64)
                dhash_of[sha] = None if rng.random() < 0.05 else h
            split = rng.choice(["train", "validation", "test", "extra"])
            items.append(
                dup.Located(
                    split, f"s{rng.randrange(3)}", i, i, f"f{rng.randrange(30):02d}.jpg", "c", sha, dhash_of[sha]
                )
            )
        distance = rng.choice([0, 2, 6, 10, 16])
        groups, exact_total, near_total = _rule_reference(items, distance)
        found = dup.find_duplicates(items, distance)
        got = sorted(
            (
                (g.match, [(c.sha256, c.distance, [r.filename for r in c.records]) for c in g.contents], g.pairs)
                for g in found.groups
            ),
            key=repr,
        )
        assert got == sorted(groups, key=repr), (trial, distance)
        assert (found.exact_pairs, found.near_pairs) == (exact_total, near_total), (trial, distance)
        assert [dup.rank_key(g) for g in found.groups] == sorted(dup.rank_key(g) for g in found.groups)


@pytest.mark.parametrize(
    "chosen",
    [
        near_search.Plan(9, (0,) * 7),
        near_search.Plan(16, (1, 1, 1, 0)),
        near_search.Plan(21, (2, 1, 1)),
        near_search.Plan(32, (3, 2)),
    ],
)
def test_every_exact_plan_finds_the_same_pairs(chosen):
    rng = random.Random(7)
    centres = [rng.getrandbits(64) for _ in range(20)]
    hashes = []
    for _ in range(500):
        h = rng.choice(centres)
        for _ in range(rng.randint(0, 8)):
            h ^= 1 << rng.randrange(64)
        hashes.append(h)
    brute = sorted(
        (i, j)
        for i in range(len(hashes))
        for j in range(i + 1, len(hashes))
        if perceptual_hash.hamming(hashes[i], hashes[j]) <= 6
    )
    found = [
        (int(a), int(b))
        for first, second, _ in near_search.near_pair_batches(np.array(hashes, dtype=np.uint64), 6, chosen)
        for a, b in zip(first, second)
    ]
    assert sorted(found) == brute and len(found) == len(set(found)), "every pair, once"
    with pytest.raises(ValueError):
        list(near_search.near_pair_batches(np.array(hashes, dtype=np.uint64), 7, near_search.Plan(16, (1, 1, 1, 0))))


def test_plans_grow_their_blocks_with_the_number_of_hashes():
    small, large = near_search.plan(50_000, 6), near_search.plan(1_280_000, 6)
    assert (small.bits, large.bits) == (9, 16) and large.flips == (1, 1, 1, 0)
    for count in (10, 10_000, 10**6, 10**8):
        for distance in range(perceptual_hash.MAX_NEAR_DUPLICATE_DISTANCE + 1):
            chosen = near_search.plan(count, distance)
            assert sum(f + 1 for f in chosen.flips) > distance and chosen.bits * len(chosen.flips) <= 64


def test_difference_hash_is_stable_under_small_changes():
    base = photo(1)
    h = perceptual_hash.difference_hash(base)
    assert perceptual_hash.hamming(h, perceptual_hash.difference_hash(brighter(base, 3))) <= 2
    assert perceptual_hash.hamming(h, perceptual_hash.difference_hash(base.resize((48, 40)))) <= 6
    assert perceptual_hash.hamming(h, perceptual_hash.difference_hash(photo(2))) > 12
    assert perceptual_hash.difference_hash(Image.new("RGB", (30, 20), (9, 9, 9))) == 0


def test_jpeg_hash_fast_path_gives_pillows_hash():
    """libjpeg-turbo via simplejpeg decodes the pixels Pillow's draft does: the hash does not depend on the path."""
    from img2tfrecord.report import shard_scan

    cases = []
    for i, (w, h) in enumerate([(12, 9), (17, 40), (48, 48), (100, 75), (160, 120), (257, 130), (640, 480)]):
        for subsampling in (0, 1, 2):
            cases.append(I.save(photo(i, w, h), "JPEG", quality=70 + 5 * subsampling, subsampling=subsampling))
        cases.append(I.save(photo(i, w, h).convert("L"), "JPEG", quality=85))
    cases.append(I.cmyk_jpeg(64, 48))
    fast = 0
    for data in cases:
        values = {"image/encoded": data, "image/format": b"jpeg"}
        expected = perceptual_hash.difference_hash(shard_scan.decode_image(values, 16))
        assert shard_scan.image_hash(values) == expected
        fast += shard_scan._draft_jpeg(data, 16) is not None
    assert fast == len(cases) - 1  # all but the CMYK one, which Pillow decodes
    with pytest.raises(OSError):  # a damaged JPEG is Pillow's to refuse
        shard_scan.image_hash({"image/encoded": I.truncated_jpeg(64, 48), "image/format": b"jpeg"})


def test_size_summary_and_imbalance():
    sizes = collections.Counter({(64, 48): 3, (48, 64): 1, (100, 10): 1})
    summary = facts.image_sizes(sizes)
    assert summary["width"] == {"min": 48, "max": 100, "mean": 68.0, "median": 64}
    assert [b["count"] for b in summary["aspect_ratio_histogram"]] == [0, 0, 0, 1, 0, 0, 3, 0, 1]
    assert facts.imbalance({"a": 10, "b": 4}) == {
        "ratio": 2.5,
        "largest": "a",
        "smallest": "b",
        "empty_classes": [],
        "empty_class_count": 0,
    }
    assert facts.imbalance({"a": 10, "b": 0})["ratio"] is None


# -- many classes, many groups -------------------------------------------------------------------

MANY_CLASSES = 1000


@pytest.fixture(scope="module")
def many_classes(tmp_path_factory):
    """1,000 classes of two 8x8 PNGs each, converted with --format keep: in the even classes both files hold the
    same bytes (500 exact groups). (output folder, report.html path, report.json document, {kind: rows})."""
    base = tmp_path_factory.mktemp("many_classes")
    source = base / "photos"
    for c in range(MANY_CLASSES):
        folder = source / f"n{c:08d}"
        folder.mkdir(parents=True)
        first = I.save(I.noise(8, 8, seed=2 * c), "PNG")
        (folder / "a.png").write_bytes(first)
        (folder / "b.png").write_bytes(first if c % 2 == 0 else I.save(I.noise(8, 8, seed=2 * c + 1), "PNG"))
    out = str(base / "out")
    proc = convert(str(source), out, "--format", "keep", "--splits", "train=0.8,validation=0.1,test=0.1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    target = base / "pages" / "week12"  # a folder not there yet: made
    proc = run_in_process("report", out, "--output", str(target) + "/", "--processes", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(target / "report.json", encoding="utf-8") as f:
        document = json.load(f)
    rows = {kind: lines(target / "report.json", document, kind) for kind in ("classes", "duplicates", "rejected")}
    return out, str(target / "report.html"), document, rows


def test_many_classes_lines_files_hold_everything_the_page_cuts_short(many_classes):
    _, html_path, document, rows = many_classes
    assert len(rows["classes"]) == MANY_CLASSES and sum(r["total"] for r in rows["classes"]) == 2 * MANY_CLASSES
    groups = rows["duplicates"]
    assert len(groups) == document["duplicates"]["exact"]["groups"] == MANY_CLASSES // 2
    assert {g["contents"][0]["records"][0]["class"] for g in groups} == {f"n{c:08d}" for c in range(0, 1000, 2)}
    top = document["duplicates"]["top_groups"]
    assert len(top) == html_page.MAX_GROUPS_SHOWN < len(groups)
    crossing = sorted(g["contents"][0]["records"][0]["filename"] for g in groups if g["crosses_splits"])
    assert document["duplicates"]["exact"]["groups_crossing_splits"] == len(crossing) > html_page.MAX_GROUPS_SHOWN
    # all groups are exact pairs: the top ones are the crossing ones with the first file names
    assert [g["contents"][0]["records"][0]["filename"] for g in top] == crossing[: html_page.MAX_GROUPS_SHOWN]
    page = open(html_path, encoding="utf-8").read()
    assert page.count('class="group') == html_page.MAX_GROUPS_SHOWN
    assert f"… {len(groups) - html_page.MAX_GROUPS_SHOWN:,} more groups in report-duplicates.jsonl" in page
    assert "examples_per_class" not in json.dumps(document), "per-class rows are in the lines file only"


def test_many_classes_page_has_a_capped_grid_a_sortable_table_and_histograms(many_classes):
    _, html_path, document, _ = many_classes
    samples = document["samples"]
    assert samples["mode"] == "grid" and len(samples["items"]) == facts.MAX_SAMPLE_THUMBNAILS
    assert len({item["class"] for item in samples["items"]}) == facts.MAX_SAMPLE_THUMBNAILS, "one per class"
    page = open(html_path, encoding="utf-8").read()
    thumbnails = page.count('<img src="data:image/jpeg')
    assert thumbnails <= facts.MAX_SAMPLE_THUMBNAILS + html_page.MAX_GROUPS_SHOWN * html_page.MAX_CONTENTS_SHOWN
    assert page.count('class="thumb"') == facts.MAX_SAMPLE_THUMBNAILS
    assert '<table id="class-counts" class="sortable">' in page and "<script>" in page
    assert page.count("<tr data-class=") == MANY_CLASSES
    assert page.count('class="class-histogram"') == 3  # one per split, no bar per class
    for info in document["splits"].values():
        spread = info["classes"]
        assert spread["classes"] == MANY_CLASSES and len(spread["smallest"]) == len(spread["largest"]) == 5
        assert sum(b["count"] for b in spread["histogram"]) == MANY_CLASSES
    assert len(page.encode()) < 3_000_000


def test_page_stays_under_its_size_limit_at_any_number_of_classes_and_groups(many_classes, tmp_path):
    """The many-classes report's document blown up: 200,000 classes with long names, thousands of groups of
    hundreds of images, a thumbnail for every sample and image; the page holds at most its caps."""
    _, _, document, rows = many_classes
    document = json.loads(json.dumps(document))
    long_name = "x" * 80
    class_rows = [
        {"class": f"{long_name}{i:07d}", "examples": {"train": i % 97, "validation": 1, "test": 2}, "total": i % 97 + 3}
        for i in range(200_000)
    ]
    record = {"split": "train", "class": long_name, "filename": "f" * 120 + ".jpg", "shard": "s", "index": 0}
    group = {
        "kind": "near",
        "crosses_splits": True,
        "splits": ["train", "test"],
        "classes": [long_name] * 3,
        "size": 10_000,
        "pairs": {"train/test": 5},
        "largest_distance": 6,
        "content_count": 100,
        "contents": [
            {"sha256": f"{c:064x}", "dhash": "0" * 16, "distance": 3, "record_count": 100, "records": [record] * 100}
            for c in range(100)
        ],
    }
    document["duplicates"]["top_groups"] = [group] * 5_000
    document["duplicates"]["near"]["groups"] = 5_000
    document["read"]["problems"] = ["p" * 200] * 10_000
    document["read"]["problem_count"] = 10**6
    document["rejected"]["by_reason"] = {"truncated": 10**6}
    document["rejected"]["shown"] = {"truncated": [{"path": "q" * 200, "source": "q", "error": "e" * 200}] * 10_000}
    thumb = "data:image/jpeg;base64," + base64.b64encode(os.urandom(7000)).decode()
    pictures = html_page.Pictures(
        samples={(item["split"], item["filename"]): thumb for item in document["samples"]["items"]},
        contents={f"{c:064x}": thumb for c in range(100)},
    )
    page = html_page.render(document, pictures, class_rows)
    assert len(page.encode()) <= 10_000_000
    assert html_page.THUMBNAIL_BYTES - len(thumb) < pictures.spent <= html_page.THUMBNAIL_BYTES
    assert page.count("<tr data-class=") == page_classes.MAX_CLASS_ROWS
    assert 'id="class-rows-note"' in page
    assert page.count('class="group') == html_page.MAX_GROUPS_SHOWN
    assert page.count('class="content"') == html_page.MAX_GROUPS_SHOWN * html_page.MAX_CONTENTS_SHOWN
    assert page.count('class="reject"') == html_page.MAX_REJECTS_PER_REASON_SHOWN
    assert page.count("<li>p") == html_page.MAX_PROBLEMS_SHOWN


# -- the page in a real browser ------------------------------------------------------------------


def _chromium() -> Optional[str]:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class WebSocket:
    """Just enough of RFC 6455 for the DevTools protocol: masked text frames out, text frames in."""

    def __init__(self, url: str, timeout: float = 30) -> None:
        parts = urllib.parse.urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            f"GET {parts.path} HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        response = b""
        while b"\r\n\r\n" not in response:
            chunk = self.sock.recv(4096)
            assert chunk, "DevTools closed the connection during the handshake"
            response += chunk
        head, self.pending = response.split(b"\r\n\r\n", 1)
        assert b" 101 " in head.split(b"\r\n", 1)[0], head

    def _read(self, n: int) -> bytes:
        while len(self.pending) < n:
            chunk = self.sock.recv(1 << 16)
            assert chunk, "DevTools closed the connection"
            self.pending += chunk
        data, self.pending = self.pending[:n], self.pending[n:]
        return data

    def send(self, text: str) -> None:
        payload = text.encode()
        header = bytearray([0x81])
        if len(payload) < 126:
            header.append(0x80 | len(payload))
        elif len(payload) < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack(">H", len(payload))
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", len(payload))
        mask = os.urandom(4)
        masked = (np.frombuffer(payload, np.uint8) ^ np.resize(np.frombuffer(mask, np.uint8), len(payload))).tobytes()
        self.sock.sendall(bytes(header) + mask + masked)

    def receive(self) -> str:
        message = b""
        while True:
            first, second = self._read(2)
            length = second & 0x7F
            if length == 126:
                length = struct.unpack(">H", self._read(2))[0]
            elif length == 127:
                length = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(length)
            opcode = first & 0x0F
            if opcode == 0x9:  # ping
                self.sock.sendall(bytes([0x8A, 0x80 | len(payload)]) + b"\0\0\0\0" + payload)
                continue
            if opcode == 0x8:
                raise ConnectionError("DevTools closed the WebSocket")
            message += payload
            if first & 0x80:
                return message.decode()


class DevTools:
    """One page target: commands by id, events kept in order."""

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.events: List[Dict[str, Any]] = []

    def call(self, method: str, **params) -> Dict[str, Any]:
        call_id = next(self.ids)
        self.ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.receive())
            if message.get("id") == call_id:
                assert "error" not in message, (method, message["error"])
                return message["result"]
            self.events.append(message)

    def wait_for(self, method: str, timeout: float = 30) -> Dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events:
                if event.get("method") == method:
                    return event
            self.events.append(json.loads(self.ws.receive()))
        raise TimeoutError(method)


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium on 127.0.0.1 with no way out to the network; yields its DevTools HTTP base URL."""
    binary = _chromium()
    if binary is None:
        pytest.skip(
            "chromium is not installed and could not be (run_tests.sh installs Debian's chromium when run as root)"
        )
    profile = tempfile.mkdtemp(prefix="report-chromium-")
    proc = subprocess.Popen(
        [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-sync",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--user-data-dir={profile}",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            "--window-size=1280,900",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                break
            if "DevTools listening on ws://" in line:
                port = urllib.parse.urlsplit(line.split("listening on ", 1)[1].strip()).port
        if port is None:
            pytest.fail(f"chromium did not start its DevTools server (exit {proc.poll()})")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


_DOM_FACTS = """JSON.stringify({
  groups: [...document.querySelectorAll('#duplicates .group')].map(g => ({
    kind: g.dataset.kind, crosses: g.dataset.crosses === 'true',
    files: [...g.querySelectorAll('.member .filename')].map(e => e.textContent).sort()})),
  counts: [...document.querySelectorAll('#class-counts td[data-class]')].map(
    td => [td.dataset.split, td.dataset.class, Number(td.textContent.replace(/,/g, ''))]),
  rejects: [...document.querySelectorAll('tr.reject')].map(
    tr => [tr.dataset.reason, tr.querySelector('.path').textContent]),
  images: [...document.images].map(i => [i.complete, i.naturalWidth]),
  leakage: document.getElementById('leakage').innerText,
  text: document.body.innerText,
})"""


def test_page_in_headless_chromium(reported, browser, tmp_path):
    data, _, html_path, document, _ = reported
    with urllib.request.urlopen(f"{browser}/json/list", timeout=10) as response:
        page = next(t for t in json.load(response) if t["type"] == "page")
    tools = DevTools(WebSocket(page["webSocketDebuggerUrl"]))
    for domain in ("Page", "Runtime", "Log", "Network"):
        tools.call(f"{domain}.enable")
    tools.call("Page.navigate", url="file://" + html_path)
    tools.wait_for("Page.loadEventFired")

    facts_json = tools.call("Runtime.evaluate", expression=_DOM_FACTS, returnByValue=True)["result"]["value"]
    dom = json.loads(facts_json)
    metrics = tools.call("Page.getLayoutMetrics")["cssContentSize"]
    shot = tools.call(
        "Page.captureScreenshot",
        format="png",
        captureBeyondViewport=True,
        clip={"x": 0, "y": 0, "width": metrics["width"], "height": min(metrics["height"], 6000), "scale": 1},
    )
    png = tmp_path / "report.png"
    png.write_bytes(base64.b64decode(shot["data"]))
    shutil.copy(png, os.path.join(os.path.dirname(html_path), "report.png"))  # for a person to look at

    errors = [
        e
        for e in tools.events
        if (e.get("method") == "Runtime.consoleAPICalled" and e["params"]["type"] in ("error", "assert"))
        or e.get("method") == "Runtime.exceptionThrown"
        or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")
    ]
    assert errors == []
    requests = [e["params"]["request"]["url"] for e in tools.events if e.get("method") == "Network.requestWillBeSent"]
    assert all(url.startswith(("file:", "data:")) for url in requests), requests

    with Image.open(png) as image:
        assert image.width >= 800 and image.height >= 900
        colors = image.convert("RGB").getcolors(1 << 20)
        assert colors is None or len(colors) > 50, "the screenshot is blank"

    expected_groups = sorted(
        [{"kind": "exact", "files": sorted(g)} for g in data.exact]
        + [{"kind": "near", "files": sorted(g)} for g in data.near],
        key=lambda g: g["files"],
    )
    assert (
        sorted(({"kind": g["kind"], "files": g["files"]} for g in dom["groups"]), key=lambda g: g["files"])
        == expected_groups
    )
    assert [g["crosses"] for g in dom["groups"]] == [True, True, True, True, False]
    expected_counts = sorted([s, c, n] for s, counts in data.class_counts().items() for c, n in counts.items())
    assert sorted(dom["counts"]) == expected_counts
    assert sorted(dom["rejects"]) == sorted([r, p] for r, paths in data.rejected.items() for p in paths)
    assert dom["images"] and all(complete and width > 0 for complete, width in dom["images"])
    assert "3 exact, 2 near" in dom["leakage"]
    for name in (
        "Examples per class",
        "Duplicates and split leakage",
        "Rejected inputs",
        "Samples per class",
        "Shards",
    ):
        assert name in dom["text"]


_SORT_AND_FILTER = """(() => {
  const table = document.getElementById('class-counts');
  const heads = table.tHead.rows[0].cells;
  const firstClass = () => table.tBodies[0].rows[0].dataset.class;
  const visible = () => [...table.tBodies[0].rows].filter(r => r.style.display !== 'none').length;
  const before = firstClass();
  heads[heads.length - 1].click();
  const largest = firstClass();
  heads[heads.length - 1].click();
  const smallest = firstClass();
  const filter = document.getElementById('class-filter');
  filter.value = 'n0000099';
  filter.dispatchEvent(new Event('input'));
  return JSON.stringify({before, largest, smallest, visible: visible(), rows: table.tBodies[0].rows.length,
                         thumbs: document.querySelectorAll('#sample-grid .thumb img').length,
                         loaded: [...document.images].every(i => i.complete && i.naturalWidth > 0)});
})()"""


def test_many_classes_page_in_headless_chromium(many_classes, browser):
    _, html_path, _, rows = many_classes
    request = urllib.request.Request(f"{browser}/json/new?about:blank", method="PUT")
    with urllib.request.urlopen(request, timeout=10) as response:
        page = json.load(response)
    tools = DevTools(WebSocket(page["webSocketDebuggerUrl"]))
    for domain in ("Page", "Runtime", "Log", "Network"):
        tools.call(f"{domain}.enable")
    tools.call("Page.navigate", url="file://" + html_path)
    tools.wait_for("Page.loadEventFired")
    state = json.loads(
        tools.call("Runtime.evaluate", expression=_SORT_AND_FILTER, returnByValue=True)["result"]["value"]
    )
    errors = [
        e
        for e in tools.events
        if e.get("method") == "Runtime.exceptionThrown"
        or (e.get("method") == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")
    ]
    assert errors == []
    requests = [e["params"]["request"]["url"] for e in tools.events if e.get("method") == "Network.requestWillBeSent"]
    assert all(url.startswith(("file:", "data:")) for url in requests), requests
    totals = {r["class"]: r["total"] for r in rows["classes"]}
    assert state["before"] == "n00000000"  # labels order until a column is clicked
    assert totals[state["largest"]] == max(totals.values()) and totals[state["smallest"]] == min(totals.values())
    assert state["rows"] == MANY_CLASSES and state["visible"] == 10  # n00000990 .. n00000999
    assert state["thumbs"] == facts.MAX_SAMPLE_THUMBNAILS and state["loaded"]
