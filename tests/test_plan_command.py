"""``convert --plan [--json]``: the real CLI plans a run, and a real run then writes what the plan counted."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import subprocess
import sys

import images as I
import pytest
from conftest import cli_env, convert
from helpers.cli import run_in_process
from helpers.datasets import JUNK, write_tar, write_tree, write_zip
from helpers.detection_inputs import RESIZE, VOC_TOP
from helpers.outputs import assert_plan_is_the_run
from helpers.shared_builds import (
    COCO_SPLITS,
    DETECTION_SPLITS,
    ONE_PROCESS,
    bad_voc,
    bad_voc_tree,
    split_coco,
    voc_orientations,
    voc_with_link_and_twin,
)

from img2tfrecord.readers.records import read_manifest

SPLITS = DETECTION_SPLITS  # the shared detection conversions (helpers/shared_builds.py) use these too
# The runs these plans are compared with skip the analysis, and so do the plans: the analysis would only add
# TensorFlow's imports to the start-up a plan times in a fresh interpreter (once per process).
FAST = ("--no-analyze",)


def plan(input_path: str, output: str, *extra: str) -> dict:
    proc = run_in_process("convert", "--input", input_path, "--output", output, "--plan", "--json", *FAST, *extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def many_files() -> dict:
    """relpath -> bytes: 3 classes of 12 small images, JPEG and PNG."""
    files = {}
    for ci, name in enumerate(("cat", "dog", "emu")):
        for i in range(12):
            files[f"{name}/{name}_{i}.{'png' if i % 3 else 'jpg'}"] = (
                I.png(10 + i, 8 + ci) if i % 3 else I.jpeg(16 + i, 12 + ci)
            )
    return files


@pytest.fixture(scope="module")
def class_folder(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("plan") / "photos")
    write_tree(root, {**many_files(), **JUNK})
    return root


@pytest.fixture(scope="module")
def class_folder_plan(class_folder, tmp_path_factory) -> dict:
    """The plan of ``class_folder`` with ``SPLITS``, which the archives holding the same files are planned as."""
    return plan(class_folder, str(tmp_path_factory.mktemp("plan_out") / "out"), *SPLITS)


def test_the_plan_of_class_folders_counts_what_the_run_writes_per_split_and_class(class_folder, tmp_path):
    out = str(tmp_path / "records")
    found = plan(class_folder, out, *SPLITS, "--image-size", "16")
    assert not os.path.exists(out), "--plan created the output folder"
    assert (found["input_kind"], found["layout"], found["task"]) == ("folder", "class", "classification")
    assert set(found["splits"]) == {"train", "validation", "test"}
    assert all(found["splits"][s]["examples"] > 0 for s in found["splits"])
    assert found["skipped"] == {"count": 3, "examples": sorted(JUNK)}
    assert found["not_image_names"]["count"] == 0 and found["rejected"]["count"] == 0
    t = found["time"]
    assert t["sample_size"] == 16 and t["seconds_per_input"] > 0
    assert t["processes"] == 1, "a run of a few small files converts in one process"
    assert t["seconds"] >= t["startup_seconds"] > 0
    parts = t["startup_parts"]  # measured: a fresh interpreter's imports, this plan's listing, the run's graph,
    # its placement
    assert set(parts) == {"imports", "listing", "graph", "placement"} and parts["imports"] > 0 and parts["graph"] > 0
    assert parts["listing"] >= 0, "a listing of a few files may take under 5 ms, shown as 0.0"
    assert abs(sum(parts.values()) - t["startup_seconds"]) < 0.1
    assert found["output"]["exists"] is False

    proc = convert(class_folder, out, *SPLITS, "--image-size", "16", "--no-analyze", *ONE_PROCESS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_plan_is_the_run(found, read_manifest(out))


def write_split_folders(root: str) -> None:
    files = {}
    for i, (rel, data) in enumerate(sorted(many_files().items())):
        files[f"{('train', 'val', 'test')[i % 3]}/{rel}"] = data
    write_tree(root, files)


def write_manifest(root: str, delimiter: str = ",") -> str:
    """A CSV manifest with a split column (``val`` stands for validation) next to its images, and
    rows the run rejects without decoding anything: a missing file, a missing label."""
    files = many_files()
    write_tree(root, files)
    path = os.path.join(root, "labels.csv")
    with open(path, "w", newline="") as f:
        w = csv.writer(f, delimiter=delimiter)
        w.writerow(["path", "label", "split"])
        for i, rel in enumerate(sorted(files)):
            w.writerow([rel, rel.split("/")[0], ("train", "val", "test")[i % 4 % 3]])
        w.writerow(["cat/gone.jpg", "cat", "train"])
        w.writerow(["dog/dog_0.jpg", "", "test"])
    return path


@pytest.mark.parametrize("kind", ["split_folders", "manifest", "semicolon_manifest"])
def test_the_plan_of_split_folders_and_a_manifest_counts_what_the_run_writes(kind, tmp_path):
    """A semicolon-delimited manifest (what Excel writes in many locales) is read as the comma-delimited one."""
    source = str(tmp_path / "source")
    if kind == "split_folders":
        write_split_folders(source)
    else:
        source = write_manifest(source, ";" if kind == "semicolon_manifest" else ",")
    out = str(tmp_path / "records")
    found = plan(source, out, *SPLITS)
    assert found["layout"] == ("split" if kind == "split_folders" else "manifest")
    assert set(found["splits"]) == {"train", "validation", "test"}  # val is validation
    if kind != "split_folders":
        assert found["rejected"]["by_reason"] == {"missing_label": 1, "not_found": 1}
        how = "semicolon" if kind == "semicolon_manifest" else "comma"
        assert found["manifest_columns"] == {source: f"columns path, label, split ({how}-delimited, header row)"}
    proc = convert(source, out, *SPLITS, "--no-analyze", *ONE_PROCESS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_plan_is_the_run(found, read_manifest(out))


def test_the_plan_of_voc_with_random_splits_counts_what_the_run_writes(tmp_path_factory, tmp_path):
    run = voc_orientations(tmp_path_factory, "keep")  # PNG records, helpers/shared_builds.DETECTION_SPLITS
    found = plan(run.input, str(tmp_path / "records"), "--format", "png", *SPLITS)
    assert found["layout"] == "detection"
    assert found["annotations"] == "voc" and found["classes"] == ["bird", "cat", "dog"]
    assert sum(sum(s["boxes_per_class"].values()) for s in found["splits"].values()) == 8 * 3
    assert_plan_is_the_run(found, read_manifest(run.output))


@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
def test_an_archive_is_planned_as_its_unpacked_folder(kind, class_folder_plan, tmp_path):
    files = {**many_files(), **JUNK}
    archive = str(tmp_path / f"photos.{kind}")
    if kind == "zip":
        write_zip(archive, files, top="photos")  # a wrapping folder, stripped as the run strips it
    else:
        write_tar(archive, files, mode="w:gz")
    found = plan(archive, str(tmp_path / "out"), *SPLITS)
    folder = class_folder_plan
    assert found["input_kind"] == "archives" and found["layout"] == "class"
    assert found["inputs"] == folder["inputs"] == len(many_files())
    assert {s: v["examples_per_class"] for s, v in found["splits"].items()} == {
        s: v["examples_per_class"] for s, v in folder["splits"].items()
    }
    assert found["skipped"]["count"] == 3
    assert all("!/" in name for name in found["skipped"]["examples"])  # ARCHIVE!/MEMBER, as errors.jsonl names them
    assert found["time"]["sample_size"] == 16


def comparable(found: dict) -> dict:
    """A plan without what names where the input is, or depends on timing or the output."""
    same = {k: v for k, v in found.items() if k not in ("input", "input_kind", "time", "output", "rejected")}
    rejected = found["rejected"]
    examples = sorted((r["relpath"], r["reason"]) for r in rejected["examples"])
    return dict(same, rejected=(rejected["count"], rejected["by_reason"], examples))


@pytest.mark.parametrize("kind", ["folder", "zip"])
def test_the_plan_and_its_counts_share_one_listing_of_the_input(kind, class_folder, tmp_path, monkeypatch):
    """A bucket of a million objects is listed once by ``--plan``, not once for the plan and again for the counts."""
    from apache_beam.io.filesystems import FileSystems

    from img2tfrecord.pipeline import listing
    from img2tfrecord.pipeline.config import ConvertConfig
    from img2tfrecord.pipeline.preview import plan_run

    source = class_folder
    if kind == "zip":
        os.makedirs(tmp_path / "in")
        source = str(tmp_path / "in" / "photos.zip")
        write_zip(source, many_files())
    listed = []

    def counting(lister):
        def count(patterns, *args, **kwargs):
            found = [patterns] if isinstance(patterns, str) else patterns
            listed.extend(p for p in found if p.startswith(os.path.dirname(source)))
            return lister(patterns, *args, **kwargs)

        return count

    monkeypatch.setattr(FileSystems, "match", counting(FileSystems.match))  # remote paths, and globs
    monkeypatch.setattr(listing, "_list", counting(listing._list))  # every listing, a local folder's without Beam
    found = plan_run(ConvertConfig(input=source, output=str(tmp_path / "out"), analyze=False), 1)
    assert found.inputs == 36 and sum(s.examples for s in found.splits.values()) == 36
    assert len(listed) == 1, listed


@pytest.fixture(scope="module")
def bad_voc_folder_plan(tmp_path_factory) -> dict:
    """The plan of the bad VOC tree's root (helpers/shared_builds.bad_voc_tree), which its archives are planned as."""
    root = os.path.join(bad_voc_tree(tmp_path_factory), *VOC_TOP.split("/"))
    return plan(root, str(tmp_path_factory.mktemp("voc_plan") / "records"), *RESIZE)


