"""mkdocs hooks: replace each `<!-- vpatch:NAME -->` line with reference text generated from the
code (patcher.commands._docgen), so the spec, CLI and JSON references cannot drift from what vpatch
does;
draw the figures (patcher.commands._figures: Graphviz text made from the code) with `dot` into
the site as figures/NAME.svg, at build time and offline; publish the JSON Schemas `vpatch schema`
prints at stable addresses of the site, schema/spec.json and schema/result.json (what an
editor's `#:schema` line or taplo's configuration can point at);
and write the man page, vpatch(1), from the same parser into the site (site/vpatch.1). Run as a
script (`make man`), it prints that page: man/vpatch.1, which the wheel installs."""

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from patcher.commands._docgen import expand, manpage
from patcher.commands._figures import FIGURES
from patcher.commands._schema import result_schema, spec_schema

# The site's address of each schema -> the schema: byte for byte what `vpatch schema` prints.
SCHEMAS = {"schema/spec.json": spec_schema, "schema/result.json": result_schema}


def _svg(name: str, dot_text: str) -> str:
    from mkdocs.exceptions import PluginError  # here: `make man` runs this file without mkdocs

    dot = shutil.which("dot")
    if dot is None:
        raise PluginError("the figures need Graphviz's dot (Debian: apt-get install graphviz)")
    done = subprocess.run([dot, "-Tsvg"], input=dot_text, capture_output=True, text=True)
    if done.returncode != 0:
        raise PluginError(f"dot could not draw figures/{name}.svg: {done.stderr.strip()}")
    return done.stdout


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for name, (_, make) in FIGURES.items():
        files.append(File.generated(config, f"figures/{name}.svg", content=_svg(name, make())))
    for uri, schema in SCHEMAS.items():
        text = json.dumps(schema(), indent=2) + "\n"
        files.append(File.generated(config, uri, content=text))
    return files


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    depth = page.file.src_uri.count("/")
    return expand(markdown, "../" * depth)


def on_post_build(config: Any, **_: Any) -> None:
    (Path(config["site_dir"]) / "vpatch.1").write_text(manpage(), encoding="utf-8")


if __name__ == "__main__":
    sys.stdout.write(manpage())
