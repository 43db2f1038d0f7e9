"""etcd with authentication enabled: the oracle logs in; a wrong password is a typed error."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from streamwal.errors import MisconfiguredError, UnavailableError
from streamwal.tso import EtcdConfig, InProcessTSO, TsoConfig
from tests.tso.etcd_proc import EtcdProcess, _etcd_binary

pytestmark = pytest.mark.integration


@pytest.fixture
def auth_etcd(tmp_path: Path) -> Iterator[EtcdProcess]:
    etcd = EtcdProcess(tmp_path / "auth-etcd")
    etcd.start()
    etcdctl = str(Path(_etcd_binary()).with_name("etcdctl"))
    for args in (
        ["user", "add", "root:root-pw"],
        ["user", "add", "tso:tso-pw"],
        ["user", "grant-role", "tso", "root"],
        ["auth", "enable"],
    ):
        subprocess.run(
            [etcdctl, f"--endpoints={etcd.endpoint}", *args],
            check=True,
            capture_output=True,
            timeout=30,
        )
    yield etcd
    etcd.kill()


def _as_tso(etcd: EtcdProcess, password: str) -> TsoConfig:
    """The TSO's settings on ``etcd`` as the user ``tso`` with ``password``."""
    return TsoConfig(
        etcd=EtcdConfig((etcd.endpoint,), user="tso", password=password),
        key_prefix="/auth-test",
    )


async def test_oracle_authenticates_to_etcd(auth_etcd: EtcdProcess) -> None:
    config = _as_tso(auth_etcd, "tso-pw")
    assert "tso-pw" not in repr(config)
    async with InProcessTSO(config) as tso:
        allocator = tso.allocator()
        first = await allocator.allocate()
        assert await allocator.allocate() > first


async def test_wrong_password_is_misconfigured_at_once_and_not_printed(
    auth_etcd: EtcdProcess,
) -> None:
    # etcd answered and refused: not an outage to wait out (the bound is 60 s here)
    config = replace(_as_tso(auth_etcd, "not-the-password"), unavailable_after_s=60.0)
    started = time.monotonic()
    with pytest.raises(MisconfiguredError) as err:
        async with InProcessTSO(config):
            pass
    assert time.monotonic() - started < 30
    assert "not-the-password" not in str(err.value)
    assert "refused the login of user 'tso'" in str(err.value)


async def test_an_unreachable_etcd_with_a_user_is_still_unavailable(
    auth_etcd: EtcdProcess,
) -> None:
    # a port nobody listens on: no answer at all, where the login itself needs one
    nowhere = EtcdConfig(("127.0.0.1:1",), user="tso", password="tso-pw")
    config = TsoConfig(etcd=nowhere, key_prefix="/auth-test", unavailable_after_s=2.0)
    with pytest.raises(UnavailableError):
        async with InProcessTSO(config):
            pass


def test_tso_now_logs_in_with_the_etcd_options(
    auth_etcd: EtcdProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from streamwal.cli import main

    password = tmp_path / "tso.password"
    password.write_text("tso-pw\n")
    where = ["tso", "now", "--etcd", auth_etcd.endpoint, "--prefix", "/auth-test", "--json"]
    assert main([*where, "--timeout", "2"]) == 1  # etcd with auth: no user, refused
    assert "user name is empty" in capsys.readouterr().err
    assert main([*where, "--etcd-user", "tso", "--etcd-password-file", str(password)]) == 0
    assert '"timestamp"' in capsys.readouterr().out
    password.write_text("not-the-password\n")
    assert (
        main(
            [*where, "--timeout", "2", "--etcd-user", "tso", "--etcd-password-file", str(password)]
        )
        == 1
    )
    assert "not-the-password" not in capsys.readouterr().err
