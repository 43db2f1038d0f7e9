"""Every relative link of the README and the docs leads to a file of the repository.

Docs are moved, split and deleted as the project changes; a link left pointing at a
page that went away sends a newcomer nowhere, and nothing else would notice.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: ``[text](target)`` and ``![alt](target)``, with an optional title after the target
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"`[^`]*`")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def relative_links(text: str) -> list[tuple[int, str]]:
    """The targets of the links outside code that name a local path, with their line."""
    links: list[tuple[int, str]] = []
    in_fence = False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for match in _LINK.finditer(_INLINE_CODE.sub("", line)):
            target = match.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) or target.startswith("#"):
                continue  # a URL (http:, mailto:...) or an anchor of the same page
            links.append((number, target.split("#", 1)[0]))
    return links


def test_the_link_finder_sees_links_and_images_and_skips_code_and_urls() -> None:
    text = "\n".join(
        [
            "See [the deploy guide](docs/deploy.md#tracing) and ![a plot](img/a.png).",
            "[web](https://example.org) [here](#anchor) `[not](a-link.md)`",
            "```",
            "[inside](code.md)",
            "```",
            '[titled](other.md "Title")',
        ]
    )
    assert relative_links(text) == [(1, "docs/deploy.md"), (1, "img/a.png"), (6, "other.md")]


@pytest.mark.parametrize("page", _pages(), ids=lambda page: str(page.relative_to(ROOT)))
def test_no_relative_link_dangles(page: Path) -> None:
    dangling = [
        f"{page.relative_to(ROOT)}:{line}: {target}"
        for line, target in relative_links(page.read_text())
        if not (page.parent / target).exists()
    ]
    assert not dangling, "links to files that do not exist:\n" + "\n".join(dangling)


def test_every_image_under_docs_is_shown_by_a_page() -> None:
    shown = {
        (page.parent / target).resolve()
        for page in _pages()
        for _, target in relative_links(page.read_text())
    }
    unused = sorted(
        str(image.relative_to(ROOT))
        for image in (ROOT / "docs" / "img").iterdir()
        if image.resolve() not in shown
    )
    assert not unused, f"images no page shows (delete them or show them): {unused}"
