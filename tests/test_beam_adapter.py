"""What img2tfrecord/transforms/beam_tfrecord_sink.py relies on inside Beam, checked against the installed Beam.

setup.py pins apache-beam to the range these tests cover. A Beam upgrade that
renames or reshapes one of these internals fails here, naming the Beam version
and the attribute, before it can fail (or silently misname shards) in a run.
"""

from __future__ import annotations

import hashlib
import inspect
import os

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.io import filebasedsink, filesystem
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import userstate
from apache_beam.transforms.userstate import BagStateSpec

from img2tfrecord.schemas import output_files
from img2tfrecord.transforms.beam_tfrecord_sink import ShardSink, WrittenShard

BEAM = f"apache-beam {beam.__version__}"

# (owner, attribute, the leading parameters the adapter passes or overrides, in order)
RELIED_ON = [
    (
        filebasedsink.FileBasedSink,
        "__init__",
        (
            "self",
            "file_path_prefix",
            "coder",
            "file_name_suffix",
            "num_shards",
            "shard_name_template",
            "mime_type",
            "compression_type",
        ),
    ),
    (filebasedsink.FileBasedSink, "open_writer", ("self", "init_result", "uid")),
    (
        filebasedsink.FileBasedSink,
        "finalize_write",
        ("self", "init_result", "writer_results", "unused_pre_finalize_results"),
    ),
    (filebasedsink.FileBasedSink, "initialize_write", ("self",)),
    (filebasedsink.FileBasedSink, "open", ("self", "temp_path")),
    (filebasedsink.FileBasedSink, "write_record", ("self", "file_handle", "value")),
    (filebasedsink.FileBasedSink, "write_encoded_record", ("self", "file_handle", "encoded_value")),
    (filebasedsink.FileBasedSink, "close", ("self", "file_handle")),
    (filebasedsink.FileBasedSinkWriter, "__init__", ("self", "sink", "temp_shard_path")),
    (filebasedsink.FileBasedSinkWriter, "write", ("self", "value")),
    (filebasedsink.FileBasedSinkWriter, "close", ("self",)),
    (filesystem.CompressedFile, "__init__", ("self", "fileobj", "compression_type")),
]


@pytest.mark.parametrize("owner, name, parameters", RELIED_ON, ids=[f"{o.__name__}.{n}" for o, n, _ in RELIED_ON])
def test_beam_still_has_each_internal_the_adapter_uses(owner, name, parameters):
    where = f"{owner.__module__}.{owner.__qualname__}.{name}"
    attribute = getattr(owner, name, None)
    assert attribute is not None, f"{BEAM}: {where} is gone; beam_tfrecord_sink.py relies on it"
    found = tuple(inspect.signature(attribute).parameters)
    assert found[: len(parameters)] == parameters, (
        f"{BEAM}: {where} changed: parameters {found}, beam_tfrecord_sink.py relies on {parameters}"
    )


def test_beam_still_has_the_compression_types_the_adapter_uses():
    for name in ("GZIP", "UNCOMPRESSED"):
        assert hasattr(filesystem.CompressionTypes, name), f"{BEAM}: CompressionTypes.{name} is gone"


def test_beam_writer_still_keeps_the_handle_its_sink_opened(tmp_path):
    sink = ShardSink(str(tmp_path), "train", 1, "none", str(tmp_path / "staging"))
    writer = sink.open_writer(sink.initialize_write(), "00000-handle")
    try:
        assert hasattr(writer, "temp_handle"), (
            f"{BEAM}: {type(writer).__qualname__} has no temp_handle; beam_tfrecord_sink.ShardFile reads it"
        )
        assert hasattr(writer.temp_handle, "file") and hasattr(writer.temp_handle, "stream"), (
            f"{BEAM}: the writer's temp_handle is not what ShardSink.open returned: {writer.temp_handle!r}"
        )
    finally:
        writer.close()


def _records(shard: int, n: int):
    return [f"shard {shard} record {i} ".encode() * (i + 1) for i in range(n)]


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_shards_written_and_committed_through_the_adapter_read_back_in_tensorflow(tmp_path, compression):
    tf = pytest.importorskip("tensorflow")
    out = str(tmp_path / "out")
    os.makedirs(out)
    staging = str(tmp_path / "run" / "shards" / "train")
    sink = ShardSink(out, "train", 3, compression, staging)
    expected = {shard: _records(shard, n) for shard, n in ((0, 5), (1, 0), (2, 7))}
    written = {}
    for shard in (2, 0, 1):  # opened out of order: the commit numbers shards by their sorted temp names
        file = sink.open_shard(shard)
        sizes = [file.bytes_written]
        for record in expected[shard]:
            file.write(record)
            sizes.append(file.bytes_written)
        written[shard] = file.close()
        assert isinstance(written[shard], WrittenShard)
        assert sizes == sorted(sizes) and file.bytes_written == written[shard].num_bytes
        assert os.path.dirname(written[shard].temp_path) == staging
        assert _sha256(written[shard].temp_path) == written[shard].sha256, f"{BEAM}: the digest missed bytes"
        assert os.path.getsize(written[shard].temp_path) == written[shard].num_bytes

    renamed = sink.commit([written[s].temp_path for s in (1, 2, 0)])
    finals = [os.path.join(out, sink.final_name(s)) for s in range(3)]
    assert sorted(renamed) == finals, f"{BEAM}: finalize_write renamed {renamed}, not {finals}"
    assert sink.final_name(0) == output_files.shard_file_name("train", 0, 3, compression)
    assert not os.path.exists(staging), f"{BEAM}: finalize_write left the temp folder"
    for shard, path in enumerate(finals):
        assert _sha256(path) == written[shard].sha256, f"{BEAM}: {path} is not the temp file of shard {shard}"
        dataset = tf.data.TFRecordDataset(path, compression_type="GZIP" if compression == "gzip" else "")
        assert [t.numpy() for t in dataset] == expected[shard], f"{BEAM}: {path} does not hold shard {shard}"

    # A resumed commit of the same split: every shard already renamed, nothing moves or goes.
    assert sink.commit([written[s].temp_path for s in range(3)]) == []
    assert [_sha256(p) for p in finals] == [written[s].sha256 for s in range(3)]