@pytest.mark.parametrize("name", ["voc.zip", "voc.tar.gz"])
def test_a_voc_archive_is_planned_as_its_folder_and_the_run_writes_what_it_counted(
    name, bad_voc_folder_plan, tmp_path_factory, tmp_path
):
    """``VOCdevkit/VOC2012/``: image sets, a missing image, malformed XML, an image in no image set, bad boxes;
    the zip holds VOCdevkit/VOC2012/..., the tar.gz the VOC root's content under ./data/."""
    run = bad_voc(tmp_path_factory, name)  # converted with RESIZE
    out = str(tmp_path / "records")
    found = plan(run.input, out, *RESIZE)
    assert (found["input_kind"], found["layout"], found["annotations"]) == ("archived_detection", "detection", "voc")
    assert found["rejected"]["by_reason"] == {"bad_annotation": 2, "not_found": 1, "not_in_image_sets": 1}
    assert found["inputs"] == 9 and found["time"]["sample_size"] == 5
    assert all("!/" in row["path"] for row in found["rejected"]["examples"])  # ARCHIVE!/MEMBER, as errors.jsonl
    assert comparable(found) == comparable(bad_voc_folder_plan)

    doc = read_manifest(run.output)
    assert_plan_is_the_run(found, doc, boxes=False)
    for name, info in doc.splits.items():
        # The plan counts the boxes the annotations give; the run drops the cat box planted outside each image.
        outside = info.dropped_boxes.get("box_outside_image", 0)
        assert outside > 0, name
        written = dict(info.boxes_per_class, cat=info.boxes_per_class["cat"] + outside)
        assert found["splits"][name]["boxes_per_class"] == written, name


