"""``convert --sequence --append``: new clip folders become a generation; a clip that gained, lost or
changed a frame is refused (its record cannot be withdrawn)."""

from __future__ import annotations

import json
import os

import pytest
from helpers.datasets import clip_dataset, frame, write_tree

from img2tfrecord import api
from img2tfrecord.errors import UsageError
from img2tfrecord.readers import records
from img2tfrecord.schemas import example_proto, manifest
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas.ledger import parse_ledger
from img2tfrecord.verification import verify

OPTIONS = dict(splits={"train": 0.5, "test": 0.5}, seed=3, analyze=False, processes=1, sequence=True)
BEAM = ["--runner=FnApiRunner", "--direct_running_mode=in_memory"]


def _convert(src: str, out: str, **extra):
    return api.convert(src, out, pipeline_options=BEAM, **{**OPTIONS, **extra})


def _clips(output: str) -> dict:
    """clip -> (split, class, frame bytes) of every live record, read without TensorFlow."""
    doc = json.load(open(os.path.join(output, manifest.MANIFEST_FILE)))
    found = {}
    for split, info in doc["splits"].items():
        for shard in info["shards"]:
            for _, _, data in records.iter_records(os.path.join(output, shard["file"]), doc["compression"]):
                context = example_proto.SequenceExample.FromString(data)
                name = context.context.feature[keys.CLIP_NAME].bytes_list.value[0].decode()
                frames = context.feature_lists.feature_list[keys.IMAGE_ENCODED].feature
                label = context.context.feature[keys.CLASS_TEXT].bytes_list.value[0].decode()
                assert name not in found
                found[name] = (split, label, [f.bytes_list.value[0] for f in frames])
    return found


@pytest.mark.e2e
def test_new_clip_folders_give_the_records_of_one_run_over_all_of_them(tmp_path):
    files, _ = clip_dataset()
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    write_tree(src, {**files, "walk/loose.png": frame(1, 9)})  # a frame outside any clip: rejected
    first = _convert(src, out, append=True)
    assert first.accounting.inputs == 5 and first.accounting.rejected == 1
    with open(os.path.join(out, manifest.ledger_file(0)), "rb") as f:
        keys_0 = [e.relpath for e in parse_ledger(f.read(), "ledger")]
    assert keys_0 == ["run/clip_a", "run/clip_b", "walk/clip_c", "walk/clip_d", "walk/loose.png"]
    write_tree(src, {f"run/clip_new{c}/frame_{i}.png": frame(i, 5 + c) for c in range(3) for i in range(1, 4)})
    plan = api.plan(src, out, append=True, pipeline_options=BEAM, **OPTIONS)
    assert plan.append is not None and (plan.append.new, plan.append.unchanged, plan.inputs) == (3, 5, 3)
    second = _convert(src, out, append=True)
    assert (second.generations[-1].inputs, second.generations[-1].written) == (3, 3)
    assert _convert(src, out, append=True).generations == second.generations  # nothing new
    full = str(tmp_path / "full")
    _convert(src, full)
    assert _clips(out) == _clips(full) and len(_clips(out)) == 7
    report = verify(out)
    assert report.ok, report.text()


@pytest.mark.e2e
def test_a_clip_that_gained_or_lost_a_frame_is_refused_even_when_changes_are_accepted(tmp_path):
    files, _ = clip_dataset()
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    write_tree(src, files)
    _convert(src, out)
    write_tree(src, {"run/clip_a/frame_4.png": frame(4, 0)})
    os.remove(os.path.join(src, "walk", "clip_d", "frame_1.png"))
    for accept in (False, True):
        with pytest.raises(UsageError) as refused:
            _convert(src, out, append=True, accept_changes=accept)
        line = str(refused.value)
        assert "1 clip(s) changed since they were converted (e.g. run/clip_a)" in line
        assert "1 converted clip(s) removed (e.g. walk/clip_d)" in line
        assert "withdrawing a clip's record is not supported: rebuild with --overwrite" in line
        os.remove(line.rsplit("the list is in ", 1)[1].rstrip(")"))
