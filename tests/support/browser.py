"""The built docs site as a reader's browser lays it out: headless Chromium (Debian's `chromium`,
`make test-deps` installs it) opens a page of the site from disk at a given window width and
reports how wide each code block and table is against the box it sits in, and whether each
image loaded.

Chromium runs nothing of ours but the page: a copy of the page, beside it so its relative
links to the theme's CSS and JS still resolve, gets a script that measures on `load` and
writes the numbers into the DOM as JSON; `--dump-dom` prints that DOM. Every host name
resolves to nothing (`--host-resolver-rules`), so a page that needed the network would show
it, and the profile lives in a temporary directory, never the user's."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import tempfile
import zlib
from pathlib import Path

MEASURE_ID = "vpatch-measure"

# Each code block (`pre`; the theme scrolls its `code`) and each table's scroll box in the
# page's content: the width of what it holds (scrollWidth) against the width it is given
# (clientWidth). `probe` adds one block of 200 characters first when set: the control that
# shows the measure can see an overflow at all in this page's layout.
_SCRIPT = """
window.addEventListener("load", function () {
  var column = document.querySelector(".md-content__inner");
  if (%(probe)s) {
    var pre = document.createElement("pre"), code = document.createElement("code");
    code.textContent = "vpatch probe " + new Array(200).join("x");
    pre.appendChild(code);
    column.appendChild(pre);
  }
  var blocks = [];
  column.querySelectorAll("pre, .md-typeset__scrollwrap").forEach(function (box) {
    var inner = box.tagName === "PRE" ? (box.querySelector("code") || box) : box;
    blocks.push({kind: box.tagName === "PRE" ? "code" : "table",
                 text: box.textContent.trim().split("\\n")[0].slice(0, 80),
                 content: inner.scrollWidth, box: inner.clientWidth});
  });
  var images = [];
  column.querySelectorAll("img").forEach(function (img) {
    images.push({src: img.getAttribute("src"), width: img.naturalWidth,
                 loaded: img.complete && img.naturalWidth > 0,
                 fits: img.getBoundingClientRect().width <= column.clientWidth});
  });
  var out = document.createElement("script");
  out.type = "application/json";
  out.id = "%(id)s";
  out.textContent = JSON.stringify({column: column.clientWidth, window: window.innerWidth,
                                    page: document.documentElement.scrollWidth,
                                    blocks: blocks, images: images}).replace(/</g, "\\\\u003c");
  document.body.appendChild(out);
});
"""


@dataclasses.dataclass(frozen=True)
class Block:
    kind: str  # "code" or "table"
    text: str  # its first line, to name it in a failure
    content: int  # px its content needs
    box: int  # px it is given

    @property
    def overflows(self) -> bool:
        return self.content > self.box


@dataclasses.dataclass(frozen=True)
class Image:
    src: str
    width: int  # px the image has (0: it did not load)
    loaded: bool
    fits: bool  # drawn no wider than the column


@dataclasses.dataclass(frozen=True)
class Layout:
    window: int  # px of the window
    page: int  # px the page needs (more than `window`: the whole page scrolls sideways)
    column: int  # px of the content column
    blocks: list[Block]
    images: list[Image]

    def overflowing(self) -> list[Block]:
        return [b for b in self.blocks if b.overflows]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "headless Chromium is needed (Debian: apt-get install chromium; make test-deps)"
    return found


def _headless(profile: str, width: int, height: int) -> list[str]:
    """Chromium without a window, a profile of its own, every host name resolving to nothing."""
    return [
        chromium(),
        "--headless",
        "--no-sandbox",  # as root (CI), Chromium refuses to start with its sandbox
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
        "--virtual-time-budget=5000",
    ]


def layout(page: Path, width: int, *, probe: bool = False, height: int = 1000) -> Layout:
    """How `page` (an index.html of a built site) lays out in a `width` px window."""
    copy = page.resolve().with_name("_vpatch_measure.html")
    script = _SCRIPT % {"probe": "true" if probe else "false", "id": MEASURE_ID}
    copy.write_text(page.read_text().replace("</body>", f"<script>{script}</script></body>"))
    try:
        with tempfile.TemporaryDirectory(prefix="vpatch-chromium-") as profile:
            dom = subprocess.run(
                [*_headless(profile, width, height), "--dump-dom", copy.as_uri()],
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            ).stdout
    finally:
        copy.unlink()
    found = re.search(f'<script type="application/json" id="{MEASURE_ID}">(.*?)</script>', dom)
    assert found, f"no measure in the page Chromium rendered: {dom[-2000:]}"
    data = json.loads(found.group(1))
    return Layout(
        window=data["window"],
        page=data["page"],
        column=data["column"],
        blocks=[Block(**b) for b in data["blocks"]],
        images=[Image(**i) for i in data["images"]],
    )


# ---------------------------------------------------------------------------------------------
# A page as it renders: its DOM, a screenshot, and every request it made


@dataclasses.dataclass(frozen=True)
class Rendered:
    dom: str  # the DOM after load (--dump-dom)
    png: bytes  # the window's screenshot (--screenshot)
    requested: list[str]  # the URLs the page itself asked the network for (its net log)


def render(page: Path, width: int = 1000, height: int = 2000) -> Rendered:
    """`page` (a file, as it is: nothing added) in headless Chromium: its DOM, a screenshot
    of a `width` x `height` window, and the URLs the page requested. Every request goes into
    Chromium's net log (`--log-net-log`); the page's own are those whose network isolation
    key is the page's site (`file://`), which tells them from Chromium's background calls.
    Every name resolves to nothing, so a request is seen in the log but reaches nobody."""
    with tempfile.TemporaryDirectory(prefix="vpatch-chromium-") as tmp:
        shot, log = Path(tmp) / "shot.png", Path(tmp) / "net.json"
        dom = subprocess.run(
            [
                *_headless(f"{tmp}/profile", width, height),
                "--hide-scrollbars",
                f"--log-net-log={log}",
                f"--screenshot={shot}",
                "--dump-dom",
                page.resolve().as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
        return Rendered(dom, shot.read_bytes(), page_requests(json.loads(log.read_text())))


def page_requests(netlog: dict[str, object]) -> list[str]:
    """The URLs of the requests a file:// page started (URL_REQUEST_START_JOB events whose
    network isolation key is the file:// site), from a Chromium net log."""
    consts = netlog["constants"]
    assert isinstance(consts, dict)
    start = consts["logEventTypes"]["URL_REQUEST_START_JOB"]
    events = netlog["events"]
    assert isinstance(events, list)
    out = []
    for e in events:
        params = e.get("params") or {}
        if e["type"] == start and str(params.get("network_isolation_key", "")).startswith("file:"):
            out.append(str(params.get("url")))
    return out


