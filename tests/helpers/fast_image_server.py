"""An asyncio HTTP/1.1 image server on 127.0.0.1 in its own process: thousands of requests per second, each
answered after ``delay_s`` (a remote server's latency), so that a benchmark measures the converter and not
the server. It serves ``/img/<n>.jpg`` (as ``image_server.ImageServer`` does) and counts requests per path
(``hits()``, read over a pipe). Keep-alive connections; any other path is a 404.

    with FastImageServer(delay_s=0.05) as server:
        server.url  # http://127.0.0.1:<port>
"""

from __future__ import annotations

import asyncio
import collections
import multiprocessing
import os
import signal
import sys
from typing import Dict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from helpers.image_server import jpeg_bytes  # noqa: E402


def _serve(port_out, commands, delay_s: float, images: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    bodies = [jpeg_bytes(n) for n in range(images)]
    hits: Dict[str, int] = collections.Counter()

    def answer(path: str) -> bytes:
        hits[path] += 1
        name = path.split("?", 1)[0]
        if name.startswith("/img/"):
            stem = name[5:].split(".", 1)[0]
            if stem.isdigit():
                body = bodies[int(stem) % images]
                head = f"HTTP/1.1 200 OK\r\nContent-Type: image/jpeg\r\nContent-Length: {len(body)}\r\n\r\n"
                return head.encode() + body
        return b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                path = request.split(b" ", 2)[1].decode("latin-1")
                if delay_s:
                    await asyncio.sleep(delay_s)
                writer.write(answer(path))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, IndexError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
        port_out.send(server.sockets[0].getsockname()[1])
        loop = asyncio.get_running_loop()
        while True:
            command = await loop.run_in_executor(None, commands.recv)
            if command == "hits":
                commands.send(dict(hits))
            else:
                os._exit(0)  # open keep-alive connections dropped as they are: their clients are done

    asyncio.run(main())


class FastImageServer:
    def __init__(self, delay_s: float = 0.0, images: int = 5000):
        context = multiprocessing.get_context("spawn")
        self._port_in, port_out = context.Pipe(duplex=False)
        self._commands, theirs = context.Pipe()
        self._process = context.Process(target=_serve, args=(port_out, theirs, delay_s, images), daemon=True)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def hits(self) -> Dict[str, int]:
        self._commands.send("hits")
        return self._commands.recv()

    def __enter__(self) -> FastImageServer:
        self._process.start()
        if not self._port_in.poll(60):
            raise RuntimeError("the image server did not start")
        self.port = self._port_in.recv()
        return self

    def __exit__(self, *unused) -> None:
        try:
            self._commands.send("stop")
        except OSError:
            pass
        self._process.join(5)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
