"""``streamwal config show`` and docs/settings.md: every setting, generated from the
dataclasses, so the documentation cannot drift from the code."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from streamwal.cli import main
from streamwal.node.config import NodeConfig, load_config
from streamwal.node.settings_table import SECTION, render, settings

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "settings.md"
_BLOCK = re.compile(
    r"<!-- the table below is generated: streamwal config show --defaults -->\n\n"
    r"(?P<table>.*?)\n<!-- end of the generated table -->",
    re.S,
)


def test_the_doc_holds_the_generated_table() -> None:
    match = _BLOCK.search(DOC.read_text(encoding="utf-8"))
    assert match, "docs/settings.md lost its generated table's markers"
    assert match["table"] == render(settings(), "table", values=False), (
        "docs/settings.md differs from the code: regenerate its table with "
        "`streamwal config show --defaults` (in an environment without STREAMWAL_* variables)"
    )


def test_every_key_is_listed_once_with_a_description() -> None:
    rows = [r for r in settings() if r.type != SECTION]
    keys = [r.key for r in rows]
    assert len(keys) == len(set(keys))
    assert {r.key for r in rows if not r.description} == set()
    # every key a file can set, and nothing else (a key of the table loads)
    for row in rows:
        section, _, rest = row.key.partition(".")
        if "[]" in row.key:  # a list item's key (auth.identities[].name): the file only
            assert row.environment == ()
        else:
            assert row.environment[0] == "STREAMWAL_" + row.key.upper().replace(".", "__")
        assert section in {f for f in NodeConfig.__dataclass_fields__}, row.key
        assert rest


def test_the_defaults_are_the_standard_endpoints_whatever_the_environment() -> None:
    # the suite's environment names the lab's stack (tests/conftest.py); the defaults
    # shown are the product's
    rows = {r.key: r for r in settings()}
    assert rows["pulsar.service_url"].default == "pulsar://127.0.0.1:6650"
    assert rows["pulsar.service_url"].default_from == "STREAMWAL_PULSAR_SERVICE_URL"
    assert rows["etcd.endpoints"].default == ["127.0.0.1:2379"]
    assert rows["etcd.endpoints"].default_from == "STREAMWAL_ETCD_ENDPOINTS"
    assert rows["pulsar.admin_url"].default_from == "STREAMWAL_PULSAR_ADMIN_URL"
    assert rows["tracing.ratio"].environment == (
        "STREAMWAL_TRACING__RATIO",
        "OTEL_TRACES_SAMPLER_ARG",
    )


def test_show_gives_a_configurations_values_beside_the_defaults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "node.yaml"
    path.write_text("node:\n  id: 7\npulsar:\n  auth_token: tok-SECRET\n")
    monkeypatch.setenv("STREAMWAL_ETCD__ENDPOINTS", "e1:2379,e2:2379")
    argv = [
        "config",
        "show",
        "--config",
        str(path),
        "--set",
        "wal.retention=60",
        "--format",
        "json",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "SECRET" not in out
    rows = {r["key"]: r for r in json.loads(out)}
    assert (rows["node.id"]["value"], rows["node.id"]["default"]) == (7, 1)
    assert rows["etcd.endpoints"]["value"] == ["e1:2379", "e2:2379"]
    assert rows["wal.retention"]["value"] == 60.0
    assert rows["pulsar.auth_token"]["value"] == "<redacted>"
    assert main(["config", "show", "--defaults", "--format", "yaml"]) == 0
    listed = yaml.safe_load(capsys.readouterr().out)
    assert {r["key"] for r in listed} == {r.key for r in settings()}
    assert all("value" not in r for r in listed)


def test_a_flag_wins_over_the_environment_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "node.yaml"
    path.write_text("node:\n  id: 3\netcd:\n  endpoints: [file:2379]\n")
    config = load_config(
        path,
        environ={"STREAMWAL_NODE__ID": "4"},
        overrides=["node.id=5", "etcd.endpoints=f1:2379,f2:2379"],
    )
    assert config.node.id == 5
    assert config.etcd.endpoints == ("f1:2379", "f2:2379")


@pytest.mark.parametrize(
    ("flag", "key"),
    [
        ("pulsar.service_ulr=pulsar://x:6650", "--set pulsar.service_ulr"),
        ("pulsr.service_url=pulsar://x:6650", "--set pulsr.service_url"),
        ("wal.append_backoff=3", "--set wal.append_backoff"),
        ("node.id", "--set node.id"),
        ("node.id=seven", "node.id"),
    ],
)
def test_a_bad_flag_is_named(flag: str, key: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show", "--set", flag]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"invalid configuration: {key}"), err


def test_channel_status_reads_a_node_file_through_the_same_loader(tmp_path: Path) -> None:
    import argparse

    from streamwal.node.channel_status import register
    from streamwal.node.cli_options import pulsar_from_args as _pulsar_config

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    path = tmp_path / "node.yaml"
    path.write_text(
        "pulsar:\n  service_url: pulsar://file:6650\n  tenant: acme\n"
        "  admin_url: http://file-admin:8080\n  auth_token: tok\n"
    )
    args = parser.parse_args(["channel", "status", "ch", "--config", str(path)])
    config = _pulsar_config(args)
    assert (config.service_url, config.tenant, config.namespace) == (
        "pulsar://file:6650", "acme", "default"
    )  # fmt: skip
    assert (config.admin_url, config.auth_token, config.client_log_file) == (
        "http://file-admin:8080", "tok", None
    )  # fmt: skip
    args = parser.parse_args(
        ["channel", "status", "ch", "--config", str(path), "--pulsar", "pulsar://flag:6650",
         "--namespace", "wal", "--set", "pulsar.tenant=other"]
    )  # fmt: skip
    config = _pulsar_config(args)
    assert (config.service_url, config.tenant, config.namespace) == (
        "pulsar://flag:6650", "other", "wal"
    )  # fmt: skip
    assert config.admin_url is None  # the file's admin API is its broker's, not the flag's
