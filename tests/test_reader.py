"""img2tfrecord.load: real converted outputs read back as tf.data pipelines."""

from __future__ import annotations

import collections
import gzip
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from conftest import ROOT, SRC, manifest_to_edit, write_manifest_doc  # noqa: E402
from helpers.processes import BLOCK_TENSORFLOW  # noqa: E402

import img2tfrecord  # noqa: E402
from img2tfrecord.schemas import features as keys  # noqa: E402
from img2tfrecord.schemas import output_files  # noqa: E402
from img2tfrecord.schemas.dataset_json import (  # noqa: E402
    Accounting,
    Compression,
    DatasetManifest,
    ShardInfo,
    SplitInfo,
)


def _plain_read(path, split):
    """(sha256, label, class text) of every record, read without img2tfrecord.load."""
    doc = img2tfrecord.read_manifest(path)
    files = [os.path.join(path, s.file) for s in doc.splits[split].shards]
    spec = keys.feature_spec()
    out = []
    for record in tf.data.TFRecordDataset(files):
        ex = tf.io.parse_single_example(record, spec)
        out.append((ex[keys.KEY_SHA256].numpy(), int(ex[keys.CLASS_LABEL]), ex[keys.CLASS_TEXT].numpy().decode()))
    return out


def _load_all(path, split, **kwargs):
    rows = []
    for batch in img2tfrecord.load(path, split=split, as_dict=True, **kwargs):
        for sha, label, text in zip(
            batch[keys.KEY_SHA256].numpy(), batch[keys.CLASS_LABEL].numpy(), batch[keys.CLASS_TEXT].numpy()
        ):
            rows.append((sha, int(label), text.decode()))
    return rows


def test_import_is_light_and_load_is_exported():
    # A fresh process where TensorFlow cannot be imported (its import would cost seconds): ``import img2tfrecord``
    # does not ask for it; ``img2tfrecord.load`` does.
    code = BLOCK_TENSORFLOW + (
        "import img2tfrecord\n"
        "assert not asked_for_tensorflow, f'import img2tfrecord imported {asked_for_tensorflow}'\n"
        "try:\n"
        "    img2tfrecord.load\n"
        "except ImportError:\n"
        "    pass\n"
        "assert asked_for_tensorflow, 'img2tfrecord.load did not import TensorFlow'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=SRC, TF_CPP_MIN_LOG_LEVEL="3"),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert callable(img2tfrecord.load)  # in this process, where TensorFlow imports


def test_shapes_dtypes_and_ranges(converted_sample):
    doc = img2tfrecord.read_manifest(converted_sample)
    ds = img2tfrecord.load(converted_sample, split="train", batch_size=8, seed=1)
    images_spec, labels_spec = ds.element_spec
    assert images_spec.shape.as_list() == [None, 64, 64, 3] and images_spec.dtype == tf.float32
    assert labels_spec.shape.as_list() == [None] and labels_spec.dtype == tf.int64
    seen = 0
    for images, labels in ds:
        x = images.numpy()
        assert x.dtype == np.float32 and x.shape[1:] == (64, 64, 3)
        assert x.min() >= 0.0 and x.max() <= 1.0
        assert labels.dtype == tf.int64
        assert set(labels.numpy().tolist()) <= set(range(doc.num_classes))
        seen += x.shape[0]
    assert seen == doc.splits["train"].num_examples


@pytest.mark.parametrize("split", ["train", "validation", "test"])
def test_exact_records_per_split(converted_sample, split):
    doc = img2tfrecord.read_manifest(converted_sample)
    plain = _plain_read(converted_sample, split)
    loaded = _load_all(converted_sample, split, batch_size=5, shuffle=False)
    shuffled = _load_all(converted_sample, split, batch_size=7, seed=3)
    assert len(loaded) == len(plain) == doc.splits[split].num_examples > 0
    assert sorted(loaded) == sorted(plain) == sorted(shuffled)
    assert collections.Counter(text for _, _, text in loaded) == collections.Counter(
        {k: v for k, v in doc.splits[split].examples_per_class.items() if v}
    )


def test_labels_match_class_text(converted_sample):
    labels = img2tfrecord.read_manifest(converted_sample).labels
    rows = _load_all(converted_sample, "train", batch_size=16)
    assert rows and all(labels[label] == text for _, label, text in rows)


def test_pixels_equal_a_plain_decode(converted_sample):
    """load() decodes JPEG with the accurate integer DCT: exactly Pillow's pixels (those --exact-statistics sums)."""
    import io

    from PIL import Image

    for batch in img2tfrecord.load(converted_sample, split="validation", batch_size=4, as_dict=True):
        images = batch[keys.DECODED_IMAGE].numpy()
        for encoded, image in zip(batch[keys.IMAGE_ENCODED].numpy(), images):
            accurate = tf.io.decode_jpeg(encoded, channels=3, dct_method="INTEGER_ACCURATE").numpy()
            np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(encoded)).convert("RGB")), accurate)
            np.testing.assert_allclose(image, accurate.astype(np.float32) / 255.0, atol=1e-6)
        assert set(batch) == set(keys.FEATURES) | {keys.DECODED_IMAGE}