def test_archive_members_an_annotation_cannot_use_are_planned_as_the_run_rejects_them(tmp_path_factory, tmp_path):
    """A link and a name held twice: the run rejects the annotated images naming them, and so does the plan."""
    run = voc_with_link_and_twin(tmp_path_factory)  # --task detection, helpers/shared_builds.DETECTION_SPLITS
    found = plan(run.input, str(tmp_path / "records"), "--task", "detection", *SPLITS)
    assert found["rejected"]["by_reason"] == {"duplicate_member": 1, "unsupported_member": 1}
    assert found["inputs"] == 3
    assert_plan_is_the_run(found, read_manifest(run.output))


def test_a_coco_archive_is_planned_as_its_folder_and_the_run_writes_what_it_counted(tmp_path_factory, tmp_path):
    """helpers/shared_builds.write_split_coco: split files, an image that is not there, boxes of an unknown
    image and category, a malformed JSON file."""
    run = split_coco(tmp_path_factory, "coco.tar")  # converted with RESIZE
    out = str(tmp_path / "records")
    found = plan(run.input, out, *RESIZE)
    assert (found["input_kind"], found["annotations"]) == ("archived_detection", "coco")
    assert found["rejected"]["by_reason"] == {"bad_annotation": 1, "not_found": 1, "unknown_image": 1}
    assert found["inputs"] == 11
    assert {name: s["examples"] for name, s in found["splits"].items()} == COCO_SPLITS
    assert comparable(found) == comparable(plan(split_coco(tmp_path_factory).input, out, *RESIZE))
    assert_plan_is_the_run(found, read_manifest(run.output))