def test_a_local_folder_is_listed_as_beams_match_lists_it(tmp_path):
    """The launch lists a local folder without Beam (pipeline/listing.py); the pipeline's own reads go
    through Beam's match: both must see the same files, in the same order, with the same markers."""
    from apache_beam.io.filesystems import FileSystems

    from img2tfrecord.pipeline import listing

    root = tmp_path / "in"
    for relpath in ("a/1.jpg", "a/.hidden.jpg", "b/c/2.png", "b/3.txt", "top.jpg", "we[ird]/4.jpg", "ü/5.jpg"):
        (root / relpath).parent.mkdir(parents=True, exist_ok=True)
        (root / relpath).write_bytes(b"x" * len(relpath))
    os.symlink(root / "a" / "1.jpg", root / "link.jpg")
    os.symlink(root / "gone.jpg", root / "broken.jpg")  # Beam leaves a broken link out: so does the listing
    os.symlink(root / "b", root / "folder-link")  # not walked into, by either
    patterns = [f"{root}/**", f"{root}/*/*.jpg", f"{root}/**.png", f"{root}/we?ird?/**", f"{root}/top.jpg"]
    patterns += [f"{root}/a", f"{tmp_path}/missing/**"]
    for pattern in patterns:
        beams = [
            (m.path, m.size_in_bytes, m.last_updated_in_seconds) for m in FileSystems.match([pattern])[0].metadata_list
        ]
        assert list(listing._list(pattern).files) == beams, f"{BEAM}: {pattern}"
    assert len(listing._list(f"{root}/**").files) == 8


@pytest.mark.parametrize(
    "pattern",
    [
        "/a/*.zip",
        "/a/**",
        "/a/b?/[!x]*.jpg",
        "/a/[]x]/c",
        "/a/[^y]z",
        "/a/[open",
        "/a/back\\slash/*",
        "gs://b/d/*/*.tgz",
        "/a/é ü/*.jpg",
        "/a/[a-c]/**/x.png",
        "/a/.+()$^{}|",
    ],
)
def test_a_local_glob_is_translated_as_beams_match_translates_it(pattern):
    """The launch matches a local glob without importing Beam: with Beam's own regular expression."""
    from img2tfrecord.pipeline import listing

    assert listing.glob_regex(pattern) == filesystem.FileSystem.translate_pattern(pattern), BEAM


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--runner=FnApiRunner"],
        ["--runner", "FnApiRunner", "--direct_running_mode", "in_memory"],
        ["--runner=apache_beam.runners.portability.fn_api_runner.FnApiRunner"],
        ["--direct_running_mode=multi_processing"],
        ["--runner=FnApiRunner", "--direct_running_mode=multi_threading"],
        ["--runner=DirectRunner"],
        ["--runner=PrismRunner"],
        ["--runner=DataflowRunner", "--project=p", "--region=r"],
        ["--runner=PortableRunner", "--job_endpoint=localhost:8099"],
        ["--runner=DataflowRunner", "--runner=FnApiRunner"],
    ],
)
def test_the_launch_reads_where_the_job_converts_as_beams_options_say(args):
    """The early pool starts (without Beam) only where Beam's options run the job in this process: its
    default local runner in its default mode."""
    from apache_beam.options.pipeline_options import DirectOptions, StandardOptions

    from img2tfrecord.pipeline.config import LOCAL_RUNNER, LOCAL_RUNNING_MODE
    from img2tfrecord.pipeline.fast_start import converts_in_this_process
    from img2tfrecord.pipeline.runner import pipeline_options

    options = pipeline_options(args)
    runner = str(options.view_as(StandardOptions).runner).split(".")[-1]
    mode = options.view_as(DirectOptions).direct_running_mode
    here = runner == LOCAL_RUNNER and mode == LOCAL_RUNNING_MODE
    assert converts_in_this_process(args) == here, (args, runner, mode, BEAM)