def test_same_seed_same_order(converted_sample):
    a = _load_all(converted_sample, "train", batch_size=4, seed=11, deterministic=True)
    b = _load_all(converted_sample, "train", batch_size=4, seed=11, deterministic=True)
    assert a == b


def test_unbatched_and_repeat(converted_sample):
    n = img2tfrecord.read_manifest(converted_sample).splits["test"].num_examples
    ds = img2tfrecord.load(converted_sample, split="test", batch_size=None)
    assert ds.element_spec[0].shape.as_list() == [64, 64, 3]
    assert sum(1 for _ in ds) == n
    repeated = img2tfrecord.load(converted_sample, split="test", batch_size=None, repeat=True)
    assert sum(1 for _ in repeated.take(3 * n)) == 3 * n


def test_mixed_sizes_need_image_size(converted_keep):
    with pytest.raises(ValueError, match="image_size"):
        img2tfrecord.load(converted_keep)
    doc = img2tfrecord.read_manifest(converted_keep)
    total = 0
    for images, _labels in img2tfrecord.load(converted_keep, batch_size=16, image_size=(40, 56)):
        assert images.shape[1:] == (40, 56, 3) and images.dtype == tf.float32
        assert float(tf.reduce_min(images)) >= 0.0 and float(tf.reduce_max(images)) <= 1.0
        total += images.shape[0]
    assert total == doc.splits["train"].num_examples
    square = next(iter(img2tfrecord.load(converted_keep, batch_size=4, image_size=32)))[0]
    assert square.shape == (4, 32, 32, 3)


def test_mixed_sizes_unbatched_keep_their_size(converted_keep):
    ds = img2tfrecord.load(converted_keep, batch_size=None, as_dict=True, shuffle=False)
    formats = set()
    for ex in ds.take(40):
        h, w = int(ex[keys.IMAGE_HEIGHT]), int(ex[keys.IMAGE_WIDTH])
        assert ex[keys.DECODED_IMAGE].shape == (h, w, 3)
        formats.add(ex[keys.IMAGE_FORMAT].numpy().decode())
    assert formats == {"jpeg", "png"}


def test_bad_calls(converted_sample, tmp_path):
    missing = str(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="nowhere"):
        img2tfrecord.load(missing)
    with pytest.raises(FileNotFoundError, match="dataset.json"):
        img2tfrecord.load(str(tmp_path))
    with pytest.raises(ValueError, match=r"available splits: test, train, validation"):
        img2tfrecord.load(converted_sample, split="training")
    with pytest.raises(ValueError, match="image_size"):
        img2tfrecord.load(converted_sample, image_size=(0, 3))
    with pytest.raises(ValueError, match="batch_size"):
        img2tfrecord.load(converted_sample, batch_size=0)
    incomplete = tmp_path / "incomplete"
    shutil.copytree(converted_sample, incomplete)
    os.remove(incomplete / output_files.SUCCESS_FILE)
    with pytest.raises(ValueError, match=f"^{incomplete}: the conversion is incomplete, no _SUCCESS "):
        img2tfrecord.load(str(incomplete))