def test_junk_strays_and_non_images_are_listed_and_an_existing_output_is_reported_untouched(class_folder, tmp_path):
    source = str(tmp_path / "photos")
    write_tree(source, {**many_files(), **JUNK, "stray.jpg": I.jpeg(8, 8), "cat/notes.txt": b"not a picture"})
    out = tmp_path / "records"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    before = sorted((p.name, p.stat().st_mtime_ns) for p in out.iterdir())

    proc = run_in_process("convert", "--input", source, "--output", str(out), "--plan", *FAST, *SPLITS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    assert "junk skipped: 3 (.DS_Store, __MACOSX/cat/._cat_0.jpg, cat/Thumbs.db)" in text
    assert f"no_class_folder: 1 ({os.path.join(source, 'stray.jpg')})" in text
    assert "probably rejected (the content decides): 1 (cat/notes.txt)" in text
    assert "output exists (1 file(s)): a run would need --overwrite or --resume" in text
    assert "estimated run time on the local runner" in text
    assert sorted((p.name, p.stat().st_mtime_ns) for p in out.iterdir()) == before

    found = plan(source, str(out), *SPLITS)
    assert found["output"]["exists"] is True and found["output"]["files"] == 1
    assert found["rejected"]["by_reason"] == {"no_class_folder": 1}
    # The plan counts inputs: the text file sits in a class folder until converting rejects it.
    cats = sum(s["examples_per_class"].get("cat", 0) for s in found["splits"].values())
    assert cats == 12 + 1
    assert found["inputs"] == len(many_files()) + 2


@pytest.mark.parametrize(
    "args, message",
    [
        (("--json",), "--json prints the plan as JSON: give it with --plan"),
        (("--plan", "--bogus-flag"), "unrecognized argument --bogus-flag"),
        (("--plan", "--splits", "train=0.5"), "--splits: split fractions must sum to 1"),
    ],
)
def test_usage_errors_exit_2_with_one_line_and_nothing_written(args, message, class_folder, tmp_path):
    out = str(tmp_path / "records")
    proc = run_in_process("convert", "--input", class_folder, "--output", out, *args)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert proc.stdout == "" and not os.path.exists(out)


def test_a_missing_input_exits_2_with_one_line(tmp_path):
    missing = str(tmp_path / "nowhere")
    proc = run_in_process("convert", "--input", missing, "--output", str(tmp_path / "out"), "--plan", "--json")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--input {missing}: no such file or folder ({missing}); check the path" in lines[0], (
        proc.stderr
    )
    assert proc.stdout == ""


def test_the_plans_start_up_times_the_placement_a_folder_or_manifest_run_does_at_launch(class_folder, tmp_path):
    from img2tfrecord.model import WorkItem
    from img2tfrecord.pipeline.config import ConvertConfig
    from img2tfrecord.pipeline.kinds import plan_input
    from img2tfrecord.pipeline.startup import placement_seconds

    config = ConvertConfig(input=class_folder, output=str(tmp_path / "out"), analyze=False)
    kind, plan = plan_input(config)
    assert kind.places_at_launch(config) and not kind.places_at_launch(dataclasses.replace(config, dedupe=True))
    items = [WorkItem(f"/x/{c}/{i}.jpg", f"{c}/{i}.jpg", 10) for c in ("cat", "dog") for i in range(5000)]
    assert placement_seconds(config, plan, items) > 0 and placement_seconds(config, plan, []) == 0.0


