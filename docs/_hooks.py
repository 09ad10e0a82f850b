"""mkdocs hooks: replace each `<!-- vpatch:NAME -->` line with reference text generated from the
code (patcher.commands._docgen), so the spec, CLI and JSON references cannot drift from what vpatch
does;
and write the man page, vpatch(1), from the same parser into the site (site/vpatch.1). Run as a
script (`make man`), it prints that page: man/vpatch.1, which the wheel installs."""

import sys
from pathlib import Path
from typing import Any

from patcher.commands._docgen import expand, manpage


def on_page_markdown(markdown: str, **_: Any) -> str:
    return expand(markdown)


def on_post_build(config: Any, **_: Any) -> None:
    (Path(config["site_dir"]) / "vpatch.1").write_text(manpage(), encoding="utf-8")


if __name__ == "__main__":
    sys.stdout.write(manpage())
