"""``img2tfrecord.load`` from a local folder, S3 (moto) and Azure Blob Storage (Azurite) on 127.0.0.1.

    .venv/bin/python benchmarks/bench_store_load.py [--images 2000] [--runs 3]

Converts the built-in sample (``--images`` images, 64x64 JPEG, 8 shards) once, copies the output to each
store (the servers of ``tests/object_stores.py``), then times a full pass of ``load(split="train",
batch_size=64)`` over each copy: records per second and MB/s of shard bytes, medians of ``--runs``. TensorFlow
opens neither ``s3://`` nor ``azfs://``, so those passes read through the storage layer (``readers/tfdata_storage``).
The servers are single processes on the same machine: the figures compare the read paths, not the clouds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(_HERE), "tests"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    import logging

    logging.getLogger("azure").setLevel(logging.WARNING)
    from helpers.cli import run_in_process
    from object_stores import azure_server, s3_server

    import img2tfrecord
    from img2tfrecord import sample, storage
    from img2tfrecord.readers import records

    with tempfile.TemporaryDirectory() as base:
        source, out = os.path.join(base, "sample"), os.path.join(base, "out")
        sample.generate(source, images_per_class=max(1, args.images // 5), seed=1)
        done = run_in_process(
            "convert", "--input", source, "--output", out, "--image-size", "64", "--num-shards", "8",
            "--splits", "train=1", "--no-analyze",
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        doc = records.read_manifest(out)
        count = doc.live_records("train")
        size = sum(s.num_bytes or 0 for s in doc.splits["train"].shards)
        os.makedirs(os.path.join(base, "s3"))
        os.makedirs(os.path.join(base, "azure"))
        with s3_server(os.path.join(base, "s3")) as s3, azure_server(os.path.join(base, "azure")) as azure:
            paths = {"local": out}
            for store in (s3, azure):
                storage.copy_tree(out, store.url("out"))
                paths[store.name] = store.url("out")
            print(f"{count} records, {size / 1e6:.1f} MB in 8 shards; load(batch_size=64), medians of {args.runs}")
            print(f"{'where':8} {'records/s':>10} {'MB/s':>7}")
            for name, path in paths.items():
                times = []
                for _ in range(args.runs):
                    start = time.perf_counter()
                    seen = sum(int(images.shape[0]) for images, _ in img2tfrecord.load(path, batch_size=64))
                    times.append(time.perf_counter() - start)
                    assert seen == count
                median = statistics.median(times)
                print(f"{name:8} {count / median:10.0f} {size / 1e6 / median:7.1f}")


if __name__ == "__main__":
    main()
