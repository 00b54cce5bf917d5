"""Downloading images over HTTP(S) as a good citizen, in the conversion workers (no Beam).

A :class:`Downloader` fetches many URLs at once on a pool of threads (the work is waiting, not computing):
at most ``concurrency`` requests in flight per process and ``per_host`` per host, connect and read
time-outs, a body size limit, redirects followed up to a limit, retries with backoff for transient failures
(429 honouring ``Retry-After`` up to a cap, 5xx, time-outs, dropped connections) and none for other 4xx, a
User-Agent naming the tool, and ``X-Robots-Tag`` opt-outs honoured. A failure is a :class:`DownloadError`
with one of the reasons below; whether the body is an image is decided by decoding it, not by its
Content-Type (the converter does that).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import email.utils
import os
import threading
import time
import urllib.parse
from typing import Dict, List, Optional, Sequence, Tuple

import urllib3

from img2tfrecord import __version__

# Reasons of a failed download (errors.jsonl). TRANSIENT ones may succeed later: an append with
# --retry-failed downloads those URLs again.
HTTP_404 = "http_404"  # 404 Not Found or 410 Gone
HTTP_STATUS = "http_status"  # any other 4xx (the message names the code)
SERVER_ERROR = "server_error"  # 5xx after the retries
RATE_LIMITED = "rate_limited"  # 429 after the retries
TIMEOUT = "timeout"
CONNECTION = "connection"  # refused, reset, or a body shorter than its Content-Length
TOO_LARGE = "too_large"
OPTED_OUT = "opted_out"  # X-Robots-Tag names a directive of the opt-out set
REDIRECTS = "redirects"  # more redirects than allowed, or a redirect without a usable Location
BAD_URL = "bad_url"
NOT_AN_IMAGE = "not_an_image"  # the body does not decode as an image (given by the converter)
TRANSIENT = (SERVER_ERROR, RATE_LIMITED, TIMEOUT, CONNECTION)

DEFAULT_OPT_OUT = ("noai", "noimageai", "noindex", "noimageindex")  # img2dataset's default set
DEFAULT_CONCURRENCY = 64
DEFAULT_PER_HOST = 32  # one host at 50 ms a request: 640 requests/s per process at most
DEFAULT_TIMEOUT_S = 20.0
DEFAULT_RETRIES = 2
USER_AGENT = f"img2tfrecord/{__version__} (+https://pypi.org/project/img2tfrecord/; image dataset converter)"
AGENT_NAME = "img2tfrecord"  # the name an agent-specific X-Robots-Tag directive ("img2tfrecord: noai") names
# Test-only: seconds of the first backoff and the cap on Retry-After (fast tests against a local server).
BACKOFF_ENV = "IMG2TFRECORD_DOWNLOAD_BACKOFF_S"
_REDIRECT_CODES = (301, 302, 303, 307, 308)
_CHUNK = 64 * 1024


@dataclasses.dataclass(frozen=True)
class DownloadOptions:
    """How URLs are fetched: the options ``--download-*`` and ``--opt-out`` (``max_bytes``: ``--max-file-mb``)."""

    concurrency: int = DEFAULT_CONCURRENCY
    per_host: int = DEFAULT_PER_HOST
    timeout_s: float = DEFAULT_TIMEOUT_S  # read time-out; connecting gets at most 10 s of it
    retries: int = DEFAULT_RETRIES
    max_redirects: int = 5
    opt_out: Tuple[str, ...] = DEFAULT_OPT_OUT
    backoff_s: float = 1.0  # the first retry's wait, doubled for each next one
    max_wait_s: float = 30.0  # the cap on a Retry-After (and on the backoff)
    user_agent: str = USER_AGENT

    def for_this_process(self) -> DownloadOptions:
        """These options with the test-only backoff from the environment, when it is set."""
        value = os.environ.get(BACKOFF_ENV)
        if not value:
            return self
        return dataclasses.replace(self, backoff_s=float(value), max_wait_s=float(value))


class DownloadError(Exception):
    """A URL that gave no body: ``reason`` (above) and a one-line message."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


def is_download(url: str) -> bool:
    """Whether ``url`` is fetched over HTTP(S) (other entries are read through the storage layer)."""
    return split_host(url)[0] in ("http", "https")


def opted_out(values: Sequence[str], opt_out: Sequence[str]) -> Optional[str]:
    """The first directive of ``opt_out`` the ``X-Robots-Tag`` header ``values`` give this tool, or None.
    A directive for another agent (``otherbot: noai``) does not apply."""
    wanted = {d.lower() for d in opt_out}
    for value in values:
        agent = ""
        for part in value.split(","):
            token = part.strip().lower()
            if ":" in token:
                agent, _, token = token.partition(":")
                agent, token = agent.strip(), token.strip()
            if agent and agent != AGENT_NAME:
                continue
            if token in wanted:
                return token
    return None


