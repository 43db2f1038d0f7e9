"""Cluster operations (drain, move, channels add/remove, delete) are writes to the
cluster's keys in etcd: etcd's own users and roles restrict them (docs/auth.md,
"Cluster operations"). On a private etcd with auth enabled (the shared one must stay
open to everyone): an operator whose etcd role may write ``<prefix>/cluster/`` only
changes the channel set through ``streamwal cluster --etcd`` with its user and
password file, and through ``ClusterClient(etcd=EtcdConfig(...))``; no credentials, or
a user whose role covers another prefix, are refused with nothing written; the
password never shows."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamwal.cluster import ClusterClient
from streamwal.cluster.moving import NoSuchNodeError
from streamwal.errors import InvalidInputError, NoSuchChannelError, StreamwalError
from streamwal.tso import EtcdConfig
from tests.tso.etcd_proc import EtcdProcess, _etcd_binary

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "/prod-a"


def _etcdctl(etcd: EtcdProcess, *args: str) -> None:
    etcdctl = str(Path(_etcd_binary()).with_name("etcdctl"))
    subprocess.run(
        [etcdctl, f"--endpoints={etcd.endpoint}", *args],
        check=True,
        capture_output=True,
        timeout=30,
    )


@pytest.fixture
def ops_etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    """The commands docs/auth.md shows: a role with read-write access to one
    cluster's keys, a user holding it, and another user whose role covers another
    prefix."""
    etcd = EtcdProcess(tmp_path / "ops-etcd")
    etcd.start()
    for args in (
        ["user", "add", "root:root-pw-SECRET"],
        ["role", "add", "streamwal-ops"],
        [
            "role",
            "grant-permission",
            "streamwal-ops",
            "--prefix=true",
            "readwrite",
            f"{PREFIX}/cluster/",
        ],
        ["user", "add", "ops:ops-pw-SECRET"],
        ["user", "grant-role", "ops", "streamwal-ops"],
        ["role", "add", "elsewhere"],
        ["role", "grant-permission", "elsewhere", "--prefix=true", "readwrite", "/other/cluster/"],
        ["user", "add", "stranger:stranger-pw-SECRET"],
        ["user", "grant-role", "stranger", "elsewhere"],
        ["auth", "enable"],
        # a cluster that exists: its balancer seeded the channel set
        ["--user=root:root-pw-SECRET", "put", f"{PREFIX}/cluster/seeded", "1"],
    ):
        _etcdctl(etcd, *args)
    yield etcd
    etcd.kill()


def _keys(etcd: EtcdProcess) -> list[str]:
    """Every key under the cluster's prefix, read as root."""
    etcdctl = str(Path(_etcd_binary()).with_name("etcdctl"))
    listed = subprocess.run(
        [
            etcdctl,
            f"--endpoints={etcd.endpoint}",
            "--user=root:root-pw-SECRET",
            *("get", "--prefix", "--keys-only", PREFIX + "/"),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return sorted(line for line in listed.stdout.splitlines() if line.strip())


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamwal.cli", *args],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=ROOT,
        check=False,
    )


def _password_file(tmp_path: Path, user: str) -> str:
    path = tmp_path / f"{user}.password"
    path.write_text(f"{user}-pw-SECRET\n")
    return str(path)


def test_the_cluster_command_logs_in_to_etcd(ops_etcd: EtcdProcess, tmp_path: Path) -> None:
    where = ["--etcd", ops_etcd.endpoint, "--prefix", PREFIX]
    ops = ["--etcd-user", "ops", "--etcd-password-file", _password_file(tmp_path, "ops")]
    stranger = [
        "--etcd-user",
        "stranger",
        "--etcd-password-file",
        _password_file(tmp_path, "stranger"),
    ]
    for who in ([], stranger):
        refused = _cli("cluster", "channels", "add", "c1", *where, *who)
        assert refused.returncode == 1, refused.stderr
        assert "SECRET" not in refused.stderr + refused.stdout
        assert _keys(ops_etcd) == [f"{PREFIX}/cluster/seeded"]  # nothing written
    added = _cli("cluster", "channels", "add", "c1", "c2", *where, *ops)
    assert added.returncode == 0, added.stderr
    assert _keys(ops_etcd) == [
        f"{PREFIX}/cluster/channels/c1",
        f"{PREFIX}/cluster/channels/c2",
        f"{PREFIX}/cluster/seeded",
    ]
    # the options also go after the action, before it, or both
    status = _cli("cluster", *ops, "status", "--json", *where)
    assert status.returncode == 0, status.stderr
    assert '"c1"' in status.stdout and "SECRET" not in status.stdout + status.stderr
    # a user without a password file (or the reverse) is a usage error
    alone = _cli("cluster", "status", *where, "--etcd-user", "ops")
    assert alone.returncode == 2 and "--etcd-password-file" in alone.stderr
    # credentials beside a node file, which has its own etcd section: refused
    config = tmp_path / "node.yaml"
    config.write_text(f"etcd:\n  endpoints: [{ops_etcd.endpoint}]\n")
    both = _cli("cluster", "status", "--config", str(config), *ops)
    assert both.returncode == 2 and "--etcd-user" in both.stderr
    # the node file's etcd user and password, as the nodes use them
    config.write_text(
        f"etcd:\n  endpoints: [{ops_etcd.endpoint}]\n  user: ops\n  password: ops-pw-SECRET\n"
        f"cluster:\n  key_prefix: {PREFIX}\n"
    )
    by_file = _cli("cluster", "status", "--config", str(config))
    assert by_file.returncode == 0, by_file.stderr


async def test_cluster_client_takes_an_etcd_config(ops_etcd: EtcdProcess) -> None:
    ops = EtcdConfig((ops_etcd.endpoint,), user="ops", password="ops-pw-SECRET")
    assert "SECRET" not in repr(ops)
    async with ClusterClient(etcd=ops, key_prefix=PREFIX, tracing=False) as client:
        # read as ops: the move is refused for the cluster's state, not by etcd
        with pytest.raises((NoSuchChannelError, NoSuchNodeError)):
            await client.move("c1", 7, timeout_s=2.0)
    stranger = EtcdConfig((ops_etcd.endpoint,), user="stranger", password="stranger-pw-SECRET")
    async with ClusterClient(etcd=stranger, key_prefix=PREFIX, tracing=False) as client:
        with pytest.raises(StreamwalError) as refused:
            await asyncio.wait_for(client.move("c1", 7, timeout_s=2.0), 30)
    assert not isinstance(refused.value, (NoSuchChannelError, NoSuchNodeError))
    assert "SECRET" not in str(refused.value) and "SECRET" not in repr(refused.value)
    assert _keys(ops_etcd) == [f"{PREFIX}/cluster/seeded"]
    with pytest.raises(InvalidInputError):
        ClusterClient([ops_etcd.endpoint], etcd=ops)
    with pytest.raises(InvalidInputError):
        ClusterClient(etcd=ops, nodes=["127.0.0.1:1"])


def test_the_console_keeps_the_etcd_section_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``streamwal produce``/``consume`` through a node file's cluster use its etcd
    section as it is (user, password and TLS), and etcd credentials given as options
    go with ``--etcd`` only."""
    from streamwal.cli import _build_parser, main
    from streamwal.console import _where_to
    from streamwal.node.config import load_config
    from tests.node.certs import TestCA

    ca = TestCA(tmp_path)
    client = ca.issue("ops", server=False, client=True)
    config = tmp_path / "node.yaml"
    config.write_text(
        "etcd:\n  endpoints: [127.0.0.1:2379]\n  user: ops\n  password: ops-pw-SECRET\n"
        f"  tls: {{ca_file: {ca.ca_file}, cert_file: {client.cert_file}, "
        f"key_file: {client.key_file}}}\n"
        "cluster:\n  enabled: true\n  key_prefix: /prod-a\n"
    )
    args = _build_parser().parse_args(["produce", "c1", "-m", "x", "--config", str(config)])
    target = _where_to(args)
    assert target.etcd == load_config(config).etcd and target.prefix == "/prod-a"
    assert target.etcd is not None and target.etcd.tls.cert_file == client.cert_file
    password = _password_file(tmp_path, "ops")
    args = _build_parser().parse_args(
        [
            *("consume", "c1", "--etcd", "127.0.0.1:2379", "--etcd-user", "ops"),
            *("--etcd-password-file", password, "--etcd-ca-file", ca.ca_file),
        ]
    )
    given = _where_to(args).etcd
    assert given is not None and (given.user, given.password) == ("ops", "ops-pw-SECRET")
    assert given.tls.ca_file == ca.ca_file
    assert main(["produce", "c1", "-m", "x", "--node", "127.0.0.1:1", "--etcd-user", "ops"]) == 2
    assert "--etcd-user" in capsys.readouterr().err
    assert main(["produce", "c1", "-m", "x", "--etcd", "127.0.0.1:2379", "--etcd-user", "ops"]) == 2
    assert "--etcd-password-file" in capsys.readouterr().err