def test_run_options_keep_their_views_and_read_and_copy_as_beams_own():
    """``RunOptions`` keeps one view per options class: a value set through one view is read through every
    view and the options, copies and pickles carry the values and no kept view, as Beam's options do."""
    import copy
    import pickle

    from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions, StandardOptions

    from img2tfrecord.pipeline.runner import RunOptions, pipeline_options

    args = ["--runner=PrismRunner", "--temp_location=/tmp/t", "--unknown_flag=1"]
    options = pipeline_options(args)
    assert isinstance(options, RunOptions)
    assert options.view_as(StandardOptions) is options.view_as(StandardOptions)
    options.view_as(SetupOptions).save_main_session = True
    assert options.view_as(SetupOptions).save_main_session is True
    options.view_as(StandardOptions).runner = "DirectRunner"
    for twin in (copy.deepcopy(options), pickle.loads(pickle.dumps(options))):
        assert "_views" not in twin.__dict__
        assert twin.view_as(StandardOptions).runner == "DirectRunner"
        assert twin.view_as(SetupOptions).save_main_session is True
    plain = PipelineOptions(args)
    plain.view_as(SetupOptions).save_main_session = True
    plain.view_as(StandardOptions).runner = "DirectRunner"
    keep = dict(retain_unknown_options=True)
    assert options.get_all_options(**keep) == plain.get_all_options(**keep)


def test_the_worker_cache_weighs_values_as_beam_does_without_listing_every_modules_globals(monkeypatch):
    """A run's options make Beam's state cache weigh side inputs and state without objsize's scan of every
    loaded module's globals: the weights of plain values are Beam's own."""
    import numpy as np
    from apache_beam.runners.worker import statecache
    from objsize import traverse

    from img2tfrecord.pipeline.runner import pipeline_options

    values = [["cat", "dog"] * 50, {"train": 3, "test": 1}, np.zeros((16, 16, 3), np.uint8), ("k", b"v" * 1000)]
    monkeypatch.setattr(statecache, "get_deep_size", statecache.get_deep_size)  # restored after the test
    beams = [statecache.get_deep_size(v) for v in values]
    pipeline_options([])
    scans = []
    original_scan = traverse._iter_modules_globals
    monkeypatch.setattr(traverse, "_iter_modules_globals", lambda: scans.append(1) or original_scan())
    assert [statecache.get_deep_size(v) for v in values] == beams
    assert scans == []


class _Plain(beam.DoFn):
    def process(self, element):
        yield element


class _Stateful(beam.DoFn):
    SEEN = BagStateSpec("seen", VarIntCoder())

    def process(self, element, seen=beam.DoFn.StateParam(SEEN)):
        seen.add(element[1])
        yield element[0], len(list(seen.read()))


_COUNT = BagStateSpec("count", VarIntCoder())


def _plain_pair(element):
    return element


def _counted_pair(element, count=beam.DoFn.StateParam(_COUNT)):
    count.add(element[1])
    return element[0], len(list(count.read()))


class _Holder:
    def twice(self, x):
        return [x, x]


def _shadowed_stateful() -> _Stateful:
    dofn = _Stateful()
    dofn.process = _plain_pair  # a plain function: Beam no longer inspects process
    return dofn


def test_dofn_specs_are_asked_once_per_class_and_shape_with_beams_answers(monkeypatch):
    """A run's options make Beam's ``get_dofn_specs`` answer once per DoFn class and set of methods its
    instances shadow (``beam.Map`` shadows ``process``), with Beam's own answers."""
    from img2tfrecord.pipeline.runner import ask_dofn_specs_once, pipeline_options

    real = userstate.get_dofn_specs
    asked = []
    monkeypatch.setattr(userstate, "get_dofn_specs", lambda dofn: asked.append(dofn) or real(dofn))
    pipeline_options([])
    assert ask_dofn_specs_once() is False  # made so once per process
    kept = userstate.get_dofn_specs
    maps = [beam.Map(_plain_pair).fn, beam.Map(_counted_pair).fn, beam.FlatMap(lambda x: [x]).fn]
    for _ in range(3):
        for dofn in (_Plain(), _Stateful(), _shadowed_stateful(), *maps):
            assert kept(dofn) == real(dofn)
    assert sorted(type(d).__name__ for d in asked) == ["CallableWrapperDoFn", "_Plain", "_Stateful", "_Stateful"]
    assert userstate.is_stateful_dofn(_Stateful()) and not userstate.is_stateful_dofn(_shadowed_stateful())
    kept(_Stateful())[0].clear()  # each caller gets its own sets
    assert kept(_Stateful()) == real(_Stateful())
    bound = beam.FlatMap(_Holder().twice).fn  # a DoFn holding a bound method of its own: asked every time
    before = len(asked)
    kept(bound), kept(bound)
    assert asked[before:] == [bound, bound]
    with beam.Pipeline(runner="FnApiRunner") as p:  # Beam still sees the state of a stateful DoFn
        out = p | beam.Create([("a", 1), ("a", 2), ("b", 3)]) | beam.ParDo(_Stateful())
        assert_that(out, equal_to([("a", 1), ("a", 2), ("b", 1)]))
