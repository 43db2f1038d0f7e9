"""The product imports nothing from the lab: a static check of the import graph.

The repository holds two distributions: ``streamwal`` (the library, node, cluster,
TSO and the ``streamwal`` command) and ``streamwal-lab`` (the local stack, demo,
benchmarks, chaos runner, in ``lab/``). A user installs the product alone, so a
product module that imports the lab works in a checkout and fails in production.
This test reads every product source file with :mod:`ast` (no import, so it is fast
and sees imports inside functions too) and fails on any import of the lab or of the
developer tools' old home, ``streamwal.tools``. ``scripts/check_wheel.py`` checks the
same at run time in a virtualenv without the lab. Nor does a product module import a
test runner: test fixtures live in ``tests/``, and the backend conformance suite the
product ships (``streamwal.adaptors.testing``) runs under any runner.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: the product's source folders; streamwal/adaptors and streamwal/tso are symlinks to
#: the two root folders, walked once under their real paths
PRODUCT_DIRS = ("streamwal", "adaptors", "tso")
#: module prefixes a product module must not import
FORBIDDEN = ("streamwal_lab", "streamwal.tools")
#: test runners and their helpers, which a user's install does not have
TEST_ONLY = ("pytest", "_pytest", "pytest_asyncio", "hypothesis")


def _product_files() -> Iterator[Path]:
    """Every ``.py`` file of the product, each once, symlinked folders followed once."""
    seen: set[Path] = set()
    for top in PRODUCT_DIRS:
        for path in sorted((ROOT / top).rglob("*.py")):
            real = path.resolve()
            if real not in seen and "__pycache__" not in real.parts:
                seen.add(real)
                yield real
    # rglob does not descend into symlinked folders: the root folders above cover them
    for link in (ROOT / "streamwal").iterdir():
        if link.is_symlink() and link.is_dir():
            assert link.resolve() in {(ROOT / d).resolve() for d in PRODUCT_DIRS}, link


def _package_of(path: Path) -> str:
    """The dotted package ``path`` belongs to, for resolving relative imports."""
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts[:-1])
    if parts and parts[0] != "streamwal":  # adaptors/, tso/ are streamwal.adaptors, .tso
        parts.insert(0, "streamwal")
    return ".".join(parts)


def _imported(tree: ast.AST, package: str) -> Iterator[tuple[int, str]]:
    """``(line, module)`` for every import in ``tree``, relative ones made absolute."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield node.lineno, base
            for alias in node.names:  # `from streamwal import tools`
                yield node.lineno, f"{base}.{alias.name}"


def _forbidden(module: str, prefixes: tuple[str, ...] = FORBIDDEN) -> bool:
    return any(module == f or module.startswith(f + ".") for f in prefixes)


def _imports_of_product(prefixes: tuple[str, ...]) -> list[str]:
    """``file:line: imports module`` for each product import under ``prefixes``."""
    found = []
    for path in _product_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, module in _imported(tree, _package_of(path)):
            if _forbidden(module, prefixes):
                found.append(f"{path.relative_to(ROOT)}:{line}: imports {module}")
    return sorted(set(found))


def test_the_product_has_source_files() -> None:
    files = list(_product_files())
    names = {p.relative_to(ROOT).as_posix() for p in files}
    assert "streamwal/cli.py" in names
    assert "adaptors/pulsar/admin.py" in names
    assert "tso/cli.py" in names


def test_no_product_module_imports_the_lab() -> None:
    found = _imports_of_product(FORBIDDEN)
    assert found == [], "product modules import the lab:\n" + "\n".join(found)


def test_no_product_module_imports_a_test_runner() -> None:
    found = _imports_of_product(TEST_ONLY)
    assert found == [], "product modules import a test runner:\n" + "\n".join(found)


def test_the_tools_left_the_product_package() -> None:
    assert not (ROOT / "streamwal" / "tools").exists(), (
        "streamwal/tools/ is gone: the developer tools are lab/streamwal_lab/"
    )
