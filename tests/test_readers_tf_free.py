"""Reading a converted output without TensorFlow: random access (``SplitDataSource``) and streaming (``iter_split``).

Outputs come from the real CLI; index files from the ``tfrecord`` package's
``tfrecord2idx`` (DALI's format). Damaged copies test the errors; the
fixtures are never modified.
"""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import pickle
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import ROOT, SRC, convert, manifest_to_edit, write_manifest_doc
from helpers.processes import BLOCK_TENSORFLOW

from img2tfrecord import tfrecord_codec
from img2tfrecord.readers import datasource, records
from img2tfrecord.schemas import features as keys
from img2tfrecord.schemas import output_files

CONVERT_ARGS = ("--image-size", "64", "--splits", "train=0.8,test=0.2", "--no-analyze", "--num-shards", "3")


@pytest.fixture(scope="module")
def output(sample_dir, tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("readers") / "out")
    proc = convert(sample_dir, out, *CONVERT_ARGS)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def gzip_output(sample_dir, tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("readers_gz") / "out")
    proc = convert(sample_dir, out, *CONVERT_ARGS, "--compression", "gzip")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _copy(src: str, tmp_path, name: str = "out") -> str:
    dst = str(tmp_path / name)
    shutil.copytree(src, dst)
    return dst


def _drop_indexes(out: str) -> None:
    """Remove the index files and their manifest entries: the readers then walk the record headers."""
    shutil.rmtree(os.path.join(out, output_files.INDEX_DIR), ignore_errors=True)
    doc = manifest_to_edit(out)
    for info in doc["splits"].values():
        for shard in info["shards"]:
            shard.pop("index", None)
    write_manifest_doc(out, doc)


def _prepared(output: str, tmp_path, indexed: bool) -> str:
    """A copy of ``output`` with an index file for every shard, or with none."""
    out = _copy(output, tmp_path)
    if indexed:
        if not os.path.isdir(os.path.join(out, output_files.INDEX_DIR)):
            _write_indexes(out)
    else:
        _drop_indexes(out)
    return out


def _shard(out: str, split: str = "train", n: int = 0) -> str:
    return os.path.join(out, records.read_manifest(out).splits[split].shards[n].file)


