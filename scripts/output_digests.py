"""Digests of every output of a fixed set of conversions: proof that a refactor changes no behaviour and no byte.

Each variant converts a small input that this script first writes under ``WORK/inputs`` with the test helpers of
``tests/`` (the same bytes and modification times on every run) by running ``python -m img2tfrecord convert``
as a subprocess with ``PYTHONPATH=--package-dir`` (the folder that holds the ``img2tfrecord`` package), on the
in-memory Beam runner, without the tf.Transform analysis except in two variants. Before each conversion (and
each ``--append`` of the append variants) the same command with ``--plan --json`` is run and recorded. The lines
printed, sorted, are ``VARIANT<TAB>WHAT<TAB>SHA256`` for

* every input file (variant ``inputs``);
* per step: the exit codes of the plan and of the conversion, the plan (its measured times left out), the
  conversion's stdout and stderr, and every file of the output folder afterwards: shards and index files as
  they are; ``errors*.jsonl`` as sorted rows; JSON files without their ``created`` times; ledgers decompressed;
  ``saved_model.pb`` as protobuf text (tf.Transform names a hash table after its temporary folder);
  a file whose bytes differ between two runs of the same code (``transform_fn/fingerprint.pb``, a digest of
  ``saved_model.pb``) as ``volatile``.

Everywhere, the work folder's path becomes ``<WORK>``, the package folder's ``<PKG>``, and random temporary
names ``XXXXXXXX``. The commands reach the work folder by the fixed symbolic link ``--link``, so that what the
tool hashes with the input's absolute path (``run_fingerprint``) is the same whatever ``--work`` is: compare
runs made with the same ``--link`` (the default). ``WORK/logs/VARIANT/`` keeps the normalised stdout, stderr
and plans, and ``WORK/out/VARIANT/`` the last output, to see what a differing digest stands for.

Compare two checkouts (one run at a time: they share the link)::

    python scripts/output_digests.py --package-dir /path/old-checkout --work /tmp/digests-old --out old.txt
    python scripts/output_digests.py --package-dir /path/new-checkout/src --work /tmp/digests-new --out new.txt
    diff old.txt new.txt

``--only NAME[,NAME...]`` runs some variants; ``--list`` names them all; ``--jobs N`` runs N variants at once.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import fcntl
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple
from unittest import mock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import images as I  # noqa: E402
from helpers import datasets, detection_inputs, shared_builds  # noqa: E402

IN_MEMORY = ("--runner=FnApiRunner", "--direct_running_mode=in_memory")
COMMON = ("--seed", "3", "--num-shards", "2")
FIXED_MTIME = 1_000_000_000  # every input file's modification time: the ledgers record it
CHANGED_MTIME = FIXED_MTIME + 86_400  # the modification time of an input an append step changes
TIMEOUT_S = 900
DEFAULT_LINK = "/tmp/img2tfrecord-output-digests"
VOLATILE = "volatile"
# Files whose bytes differ between two runs of the same code on the same input (see the module docstring).
VOLATILE_FILES = (re.compile(r"(^|/)transform_fn/fingerprint\.pb$"),)
# Random parts of temporary names a run prints or stores: Python's mkstemp/mkdtemp suffixes under the run's
# TMPDIR (a refused append's list of changes, tf.Transform's folder) and tf.Transform's uuid4 folder.
RANDOM_NAMES = (
    (re.compile(r"(<WORK>/tmp/[^/\s]+/[^/\s]*?)[a-z0-9_]{8}(?=[./\s'\")]|$)"), r"\1XXXXXXXX"),
    (re.compile(r"tftransform_tmp/[0-9a-f]{32}"), "tftransform_tmp/UUID"),
)
# Keys of dataset.json (top level and each generation) that hold the time of a run.
VOLATILE_KEYS = frozenset({"created"})
# Keys of the plan's "time" object that are measured, not counted.
PLAN_MEASURED_TIME = frozenset({"seconds", "startup_seconds", "seconds_per_input", "sample_seconds", "startup_parts"})


# ---------------------------------------------------------------------------------------------------------
# Inputs


def set_mtimes(root: str, mtime: int = FIXED_MTIME) -> None:
    """Every file and folder under ``root`` (or the file ``root``) modified at ``mtime``."""
    if os.path.isfile(root):
        os.utime(root, (mtime, mtime))
        return
    for directory, _, names in os.walk(root):
        for name in names:
            os.utime(os.path.join(directory, name), (mtime, mtime))
        os.utime(directory, (mtime, mtime))


def write_file(path: str, data: bytes, mtime: int = FIXED_MTIME) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.utime(path, (mtime, mtime))


def write_rows(path: str, header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A CSV manifest (``.csv``) or JSONL (``.jsonl``, one object per row with the header's keys)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        if path.endswith(".jsonl"):
            for row in rows:
                f.write(json.dumps(dict(zip(header, row))) + "\n")
        else:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(header)
            writer.writerows(rows)
    os.utime(path, (FIXED_MTIME, FIXED_MTIME))
    return path


def class_files() -> Dict[str, bytes]:
    """A class-folder dataset: JPEG and PNG of several sizes, a nested file, noisy JPEGs in two more classes."""
    files = dict(datasets.dataset_files())
    for c in range(2):
        for i in range(5):
            noise = I.noise(4, 3, seed=100 * c + i).resize((40, 30))
            files[f"noise{c}/img_{i:02d}.jpg"] = I.jpeg(40, 30, noise)
    return files


def write_classes(root: str) -> str:
    datasets.write_tree(root, class_files())
    return root


def write_split_folders(root: str) -> str:
    for split, per_class in (("train", 4), ("validation", 2), ("test", 2)):
        datasets.photos(os.path.join(root, split), per_class=per_class)
    return root


def write_hostile(root: str) -> str:
    datasets.write_tree(root, {rel: data for rel, (data, _) in datasets.hostile_corpus().items()})
    datasets.write_tree(root, datasets.JUNK)
    return root


def write_duplicates(root: str) -> str:
    files = datasets.photos(root, per_class=4)
    copies = {"cat/cat_000.jpg": "dog/copy_of_cat.jpg", "dog/dog_001.png": "dog/zz_same.png"}
    copies["cat/cat_002.jpg"] = "cat/a_first.jpg"  # the copy sorts first: it is the one kept
    datasets.write_tree(root, {new: files[old] for old, new in copies.items()})
    return root


def write_mostly_broken(root: str) -> str:
    datasets.make_images(root, classes=2, per_class=4, size=(40, 30), bad=2)
    return root


def write_archives(folder: str) -> Dict[str, str]:
    """The class files as one zip (under a top folder), one tar, one tar.gz, and split over two zips."""
    files = class_files()
    os.makedirs(folder)
    paths = {
        "zip": os.path.join(folder, "data.zip"),
        "tar": os.path.join(folder, "data.tar"),
        "tgz": os.path.join(folder, "data.tar.gz"),
    }
    datasets.write_zip(paths["zip"], files, top="photos")
    datasets.write_tar(paths["tar"], files)
    datasets.write_tar(paths["tgz"], files, top="./photos", mode="w:gz")
    parts = os.path.join(folder, "parts")
    os.makedirs(parts)
    names = sorted(files)
    for n, part in enumerate((names[::2], names[1::2])):
        datasets.write_zip(os.path.join(parts, f"part-{n}.zip"), {rel: files[rel] for rel in part})
    paths["zip_glob"] = os.path.join(parts, "*.zip")
    return paths


def write_manifests(root: str) -> Dict[str, str]:
    """Class files with CSV (labeled, with splits, unlabeled) and JSONL manifests beside them; rows name a
    missing file too."""
    files = class_files()
    datasets.write_tree(root, files)
    names = sorted(files) + ["cat/missing.jpg"]
    splits = ("train", "train", "val", "test")
    return {
        "csv": write_rows(os.path.join(root, "labels.csv"), ("path", "label"), ((n, n.split("/")[0]) for n in names)),
        "csv_splits": write_rows(
            os.path.join(root, "splits.csv"),
            ("path", "label", "split"),
            ((n, n.split("/")[0], splits[i % 4]) for i, n in enumerate(names)),
        ),
        "csv_unlabeled": write_rows(os.path.join(root, "paths.csv"), ("path",), ((n,) for n in names)),
        "jsonl": write_rows(
            os.path.join(root, "labels.jsonl"), ("path", "label"), ((n, n.split("/")[0]) for n in names)
        ),
    }


def frame_rows(root: str) -> List[Tuple[str, str]]:
    names = sorted(
        os.path.relpath(os.path.join(d, n), root) for d, _, ns in os.walk(root) for n in ns if n.endswith(".png")
    )
    return [(n, n.split("/")[0]) for n in names]


def write_clips(folder: str) -> Dict[str, str]:
    """Clips as a folder, as a zip and, in a copy of the folder, listed frame by frame in a manifest."""
    files, _ = datasets.clip_dataset()
    root, listed = os.path.join(folder, "clips"), os.path.join(folder, "listed")
    datasets.write_tree(root, files)
    datasets.write_tree(listed, files)
    archive = os.path.join(folder, "clips.zip")
    datasets.write_zip(archive, files)
    manifest = write_rows(os.path.join(listed, "frames.csv"), ("path", "label"), frame_rows(listed))
    return {"folder": root, "zip": archive, "manifest": manifest}


def write_detection(folder: str) -> Dict[str, str]:
    """VOC (bad annotations, image sets), COCO split by its files, a CSV of boxes, the VOC folder in a zip."""
    voc_tree = os.path.join(folder, "voc")
    voc_root = os.path.join(voc_tree, *detection_inputs.VOC_TOP.split("/"))
    detection_inputs.write_bad_voc(voc_root)
    set_mtimes(voc_tree)
    return {
        "voc": voc_root,
        "coco": shared_builds.write_split_coco(os.path.join(folder, "coco")),
        "boxes": shared_builds.write_box_manifest(os.path.join(folder, "boxes")),
        "voc_zip": detection_inputs.pack(voc_tree, os.path.join(folder, "voc.zip")),
    }


def write_append_folder(root: str) -> str:
    datasets.make_images(root, classes=2, per_class=6, size=(40, 30))
    return root


def write_append_manifest(root: str) -> str:
    datasets.make_images(root, classes=2, per_class=6, size=(40, 30))
    return write_rows(os.path.join(root, "labels.csv"), ("path", "label"), manifest_rows(root))


def manifest_rows(root: str) -> List[Tuple[str, str]]:
    names = sorted(
        os.path.relpath(os.path.join(d, n), root) for d, _, ns in os.walk(root) for n in ns if n.endswith(".jpg")
    )
    return [(n, n.split("/")[0]) for n in names]


def write_inputs(folder: str) -> Dict[str, str]:
    """Every input under ``folder``, by name; the same bytes and modification times on every call (the zip
    and gzip writers stamp their members and headers with the clock, which is stopped meanwhile)."""
    with mock.patch.object(time, "time", lambda: float(FIXED_MTIME)):
        return write_all_inputs(folder)


def write_all_inputs(folder: str) -> Dict[str, str]:
    found = {
        "classes": write_classes(os.path.join(folder, "classes")),
        "split_folders": write_split_folders(os.path.join(folder, "split_folders")),
        "hostile": write_hostile(os.path.join(folder, "hostile")),
        "duplicates": write_duplicates(os.path.join(folder, "duplicates")),
        "mostly_broken": write_mostly_broken(os.path.join(folder, "mostly_broken")),
        # one folder per append variant: the append steps change their input
        "append_folder": write_append_folder(os.path.join(folder, "append_folder")),
        "append_folder_ar": write_append_folder(os.path.join(folder, "append_folder_ar")),
        "append_folder_wds": write_append_folder(os.path.join(folder, "append_folder_wds")),
        "append_manifest": write_append_manifest(os.path.join(folder, "append_manifest")),
    }
    found["classes_glob"] = os.path.join(found["classes"], "*", "*.jpg")
    for prefix, written in (
        ("archive", write_archives(os.path.join(folder, "archives"))),
        ("manifest", write_manifests(os.path.join(folder, "manifests"))),
        ("clips", write_clips(os.path.join(folder, "clips"))),
        ("detection", write_detection(os.path.join(folder, "detection"))),
    ):
        found.update({f"{prefix}_{key}": path for key, path in written.items()})
    set_mtimes(folder)
    return found


# ---------------------------------------------------------------------------------------------------------
# Changes the append steps make to their input


def input_root(given: str) -> str:
    """The folder an input path names (a manifest's folder for a manifest)."""
    return given if os.path.isdir(given) else os.path.dirname(given)


def add_new_images(given: str) -> None:
    """Two images in existing classes and one in a new class."""
    root = input_root(given)
    for n, (rel, seed) in enumerate((("class0/new_0.jpg", 7), ("class1/new_1.jpg", 8), ("class9/new_9.jpg", 9))):
        write_file(os.path.join(root, rel), I.jpeg(36 + n, 28, I.noise(4, 3, seed=seed).resize((36 + n, 28))))
    rewrite_manifest(given)


def change_and_remove(given: str) -> None:
    """One converted image rewritten (other bytes, other size, later time), another removed."""
    root = input_root(given)
    write_file(os.path.join(root, "class0", "img_0001.jpg"), I.jpeg(30, 30), mtime=CHANGED_MTIME)
    os.remove(os.path.join(root, "class1", "img_0002.jpg"))
    rewrite_manifest(given)


def rewrite_manifest(given: str) -> None:
    if given.endswith(".csv"):
        write_rows(given, ("path", "label"), manifest_rows(os.path.dirname(given)))


# ---------------------------------------------------------------------------------------------------------
# Variants


@dataclass(frozen=True)
class Step:
    """One ``convert`` into the variant's output: its name in the digests, its own flags, and what it first
    changes in the input."""

    name: str
    args: Tuple[str, ...] = ()
    change: Optional[Callable[[str], None]] = None


@dataclass(frozen=True)
class Variant:
    name: str
    input: str  # a key of write_inputs()
    args: Tuple[str, ...] = ()
    analyze: bool = False
    common: Tuple[str, ...] = COMMON
    steps: Tuple[Step, ...] = field(default=(Step("convert"),))


APPEND_STEPS = (
    Step("convert"),
    Step("append-new", ("--append", "--allow-new-classes"), add_new_images),
    Step("append-refused", ("--append",), change_and_remove),
    Step("append-accept", ("--append", "--accept-changes")),
)
DETECTION = detection_inputs.RESIZE

VARIANTS: Tuple[Variant, ...] = (
    # Class folders.
    Variant("folder-jpeg32", "classes", ("--image-size", "32")),
    Variant("folder-keep", "classes", ("--format", "keep")),
    Variant("folder-png-2proc", "classes", ("--format", "png", "--image-size", "24x16", "--processes", "2")),
    Variant("folder-gray", "classes", ("--channels", "1", "--image-size", "32")),
    Variant("folder-raw-fit", "classes", ("--format", "raw", "--image-size", "16x12", "--resize", "fit")),
    Variant("folder-gzip-splits", "classes", ("--compression", "gzip", "--splits", "train=0.6,val=0.2,test=0.2")),
    Variant("folder-shard-size", "classes", ("--image-size", "32", "--shard-size-mb", "1"), common=("--seed", "3")),
    Variant("glob-jpg", "classes_glob", ("--image-size", "32")),
    Variant("split-folders", "split_folders", ("--image-size", "32")),
    Variant("hostile-keep", "hostile", ("--format", "keep", "--max-file-mb", "1")),
    Variant("dedupe", "duplicates", ("--dedupe", "--image-size", "32")),
    Variant("error-budget", "mostly_broken", ("--image-size", "32", "--max-error-rate", "0.1")),
    # Archives.
    Variant("zip", "archive_zip", ("--image-size", "32")),
    Variant("tar", "archive_tar", ("--image-size", "32")),
    Variant("tar-gz", "archive_tgz", ("--image-size", "32")),
    Variant("zip-glob", "archive_zip_glob", ("--image-size", "32", "--splits", "train=0.5,test=0.5")),
    # Manifests.
    Variant("csv", "manifest_csv", ("--image-size", "32")),
    Variant("csv-splits", "manifest_csv_splits", ("--image-size", "32")),
    Variant("csv-unlabeled", "manifest_csv_unlabeled", ("--image-size", "32")),
    Variant("jsonl", "manifest_jsonl", ("--format", "keep")),
    # Clips.
    Variant("sequence-folder", "clips_folder", ("--sequence",)),
    Variant("sequence-zip", "clips_zip", ("--sequence", "--format", "png")),
    Variant("sequence-manifest", "clips_manifest", ("--sequence", "--image-size", "8")),
    # Detection.
    Variant("voc", "detection_voc", DETECTION),
    Variant("coco", "detection_coco", DETECTION),
    Variant("boxes-csv", "detection_boxes", (*DETECTION, *shared_builds.BOX_SPLITS[:2])),
    Variant("voc-zip", "detection_voc_zip", ("--task", "detection", "--splits", "train=0.5,test=0.5")),
    # With the tf.Transform analysis.
    Variant("analyzed-jpeg32", "classes", ("--image-size", "32"), analyze=True),
    Variant("analyzed-keep", "classes", ("--format", "keep"), analyze=True),
    # Appends.
    Variant("append-folder", "append_folder", ("--image-size", "32"), steps=APPEND_STEPS),
    # --file-format: the other shard containers, first run and an append
    Variant("array-record", "classes", ("--image-size", "32", "--file-format", "array_record")),
    Variant("webdataset-keep", "classes", ("--format", "keep", "--file-format", "webdataset")),
    Variant("webdataset-sequence", "clips_folder", ("--sequence", "--file-format", "webdataset")),
    Variant(
        "append-array-record",
        "append_folder_ar",
        ("--image-size", "32", "--file-format", "array_record"),
        steps=APPEND_STEPS,
    ),
    Variant(
        "append-webdataset",
        "append_folder_wds",
        ("--image-size", "32", "--file-format", "webdataset"),
        steps=APPEND_STEPS,
    ),
    Variant(
        "append-manifest",
        "append_manifest",
        ("--image-size", "32", "--splits", "train=0.7,validation=0.3"),
        steps=APPEND_STEPS,
    ),
)


# ---------------------------------------------------------------------------------------------------------
# Normalising and digesting


@dataclass(frozen=True)
class Context:
    work: str  # the work folder as the commands see it: the fixed link to it
    package_dir: str
    inputs: Dict[str, str]

    def replacements(self) -> List[Tuple[str, str]]:
        pairs = {
            os.path.realpath(self.work): "<WORK>",
            self.work: "<WORK>",
            os.path.realpath(self.package_dir): "<PKG>",
            os.path.abspath(self.package_dir): "<PKG>",
        }
        return sorted(pairs.items(), key=lambda pair: -len(pair[0]))  # the longest prefix first


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def normalize_text(text: str, ctx: Context) -> str:
    for old, new in ctx.replacements():
        text = text.replace(old, new)
    for pattern, replacement in RANDOM_NAMES:
        text = pattern.sub(replacement, text)
    return text


def normalize_json(value, ctx: Context, drop: frozenset = VOLATILE_KEYS):
    """``value`` with every key in ``drop`` removed (at any depth) and the work folder's path replaced."""
    if isinstance(value, dict):
        return {key: normalize_json(item, ctx, drop) for key, item in value.items() if key not in drop}
    if isinstance(value, list):
        return [normalize_json(item, ctx, drop) for item in value]
    if isinstance(value, str):
        return normalize_text(value, ctx)
    return value


def canonical(value) -> bytes:
    return json.dumps(value, sort_keys=True, ensure_ascii=False).encode("utf-8")


def normalize_plan(doc: dict, ctx: Context) -> dict:
    """The plan without its time measurements (what is counted in ``time`` stays)."""
    doc = normalize_json(doc, ctx)
    if isinstance(doc.get("time"), dict):
        doc["time"] = {key: value for key, value in doc["time"].items() if key not in PLAN_MEASURED_TIME}
    return doc


def jsonl_rows(text: str, ctx: Context) -> List[bytes]:
    return sorted(canonical(normalize_json(json.loads(line), ctx)) for line in text.splitlines() if line.strip())


def file_digest(path: str, relative: str, ctx: Context) -> str:
    """The digest of one output file, after its volatile parts are taken out."""
    if any(pattern.search(relative) for pattern in VOLATILE_FILES):
        return VOLATILE
    with open(path, "rb") as f:
        data = f.read()
    name = os.path.basename(relative)
    if name.endswith(".jsonl.gz") and relative.startswith("ledger/"):  # sorted rows: their order is kept
        text = normalize_text(gzip.decompress(data).decode("utf-8"), ctx)
        return sha256(text.encode("utf-8"))
    if name.endswith(".jsonl"):  # errors.jsonl and each generation's errors-gNNNNN.jsonl: rows in any order
        return sha256(b"\n".join(jsonl_rows(data.decode("utf-8"), ctx)))
    if name.endswith(".json"):
        return sha256(canonical(normalize_json(json.loads(data), ctx)))
    if name == "saved_model.pb":
        return sha256(normalize_text(saved_model_text(data), ctx).encode("utf-8"))
    if is_shard(relative) or relative.startswith("index/"):
        return sha256(data)
    for old, new in ctx.replacements():
        data = data.replace(old.encode("utf-8"), new.encode("utf-8"))
    return sha256(data)


@contextlib.contextmanager
def stderr_silenced() -> Iterator[None]:
    """File descriptor 2 sent to /dev/null meanwhile (C++ libraries write to it directly)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def saved_model_text(data: bytes) -> str:
    """A SavedModel as protobuf text: tf.Transform names a vocabulary's hash table after the temporary
    path it was written to, which only the text form lets :func:`normalize_text` replace."""
    from google.protobuf import text_format

    with stderr_silenced():  # TensorFlow's C++ start-up lines
        from tensorflow.core.protobuf import saved_model_pb2

    model = saved_model_pb2.SavedModel()
    model.ParseFromString(data)
    return text_format.MessageToString(model)


def is_shard(relative: str) -> bool:
    return ".tfrecord" in os.path.basename(relative) and "/" not in relative


def walk_output(output: str) -> List[str]:
    """Every file under ``output``, as sorted paths relative to it."""
    found = []
    for directory, _, names in os.walk(output):
        for name in names:
            found.append(os.path.relpath(os.path.join(directory, name), output).replace(os.sep, "/"))
    return sorted(found)


def output_lines(output: str, step: str, ctx: Context) -> List[Tuple[str, str]]:
    if not os.path.isdir(output):
        return [(f"{step} output", "absent")]
    return [
        (f"{step} {printable(rel)}", file_digest(os.path.join(output, rel), rel, ctx)) for rel in walk_output(output)
    ]


# ---------------------------------------------------------------------------------------------------------
# Running


def command_env(ctx: Context, tmp: str) -> Dict[str, str]:
    env = dict(os.environ, PYTHONPATH=ctx.package_dir, TF_CPP_MIN_LOG_LEVEL="3", TMPDIR=tmp)
    env.pop("PYTHONSTARTUP", None)
    return env


def run_convert(ctx: Context, args: Sequence[str], tmp: str) -> subprocess.CompletedProcess:
    os.makedirs(tmp, exist_ok=True)
    argv = [sys.executable, "-m", "img2tfrecord", "convert", *args]
    return subprocess.run(
        argv, capture_output=True, text=True, env=command_env(ctx, tmp), cwd=ctx.work, timeout=TIMEOUT_S
    )


def convert_args(variant: Variant, step: Step, given: str, output: str) -> List[str]:
    analysis = () if variant.analyze else ("--no-analyze",)
    return ["--input", given, "--output", output, *variant.args, *step.args, *variant.common, *analysis, *IN_MEMORY]


def logged(ctx: Context, variant: str, name: str, text: str) -> Tuple[str, str]:
    """``(name, digest of text)``; the text is kept as ``WORK/logs/VARIANT/NAME`` to diff by hand."""
    folder = os.path.join(ctx.work, "logs", variant)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name.replace(" ", ".")), "w", encoding="utf-8") as f:
        f.write(text)
    return name, sha256(text.encode("utf-8"))


def plan_text(stdout: str, ctx: Context) -> str:
    """The plan document, normalised and pretty-printed (stdout as it is when it is no JSON)."""
    try:
        doc = json.loads(stdout)
    except ValueError:
        return normalize_text(stdout, ctx)
    return json.dumps(normalize_plan(doc, ctx), indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def plan_lines(ctx: Context, variant: Variant, step: str, args: Sequence[str], tmp: str) -> List[Tuple[str, str]]:
    proc = run_convert(ctx, [*args, "--plan", "--json"], tmp)
    return [
        (f"{step} plan exit", str(proc.returncode)),
        logged(ctx, variant.name, f"{step} plan", plan_text(proc.stdout, ctx)),
        logged(ctx, variant.name, f"{step} plan stderr", normalize_text(proc.stderr, ctx)),
    ]


def step_lines(ctx: Context, variant: Variant, step: Step, given: str) -> List[Tuple[str, str]]:
    """Plan then run one step; its exit code, stdout, stderr and the output folder's digests."""
    output = os.path.join(ctx.work, "out", variant.name)
    tmp = os.path.join(ctx.work, "tmp", variant.name)
    if step.change is not None:
        step.change(given)
    fresh = os.path.join(ctx.work, "plans", variant.name, step.name)
    planned = output if "--append" in step.args else fresh  # an append is planned against its output
    lines = plan_lines(ctx, variant, step.name, convert_args(variant, step, given, planned), tmp)
    proc = run_convert(ctx, convert_args(variant, step, given, output), tmp)
    lines += [
        (f"{step.name} exit", str(proc.returncode)),
        logged(ctx, variant.name, f"{step.name} stdout", normalize_text(proc.stdout, ctx)),
        logged(ctx, variant.name, f"{step.name} stderr", normalize_text(proc.stderr, ctx)),
    ]
    return lines + output_lines(output, step.name, ctx)


def input_lines(folder: str) -> List[str]:
    """``inputs<TAB>PATH<TAB>SHA256`` of every input file: the same inputs on every run."""
    lines = []
    for rel in walk_output(folder):
        with open(os.path.join(folder, rel), "rb") as f:
            lines.append(f"inputs\t{printable(rel)}\t{sha256(f.read())}")
    return lines


def printable(path: str) -> str:
    """``path`` on one line: control characters, quotes and backslashes escaped as in JSON."""
    return json.dumps(path, ensure_ascii=False)[1:-1]


def run_variant(variant: Variant, ctx: Context) -> List[str]:
    given = ctx.inputs[variant.input]
    lines = []
    for step in variant.steps:
        lines += step_lines(ctx, variant, step, given)
    return [f"{variant.name}\t{what}\t{value}" for what, value in lines]


@contextlib.contextmanager
def work_link(work: str, link: str) -> Iterator[str]:
    """``link``, a symbolic link to ``work`` for the duration: every command names its input and output
    through it, so that the absolute paths a run hashes (``run_fingerprint`` hashes the input's) are the same
    whatever the work folder. A lock beside it keeps two runs from sharing it."""
    with open(link + ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise SystemExit(f"another run holds {link}: wait for it, or pass another --link") from None
        if os.path.lexists(link):
            if not os.path.islink(link):
                raise SystemExit(f"{link} exists and is no symbolic link: pass another --link")
            os.remove(link)
        os.symlink(work, link)
        try:
            yield link
        finally:
            os.remove(link)


def prepare_work(work: str) -> None:
    """An empty work folder for this script's own sub-folders (anything else in it is left alone)."""
    for name in ("inputs", "out", "plans", "tmp", "logs"):
        shutil.rmtree(os.path.join(work, name), ignore_errors=True)
    os.makedirs(work, exist_ok=True)


def select(names: Optional[str]) -> List[Variant]:
    if not names:
        return list(VARIANTS)
    wanted = names.split(",")
    unknown = sorted(set(wanted) - {v.name for v in VARIANTS})
    if unknown:
        raise SystemExit(f"unknown variant(s): {', '.join(unknown)} (see --list)")
    return [v for v in VARIANTS if v.name in wanted]


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package-dir", help="the folder that contains the img2tfrecord package")
    parser.add_argument(
        "--work", help="work folder: inputs/, out/, logs/ (normalised stdout, stderr, plans), tmp/ are made anew in it"
    )
    parser.add_argument(
        "--link", default=DEFAULT_LINK, help=f"the fixed path the commands reach --work by (default {DEFAULT_LINK})"
    )
    parser.add_argument("--jobs", type=int, default=1, help="variants run at once (default 1)")
    parser.add_argument("--out", help="write the digests here instead of stdout")
    parser.add_argument("--only", help="comma-separated variant names (default: all)")
    parser.add_argument("--list", action="store_true", help="print the variant names and exit")
    args = parser.parse_args(argv)
    if not args.list and not (args.package_dir and args.work):
        parser.error("--package-dir and --work are required")
    return args


def run_all(ctx: Context, variants: Sequence[Variant], jobs: int) -> List[str]:
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return [line for lines in pool.map(lambda v: run_variant(v, ctx), variants) for line in lines]


def write_lines(lines: Sequence[str], path: Optional[str]) -> None:
    text = "".join(line + "\n" for line in lines)
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if args.list:
        print("\n".join(v.name for v in VARIANTS))
        return 0
    if not os.path.isdir(os.path.join(args.package_dir, "img2tfrecord")):
        raise SystemExit(f"{args.package_dir} holds no img2tfrecord package")
    variants = select(args.only)
    work = os.path.realpath(args.work)
    prepare_work(work)
    started = time.monotonic()
    with work_link(work, os.path.abspath(args.link)) as link:
        inputs = os.path.join(link, "inputs")
        ctx = Context(link, os.path.abspath(args.package_dir), write_inputs(inputs))
        lines = input_lines(inputs)  # before the append steps change their inputs
        lines = sorted(lines + run_all(ctx, variants, args.jobs))
    write_lines(lines, args.out)
    shutil.rmtree(os.path.join(work, "tmp"), ignore_errors=True)
    print(f"{len(variants)} variant(s), {len(lines)} line(s) in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
