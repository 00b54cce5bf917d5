"""benchmarks/corpus.py's ImageNet-shaped corpus: deterministic, uneven classes, planted copies and variants."""

from __future__ import annotations

import hashlib
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import corpus  # noqa: E402


def _files(root: str):
    return {
        os.path.relpath(os.path.join(folder, name), root): hashlib.sha256(
            open(os.path.join(folder, name), "rb").read()
        ).hexdigest()
        for folder, _, names in os.walk(root)
        for name in names
    }


def test_imagenet_shaped_is_deterministic_whatever_the_processes(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "_CHUNK", 100)  # several tasks for the two processes
    made = corpus.imagenet_shaped(str(tmp_path / "a"), 500, num_classes=7, seed=1, processes=2)
    again = corpus.imagenet_shaped(str(tmp_path / "b"), 500, num_classes=7, seed=1, processes=1)
    files = _files(made.root)
    assert files == _files(again.root) and len(files) == made.images == 500
    sizes = corpus.class_sizes(500, 7, 1)
    assert sorted(os.listdir(made.root)) == [corpus.wnid(c) for c in range(7)]
    assert [len(os.listdir(os.path.join(made.root, corpus.wnid(c)))) for c in range(7)] == sizes
    assert min(sizes) < max(sizes), "uneven classes"
    assert made.copies > 0 and made.near > 0 and made.copies + made.near == len(made.planted)
    for planted in made.planted:
        same = files[planted.relpath] == files[planted.source]
        assert same == (planted.kind == "copy"), planted
    assert corpus.imagenet_shaped(made.root, 500, 7, 1).planted == made.planted, "a finished corpus is not rewritten"
