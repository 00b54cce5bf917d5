"""An HTTP server on 127.0.0.1 that serves images and misbehaves on purpose, one route per fault.

    /img/<n>.jpg            a small JPEG (distinct per n)
    /slow/<n>.jpg           the same after ``slow_s``
    /missing                404
    /forbidden              403
    /limited/<id>           429 with Retry-After: 1 the first ``limited_times`` requests per id, then the image
    /flaky/<id>             500 the first time per id, then the image
    /down/<n>.jpg           503 while ``down`` is set (a server that recovers later)
    /short                  a body shorter than its Content-Length
    /loop                   a redirect to itself
    /moved/<n>.jpg          a redirect to /img/<n>.jpg
    /huge                   a body of ``huge_bytes``
    /html                   an HTML page served as image/jpeg
    /optout/<directive>     the image with X-Robots-Tag: <directive>
    /reset                  the connection closed before any answer

Every answer waits ``delay_s`` first (a remote server's latency). ``hits`` counts requests per path.
"""

from __future__ import annotations

import collections
import http.server
import io
import socket
import struct
import threading
import time
from typing import Dict

from PIL import Image


def jpeg_bytes(n: int, size: int = 48) -> bytes:
    image = Image.new("RGB", (size, size), ((n * 37) % 256, (n * 91) % 256, (n * 13) % 256))
    image.putpixel((n % size, (n // size) % size), (255, 255, 255))
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90)
    return out.getvalue()


class _NoSignalWriter(io.RawIOBase):
    """Writes to a socket without SIGPIPE when the client is gone (MSG_NOSIGNAL): a conversion running in the
    test's own process treats a SIGPIPE as its output pipe closed."""

    def __init__(self, sock: socket.socket):
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self._sock.sendall(data, socket.MSG_NOSIGNAL)
        return len(data)


class ImageServer:
    def __init__(self, delay_s: float = 0.0, slow_s: float = 3.0, limited_times: int = 1):
        self.delay_s = delay_s
        self.slow_s = slow_s
        self.limited_times = limited_times
        self.huge_bytes = 4 * 1024 * 1024
        self.down = False
        self.hits: Dict[str, int] = collections.Counter()
        self._images: Dict[int, bytes] = {}
        self._lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # no 40 ms delayed-ACK wait between headers and body

            def log_message(self, *args):
                pass

            def setup(self):
                super().setup()
                self.wfile = _NoSignalWriter(self.connection)

            def do_GET(self):
                server._answer(self)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.handle_error = lambda request, address: None  # a client gone mid-answer is expected here
        self._server.request_queue_size = 512
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> ImageServer:
        self._thread.start()
        return self

    def __exit__(self, *unused) -> None:
        self._server.shutdown()
        self._server.server_close()

    def image(self, n: int) -> bytes:
        with self._lock:
            if n not in self._images:
                self._images[n] = jpeg_bytes(n)
            return self._images[n]

    def _count(self, path: str) -> int:
        with self._lock:
            self.hits[path] += 1
            return self.hits[path]

    def _answer(self, h) -> None:
        path = h.path
        hit = self._count(path)
        if self.delay_s:
            time.sleep(self.delay_s)
        parts = path.strip("/").split("/")
        head = parts[0]

        def send(status: int, body: bytes = b"", headers: Dict[str, str] = None, length: int = None):
            h.send_response(status)
            h.send_header("Content-Type", (headers or {}).pop("Content-Type", "image/jpeg"))
            for k, v in (headers or {}).items():
                h.send_header(k, v)
            h.send_header("Content-Length", str(len(body) if length is None else length))
            h.end_headers()
            h.wfile.write(body)

        def number() -> int:
            return int(parts[-1].split(".")[0]) if parts[-1].split(".")[0].isdigit() else 0

        if head == "img":
            send(200, self.image(number()))
        elif head == "slow":
            time.sleep(self.slow_s)
            send(200, self.image(number()))
        elif head == "missing":
            send(404, b"not here", {"Content-Type": "text/plain"})
        elif head == "forbidden":
            send(403, b"no", {"Content-Type": "text/plain"})
        elif head == "limited":
            if hit <= self.limited_times:
                send(429, b"slow down", {"Retry-After": "1", "Content-Type": "text/plain"})
            else:
                send(200, self.image(number()))
        elif head == "flaky":
            if hit == 1:
                send(500, b"oops", {"Content-Type": "text/plain"})
            else:
                send(200, self.image(number()))
        elif head == "down":
            if self.down:
                send(503, b"down", {"Content-Type": "text/plain"})
            else:
                send(200, self.image(number()))
        elif head == "short":
            body = self.image(1)
            send(200, body[: len(body) // 2], length=len(body))
            h.close_connection = True
        elif head == "loop":
            send(302, b"", {"Location": "/loop"})
        elif head == "moved":
            send(301, b"", {"Location": f"/img/{number()}.jpg"})
        elif head == "huge":
            h.send_response(200)
            h.send_header("Content-Type", "image/jpeg")
            h.end_headers()  # no Content-Length: the size shows only while reading
            h.close_connection = True
            chunk = b"\xff" * 65536
            try:
                for _ in range(self.huge_bytes // len(chunk)):
                    h.wfile.write(chunk)
            except OSError:
                pass
        elif head == "html":
            send(200, b"<!doctype html><html><body>not an image</body></html>")
        elif head == "optout":
            send(200, self.image(2), {"X-Robots-Tag": parts[1]})
        elif head == "reset":
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.connection.close()
            h.close_connection = True
        else:
            send(404, b"", {"Content-Type": "text/plain"})