def _tfrecord2idx():
    """The tfrecord package's ``tools/tfrecord2idx.py`` (DALI's index format), loaded from its file alone: the
    package's ``__init__`` imports torch and registers its own ``tensorflow.Example`` in protobuf's default
    pool, which then breaks importing TensorFlow; the tool itself needs neither."""
    import importlib.util

    spec = importlib.util.find_spec("tfrecord")
    assert spec is not None and spec.submodule_search_locations, "the tfrecord package is not installed"
    path = os.path.join(list(spec.submodule_search_locations)[0], "tools", "tfrecord2idx.py")
    module_spec = importlib.util.spec_from_file_location("_tfrecord2idx", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def _write_indexes(out: str) -> None:
    """``index/<shard>.idx`` for every shard, written by the tfrecord package's tfrecord2idx (DALI's format)."""
    os.makedirs(os.path.join(out, output_files.INDEX_DIR), exist_ok=True)
    create_index = _tfrecord2idx().create_index
    for info in records.read_manifest(out).splits.values():
        for shard in info.shards:
            create_index(os.path.join(out, shard.file), os.path.join(out, output_files.index_file(shard.file)))


def _sequential(out: str, split: str):
    """The split's records in shard order, parsed from the framing reader."""
    doc = records.read_manifest(out)
    compression = doc.compression.value
    return [
        records.parse_example(data, doc.spec)
        for shard in doc.splits[split].shards
        for _, _, data in records.iter_records(os.path.join(out, shard.file), compression)
    ]


def _names(examples):
    return [e[keys.FILENAME] for e in examples]


# ---------------------------------------------------------------------------
# Random access.


@pytest.mark.parametrize("indexed", [True, False])
def test_source_reads_every_record_in_shard_order(output, tmp_path, indexed):
    out = _prepared(output, tmp_path, indexed)
    assert os.path.exists(os.path.join(out, output_files.INDEX_DIR)) == indexed
    doc = records.read_manifest(out)
    for split in ("train", "test"):
        source = datasource.SplitDataSource(out, split)
        assert len(source) == doc.splits[split].num_examples > 0
        expected = _sequential(out, split)
        got = [source[i] for i in range(len(source))]
        for e, g in zip(expected, got):
            assert {k: g[k] for k in e} == e
            image = g[keys.DECODED_IMAGE]
            assert image.dtype == np.uint8 and image.shape == (64, 64, 3)
        assert len(got) == len(expected)
    assert source[-1][keys.FILENAME] == expected[-1][keys.FILENAME]
    with pytest.raises(IndexError, match="out of range"):
        source[len(source)]
    assert source.labels == doc.labels


def test_decode_false_gives_the_stored_bytes(output):
    source = datasource.SplitDataSource(output, "test", decode=False)
    example = source[0]
    assert keys.DECODED_IMAGE not in example
    assert example[keys.IMAGE_ENCODED][:2] == b"\xff\xd8"  # a JPEG


def test_index_files_in_dali_format_are_used_and_match_the_header_walk(output, tmp_path):
    out = _copy(output, tmp_path)
    shard = _shard(out, "train", 1)
    index_path = os.path.join(out, output_files.index_file(os.path.basename(shard)))
    written = open(index_path).read() if os.path.exists(index_path) else None
    walked = records.walk_offsets(shard)
    _write_indexes(out)
    with open(index_path) as f:
        dali_text = f.read()
    assert tfrecord_codec.index_text(walked) == dali_text
    if written is not None:  # convert's own index files are byte for byte tfrecord2idx's
        assert written == dali_text
    info = datasource.read_split(out, "train").shards[1]
    assert datasource.shard_offsets(info) == walked
    # The index is what is read: one that misplaces a record is caught at that record.
    entries = tfrecord_codec.parse_index(dali_text)
    (_, l0), (_, l1) = entries[0], entries[1]
    assert l0 != l1, "the test needs two records of different sizes"
    swapped = [(0, l1), (l1, l0)] + entries[2:]
    with open(os.path.join(out, output_files.index_file(os.path.basename(shard))), "w") as f:
        f.write(tfrecord_codec.index_text(swapped))
    source = datasource.SplitDataSource(out, "train")
    first = records.read_manifest(out).splits["train"].shards[0].num_records
    with pytest.raises(
        datasource.IndexMismatchError, match=r"\.idx: record 0 \(byte 0\): disagrees with .*train-00001"
    ) as e:
        source[first]
    assert e.value.record == 0
    assert source[first + 2][keys.FILENAME] == _sequential(output, "train")[first + 2][keys.FILENAME]


def test_index_declared_in_the_manifest(output, tmp_path):
    out = _copy(output, tmp_path)
    _write_indexes(out)
    doc = manifest_to_edit(out)
    for info in doc["splits"].values():
        for shard in info["shards"]:
            moved = f"{output_files.INDEX_DIR}/moved-{shard['file']}.idx"
            os.rename(os.path.join(out, output_files.index_file(shard["file"])), os.path.join(out, moved))
            shard["index"] = moved
    write_manifest_doc(out, doc)
    source = datasource.SplitDataSource(out, "test")
    assert _names(source[i] for i in range(len(source))) == _names(_sequential(out, "test"))
    os.remove(os.path.join(out, doc["splits"]["test"]["shards"][0]["index"]))
    with pytest.raises(datasource.IndexMismatchError, match="moved-test-00000-of-00003.tfrecord.idx: missing"):
        datasource.SplitDataSource(out, "test")[0]


@pytest.mark.parametrize("damage", ["shifted offset", "missing line", "extra bytes"])
def test_index_disagreeing_with_its_shard(output, tmp_path, damage):
    out = _copy(output, tmp_path)
    _write_indexes(out)
    shard = _shard(out, "train", 0)
    index_path = os.path.join(out, output_files.index_file(os.path.basename(shard)))
    with open(index_path) as f:
        entries = tfrecord_codec.parse_index(f.read())
    if damage == "shifted offset":
        entries[2] = (entries[2][0] + 1, entries[2][1])
        pattern = r"train-00000-of-00003\.tfrecord\.idx: record 2: disagrees"
    elif damage == "missing line":
        entries = entries[:-1]
        pattern = r"train-00000-of-00003\.tfrecord\.idx: lists \d+ records where dataset.json lists \d+"
    else:
        entries[-1] = (entries[-1][0], entries[-1][1] - 1)
        pattern = r"train-00000-of-00003\.tfrecord\.idx: covers \d+ bytes of .*train-00000-of-00003\.tfrecord"
    with open(index_path, "w") as f:
        f.write(tfrecord_codec.index_text(entries))
    with pytest.raises(datasource.IndexMismatchError, match=pattern):
        datasource.SplitDataSource(out, "train")[0]


def test_source_is_picklable_and_holds_no_open_file(output):
    source = datasource.SplitDataSource(output, "train")
    first = source[0]
    assert source._files, "reading opened the shard"
    copy = pickle.loads(pickle.dumps(source))
    assert not copy._files and not copy._offsets
    assert copy[0][keys.KEY_SHA256] == first[keys.KEY_SHA256]
    source.close()


def _read_range(args):
    source, start, stop = args
    return [(i, source[i][keys.FILENAME].decode()) for i in range(start, stop)]


def test_pool_of_four_reads_disjoint_ranges_exactly_once(output):
    source = datasource.SplitDataSource(output, "train")
    source[0]  # the parent has files open when the source is sent to the workers
    n = len(source)
    bounds = [round(k * n / 4) for k in range(5)]
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        parts = pool.map(_read_range, [(source, bounds[k], bounds[k + 1]) for k in range(4)])
    got = [item for part in parts for item in part]
    assert [i for i, _ in got] == list(range(n))
    names = [name for _, name in got]
    assert names == [n.decode() for n in _names(_sequential(output, "train"))]
    assert len(set(names)) == n


def test_grain_reads_a_split_with_a_global_shuffle(output):
    import grain

    source = datasource.SplitDataSource(output, "train")
    expected = sorted(_names(_sequential(output, "train")))
    dataset = grain.MapDataset.source(source).shuffle(seed=3)
    assert len(dataset) == len(source) == records.read_manifest(output).splits["train"].num_examples
    shuffled = [dataset[i][keys.FILENAME] for i in range(len(dataset))]
    assert sorted(shuffled) == expected
    assert shuffled != _names(_sequential(output, "train"))
    loader = grain.DataLoader(
        data_source=source,
        sampler=grain.samplers.IndexSampler(
            num_records=len(source), shard_options=grain.sharding.NoSharding(), shuffle=True, num_epochs=1, seed=3
        ),
        worker_count=2,
    )
    names = [example[keys.FILENAME] for example in loader]
    assert sorted(names) == expected


def test_source_works_where_tensorflow_cannot_be_imported(output, gzip_output):
    script = BLOCK_TENSORFLOW + textwrap.dedent(
        """
        import json
        try:
            import tensorflow  # noqa: F401
        except ImportError:
            pass
        else:
            raise SystemExit("tensorflow imported despite the block")

        from img2tfrecord.readers import datasource
        from img2tfrecord.schemas import features as keys

        source = datasource.SplitDataSource(sys.argv[1], "train")
        random_access = [source[i][keys.FILENAME].decode() for i in reversed(range(len(source)))]
        shapes = {str(source[i][keys.DECODED_IMAGE].shape) for i in range(len(source))}
        streamed = [e[keys.FILENAME].decode() for e in datasource.iter_split(sys.argv[2], "train")]
        loaded = sorted(m for m in sys.modules if m == "tensorflow" or m.startswith("tensorflow."))
        print(json.dumps({"random_access": random_access, "streamed": streamed, "shapes": sorted(shapes),
                          "tensorflow_modules": loaded}))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, output, gzip_output],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=SRC),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    expected = [n.decode() for n in _names(_sequential(output, "train"))]
    assert result["random_access"] == expected[::-1]
    assert sorted(result["streamed"]) == sorted(expected)  # the same seed puts the same files in the split
    assert result["shapes"] == ["(64, 64, 3)"]
    assert result["tensorflow_modules"] == []


def test_values_equal_those_of_load(output):
    import img2tfrecord

    ds = img2tfrecord.load(output, split="test", batch_size=None, shuffle=False, as_dict=True, deterministic=True)
    loaded = {}
    for example in ds.as_numpy_iterator():
        loaded[example[keys.FILENAME]] = example
    source = datasource.SplitDataSource(output, "test")
    assert len(loaded) == len(source)
    for i in range(len(source)):
        ours = source[i]
        theirs = loaded[ours[keys.FILENAME]]
        for key in records.read_manifest(output).spec:
            assert ours[key] == theirs[key], key
        pixels = np.round(theirs[keys.DECODED_IMAGE] * 255).astype(np.uint8)
        np.testing.assert_array_equal(ours[keys.DECODED_IMAGE], pixels)


def test_gzip_output_is_refused_for_random_access(gzip_output):
    with pytest.raises(ValueError, match="gzip-compressed: random access needs uncompressed shards"):
        datasource.SplitDataSource(gzip_output, "train")


# ---------------------------------------------------------------------------
# Streaming.


@pytest.mark.parametrize("num_shards", [1, 2, 3, 5])
def test_shares_of_all_workers_hold_every_record_once(output, gzip_output, num_shards):
    expected = sorted(_names(_sequential(output, "train")))
    for out in (output, gzip_output):
        shares = [
            _names(datasource.iter_split(out, "train", shard_index=k, num_shards=num_shards, decode=False))
            for k in range(num_shards)
        ]
        assert sorted(n for share in shares for n in share) == expected
        assert all(shares), "every worker gets records"
    with pytest.raises(ValueError, match="shard_index"):
        next(datasource.iter_split(output, "train", shard_index=2, num_shards=2))


def test_streamed_examples_are_decoded(gzip_output):
    example = next(datasource.iter_split(gzip_output, "test"))
    assert example[keys.DECODED_IMAGE].shape == (64, 64, 3)


# ---------------------------------------------------------------------------
# Bad input.


def _flip_data_byte(path: str, record: int) -> int:
    """Corrupt one byte of the data of ``record``; returns its offset."""
    offset, length = records.walk_offsets(path)[record]
    with open(path, "r+b") as f:
        f.seek(offset + 12 + (length - 16) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    return offset


@pytest.mark.parametrize("indexed", [True, False])
def test_wrong_record_crc(output, tmp_path, indexed):
    out = _prepared(output, tmp_path, indexed)
    shard = _shard(out, "train", 0)
    offset = _flip_data_byte(shard, 3)
    source = datasource.SplitDataSource(out, "train")
    with pytest.raises(
        datasource.CorruptRecordError,
        match=rf"train-00000-of-00003\.tfrecord: record 3 \(byte {offset}\): data checksum",
    ) as e:
        source[3]
    assert e.value.path == shard and e.value.record == 3
    assert source[2][keys.FILENAME]  # the other records still read
    with pytest.raises(datasource.CorruptRecordError, match=r"train-00000-of-00003\.tfrecord: record 3 .*checksum"):
        list(datasource.iter_split(out, "train", decode=False))


def test_wrong_record_crc_in_gzip_shard(gzip_output, tmp_path):
    out = _copy(gzip_output, tmp_path)
    shard = _shard(out, "test", 1)
    with gzip.open(shard, "rb") as f:
        plain = f.read()
    plain_path = str(tmp_path / "plain.tfrecord")
    with open(plain_path, "wb") as f:
        f.write(plain)
    _flip_data_byte(plain_path, 1)
    with open(plain_path, "rb") as f, gzip.open(shard, "wb") as g:
        g.write(f.read())
    with pytest.raises(datasource.CorruptRecordError, match=r"test-00001-of-00003\.tfrecord\.gz: record 1 "):
        list(datasource.iter_split(out, "test"))


@pytest.mark.parametrize("indexed", [True, False])
def test_shard_cut_short(output, tmp_path, indexed):
    out = _prepared(output, tmp_path, indexed)
    shard = _shard(out, "train", 2)
    entries = records.walk_offsets(shard)
    with open(shard, "r+b") as f:
        f.truncate(os.path.getsize(shard) - 100)
    source = datasource.SplitDataSource(out, "train")
    last = len(entries) - 1
    pattern = rf"train-00002-of-00003\.tfrecord: record {last} \(byte {entries[last][0]}\): "
    with pytest.raises(datasource.TruncatedShardError, match=pattern):
        source[len(source) - 1]
    with pytest.raises(datasource.TruncatedShardError, match=rf"train-00002-of-00003\.tfrecord: record {last} "):
        list(datasource.iter_split(out, "train", decode=False))


@pytest.mark.parametrize("indexed", [True, False])
def test_shard_cut_at_a_record_boundary(output, tmp_path, indexed):
    out = _prepared(output, tmp_path, indexed)
    shard = _shard(out, "test", 0)
    entries = records.walk_offsets(shard)
    with open(shard, "r+b") as f:
        f.truncate(entries[-1][0])
    with pytest.raises(
        datasource.TruncatedShardError, match=rf"test-00000-of-00003\.tfrecord: record {len(entries) - 1} .*cut short"
    ):
        datasource.SplitDataSource(out, "test")[0]
    with pytest.raises(datasource.TruncatedShardError, match=r"test-00000-of-00003\.tfrecord: record \d+ .*cut short"):
        list(datasource.iter_split(out, "test", decode=False))


def test_gzip_shard_cut_short(gzip_output, tmp_path):
    out = _copy(gzip_output, tmp_path)
    shard = _shard(out, "train", 1)
    with open(shard, "r+b") as f:
        f.truncate(os.path.getsize(shard) // 2)
    with pytest.raises(datasource.TruncatedShardError, match=r"train-00001-of-00003\.tfrecord\.gz: record \d+ "):
        list(datasource.iter_split(out, "train", decode=False))


def test_output_without_success(output, tmp_path):
    out = _copy(output, tmp_path)
    os.remove(os.path.join(out, output_files.SUCCESS_FILE))
    message = "^" + re.escape(f"{out}: the conversion is incomplete, no _SUCCESS (")
    with pytest.raises(datasource.IncompleteOutputError, match=message) as raised:
        datasource.SplitDataSource(out, "train")
    assert raised.value.path == out and isinstance(raised.value, ValueError)
    with pytest.raises(datasource.IncompleteOutputError, match=message):
        next(datasource.iter_split(out, "train"))


def test_interrupted_output_with_only_its_staging_folder(tmp_path):
    out = tmp_path / "out"
    (out / f"{output_files.RUN_FOLDER_PREFIX}0a1b2c").mkdir(parents=True)  # a run stopped before dataset.json
    (out / f"{output_files.RUN_FOLDER_PREFIX}0a1b2c" / "train-00000-of-00002.tfrecord").write_bytes(b"")
    message = (
        "^"
        + re.escape(f"{out}: the conversion is incomplete, no dataset.json and no _SUCCESS (")
        + ".*convert --resume"
    )
    with pytest.raises(datasource.IncompleteOutputError, match=message):
        datasource.SplitDataSource(str(out), "train")
    with pytest.raises(datasource.IncompleteOutputError, match=message):
        next(datasource.iter_split(str(out), "train"))
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("mine")  # not an output: FileNotFoundError, as for a missing folder
    with pytest.raises(FileNotFoundError, match="not an img2tfrecord output directory: it has no dataset.json"):
        datasource.SplitDataSource(str(empty), "train")
    with pytest.raises(FileNotFoundError, match="no such directory"):
        datasource.SplitDataSource(str(tmp_path / "nowhere"), "train")


def test_unknown_split(output):
    with pytest.raises(ValueError, match="unknown split 'validation'.*available splits: test, train"):
        datasource.SplitDataSource(output, "validation")
