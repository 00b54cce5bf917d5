"""``convert --append`` with the tf.Transform analysis: statistics and the exported transform cover every generation.

Each append adds its train records' exact totals to those ``dataset.json`` keeps, less the records it
withdraws, without reading earlier shards; the result equals the analysis of a full run over the final
input. Real conversions in this process, read back through the exported transform.
"""

from __future__ import annotations

import json
import os
import shutil

import images as I
import pytest
from helpers.datasets import make_images

from img2tfrecord import api
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import output_files
from img2tfrecord.verification.output_checks import verify

pytestmark = pytest.mark.e2e

# PNG records: their statistics are exact, so the totals of an append history equal a rebuild's.
OPTIONS = dict(splits={"train": 0.7, "validation": 0.3}, seed=5, image_size=32, format="png", processes=1, num_shards=2)
BEAM = ["--runner=FnApiRunner", "--direct_running_mode=in_memory"]


def _convert(src: str, out: str, **extra):
    return api.convert(src, out, pipeline_options=BEAM, **{**OPTIONS, **extra})


def _transformed(out: str) -> dict:
    """relpath -> (label, transformed image as nested lists) of every train record, through transform_fn/."""
    import img2tfrecord

    found = {}
    ds = img2tfrecord.load(out, "train", batch_size=None, shuffle=False, as_dict=True, deterministic=True)
    raw = img2tfrecord.load(
        out, "train", batch_size=None, shuffle=False, as_dict=True, deterministic=True, transform=True
    )
    for plain, example in zip(ds, raw):
        found[plain[keys.FILENAME].numpy().decode()] = (
            int(example["label"]),
            example["image"].numpy().round(6).tolist(),
        )
    return found


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """An analysed output grown by two appends (the second withdrawing a changed and a removed input),
    and a full analysed run over the final input."""
    root = tmp_path_factory.mktemp("append-statistics")
    pool, src, out, full = (str(root / name) for name in ("pool", "in", "out", "full"))
    relpaths = sorted(make_images(pool, classes=3, per_class=8, size=(40, 36)))
    later = set(relpaths[::3])
    shutil.copytree(pool, src, ignore=lambda folder, names: [n for n in names if _rel(pool, folder, n) in later])
    docs = [_convert(src, out)]
    shutil.copytree(pool, src, dirs_exist_ok=True)
    docs.append(_convert(src, out, append=True))
    with open(os.path.join(src, relpaths[1]), "wb") as f:
        f.write(I.jpeg(40, 36))
    os.remove(os.path.join(src, relpaths[2]))
    with open(os.path.join(src, "class1", "extra.png"), "wb") as f:
        f.write(I.png(30, 44))
    docs.append(_convert(src, out, append=True, accept_changes=True))
    reference = _convert(src, full)
    return out, full, docs, reference


def _rel(root: str, folder: str, name: str) -> str:
    return os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")


def test_the_statistics_of_an_append_history_are_those_of_a_full_run(history):
    out, full, docs, reference = history
    assert [g.analyzed for g in docs[-1].generations] == [True, True, True]
    assert docs[-1].generations[-1].withdrawn, "the last append withdrew records"
    assert docs[-1].statistics == reference.statistics
    assert docs[1].statistics != docs[0].statistics  # each append's analysis covers its records too
    report = verify(out)
    assert report.ok, report.text()


def test_the_exported_transform_of_an_append_history_is_that_of_a_full_run(history):
    pytest.importorskip("tensorflow_transform")
    out, full, _, _ = history
    assert _transformed(out) == _transformed(full)


def test_statistics_an_append_cannot_add_to_are_kept_and_say_which_generations_they_cover(history, tmp_path):
    _, _, docs, _ = history
    copy_src, copy_out = str(tmp_path / "in"), str(tmp_path / "out")
    shutil.copytree(docs[-1].input, copy_src)
    _convert(copy_src, copy_out)
    path = os.path.join(copy_out, output_files.MANIFEST_FILE)
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    del doc["statistics"]["pixel_totals"]  # as an output written before the totals were recorded
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
    with open(os.path.join(copy_src, "class0", "new.png"), "wb") as f:
        f.write(I.png(36, 36))
    appended = _convert(copy_src, copy_out, append=True)
    assert [g.analyzed for g in appended.generations] == [True, False]
    assert appended.statistics == doc["statistics"]
    assert verify(copy_out).ok  # the statistics describe the analysed generations only
    # Generation 1 was not analysed: later appends cannot cover it without reading its shards.
    with open(os.path.join(copy_src, "class2", "later.png"), "wb") as f:
        f.write(I.png(35, 31))
    again = _convert(copy_src, copy_out, append=True)
    assert [g.analyzed for g in again.generations] == [True, False, False]
    assert again.statistics == doc["statistics"]
    assert verify(copy_out).ok


def test_an_append_with_no_analyze_adds_nothing_to_the_statistics(history):
    from img2tfrecord.conversion.run_totals import totals_of
    from img2tfrecord.pipeline.append import analysis_base
    from img2tfrecord.pipeline.config import ConvertConfig

    out, _, docs, _ = history
    config = ConvertConfig(input=docs[-1].input, output=out)
    assert analysis_base(config, docs[-1]) == totals_of(docs[-1].statistics, 3)
    assert analysis_base(ConvertConfig(input=docs[-1].input, output=out, analyze=False), docs[-1]) is None