def pixels(png: bytes) -> list[tuple[int, int, int]]:
    """The RGB pixels of an 8-bit RGB or RGBA PNG (Chromium's screenshots), decoded with zlib
    alone: the chunks, the inflated scanlines, each line's filter undone (PNG spec, 9.2)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, head = 8, b"", b""
    while pos < len(png):
        size = int.from_bytes(png[pos : pos + 4], "big")
        kind, data = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + size]
        if kind == b"IHDR":
            head = data
        elif kind == b"IDAT":
            idat += data
        pos += 12 + size
    width, height = int.from_bytes(head[0:4], "big"), int.from_bytes(head[4:8], "big")
    depth, colour, interlace = head[8], head[9], head[12]
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    bpp = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    prev, out = bytearray(stride), []
    for y in range(height):
        line = raw[y * (stride + 1) : (y + 1) * (stride + 1)]
        cur = _unfilter(line[0], bytearray(line[1:]), prev, bpp)
        out += [(cur[i], cur[i + 1], cur[i + 2]) for i in range(0, stride, bpp)]
        prev = cur
    return out


def _unfilter(kind: int, cur: bytearray, prev: bytearray, bpp: int) -> bytearray:
    for i in range(len(cur)):
        a = cur[i - bpp] if i >= bpp else 0
        b, c = prev[i], prev[i - bpp] if i >= bpp else 0
        if kind == 1:
            cur[i] = (cur[i] + a) & 0xFF
        elif kind == 2:
            cur[i] = (cur[i] + b) & 0xFF
        elif kind == 3:
            cur[i] = (cur[i] + (a + b) // 2) & 0xFF
        elif kind == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
            cur[i] = (cur[i] + pred) & 0xFF
    return cur
