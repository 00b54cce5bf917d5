"""URL lists: images per second and the process tree's peak memory, converting N URLs served by a local
server that answers each request after 50 ms (the work is waiting, not computing), with default settings.

    PYTHONPATH=src python benchmarks/bench_urls.py [--sizes 10000,100000] [--delay-ms 50] [--extra ARGS]

Prints one row per size: URLs, seconds, images/s, peak RSS of the convert process and its workers (MB).
The server (``tests/helpers/fast_image_server.py``: asyncio, >1,000 requests/s at 50 ms) runs in its own
process, the conversion in a fresh process (``common.CONVERT``), so neither competes for the other's GIL.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import CONVERT, package_dir, peak_tree_rss, save_result  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from helpers.fast_image_server import FastImageServer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--delay-ms", type=float, default=50.0)
    parser.add_argument("--extra", default="", help="more convert options, e.g. '--no-analyze'")
    args = parser.parse_args()
    rows = []
    env = dict(os.environ, PYTHONPATH=package_dir())
    with FastImageServer(delay_s=args.delay_ms / 1000) as server, tempfile.TemporaryDirectory() as tmp:
        for n in (int(s) for s in args.sizes.split(",")):
            listing = os.path.join(tmp, f"urls-{n}.txt")
            with open(listing, "w", encoding="utf-8") as f:
                f.writelines(f"{server.url}/img/{i % 5000}.jpg?i={i}\n" for i in range(n))
            out = os.path.join(tmp, f"out-{n}")
            cmd = [*CONVERT, "--input", listing, "--output", out, "--quiet", *shlex.split(args.extra)]
            seconds, peak = peak_tree_rss(cmd, env=env)
            rows.append(
                {"urls": n, "seconds": round(seconds, 1), "images_per_s": round(n / seconds), "peak_mb": round(peak)}
            )
            print(f"{n:>8} URLs  {seconds:7.1f} s  {n / seconds:6.0f} images/s  peak {peak:6.0f} MB", flush=True)
            shutil.rmtree(out, ignore_errors=True)
    save_result("urls", {"delay_ms": args.delay_ms, "extra": args.extra, "rows": rows})


if __name__ == "__main__":
    main()
