"""Record kinds: ``--format raw`` pixels and ``--sequence`` SequenceExamples, written and read back with ``load``."""

from __future__ import annotations

import io
import os

import images as I
import numpy as np
import pytest
from conftest import convert
from helpers.datasets import FRAME_STEP, clip_dataset, frame, write_tar, write_tree
from helpers.outputs import convert_in_process, error_rows
from PIL import Image

from img2tfrecord.conversion.converter import natural_key
from img2tfrecord.images.options import ImageOptions
from img2tfrecord.readers import records as rec
from img2tfrecord.schemas import example_proto, output_files
from img2tfrecord.schemas import features as keys
from img2tfrecord.verification.output_checks import verify

tf = pytest.importorskip("tensorflow")
import img2tfrecord  # noqa: E402  (after the TensorFlow check)


def raw_dataset():
    files = {}
    for i in range(4):
        files[f"a/rgb_{i}.png"] = I.png(5 + i, 3 + 2 * i)
        files[f"b/gray_{i}.png"] = I.png(4 + 2 * i, 6, mode="L")
        files[f"b/photo_{i}.jpg"] = I.jpeg(9, 7 + i)
    return files


def pixels(data: bytes, mode: str) -> np.ndarray:
    img = Image.open(io.BytesIO(data))
    img.load()
    return np.asarray(img.convert(mode))


@pytest.mark.parametrize("channels", [3, 1])
def test_raw_pixels_round_trip_through_load(tmp_path, channels):
    files = raw_dataset()
    root = str(tmp_path / "in")
    write_tree(root, files)
    out = tmp_path / "out"
    doc = convert_in_process(root, out, image=ImageOptions(format="raw", channels=channels))
    assert doc.image_format == "raw"
    ds = img2tfrecord.load(str(out), batch_size=None, shuffle=False, as_dict=True)
    seen = set()
    for item in ds:
        rel = item[keys.FILENAME].numpy().decode()
        assert item[keys.IMAGE_FORMAT].numpy() == b"raw"
        expected = pixels(files[rel], "RGB" if channels == 3 else "L").reshape(
            int(item[keys.IMAGE_HEIGHT]), int(item[keys.IMAGE_WIDTH]), channels
        )
        got = np.round(item[keys.DECODED_IMAGE].numpy() * 255).astype(np.uint8)
        np.testing.assert_array_equal(got, expected)
        assert len(item[keys.IMAGE_ENCODED].numpy()) == expected.size
        seen.add(rel)
    assert seen == set(files)
    assert verify(str(out)).ok


def test_raw_resized_batches(tmp_path):
    root = str(tmp_path / "in")
    write_tree(root, raw_dataset())
    out = str(tmp_path / "out")
    proc = convert(root, out, "--format", "raw", "--image-size", "6x4", "--no-analyze")
    assert proc.returncode == 0, proc.stderr[-3000:]
    images, labels = next(iter(img2tfrecord.load(out, batch_size=5)))
    assert tuple(images.shape) == (5, 4, 6, 3) and images.dtype == tf.float32
    assert labels.shape == (5,)


# -- sequences -----------------------------------------------------------------------------------


def read_sequences(output):
    """clip name -> (label, class, [frame bytes]) read without TensorFlow."""
    doc = rec.read_manifest(str(output))
    clips = {}
    for info in doc.splits.values():
        for shard in info.shards:
            for _, _, data in rec.iter_records(os.path.join(output, shard.file), doc.compression.value):
                seq = example_proto.SequenceExample.FromString(data)
                ctx = seq.context.feature
                name = ctx[keys.CLIP_NAME].bytes_list.value[0].decode()
                frames = [f.bytes_list.value[0] for f in seq.feature_lists.feature_list[keys.IMAGE_ENCODED].feature]
                assert ctx[keys.CLIP_NUM_FRAMES].int64_list.value[0] == len(frames)
                clips[name] = (
                    ctx[keys.CLASS_LABEL].int64_list.value[0],
                    ctx[keys.CLASS_TEXT].bytes_list.value[0].decode(),
                    frames,
                )
    return doc, clips


@pytest.fixture(scope="module")
def clips_converted(tmp_path_factory):
    base = tmp_path_factory.mktemp("clips")
    files, lengths = clip_dataset()
    root = str(base / "clips")
    write_tree(root, files)
    write_tree(
        root,
        {
            "walk/clip_bad/frame_1.png": frame(1, 9),
            "walk/clip_bad/frame_2.png": b"not an image",
            "walk/loose.png": frame(1, 9),  # a frame outside any clip folder
            "run/.DS_Store": b"junk",
        },
    )
    out = base / "out"
    doc = convert_in_process(root, out, sequence=True, splits=(("train", 0.5), ("test", 0.5)), seed=3)
    return files, lengths, root, out, doc


