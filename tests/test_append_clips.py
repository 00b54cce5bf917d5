"""``convert --sequence --append``: new clip folders become a generation; a clip that gained, lost or
changed a frame is refused, or withdrawn and converted again with ``--accept-changes``."""

from __future__ import annotations

import os
import shutil
import zipfile

import pytest
from helpers.datasets import clip_dataset, frame, write_tree
from helpers.outputs import append_refusal

from img2tfrecord import api
from img2tfrecord.readers import records
from img2tfrecord.schemas import example_proto, output_files
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas.ledger import parse_ledger
from img2tfrecord.verification.output_checks import verify

OPTIONS = dict(splits={"train": 0.5, "test": 0.5}, seed=3, analyze=False, processes=1, sequence=True)
BEAM = ["--runner=FnApiRunner", "--direct_running_mode=in_memory"]


def _convert(src: str, out: str, **extra):
    return api.convert(src, out, pipeline_options=BEAM, **{**OPTIONS, **extra})


def _clips(output: str) -> dict:
    """clip -> (split, class, frame bytes) of every live record, read without TensorFlow."""
    doc = records.read_manifest(output)
    withdrawn = {(w.file, w.index) for g in doc.generations for w in g.withdrawn}
    found = {}
    for split, info in doc.splits.items():
        for shard in info.shards:
            for index, _, data in records.iter_records(os.path.join(output, shard.file), doc.compression.value):
                if (shard.file, index) in withdrawn:
                    continue
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
    with open(os.path.join(out, output_files.ledger_file(0)), "rb") as f:
        keys_0 = [e.relpath for e in parse_ledger(f.read(), "ledger")]
    assert keys_0 == ["run/clip_a", "run/clip_b", "walk/clip_c", "walk/clip_d", "walk/loose.png"]
    write_tree(src, {f"run/clip_new{c}/frame_{i}.png": frame(i, 5 + c) for c in range(3) for i in range(1, 4)})
    plan = api.plan(src, out, append=True, pipeline_options=BEAM, **OPTIONS)
    assert plan.append is not None and (plan.append.new, plan.append.unchanged, plan.inputs) == (3, 5, 3)
    assert plan.append.counted == "clip(s)"
    second = _convert(src, out, append=True)
    assert (second.generations[-1].inputs, second.generations[-1].written) == (3, 3)
    assert _convert(src, out, append=True).generations == second.generations  # nothing new
    full = str(tmp_path / "full")
    _convert(src, full)
    assert _clips(out) == _clips(full) and len(_clips(out)) == 7
    report = verify(out)
    assert report.ok, report.text()


@pytest.mark.e2e
@pytest.mark.parametrize("listed", ["folder", "manifest"])
def test_a_clip_that_gained_or_lost_a_frame_is_refused_then_withdrawn_with_accept_changes(tmp_path, listed):
    files, _ = clip_dataset()
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    write_tree(src, files)
    given = src
    if listed == "manifest":  # a manifest of frames: a clip is the folder of its rows' paths
        given = os.path.join(src, "frames.csv")

        def write_manifest():
            names = sorted(
                os.path.relpath(os.path.join(d, n), src) for d, _, ns in os.walk(src) for n in ns if n.endswith(".png")
            )
            with open(given, "w") as f:
                f.write("path,label\n" + "".join(f"{n},{n.split('/')[0]}\n" for n in names))

        write_manifest()
    _convert(given, out)
    write_tree(src, {"run/clip_a/frame_4.png": frame(4, 0)})
    os.remove(os.path.join(src, "walk", "clip_d", "frame_1.png"))
    if listed == "manifest":
        write_manifest()
    line = append_refusal(lambda: _convert(given, out, append=True))
    assert "1 clip(s) changed since they were converted (e.g. run/clip_a)" in line
    assert "1 converted clip(s) removed (e.g. walk/clip_d)" in line and "--accept-changes" in line
    doc = _convert(given, out, append=True, accept_changes=True)
    assert sorted(w.relpath for w in doc.generations[-1].withdrawn) == ["run/clip_a", "walk/clip_d"]
    full = str(tmp_path / "full")
    _convert(given, full)
    assert _clips(out) == _clips(full) and len(_clips(out)["run/clip_a"][2]) == 4
    report = verify(out)
    assert report.ok, report.text()


@pytest.mark.e2e
def test_clips_in_new_archives_give_the_records_of_one_run_over_all_of_them(tmp_path):
    files, _ = clip_dataset()
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    os.makedirs(src)

    def pack(name, members):
        with zipfile.ZipFile(os.path.join(src, name), "w") as z:
            for relpath, data in members.items():
                z.writestr(relpath, data)

    pack("day1.zip", files)
    given = os.path.join(src, "*.zip")
    _convert(given, out)
    pack("day2.zip", {f"walk/clip_new{c}/frame_{i}.png": frame(i, 5 + c) for c in range(2) for i in range(1, 4)})
    doc = _convert(given, out, append=True)
    assert (doc.generations[-1].inputs, doc.generations[-1].written) == (2, 2)
    full = str(tmp_path / "full")
    _convert(given, full)
    assert _clips(out) == _clips(full) and len(_clips(out)) == 6
    assert verify(out).ok
    # day1.zip exported again with a frame more in one clip: that archive's clips are withdrawn and converted again.
    pack("day1.zip", {**files, "run/clip_a/frame_9.png": frame(9, 0)})
    line = append_refusal(lambda: _convert(given, out, append=True))
    assert "1 archive(s) changed since they were converted (e.g. day1.zip)" in line
    doc = _convert(given, out, append=True, accept_changes=True)
    assert {w.archive for w in doc.generations[-1].withdrawn} == {"day1.zip"} and len(
        doc.generations[-1].withdrawn
    ) == 4
    shutil.rmtree(full)
    _convert(given, full)
    assert _clips(out) == _clips(full) and len(_clips(out)["run/clip_a"][2]) == 4
    report = verify(out)
    assert report.ok, report.text()
