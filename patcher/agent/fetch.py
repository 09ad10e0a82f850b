"""Fetch a URL from the host itself (stdlib urllib): the live serving metrics probe.

The agent fetches, not the controller, so `http://localhost:8000/metrics` means the serving
host's own endpoint, and a metrics port that is firewalled from the operator's laptop still
works over SSH. Guard rails, because the URL comes from the command line of another machine:
http and https only (also after redirects), no proxies from the host's environment (a scrape of
localhost must not leave the host), a timeout, and a size cap on the answer.
"""

from __future__ import annotations

import http
import http.client
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

SCHEMES = ("http", "https")
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"  # Prometheus text format, not OpenMetrics


class BadURL(ValueError):
    """The URL is not something the agent will fetch (input error, not a network error)."""


def check_url(url: str) -> None:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in SCHEMES or not parts.netloc:
        raise BadURL("only http:// and https:// URLs are fetched, not %r" % url)


class _Redirects(urllib.request.HTTPRedirectHandler):
    """Follow redirects only to http(s): urllib would also follow one to ftp://."""

    def redirect_request(
        self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> Any:
        check_url(newurl)
        return urllib.request.HTTPRedirectHandler.redirect_request(
            self, req, fp, code, msg, headers, newurl
        )


class _Deadline(Exception):
    """The whole fetch ran out of time (raised by the SIGALRM handler)."""


def _alarm(signum: int, frame: Any) -> None:
    raise _Deadline()


def fetch(url: str, timeout: float = 10.0, max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, Any]:
    """{"status", "text", "seconds"} on an HTTP 200, else {"error": why, "seconds"}.

    `timeout` bounds the WHOLE fetch (connect, headers, body), not each read: a server that
    sends one byte every 2 s made a 10 s timeout last 40 s. The agent runs requests on its main
    thread, so a SIGALRM timer interrupts whatever read is waiting. Errors never quote what the
    server sent (its body is the host's data, not a message for the operator's terminal).
    Network trouble is an answer, never an exception: the controller turns it into a failed
    probe. Only a URL that is not http(s) raises (BadURL).
    """
    import signal
    import threading

    check_url(url)
    started = time.monotonic()
    timer = threading.current_thread() is threading.main_thread() and timeout > 0
    if timer:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        out = _fetch(url, timeout, max_bytes)
    except _Deadline:
        out = {"error": "timed out after %gs" % timeout}
    finally:
        if timer:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    out["seconds"] = round(time.monotonic() - started, 3)
    return out


def _fetch(url: str, timeout: float, max_bytes: int) -> dict[str, Any]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _Redirects())
    req = urllib.request.Request(url, headers={"Accept": ACCEPT, "User-Agent": "vpatch-agent"})
    out: dict[str, Any] = {}
    try:
        with opener.open(req, timeout=timeout) as resp:
            data = resp.read(max_bytes + 1)
            out["status"] = resp.status
            out["content_type"] = resp.headers.get("Content-Type", "")[:200]
        if len(data) > max_bytes:
            out = {"error": "answer is larger than %d bytes" % max_bytes}
        else:
            out["text"] = data.decode("utf-8", "replace")
    except BadURL:
        out = {"error": "redirected to a refused URL (not http or https)"}
    except urllib.error.HTTPError as exc:
        out = {"error": "HTTP %d %s" % (exc.code, _phrase(exc.code)), "status": exc.code}
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, socket.timeout):
            out = {"error": "timed out after %gs" % timeout}
        else:
            why = getattr(reason, "strerror", None) or (
                reason if isinstance(reason, str) else type(reason).__name__
            )
            out = {"error": "connection failed: %s" % why}
    except (socket.timeout, TimeoutError):
        out = {"error": "timed out after %gs" % timeout}
    except (OSError, ValueError, http.client.HTTPException) as exc:
        # e.g. BadStatusLine carries the line the server sent: name the error, not the bytes
        out = {"error": "fetch failed: %s" % (getattr(exc, "strerror", None) or type(exc).__name__)}
    return out


def _phrase(code: int) -> str:
    """The standard reason phrase (the server's own is text it chose)."""
    try:
        return http.HTTPStatus(code).phrase
    except ValueError:
        return ""
