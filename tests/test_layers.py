"""The declared layers (``docs/architecture.md``) hold, and an arrow the wrong way breaks them.

``./dev check`` runs ``lint-imports`` on the contracts in ``pyproject.toml``. These tests
check the same contracts through import-linter's own classes on grimp's graph, so that
a contract that stopped catching anything (a layer renamed, a package left out, a
contract made lenient) fails here: each wrong arrow below is added to the real graph
and must break the contract named beside it.
"""

from __future__ import annotations

import copy
import textwrap
from pathlib import Path
from typing import Any

import grimp
import pytest
from importlinter.api import read_configuration
from importlinter.contracts.acyclic_siblings import AcyclicSiblingsContract
from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.contracts.layers import LayersContract
from importlinter.contracts.protected import ProtectedContract
from importlinter.domain.contract import Contract

ROOT = Path(__file__).resolve().parent.parent
_TYPES: dict[str, type[Contract]] = {
    "layers": LayersContract,
    "forbidden": ForbiddenContract,
    "protected": ProtectedContract,
    "acyclic_siblings": AcyclicSiblingsContract,
}


def _config() -> dict[str, Any]:
    return read_configuration(str(ROOT / "pyproject.toml"))


def _build(roots: list[str]) -> grimp.ImportGraph:
    """The graph as ``lint-imports`` builds it: type-only imports included."""
    return grimp.build_graph(
        *roots, include_external_packages=False, exclude_type_checking_imports=False, cache_dir=None
    )


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return _build(_config()["session_options"]["root_packages"])


def _contracts() -> dict[str, Contract]:
    config = _config()
    return {
        options["id"]: _TYPES[options["type"]](
            name=options["name"],
            session_options=config["session_options"],
            contract_options=options,
        )
        for options in config["contracts_options"]
    }


def _kept(contract_id: str, graph: grimp.ImportGraph) -> bool:
    return bool(_contracts()[contract_id].check(copy.deepcopy(graph), verbose=False).kept)


def test_the_configuration_reads_type_only_imports() -> None:
    assert "exclude_type_checking_imports" not in _config()["session_options"]


def test_every_contract_is_kept(graph: grimp.ImportGraph) -> None:
    broken = [i for i, c in _contracts().items() if not c.check(copy.deepcopy(graph), False).kept]
    assert broken == []
    assert set(_contracts()) == {
        "product-layers",
        "wal-layers",
        "product-without-lab",
        "package-root",
        "no-cycles",
    }


@pytest.mark.parametrize(
    ("importer", "imported", "contract_id"),
    [
        # the circles that were broken
        ("streamwal.node.config", "streamwal.cluster.config", "product-layers"),
        ("streamwal.node.runtime", "streamwal.cluster.member", "product-layers"),
        ("streamwal.wal.interceptors.base", "streamwal.wal.wal", "wal-layers"),
        ("streamwal.wal.interceptors.base", "streamwal.wal.wal", "no-cycles"),
        ("streamwal.node.call_outcome", "streamwal.node.outcome", "no-cycles"),
        ("streamwal_lab.demo_common", "streamwal_lab.demo", "no-cycles"),
        ("streamwal_lab.stack.paths", "streamwal_lab.bench", "no-cycles"),
        # each arrow up between the product's layers
        ("streamwal.cluster.records", "streamwal.server.runtime", "product-layers"),
        ("streamwal.server.runtime", "streamwal.cli", "product-layers"),
        ("streamwal.tso.oracle", "streamwal.node.config", "product-layers"),
        ("streamwal.tso.oracle", "streamwal.verify.acks", "product-layers"),
        ("streamwal.adaptors.pulsar.admin", "streamwal.tso.config", "product-layers"),
        ("streamwal.wal.backend", "streamwal.adaptors.memory", "product-layers"),
        ("streamwal.errors", "streamwal.backoff", "product-layers"),
        ("streamwal.backoff", "streamwal.defaults", "product-layers"),
        ("streamwal.wal.message", "streamwal.wal.write_ahead_buffer", "wal-layers"),
        # the lab, and the package root, from inside the product
        ("streamwal.wal.config", "streamwal_lab.stack", "product-without-lab"),
        ("streamwal.node.cli_extras", "streamwal", "package-root"),
    ],
)
def test_an_arrow_the_wrong_way_breaks_a_contract(
    graph: grimp.ImportGraph, importer: str, imported: str, contract_id: str
) -> None:
    assert _kept(contract_id, graph)
    wrong = copy.deepcopy(graph)
    wrong.add_import(importer=importer, imported=imported)
    assert not _kept(contract_id, wrong)


def test_a_type_only_import_is_an_arrow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "layered"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "low.py").write_text(
        textwrap.dedent(
            """
            from typing import TYPE_CHECKING

            if TYPE_CHECKING:
                from layered.high import High
            """
        )
    )
    (package / "high.py").write_text("class High: ...\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _build(["layered"]).direct_import_exists(importer="layered.low", imported="layered.high")
