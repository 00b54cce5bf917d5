"""Split parsing, seeded split assignment and shuffle keys."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys

import pytest

from img2tfrecord.conversion.seeded_hashes import DEFAULT_SPLIT, assign_split, parse_splits, shuffle_key
from img2tfrecord.sources.split_folders import is_split_layout, split_of_folder

THREE = (("train", 0.8), ("validation", 0.1), ("test", 0.1))
SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def paths(n, prefix="class"):
    return [f"{prefix}{i % 7}/img_{i:05d}.jpg" for i in range(n)]


# -- parse_splits ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,expected",
    [
        ("train=0.8,validation=0.1,test=0.1", THREE),
        (" train = 0.8 , validation=0.1,  test =0.1 ", THREE),
        ("train=1", (("train", 1.0),)),
        ("train=1.0,", (("train", 1.0),)),
        ("test=0.5,train=0.5", (("test", 0.5), ("train", 0.5))),  # order as given
        ("a=0.1,b=0.2,c=0.7", (("a", 0.1), ("b", 0.2), ("c", 0.7))),  # float sum 0.9999999999999999
        ("A_1=5e-1,b2=.5", (("A_1", 0.5), ("b2", 0.5))),
        ("x=0.3333333,y=0.3333333,z=0.3333334", (("x", 0.3333333), ("y", 0.3333333), ("z", 0.3333334))),
    ],
)
def test_parse_splits_accepts(text, expected):
    assert parse_splits(text) == expected


@pytest.mark.parametrize(
    "text,message",
    [
        ("train=0.8,test=0.1", "sum to 1"),
        ("train=0.8,test=0.3", "sum to 1"),
        ("train=0.5", "sum to 1"),
        ("train=0.999,test=0.0001", "sum to 1"),
        ("tr ain=1", "letters"),
        ("train-set=1", "letters"),
        ("train/x=1", "letters"),
        ("träin=1", "letters"),
        ("=1", "NAME=FRACTION"),
        ("train", "NAME=FRACTION"),
        ("train:1", "NAME=FRACTION"),
        ("a=0.5,a=0.5", "twice"),
        ("a=abc,b=1", "not a number"),
        ("a=,b=1", "not a number"),
        ("a=0.5x,b=0.5", "not a number"),
        ("a=0,b=1", "(0, 1]"),
        ("a=-0.5,b=1.5", "(0, 1]"),
        ("a=1.5,b=-0.5", "(0, 1]"),
        ("a=nan,b=1", "(0, 1]"),
        ("a=inf", "(0, 1]"),
        ("", "no splits"),
        (" , ,", "no splits"),
    ],
)
def test_parse_splits_rejects(text, message):
    with pytest.raises(ValueError) as info:
        parse_splits(text)
    assert message in str(info.value)


# -- assign_split ----------------------------------------------------------------------------------


def test_assign_split_is_deterministic():
    files = paths(2000)
    first = [assign_split(p, 7, THREE) for p in files]
    assert first == [assign_split(p, 7, THREE) for p in files]
    assert set(first) == {"train", "validation", "test"}


def test_assign_split_is_stable_across_processes():
    # Not Python's per-process salted hash(): another interpreter with another hash seed agrees.
    files = paths(300)
    code = (
        "import json, sys; from img2tfrecord.conversion.seeded_hashes import assign_split, shuffle_key;"
        "files, splits = json.load(sys.stdin);"
        "splits = tuple(tuple(s) for s in splits);"
        "print(json.dumps([[assign_split(p, 7, splits), shuffle_key(p, 7)] for p in files]))"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=SRC)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps([files, THREE]),
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    other = [tuple(x) for x in json.loads(proc.stdout)]
    assert other == [(assign_split(p, 7, THREE), shuffle_key(p, 7)) for p in files]


def test_assign_split_depends_on_seed():
    files = paths(2000)
    a = [assign_split(p, 1, THREE) for p in files]
    b = [assign_split(p, 2, THREE) for p in files]
    changed = sum(x != y for x, y in zip(a, b))
    # Independent draws with 0.8/0.1/0.1 differ with probability 1 - 0.66 = 0.34.
    assert 0.25 * len(files) < changed < 0.45 * len(files)


@pytest.mark.parametrize(
    "splits",
    [THREE, (("train", 0.5), ("test", 0.5)), (("a", 0.7), ("b", 0.2), ("c", 0.05), ("d", 0.05))],
)
def test_assign_split_respects_fractions(splits):
    files = paths(10_000)
    counts = collections.Counter(assign_split(p, 42, splits) for p in files)
    assert set(counts) == {name for name, _ in splits}
    for name, fraction in splits:
        assert abs(counts[name] / len(files) - fraction) < 0.02, (name, counts)


def test_assign_split_single_split_takes_everything():
    assert {assign_split(p, 3, (("all", 1.0),)) for p in paths(500)} == {"all"}
    assert DEFAULT_SPLIT == "train"


def test_split_of_a_file_does_not_change_when_files_are_added():
    old = paths(1000, prefix="old")
    before = {p: assign_split(p, 9, THREE) for p in old}
    grown = old + paths(5000, prefix="new")
    after = {p: assign_split(p, 9, THREE) for p in sorted(grown, reverse=True)}
    assert {p: after[p] for p in old} == before


def test_assign_split_depends_on_the_whole_path():
    # Same file name in different classes must be drawn independently.
    names = [f"img_{i:04d}.jpg" for i in range(2000)]
    a = [assign_split(f"cat/{n}", 0, (("x", 0.5), ("y", 0.5))) for n in names]
    b = [assign_split(f"dog/{n}", 0, (("x", 0.5), ("y", 0.5))) for n in names]
    assert 0.4 * len(names) < sum(x != y for x, y in zip(a, b)) < 0.6 * len(names)


# -- shuffle_key -----------------------------------------------------------------------------------


def test_shuffle_key_is_deterministic_and_seeded():
    files = paths(2000)
    keys = [shuffle_key(p, 5) for p in files]
    assert keys == [shuffle_key(p, 5) for p in files]
    assert all(isinstance(k, int) and 0 <= k < 2**64 for k in keys)
    assert len(set(keys)) == len(keys)
    other = [shuffle_key(p, 6) for p in files]
    assert sum(a != b for a, b in zip(keys, other)) == len(files)
    # A different seed gives a different order, not just different numbers.
    order5 = sorted(files, key=lambda p: shuffle_key(p, 5))
    order6 = sorted(files, key=lambda p: shuffle_key(p, 6))
    assert order5 != order6


def test_shuffle_key_mixes_the_input_order():
    files = paths(1000)  # listed class by class
    ordered = sorted(files, key=lambda p: shuffle_key(p, 0))
    assert ordered != files and ordered != sorted(files)
    # Keys spread over the whole 64-bit range (a bucket is key % n, so low bits must be uniform too).
    keys = [shuffle_key(p, 0) for p in files]
    assert min(keys) < 2**64 // 10 and max(keys) > 9 * 2**64 // 10
    assert abs(sum(k % 2 for k in keys) - 500) < 80


def test_shuffle_key_is_independent_of_the_split_draw():
    files = paths(4000)
    splits = (("a", 0.5), ("b", 0.5))
    low_half = [p for p in files if shuffle_key(p, 1) < 2**63]
    share_a = sum(assign_split(p, 1, splits) == "a" for p in low_half) / len(low_half)
    assert 0.45 < share_a < 0.55


# -- split folders ---------------------------------------------------------------------------------


def test_split_folders():
    assert split_of_folder("train") == "train"
    assert split_of_folder("val") == "validation"
    assert split_of_folder("validation") == "validation"
    assert split_of_folder("test") == "test"
    assert split_of_folder("Train") is None
    assert split_of_folder("cats") is None
    assert is_split_layout(["train", "val", "test"])
    assert is_split_layout(["train"])
    assert not is_split_layout(["train", "cats"])
    assert not is_split_layout([])


def test_val_in_splits_means_validation_as_in_split_folders_and_manifests():
    from img2tfrecord.sources.manifests import canonical_split

    assert parse_splits("train=0.8,val=0.2") == (("train", 0.8), ("validation", 0.2))
    assert parse_splits("val=0.1,test=0.1,train=0.8") == (("validation", 0.1), ("test", 0.1), ("train", 0.8))
    # One rule: the name a split folder or a manifest's split column gives for the same word.
    for name in ("train", "val", "validation", "test", "holdout"):
        (split, _), *_ = parse_splits(f"{name}=1")
        assert split == (split_of_folder(name) or name) == canonical_split(name)
    for text, spelled in (("val=0.5,validation=0.5", "'val' and 'validation'"), ("validation=0.5,val=0.5", "")):
        with pytest.raises(ValueError) as info:
            parse_splits(text)
        assert "split 'validation' is given twice" in str(info.value) and spelled in str(info.value)
