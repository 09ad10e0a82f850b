"""Fetch a URL from the host itself (stdlib urllib): the live serving metrics probe.

The agent fetches, not the controller, so `http://localhost:8000/metrics` means the serving
host's own endpoint, and a metrics port that is firewalled from the operator's laptop still
works over SSH. Guard rails, because the URL comes from the command line of another machine:
http and https only (also after redirects), no proxies from the host's environment (a scrape of
localhost must not leave the host), a timeout, and a size cap on the answer.
"""

from __future__ import annotations

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


def fetch(url: str, timeout: float = 10.0, max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, Any]:
    """{"status", "text", "seconds"} on an HTTP 200, else {"error": why, "seconds"}.

    Network trouble is an answer, never an exception: the controller turns it into a failed
    probe. Only a URL that is not http(s) raises (BadURL).
    """
    check_url(url)
    started = time.monotonic()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _Redirects())
    req = urllib.request.Request(url, headers={"Accept": ACCEPT, "User-Agent": "vpatch-agent"})
    out: dict[str, Any] = {}
    try:
        with opener.open(req, timeout=timeout) as resp:
            data = resp.read(max_bytes + 1)
            out["status"] = resp.status
            out["content_type"] = resp.headers.get("Content-Type", "")
        if len(data) > max_bytes:
            out = {"error": "answer is larger than %d bytes" % max_bytes}
        else:
            out["text"] = data.decode("utf-8", "replace")
    except BadURL as exc:
        out = {"error": "redirected to a refused URL: %s" % exc}
    except urllib.error.HTTPError as exc:
        out = {"error": "HTTP %d %s" % (exc.code, exc.reason), "status": exc.code}
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, socket.timeout):
            out = {"error": "timed out after %gs" % timeout}
        else:
            out = {"error": "connection failed: %s" % (getattr(reason, "strerror", None) or reason)}
    except (socket.timeout, TimeoutError):
        out = {"error": "timed out after %gs" % timeout}
    except (OSError, ValueError, http.client.HTTPException) as exc:
        out = {"error": "fetch failed: %s" % exc}
    out["seconds"] = round(time.monotonic() - started, 3)
    return out
