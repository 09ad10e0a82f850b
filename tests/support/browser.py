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


def layout(page: Path, width: int, *, probe: bool = False, height: int = 1000) -> Layout:
    """How `page` (an index.html of a built site) lays out in a `width` px window."""
    copy = page.resolve().with_name("_vpatch_measure.html")
    script = _SCRIPT % {"probe": "true" if probe else "false", "id": MEASURE_ID}
    copy.write_text(page.read_text().replace("</body>", f"<script>{script}</script></body>"))
    try:
        with tempfile.TemporaryDirectory(prefix="vpatch-chromium-") as profile:
            dom = subprocess.run(
                [
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
                    "--dump-dom",
                    copy.as_uri(),
                ],
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