def split_host(url: str) -> Tuple[str, str]:
    """``(scheme, host)`` of a URL, lower-cased; a local path: ``("", "")``."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "", ""
    return scheme.lower(), rest.split("/", 1)[0].rsplit("@", 1)[-1].lower()


class Downloader:
    """Fetches URLs on ``concurrency`` threads, at most ``per_host`` at once per host. Thread-safe."""

    def __init__(self, options: DownloadOptions, max_bytes: int):
        self.options = options.for_this_process()
        self.max_bytes = max_bytes
        connect = min(10.0, self.options.timeout_s)
        self._timeout = urllib3.Timeout(connect=connect, read=self.options.timeout_s)
        self._http = urllib3.PoolManager(
            num_pools=256,
            maxsize=self.options.per_host,
            block=False,
            headers={"User-Agent": self.options.user_agent, "Accept": "image/*,*/*;q=0.5"},
        )
        self._threads = concurrent.futures.ThreadPoolExecutor(self.options.concurrency, "download")
        self._hosts: Dict[str, threading.BoundedSemaphore] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        self._http.clear()

    def submit(self, urls: Sequence[str]) -> List[concurrent.futures.Future]:
        """One future per URL, in order: its body (bytes) or a DownloadError."""
        return [self._threads.submit(self.fetch, url) for url in urls]

    def _host_slot(self, url: str) -> threading.BoundedSemaphore:
        _, host = split_host(url)
        with self._lock:
            slot = self._hosts.get(host)
            if slot is None:
                slot = self._hosts[host] = threading.BoundedSemaphore(self.options.per_host)
            return slot

    def fetch(self, url: str) -> bytes:
        """The body of ``url`` after redirects and retries; DownloadError otherwise."""
        attempts = self.options.retries + 1
        for attempt in range(attempts):
            try:
                return self._fetch_once(url)
            except _Retry as retry:
                if attempt + 1 == attempts:
                    raise retry.error from None
                wait = self.options.backoff_s * (2**attempt)
                if retry.after is not None:
                    wait = max(wait, retry.after)
                time.sleep(min(wait, self.options.max_wait_s))
        raise AssertionError("unreachable")

    def _fetch_once(self, url: str) -> bytes:
        current = url
        for _ in range(self.options.max_redirects + 1):
            if not is_download(current):
                raise DownloadError(BAD_URL, f"not an http(s) URL: {current[:200]}")
            with self._host_slot(current):
                location = self._request(current)
            if isinstance(location, bytes):
                return location
            current = location
        raise DownloadError(REDIRECTS, f"more than {self.options.max_redirects} redirects")

    def _request(self, url: str):
        """The body (bytes) or the redirect's target (str); _Retry or DownloadError otherwise."""
        try:
            response = self._http.request(
                "GET", url, preload_content=False, redirect=False, retries=False, timeout=self._timeout
            )
        except urllib3.exceptions.NewConnectionError as e:  # a subclass of the time-out error: refused first
            raise _Retry(DownloadError(CONNECTION, f"connection failed: {type(e).__name__}")) from None
        except urllib3.exceptions.TimeoutError as e:
            raise _Retry(DownloadError(TIMEOUT, f"timed out: {e}")) from None
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise _Retry(DownloadError(CONNECTION, f"connection failed: {type(e).__name__}")) from None
        try:
            found = self._response(url, response)
        except BaseException:
            response.close()  # a body left unread: the connection is not reused
            response.release_conn()
            raise
        response.release_conn()
        return found

    def _response(self, url: str, response):
        status = response.status
        if status in _REDIRECT_CODES:
            location = response.headers.get("Location")
            if not location:
                raise DownloadError(REDIRECTS, f"HTTP {status} without a Location")
            response.close()
            return urllib.parse.urljoin(url, location)
        if status == 429:
            raise _Retry(DownloadError(RATE_LIMITED, "HTTP 429 Too Many Requests"), retry_after(response.headers))
        if status >= 500:
            raise _Retry(DownloadError(SERVER_ERROR, f"HTTP {status}"), retry_after(response.headers))
        if status in (404, 410):
            raise DownloadError(HTTP_404, f"HTTP {status}")
        if not 200 <= status < 300:
            raise DownloadError(HTTP_STATUS, f"HTTP {status}")
        directive = opted_out(response.headers.getlist("X-Robots-Tag"), self.options.opt_out)
        if directive:
            raise DownloadError(OPTED_OUT, f"X-Robots-Tag: {directive}")
        length = response.headers.get("Content-Length")
        if length and length.isdigit() and int(length) > self.max_bytes:
            raise DownloadError(TOO_LARGE, f"Content-Length {length} bytes is over the limit of {self.max_bytes}")
        return self._body(response)

    def _body(self, response) -> bytes:
        started = time.monotonic()
        chunks: List[bytes] = []
        size = 0
        try:
            while True:
                chunk = response.read(_CHUNK)
                if not chunk:
                    break
                size += len(chunk)
                if size > self.max_bytes:
                    raise DownloadError(TOO_LARGE, f"body over the limit of {self.max_bytes} bytes")
                chunks.append(chunk)
                if time.monotonic() - started > 2 * self.options.timeout_s:
                    raise _Retry(DownloadError(TIMEOUT, "the body took too long"))
        except urllib3.exceptions.TimeoutError:
            raise _Retry(DownloadError(TIMEOUT, "timed out reading the body")) from None
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise _Retry(DownloadError(CONNECTION, f"the body was cut short: {type(e).__name__}")) from None
        return b"".join(chunks)


class _Retry(Exception):
    """A transient failure: tried again after a backoff (``after``: the server's Retry-After, seconds)."""

    def __init__(self, error: DownloadError, after: Optional[float] = None):
        super().__init__(error.message)
        self.error = error
        self.after = after


def retry_after(headers) -> Optional[float]:
    """The seconds a ``Retry-After`` header asks to wait (a number or an HTTP date), or None."""
    value = (headers.get("Retry-After") or "").strip()
    if not value:
        return None
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
