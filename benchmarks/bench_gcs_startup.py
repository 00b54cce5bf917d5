"""Launcher start-up on a big bucket: listing and plan of ``convert`` against an emulated Cloud Storage.

    .venv/bin/python benchmarks/bench_gcs_startup.py [--objects 20000] [--runs 3]

Starts ``gcp-storage-emulator`` on 127.0.0.1 (as ``tests/gcs_emulator.py``
does) on a store seeded with ``--objects`` small JPEGs in 100 class folders
(and a tenth as many under another prefix), then times
``plan_input`` (what ``convert`` does before it builds the Beam graph: one
metadata listing of the input, the layout, and the size ratio from
converting a small sample) at a tenth of the objects and at all of them, so
the growth with the object count shows, and the listing alone with change markers (what an append's
ledger holds). Counted too: the objects the
launcher opened (``FileSystems.open``), which must be the sample only. The
emulator is a single-threaded Python server, far slower per request than
Cloud Storage: the figures bound the real ones from above. Prints a table;
results go to ``benchmarks/results/bench_gcs_startup-<time>.json``.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Dict

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(os.path.dirname(_HERE), "src"), os.path.join(os.path.dirname(_HERE), "tests")]

import gcs_emulator  # noqa: E402
from common import save_result  # noqa: E402
from PIL import Image  # noqa: E402

_CLASSES = 100


def _jpeg(seed: int) -> bytes:
    image = Image.new("RGB", (32, 24), ((seed * 37) % 256, (seed * 91) % 256, (seed * 13) % 256))
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def _seed(data_dir: str, bucket: str, prefixes: Dict[str, int]) -> float:
    """Write ``count`` small JPEGs under each ``prefix/class_XX/`` straight into the emulator's on-disk store.

    Uploading through the API costs the emulator a rewrite of its whole metadata file per object
    (quadratic: about 290 s for 2,000 objects), so the store is seeded with the emulator's own
    ``Storage`` and object resources, metadata written once; returns the seconds it took.
    """
    from gcp_storage_emulator.handlers import buckets, objects
    from gcp_storage_emulator.storage import Storage

    start = time.perf_counter()
    storage = Storage(data_dir=data_dir)
    buckets.create_bucket(bucket, storage)
    listed = storage.objects.setdefault(bucket, {})
    for prefix, count in prefixes.items():
        for i in range(count):
            name = f"{prefix}/class_{i % _CLASSES:02d}/img_{i:06d}.jpg"
            data = _jpeg(i)
            resource = objects._make_object_resource("", bucket, name, "image/jpeg", len(data))
            listed[name] = objects._checksums(data, resource)
            storage._store.write_bytes(storage._object_path(bucket, name), data)
    storage._write_config_to_file()
    return time.perf_counter() - start


def _time_plan(source: str, runs: int) -> Dict[str, Any]:
    """Median seconds of ``plan_input`` over ``runs``, and the objects it opened per run."""
    from apache_beam.io.filesystems import FileSystems

    from img2tfrecord.images.options import ImageOptions
    from img2tfrecord.pipeline.config import ConvertConfig
    from img2tfrecord.pipeline.kinds import plan_input

    opened = []
    original = FileSystems.open

    def counting_open(path, *args, **kwargs):
        opened.append(path)
        return original(path, *args, **kwargs)

    FileSystems.open = counting_open  # type: ignore[method-assign]
    times = []
    try:
        for _ in range(runs):
            opened.clear()
            config = ConvertConfig(input=source, output=source + "-out", image=ImageOptions(size=(24, 24)))
            start = time.perf_counter()
            plan = plan_input(config)[1]
            times.append(time.perf_counter() - start)
    finally:
        FileSystems.open = original  # type: ignore[method-assign]
    return {"seconds": statistics.median(times), "all": times, "files": plan.sizing.num_files, "opened": len(opened)}


def _time_listing(source: str, runs: int) -> float:
    """Median seconds of the launch listing with change markers (``list_stamped``: what an append's ledger holds)."""
    from img2tfrecord.pipeline.listing import list_stamped, resolve_input

    times = []
    for _ in range(runs):
        start = time.perf_counter()
        list_stamped(resolve_input(source)[1])
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    small = max(1, args.objects // 10)
    with tempfile.TemporaryDirectory() as scratch:
        store = os.path.join(scratch, "store")
        seeded = _seed(store, gcs_emulator.BUCKET, {"small": small, "big": args.objects})
        proc, emulator = gcs_emulator.start(scratch, data_dir=store)
        os.environ.update(emulator.env)
        try:
            _time_plan(emulator.url("small"), 1)  # warm: imports, credentials, connections
            rows = [
                (small, _time_plan(emulator.url("small"), args.runs)),
                (args.objects, _time_plan(emulator.url("big"), args.runs)),
            ]
            for _, result in rows:
                prefix = "small" if result["files"] == small else "big"
                result["listing_seconds"] = _time_listing(emulator.url(prefix), args.runs)
        finally:
            gcs_emulator.stop(proc)
    print(f"seeded {small} + {args.objects} objects in {seeded:.1f} s")
    print(
        f"{'objects':>8}  {'plan s (median)':>16}  {'ms / 1000 objects':>18}  {'objects opened':>14}  listing ms / 1000"
    )
    for count, result in rows:
        assert result["files"] == count, result
        per_thousand = 1e6 * result["seconds"] / count
        listing = 1e6 * result["listing_seconds"] / count
        print(
            f"{count:>8}  {result['seconds']:>16.2f}  {per_thousand:>18.1f}  {result['opened']:>14}  {listing:>17.1f}"
        )
    doc = {"objects": args.objects, "runs": args.runs, "rows": [{"objects": c, **r} for c, r in rows]}
    save_result("bench_gcs_startup", doc, indent=1)


if __name__ == "__main__":
    main()
