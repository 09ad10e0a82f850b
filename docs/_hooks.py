"""mkdocs hook: replace each `<!-- vpatch:NAME -->` line with reference text generated from the
code (patcher.docgen), so the spec, CLI and JSON references cannot drift from what vpatch does."""

from typing import Any

from patcher.docgen import expand


def on_page_markdown(markdown: str, **_: Any) -> str:
    return expand(markdown)
