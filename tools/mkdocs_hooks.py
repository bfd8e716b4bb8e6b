"""mkdocs hooks (mkdocs.yml ``hooks:``): the README is the site's home page.

docs/index.md is a placeholder; its page is the README, read when the site is built (so it never goes stale),
with links into docs/ made relative to the site (``docs/attacks.md`` -> ``attacks.md``; a file that is no page,
such as ``docs/tutorial.ipynb``, is linked as the site's copy of it; a folder, such as ``docs/decisive/``, as its
``summary.md`` page, which the navigation lists) and a pointer to the tutorial and the API reference after its
first paragraph.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _folder_page(folder: str) -> str:
    """The page a link to a docs/ folder opens on the site: the folder's summary.md (a published run's)."""
    page = ROOT / "docs" / folder / "summary.md"
    if not page.exists():
        raise ValueError(f"README links to docs/{folder}, which has no summary.md page to show on the site")
    return f"{folder}summary.md"


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001 - mkdocs' hook signature
    if page.file.src_uri != "index.md":
        return markdown
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    text = re.sub(r"\]\(docs/((?:[\w-]+/)*[\w.-]+\.\w+(?:#[\w-]+)?)\)", r"](\1)", text)
    text = re.sub(r"\]\(docs/((?:[\w-]+/)+)\)", lambda m: f"]({_folder_page(m.group(1))})", text)
    lead = ("> New to bnmem? The [tutorial notebook](tutorial.ipynb) walks through the Python API on the embedded "
            "digits data; the [API reference](api.md) renders every public name.\n\n")
    first_break = text.index("\n\n") + 2
    return text[:first_break] + lead + text[first_break:]
