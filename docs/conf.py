"""Sphinx configuration of accel's documentation (``docs/``).

Build: ``pip install '.[docs]'`` then ``python -m sphinx -W --keep-going -b html docs docs/_build/html``
(warnings are errors; ``tests/cli/test_docs.py`` runs the same build in CI).

Pages are Markdown (MyST); the API reference comes from the docstrings (autodoc + napoleon, Google style);
``accel-help`` renders a command's ``--help`` text from the real argument parser, so the CLI reference
cannot drift from the code.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

sys.path.insert(0, os.path.dirname(__file__))

project = "accel"
author = "accel developers"
copyright = "accel developers"  # noqa: A001 (Sphinx's name)

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True}
html_theme = "alabaster"
html_static_path: list[str] = []
html_title = "accel"
# the package's own version, without importing torch at configuration time
release = version = __import__("importlib.metadata").metadata.version("accel-portability")


class AccelHelp(SphinxDirective):
    """``.. accel-help:: CMD``: the ``accel CMD --help`` text (``accel --help`` without an argument)."""

    optional_arguments = 1

    def run(self) -> list[nodes.Node]:
        from accel.cli import build_parser

        parser = build_parser()
        argv = [*self.arguments, "--help"]
        out = io.StringIO()
        os.environ.setdefault("COLUMNS", "100")
        with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
            parser.parse_args(argv)
        text = out.getvalue()
        block = nodes.literal_block(text, text)
        block["language"] = "text"  # as printed: no highlighting that splits '--plot' into tokens
        return [block]


class AccelSchema(SphinxDirective):
    """``.. accel-schema:: NAME``: the JSON Schema document :data:`accel.cli.schemas.SCHEMAS` publishes for NAME."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        import json

        from accel.cli.schemas import SCHEMAS

        text = json.dumps(SCHEMAS[self.arguments[0]], indent=2)
        block = nodes.literal_block(text, text)
        block["language"] = "json"
        return [block]


_MARK = "<!-- every other page of docs/ is added here by conf.py -->"


def _other_pages(app, docname: str, source: list[str]) -> None:
    """Put every page of ``docs/`` that the index does not list into its table of contents (pages other
    helpers add, such as ``distributed.md``), in name order, so no page is left out of the navigation."""
    if docname != "index" or _MARK not in source[0]:
        return
    here = os.path.dirname(__file__)
    listed = set(source[0].split(_MARK)[0].split())
    pages = sorted(n[:-3] for n in os.listdir(here) if n.endswith(".md") and n[:-3] not in listed | {"index"})
    source[0] = source[0].replace(_MARK, "\n".join(pages))


def setup(app):
    app.add_directive("accel-help", AccelHelp)
    app.add_directive("accel-schema", AccelSchema)
    app.connect("source-read", _other_pages)
    return {"parallel_read_safe": True}