def test_load_of_an_output_interrupted_before_its_manifest(tmp_path):
    out = tmp_path / "out"
    (out / f"{output_files.RUN_FOLDER_PREFIX}0a1b2c").mkdir(parents=True)  # all a run leaves before dataset.json
    with pytest.raises(ValueError, match=f"^{out}: the conversion is incomplete, no dataset.json and no _SUCCESS "):
        img2tfrecord.load(str(out))


def test_empty_shards_are_skipped(converted_sample, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(converted_sample, out)
    doc = manifest_to_edit(out)
    empty = "train-00002-of-00003.tfrecord"
    open(out / empty, "wb").close()
    doc["splits"]["train"]["shards"].append({"file": empty, "num_records": 0, "num_bytes": 0})
    write_manifest_doc(out, doc)
    assert len(_load_all(str(out), "train", batch_size=8)) == doc["splits"]["train"]["num_examples"]


def _gzip_copy(src, dst):
    """A copy of an output directory with every shard gzip-compressed, as --compression gzip writes it."""
    shutil.copytree(src, dst)
    doc = manifest_to_edit(dst)
    for info in doc["splits"].values():
        for shard in info["shards"]:
            plain = os.path.join(dst, shard["file"])
            shard["file"] += ".gz"
            with open(plain, "rb") as f, gzip.open(os.path.join(dst, shard["file"]), "wb") as g:
                g.write(f.read())
            os.remove(plain)
            shard["num_bytes"] = os.path.getsize(os.path.join(dst, shard["file"]))
        info["num_bytes"] = sum(s["num_bytes"] for s in info["shards"])
    doc["compression"] = doc["options"]["compression"] = "gzip"
    write_manifest_doc(dst, doc)


def test_gzip_shards(converted_sample, tmp_path):
    out = tmp_path / "gz"
    _gzip_copy(converted_sample, out)
    assert sorted(_load_all(str(out), "train", batch_size=8)) == sorted(_plain_read(converted_sample, "train"))


# A dataset written directly with the schema keys: raw pixels, and raw mixed with PNG.


def _example(encoded: bytes, fmt: str, h: int, w: int, c: int, label: int, text: str, name: str) -> bytes:
    import hashlib

    def b(v):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))

    def i(v):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))

    feature = {
        keys.IMAGE_ENCODED: b(encoded),
        keys.IMAGE_FORMAT: b(fmt.encode()),
        keys.IMAGE_HEIGHT: i(h),
        keys.IMAGE_WIDTH: i(w),
        keys.IMAGE_CHANNELS: i(c),
        keys.CLASS_LABEL: i(label),
        keys.CLASS_TEXT: b(text.encode()),
        keys.FILENAME: b(name.encode()),
        keys.KEY_SHA256: b(hashlib.sha256(encoded).hexdigest().encode()),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _write_dataset(out, images, fmt_option, size):
    """Write ``images`` = [(pixels uint8 HxWx3, stored format)] as one train shard with a manifest."""
    os.makedirs(out)
    names = ["a", "b"]
    shard = output_files.shard_file_name("train", 0, 1)
    with tf.io.TFRecordWriter(os.path.join(out, shard)) as writer:
        for n, (pixels, fmt) in enumerate(images):
            encoded = pixels.tobytes() if fmt == keys.FORMAT_RAW else tf.io.encode_png(pixels).numpy()
            h, w, c = pixels.shape
            writer.write(_example(encoded, fmt, h, w, c, n % 2, names[n % 2], f"{names[n % 2]}/{n}.x"))
    counts = collections.Counter(names[n % 2] for n in range(len(images)))
    shard_bytes = os.path.getsize(os.path.join(out, shard))
    doc = DatasetManifest(
        tool_version="test",
        created="2026-01-01T00:00:00+00:00",
        input="memory",
        options={"image_size": size, "channels": 3, "format": fmt_option, "compression": "none"},
        compression=Compression.NONE,
        labels=tuple(names),
        splits={
            "train": SplitInfo(
                num_examples=len(images),
                num_bytes=shard_bytes,
                examples_per_class=dict(counts),
                shards=(ShardInfo(file=shard, num_records=len(images), num_bytes=shard_bytes),),
            )
        },
        accounting=Accounting(inputs=len(images), written=len(images), rejected=0),
    )
    write_manifest_doc(out, doc.to_json())
    open(os.path.join(out, output_files.SUCCESS_FILE), "wb").close()
    with open(os.path.join(out, output_files.LABELS_FILE), "w") as f:
        f.write("a\nb\n")
    open(os.path.join(out, output_files.ERRORS_FILE), "w").close()


def _pixels(n, h, w, seed=0):
    return [np.random.default_rng(seed + k).integers(0, 256, (h, w, 3), dtype=np.uint8) for k in range(n)]


def test_raw_format(tmp_path):
    pixels = _pixels(6, 5, 7)
    out = str(tmp_path / "raw")
    _write_dataset(out, [(p, keys.FORMAT_RAW) for p in pixels], keys.FORMAT_RAW, [7, 5])
    by_name = {}
    for batch in img2tfrecord.load(out, batch_size=4, as_dict=True):
        for name, image in zip(batch[keys.FILENAME].numpy(), batch[keys.DECODED_IMAGE].numpy()):
            by_name[int(name.decode().split("/")[1].split(".")[0])] = image
    assert sorted(by_name) == list(range(6))
    for n, p in enumerate(pixels):
        np.testing.assert_allclose(by_name[n], p.astype(np.float32) / 255.0, atol=1e-6)


def test_format_decided_per_record(tmp_path):
    pixels = _pixels(4, 6, 6, seed=10)
    out = str(tmp_path / "mixed")
    stored = [(p, keys.FORMAT_RAW if n % 2 else keys.FORMAT_PNG) for n, p in enumerate(pixels)]
    _write_dataset(out, stored, "mixed", [6, 6])
    batch = next(iter(img2tfrecord.load(out, batch_size=4, shuffle=False, as_dict=True, deterministic=True)))
    got = {
        int(n.decode().split("/")[1].split(".")[0]): im
        for n, im in zip(batch[keys.FILENAME].numpy(), batch[keys.DECODED_IMAGE].numpy())
    }
    for n, p in enumerate(pixels):
        np.testing.assert_allclose(got[n], p.astype(np.float32) / 255.0, atol=1e-6)


def test_keras_model_learns(converted_sample):
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(0)
    doc = img2tfrecord.read_manifest(converted_sample)
    model = keras.Sequential(
        [
            keras.Input((64, 64, 3)),
            keras.layers.Conv2D(16, 3, activation="relu"),
            keras.layers.MaxPooling2D(4),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(2),
            keras.layers.Flatten(),
            keras.layers.Dense(doc.num_classes),
        ]
    )
    model.compile(
        optimizer=keras.optimizers.Adam(0.003),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    evaluation = img2tfrecord.load(converted_sample, split="train", batch_size=32, shuffle=False)
    initial = model.evaluate(evaluation, verbose=0)
    train = img2tfrecord.load(converted_sample, split="train", batch_size=16, repeat=True, seed=0, deterministic=True)
    assert len(evaluation) == -(-doc.splits["train"].num_examples // 32)  # known cardinality
    model.fit(train, steps_per_epoch=40, epochs=1, verbose=0, shuffle=False)  # load() shuffles
    final = model.evaluate(evaluation, verbose=0)
    assert final < initial, (initial, final)


def test_manifest_count_is_enforced(converted_sample, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(converted_sample, out)
    doc = manifest_to_edit(out)
    doc["splits"]["test"]["shards"][0]["num_records"] += 1
    write_manifest_doc(out, doc)
    ds = img2tfrecord.load(str(out), split="test", batch_size=4)
    assert len(ds) == -(-(doc["splits"]["test"]["num_examples"] + 1) // 4)
    with pytest.raises(tf.errors.FailedPreconditionError, match="expected to contain"):
        for _ in ds:
            pass
