"""Detection outputs read back: ``load(task=...)``, the TF-free readers, ``verify`` and ``inspect --grid``."""

from __future__ import annotations

import json
import os
import shutil
from typing import Dict, List

import numpy as np
import pytest
from conftest import convert, manifest_to_edit, write_manifest_doc
from helpers.cli import run_in_process
from helpers.detection_inputs import picture, write_voc
from helpers.detection_outputs import values
from helpers.outputs import frame
from PIL import Image

from img2tfrecord import drawing, inspection
from img2tfrecord.readers import records as framing
from img2tfrecord.readers.datasource import SplitDataSource, iter_split
from img2tfrecord.schemas import example_proto, output_files
from img2tfrecord.schemas import features as keys

SIZE = "64"  # --image-size: the fit pads 160x120 sources to 64x64


@pytest.fixture(scope="module")
def detection_out(tmp_path_factory) -> str:
    """A VOC folder of 6 orientations and one image without boxes, converted at 64 (fit) PNG into 2 shards."""
    root = str(tmp_path_factory.mktemp("voc") / "voc")
    write_voc(root, {f"o{o}": o for o in range(1, 7)})
    with open(os.path.join(root, "JPEGImages", "empty.jpg"), "wb") as f:
        f.write(picture())
    with open(os.path.join(root, "Annotations", "empty.xml"), "w") as f:
        f.write("<annotation><filename>empty.jpg</filename></annotation>")
    out = str(tmp_path_factory.mktemp("det") / "out")
    proc = convert(root, out, "--image-size", SIZE, "--resize", "fit", "--format", "png", "--num-shards", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert framing.read_manifest(out).is_detection
    return out


def stored(out: str) -> Dict[str, example_proto.Example]:
    """The records of the train split, by image/filename."""
    doc = framing.read_manifest(out)
    found = {}
    for shard, _ in framing.shard_paths(out, doc, "train"):
        for _, _, raw in framing.iter_records(shard):
            example = example_proto.Example.FromString(raw)
            found[values(example, keys.FILENAME)[0].decode()] = example
    return found


def stored_boxes(example) -> np.ndarray:
    return np.array([values(example, k) for k in keys.BBOX_KEYS], np.float32).T.reshape(-1, 4)


# ---------------------------------------------------------------------------
# load


def test_load_detection_ragged_batches(detection_out):
    tf = pytest.importorskip("tensorflow")
    import img2tfrecord

    expected = stored(detection_out)
    ds = img2tfrecord.load(detection_out, split="train", batch_size=3, shuffle=False, as_dict=True)
    seen = 0
    for batch in ds:
        assert isinstance(batch[keys.DECODED_BOXES], tf.RaggedTensor)
        assert batch[keys.DECODED_IMAGE].dtype == tf.float32 and batch[keys.DECODED_IMAGE].shape[1:] == (64, 64, 3)
        for i, name in enumerate(batch[keys.FILENAME].numpy()):
            example = expected[name.decode()]
            np.testing.assert_array_equal(batch[keys.DECODED_BOXES][i].numpy().reshape(-1, 4), stored_boxes(example))
            assert batch[keys.OBJECT_CLASS_LABEL][i].numpy().tolist() == values(example, keys.OBJECT_CLASS_LABEL)
            assert int(batch[keys.DECODED_NUM_BOXES][i]) == len(values(example, keys.BBOX_XMIN))
            seen += 1
    assert seen == len(expected) == 7

    images, targets = next(iter(img2tfrecord.load(detection_out, batch_size=7, shuffle=False)))  # task "auto"
    assert images.shape == (7, 64, 64, 3) and float(tf.reduce_max(images)) <= 1.0
    assert isinstance(targets[keys.DECODED_BOXES], tf.RaggedTensor)
    assert targets[keys.DECODED_BOXES].shape.as_list() == [7, None, 4]
    lengths = targets[keys.DECODED_NUM_BOXES].numpy().tolist()
    assert targets[keys.DECODED_CLASSES].row_lengths().numpy().tolist() == lengths and 0 in lengths
    doc = framing.read_manifest(detection_out)
    ids = {name: i + 1 for i, name in enumerate(doc.labels)}
    texts = [t.decode() for t in targets[keys.DECODED_CLASS_TEXTS].flat_values.numpy()]
    assert targets[keys.DECODED_CLASSES].flat_values.numpy().tolist() == [ids[t] for t in texts]
    assert sum(lengths) == sum(doc.splits["train"].boxes_per_class.values())


def test_load_detection_padded_and_unbatched(detection_out):
    tf = pytest.importorskip("tensorflow")
    import img2tfrecord

    images, targets = next(iter(img2tfrecord.load(detection_out, batch_size=7, shuffle=False, pad_boxes=True)))
    boxes, classes, counts = (targets[k] for k in (keys.DECODED_BOXES, keys.DECODED_CLASSES, keys.DECODED_NUM_BOXES))
    assert isinstance(boxes, tf.Tensor) and boxes.shape == (7, int(tf.reduce_max(counts)), 4)
    assert tf.reduce_sum(tf.cast(classes != 0, tf.int64)).numpy() == tf.reduce_sum(counts).numpy()
    for row, n in zip(boxes.numpy(), counts.numpy()):
        assert not row[n:].any()  # padding is zero; a box of zeros never passes min < max

    expected = stored(detection_out)
    ds = img2tfrecord.load(detection_out, batch_size=None, shuffle=False, task="detection", as_dict=True)
    for example in ds:
        assert example[keys.DECODED_BOXES].shape[1:] == (4,)
        want = stored_boxes(expected[example[keys.FILENAME].numpy().decode()])
        np.testing.assert_array_equal(example[keys.DECODED_BOXES].numpy(), want)


def test_load_task_mismatches_are_value_errors(detection_out, converted_sample):
    pytest.importorskip("tensorflow")
    import img2tfrecord

    with pytest.raises(ValueError, match="is a detection output"):
        img2tfrecord.load(detection_out, task="classification")
    with pytest.raises(ValueError, match="is a classification output"):
        img2tfrecord.load(converted_sample, task="detection")
    with pytest.raises(ValueError, match="pad_boxes=True reads detection outputs"):
        img2tfrecord.load(converted_sample, pad_boxes=True)
    with pytest.raises(ValueError, match="task must be one of"):
        img2tfrecord.load(detection_out, task="segmentation")
    with pytest.raises(ValueError, match="apply to classification outputs"):
        img2tfrecord.load(detection_out, transform=True)
    images, labels = next(iter(img2tfrecord.load(converted_sample, batch_size=4)))  # auto: classification
    assert labels.shape == (4,)


def test_tf_free_readers_give_box_arrays(detection_out):
    expected = stored(detection_out)
    source = SplitDataSource(detection_out, "train")
    streamed = list(iter_split(detection_out, "train"))
    assert len(source) == len(streamed) == len(expected)
    for i, example in enumerate(streamed):
        want = expected[example[keys.FILENAME].decode()]
        assert example[keys.DECODED_BOXES].dtype == np.float32
        np.testing.assert_array_equal(example[keys.DECODED_BOXES], stored_boxes(want))
        np.testing.assert_array_equal(source[i][keys.DECODED_BOXES], example[keys.DECODED_BOXES])
        assert example[keys.DECODED_NUM_BOXES] == len(example[keys.OBJECT_CLASS_LABEL])
        assert example[keys.OBJECT_CLASS_LABEL] == values(want, keys.OBJECT_CLASS_LABEL)
        assert example[keys.DECODED_IMAGE].shape == (64, 64, 3)


# ---------------------------------------------------------------------------
# verify


def test_verify_passes_a_detection_output(detection_out):
    proc = run_in_process("verify", detection_out)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_verify_finds_planted_bad_boxes(detection_out, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(detection_out, out)
    doc = manifest_to_edit(str(out))
    entry = max(doc["splits"]["train"]["shards"], key=lambda s: s["num_records"])
    path = out / entry["file"]
    originals = [data for _, _, data in framing.iter_records(str(path))]
    with_boxes = [i for i, d in enumerate(originals) if values(example_proto.Example.FromString(d), keys.BBOX_XMIN)]
    assert len(with_boxes) >= 3
    changed: List[bytes] = []
    for i, data in enumerate(originals):
        example = example_proto.Example.FromString(data)
        feature = example.features.feature
        if i == with_boxes[0]:
            feature[keys.BBOX_XMAX].float_list.value[0] = 1.5
            feature[keys.BBOX_YMIN].float_list.value[1] = feature[keys.BBOX_YMAX].float_list.value[1]
        elif i == with_boxes[1]:
            feature[keys.OBJECT_CLASS_LABEL].int64_list.value[0] = 9
            label = feature[keys.OBJECT_CLASS_LABEL].int64_list.value[1]
            feature[keys.OBJECT_CLASS_LABEL].int64_list.value[1] = label % 3 + 1
        elif i == with_boxes[2]:
            del feature[keys.OBJECT_TRUNCATED].int64_list.value[0]
        changed.append(example.SerializeToString())
    path.write_bytes(b"".join(frame(d) for d in changed))
    entry["num_bytes"] = os.path.getsize(path)
    doc["splits"]["train"]["num_bytes"] = sum(s["num_bytes"] for s in doc["splits"]["train"]["shards"])
    doc["splits"]["train"][output_files.BOXES_PER_CLASS]["cat"] += 1
    write_manifest_doc(str(out), doc)

    proc = run_in_process("verify", str(out))
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    name = entry["file"]
    for fragment in (
        f"{name}: record {with_boxes[0]} ",
        "box 0: outside [0, 1]: xmax 1.5",
        "box 1: ymin ",
        f"{name}: record {with_boxes[1]} ",
        "box 0: class id 9 is not in label_map.pbtxt",
        "in label_map.pbtxt, record says",
        f"{name}: record {with_boxes[2]} ",
        "object lists differ in length",
        "split train: boxes per class differ from dataset.json (cat: ",
    ):
        assert fragment in proc.stdout, (fragment, proc.stdout)
    report = json.loads(run_in_process("verify", str(out), "--json").stdout)
    assert report["ok"] is False and report["num_problems"] == 6


# ---------------------------------------------------------------------------
# inspect --grid

GRID_PAD, GRID_CELL, GRID_CAPTION = 4, 128, 18  # drawing.draw_grid's layout


def test_grid_draws_boxes_in_their_class_colour(detection_out, tmp_path):
    grid = tmp_path / "grid.png"
    doc = framing.read_manifest(detection_out)
    n = doc.splits["train"].num_examples
    proc = run_in_process("inspect", detection_out, "--grid", str(grid), "--n", str(n), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outputs"]["grid"]["images"] == n
    sampled = [
        example_proto.Example.FromString(d) for _, _, d in inspection.sample_records(detection_out, doc, "train", n)
    ]
    cols = int(np.ceil(np.sqrt(n)))
    checked = 0
    with Image.open(grid) as sheet:
        sheet = sheet.convert("RGB")
        for i, example in enumerate(sampled):
            tw, th = values(example, keys.IMAGE_WIDTH)[0], values(example, keys.IMAGE_HEIGHT)[0]  # <= cell: kept
            ox = GRID_PAD + (i % cols) * (GRID_CELL + GRID_PAD) + (GRID_CELL - tw) // 2
            oy = GRID_PAD + (i // cols) * (GRID_CELL + GRID_CAPTION + GRID_PAD) + (GRID_CELL - th) // 2
            boxes = zip(*(values(example, k) for k in (keys.BBOX_XMIN, keys.BBOX_YMIN, keys.BBOX_XMAX, keys.BBOX_YMAX)))
            for (x0, y0, x1, y1), class_id in zip(boxes, values(example, keys.OBJECT_CLASS_LABEL)):
                left, top, right, bottom = round(x0 * tw), round(y0 * th), round(x1 * tw) - 1, round(y1 * th) - 1
                if bottom - top < 16 or right - left < 4:  # the class name covers a small box's edges
                    continue
                color = drawing.box_color(class_id)
                assert sheet.getpixel((ox + (left + right) // 2, oy + bottom)) == color, (i, class_id)
                assert sheet.getpixel((ox + left, oy + bottom - 2)) == color, (i, class_id)
                assert sheet.getpixel((ox + right, oy + bottom - 2)) == color, (i, class_id)
                checked += 1
    assert checked >= 2 * (n - 1)  # cat and dog of every image with boxes
    assert len({drawing.box_color(i) for i in range(1, 4)}) == 3
