"""The code blocks the documents show, for the tests that run them as written."""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["ROOT", "python_block"]

ROOT = Path(__file__).resolve().parent.parent


def python_block(document: str, heading: str) -> str:
    """The first Python block under ``heading`` in ``document`` (a path from the
    repository's root), verbatim: a test runs what a reader copies, so a wrong heading
    or a missing block fails the test rather than running nothing."""
    text = (ROOT / document).read_text()
    assert heading in text, f"{document} has no section {heading!r}"
    match = re.search(r"```python\n(.*?)```", text.split(heading, 1)[1], re.S)
    assert match, f"{document} has no Python block under {heading!r}"
    return match.group(1)