def test_a_huge_image_size_is_sampled_at_a_bounded_size_and_its_bytes_scaled(tmp_path):
    """A launch (or --plan) converts its sample at most at SAMPLE_PIXELS output pixels, in the run's shape, and
    scales the bytes by the pixel count: a raw image's estimate is exact, and a plan takes seconds however
    large --image-size is."""
    from img2tfrecord.conversion.record_sizes import SAMPLE_PIXELS, sample_options, sample_sizes
    from img2tfrecord.images.options import ImageOptions
    from img2tfrecord.model import WorkItem

    assert sample_options(ImageOptions(size=(224, 224))) == (ImageOptions(size=(224, 224)), 1.0)
    huge = ImageOptions(size=(16384, 8192), format="raw")
    small, scale = sample_options(huge)
    width, height = small.size
    assert width * height <= SAMPLE_PIXELS * 1.001 and width == 2 * height
    assert scale == 16384 * 8192 / (width * height)
    path = tmp_path / "a.jpg"
    path.write_bytes(I.jpeg(40, 30))
    _, ratio = sample_sizes([WorkItem(str(path), "cat/a.jpg", path.stat().st_size)], huge)
    assert ratio * path.stat().st_size == pytest.approx(16384 * 8192 * 3)


def test_a_plan_without_the_analysis_loads_no_tensorflow(class_folder, tmp_path):
    """Nor does what its fresh interpreter imports to time a run's start-up without the analysis; and the plan
    builds its graph with Beam imported lean, as the run would (no pandas)."""
    code = (
        "import sys\n"
        "from img2tfrecord import cli\n"
        "from img2tfrecord.pipeline.fast_start import OPTIONAL_MODULES, import_beam_lean\n"
        f"code = cli.main(['convert', '--input', {class_folder!r}, '--output', {str(tmp_path / 'out')!r}, "
        "'--plan', '--no-analyze', '--format', 'keep'])\n"
        "planned = 'tensorflow' in sys.modules, 'pandas' in sys.modules\n"
        "import_beam_lean(OPTIONAL_MODULES)\n"
        "import img2tfrecord.pipeline.run\n"
        "print(code, *planned, 'tensorflow' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), timeout=300)
    assert proc.stdout.split()[-4:] == ["0", "False", "False", "False"], proc.stderr[-2000:]


def test_the_start_up_imports_are_timed_once_and_kept_for_later_plans(tmp_path, monkeypatch):
    from img2tfrecord.pipeline import startup

    monkeypatch.setenv(startup.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(startup, "_MEASURED", {})
    first = startup.ImportTimer(analysis=False)
    assert first.measuring
    seconds = first.seconds()
    assert seconds > 0 and startup.cached_import_seconds((False, True)) == round(seconds, 3)
    monkeypatch.setattr(startup, "_MEASURED", {})  # a later plan, in another process
    again = startup.ImportTimer(analysis=False)
    assert not again.measuring and again.seconds() == round(seconds, 3)
    assert startup.cached_import_seconds((True, True)) is None  # with the analysis: TensorFlow's, timed apart


def test_a_plan_and_a_run_whose_graph_cannot_be_built_leave_nothing_in_the_temporary_folder(
    class_folder, tmp_path, monkeypatch
):
    """Beam makes a temporary folder for every pipeline and removes it only when the pipeline runs."""
    import tempfile

    from img2tfrecord.pipeline import run

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    plan(class_folder, str(tmp_path / "planned"))
    assert os.listdir(temporary) == []

    def no_graph(*args, **kwargs):
        raise RuntimeError("no graph")

    monkeypatch.setattr(run, "build_pipeline", no_graph)
    proc = run_in_process("convert", "--input", class_folder, "--output", str(tmp_path / "out"), *FAST)
    assert proc.returncode == 1 and "no graph" in proc.stderr, proc.stderr[-3000:]
    assert [n for n in os.listdir(temporary) if n.startswith("beam-pipeline-temp")] == []