def test_sequence_records_hold_every_frame_in_natural_order(clips_converted):
    files, lengths, _, out, doc = clips_converted
    assert doc.record_type.value == output_files.SEQUENCE_RECORD_TYPE and doc.is_sequence
    assert doc.spec[keys.IMAGE_ENCODED]["kind"] == keys.FIXED_LEN_SEQUENCE
    assert doc.spec[keys.CLIP_NAME]["kind"] == keys.FIXED_LEN
    _, clips = read_sequences(out)
    assert {name: len(c[2]) for name, c in clips.items()} == lengths
    for name, (label, text, frames) in clips.items():
        assert text == name.split("/")[0] and label == doc.labels.index(text)
        # --format keep: each step holds the frame file's bytes, frame_1, frame_2, ..., frame_10, ...
        assert frames == [files[f"{name}/frame_{i}.png"] for i in range(1, len(frames) + 1)]


def test_a_bad_frame_rejects_its_clip_and_clips_are_the_inputs(clips_converted):
    _, lengths, _, out, doc = clips_converted
    rows = {e["relpath"]: e for e in error_rows(out)}
    assert set(rows) == {"walk/clip_bad", "walk/loose.png"}
    assert rows["walk/clip_bad"]["reason"] == "not_an_image"
    assert "frame_2.png" in rows["walk/clip_bad"]["error"] and rows["walk/clip_bad"]["path"].endswith("frame_2.png")
    assert rows["walk/loose.png"]["reason"] == "no_clip_folder"
    acc = doc.accounting
    assert acc is not None
    assert (acc.inputs, acc.written, acc.rejected, acc.skipped) == (len(lengths) + 2, len(lengths), 2, 1)
    assert doc.num_examples == len(lengths)
    assert verify(str(out)).ok


def test_load_sequences_ragged_and_padded(clips_converted):
    _, lengths, _, out, doc = clips_converted
    split = max(doc.splits, key=lambda s: doc.splits[s].num_examples)
    count = doc.splits[split].num_examples
    by_length = {}
    for (frames, length), label in img2tfrecord.load(str(out), split=split, batch_size=None, sequence=True):
        assert tuple(frames.shape) == (int(length), 10, 12, 3)
        red = np.round(frames.numpy()[:, 0, 0, 0] * 255)
        np.testing.assert_array_equal(red, FRAME_STEP * np.arange(1, int(length) + 1))
        by_length[int(length)] = int(label)
    assert len(by_length) == count
    # Batches need one frame size (as images do): converted with --image-size, or image_size= here.
    (frames, length), labels = next(
        iter(img2tfrecord.load(str(out), split=split, batch_size=8, sequence=True, image_size=(10, 12)))
    )
    assert isinstance(frames, tf.RaggedTensor) and frames.shape[0] == count
    assert tuple(frames.shape[2:]) == (10, 12, 3)
    assert list(frames.row_lengths().numpy()) == list(length.numpy())
    (frames, length), labels = next(
        iter(img2tfrecord.load(str(out), split=split, batch_size=8, sequence=True, pad_frames=True, image_size=4))
    )
    assert tuple(frames.shape) == (count, max(length.numpy()), 4, 4, 3)
    with pytest.raises(ValueError, match="sequence=True"):
        img2tfrecord.load(str(out), split=split)


def test_sequences_from_a_tar_gz_as_the_folder(clips_converted, tmp_path):
    files, lengths, root, out, _ = clips_converted
    archive = tmp_path / "clips.tar.gz"
    write_tar(str(archive), files, top="clips", mode="w:gz")
    out_tgz = tmp_path / "out"
    doc = convert_in_process(str(archive), out_tgz, sequence=True, splits=(("train", 0.5), ("test", 0.5)), seed=3)
    _, from_folder = read_sequences(out)
    _, from_archive = read_sequences(out_tgz)
    assert from_archive == from_folder
    membership = lambda d: {s: info.num_examples for s, info in d.splits.items()}  # noqa: E731
    assert membership(doc) == membership(rec.read_manifest(str(out)))


def test_sequence_cli_raw_resized(tmp_path):
    files, lengths = clip_dataset()
    root = str(tmp_path / "in")
    write_tree(root, files)
    out = str(tmp_path / "out")
    proc = convert(root, out, "--sequence", "--format", "raw", "--image-size", "6x5", "--no-analyze")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc, clips = read_sequences(out)
    assert all(len(f) == 6 * 5 * 3 for _, _, frames in clips.values() for f in frames)
    (frames, length), labels = next(iter(img2tfrecord.load(out, batch_size=8, sequence=True, pad_frames=True)))
    assert tuple(frames.shape) == (len(lengths), max(lengths.values()), 5, 6, 3)
    assert sorted(length.numpy()) == sorted(lengths.values())
    assert verify(out).ok


def test_natural_frame_order():
    names = ["frame_10.png", "frame_2.png", "frame_1.png", "Frame_3.png", "frame_1b.png"]
    assert sorted(names, key=natural_key) == [
        "frame_1.png",
        "frame_1b.png",
        "frame_2.png",
        "Frame_3.png",
        "frame_10.png",
    ]
