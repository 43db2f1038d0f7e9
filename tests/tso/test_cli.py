"""``streamwal tso ...`` commands through the real CLI entry point."""

from __future__ import annotations

import json
import time

import pytest

from streamwal.cli import main
from streamwal.tso.cli import check_exposure
from streamwal.tso.timestamp import compose


def test_parse_explains_a_timestamp(capsys: pytest.CaptureFixture[str]) -> None:
    ts = compose(1_735_689_600_123, 5)  # 2025-01-01T00:00:00.123Z
    assert main(["tso", "parse", str(ts)]) == 0
    out = capsys.readouterr().out
    assert f"timestamp  {ts}" in out
    assert "2025-01-01T00:00:00.123Z" in out
    assert "logical    5" in out
    assert main(["tso", "parse", hex(ts), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "timestamp": ts,
        "physical_ms": 1_735_689_600_123,
        "physical": "2025-01-01T00:00:00.123Z",
        "logical": 5,
    }


def test_parse_rejects_garbage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tso", "parse", "yesterday"]) == 2  # a wrong argument: docs/cli.md
    assert "not a timestamp" in capsys.readouterr().err


@pytest.mark.parametrize("listen", ["0.0.0.0:0", "[::]:0", ":0", "tso.example:5000"])
def test_serve_refuses_an_address_other_hosts_reach(
    listen: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The standalone service has no TLS or auth: refused before it binds or reads etcd
    (the endpoint here answers nothing), unless ``--insecure`` says so."""
    assert main(["tso", "serve", "--listen", listen, "--etcd", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert "refusing to serve" in err and "--insecure" in err and "no TLS or auth" in err
    check_exposure(listen, insecure=True)  # on purpose
    check_exposure("127.0.0.1:0", insecure=False)
    check_exposure("localhost:2379", insecure=False)


def test_now_exits_two_for_a_bad_endpoint_and_one_for_an_etcd_that_does_not_answer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["tso", "now", "--etcd", "http://x:notaport"]) == 2
    assert capsys.readouterr().err.startswith("error: invalid configuration: --etcd")
    # port 9 (discard) is closed on loopback: nothing answers
    assert main(["tso", "now", "--etcd", "127.0.0.1:9", "--timeout", "0.5"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: etcd ") and "no answer" in err, err
    assert "Traceback" not in err


@pytest.mark.integration
def test_now_allocates_increasing_timestamps(
    etcd_endpoint: str, tso_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["tso", "now", "--etcd", etcd_endpoint, "--prefix", tso_prefix, "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["timestamp"] > first["timestamp"]
    assert abs(first["physical_ms"] - time.time() * 1000) < 60_000
    assert main(["tso", "now", "--etcd", etcd_endpoint, "--prefix", tso_prefix]) == 0
    out = capsys.readouterr().out
    assert out.startswith("timestamp  ")
    assert "physical   " in out and "logical    " in out
