"""mkdocs hooks (mkdocs.yml ``hooks:``): the README is the site's home page.

docs/index.md is a placeholder; its page is the README, read when the site is built (so it never goes stale),
with links into docs/ made relative to the site (``docs/attacks.md`` -> ``attacks.md``) and a pointer to the
tutorial and the API reference after its first paragraph.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001 - mkdocs' hook signature
    if page.file.src_uri != "index.md":
        return markdown
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    text = re.sub(r"\]\(docs/([\w.-]+\.md)", r"](\1", text)
    lead = ("> New to bnmem? The [tutorial notebook](tutorial.ipynb) walks through the Python API on the embedded "
            "digits data; the [API reference](api.md) renders every public name.\n\n")
    first_break = text.index("\n\n") + 2
    return text[:first_break] + lead + text[first_break:]
