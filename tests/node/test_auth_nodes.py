"""Who may do what, end to end: two node processes with mutual TLS and ``auth.enabled``.

Each identity (an admin and a producer by token, a consumer by token, an operator by
client certificate, the nodes' peer token, and a caller whose certificate names no
identity) tries every RPC of every service the node serves. The answers are checked
against the rule table, and after the refused calls the state is: nothing written
to the channel, nothing truncated, no checkpoint, the owner not fenced, the etcd keys
unchanged. Node 2 takes its timestamps from node 1's TSO with its peer token.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import etcd3
import grpc
import pytest
import yaml

from streamwal.adaptors.pulsar import PulsarConfig
from streamwal.adaptors.pulsar.admin import PulsarAdmin
from streamwal.cluster.client import ClusterClient
from streamwal.cluster.proto import routing_pb2, routing_pb2_grpc
from streamwal.errors import UnauthenticatedError
from streamwal.node.auth import RULES
from streamwal.node.proto import streaming_pb2 as pb
from streamwal.node.proto import streaming_pb2_grpc as pb_grpc
from streamwal.tso import ClientTLS
from streamwal.tso.proto import tso_pb2, tso_pb2_grpc
from streamwal_lab.stack import StackInfo
from streamwal_lab.stack.process import port_in_use
from tests.node.certs import CertPair, TestCA
from tests.node.processes import NodeProcess, free_port, serve_once, streamwal_cli

pytestmark = pytest.mark.integration

_NODE = "/streamwal.v1.StreamingNode/"
_CODES = {code.value[0]: code for code in grpc.StatusCode}
_ADMIN_CALLS = ("AssignChannel", "RemoveChannel", "Truncate", "DeleteChannel")


@dataclass(frozen=True)
class Caller:
    name: str
    roles: frozenset[str]
    token: str | None
    cert: CertPair


@dataclass
class World:
    one: NodeProcess
    two: NodeProcess
    ca: TestCA
    callers: dict[str, Caller]
    main: str  # inside the writer's prefix, owned by node 1
    other: str  # outside it
    prefix: str
    tso_prefix: str
    folder: Path

    def channel(self, caller: Caller) -> grpc.aio.Channel:
        tls = ClientTLS(
            ca_file=self.ca.ca_file, cert_file=caller.cert.cert_file, key_file=caller.cert.key_file
        )
        return grpc.aio.secure_channel(self.one.address, tls.credentials())

    def metadata(self, caller: Caller) -> tuple[tuple[str, str], ...]:
        return () if caller.token is None else (("authorization", f"Bearer {caller.token}"),)


@pytest.fixture(scope="module")
async def world(
    stack: StackInfo, module_workdir: Path, module_etcd_prefix: Callable[[str], str]
) -> AsyncIterator[World]:
    folder = module_workdir
    ca = TestCA(folder)
    node_cert = ca.issue("node", server=True, client=True)
    stranger = ca.issue("client", server=False, client=True)
    ops = ca.issue("ops", server=False, client=True)
    uid = uuid.uuid4().hex[:8]
    prefix = f"auth-{uid}-a-"
    tokens = {}
    for name in ("admin", "writer", "reader", "peer"):
        tokens[name] = f"{name}-{uuid.uuid4().hex}"
        (folder / f"{name}.token").write_text(tokens[name] + "\n")

    def identity(name: str, roles: list[str], **extra: Any) -> dict[str, Any]:
        return {"name": name, "roles": roles, **extra}

    identities = [
        identity("admin", ["admin"], token_file=str(folder / "admin.token")),
        identity(
            "writer", ["producer"], channels=[prefix], token_file=str(folder / "writer.token")
        ),
        identity("reader", ["consumer"], token_env="AUTH_TEST_READER_TOKEN"),
        identity("ops", ["admin", "consumer"], certificate="ops"),
        identity("peer", ["node"], token_file=str(folder / "peer.token")),
    ]
    tso_prefix = module_etcd_prefix("auth")
    node_tls = {"cert_file": node_cert.cert_file, "key_file": node_cert.key_file}
    auth: dict[str, Any] = {"enabled": True, "identities": identities}
    common: dict[str, Any] = {
        "pulsar": {"service_url": stack.pulsar_url},
        "etcd": {"endpoints": [stack.etcd_endpoint]},
        "node": {"tls": {**node_tls, "ca_file": ca.ca_file}, "log_format": "text"},
        "auth": auth,
    }
    tso = {
        "mode": "in-process",
        "key_prefix": tso_prefix,
        "tls": {**node_tls, "ca_file": ca.ca_file, "server_name": "localhost"},
    }
    one = NodeProcess(folder, 1, {**common, "tso": tso})
    two = NodeProcess(
        folder,
        2,
        {
            **common,
            "tso": {**tso, "remote_addresses": [one.address]},
            "auth": {**auth, "peer_token_file": str(folder / "peer.token")},
        },
    )
    env = {"AUTH_TEST_READER_TOKEN": tokens["reader"]}
    callers = {
        "admin": Caller("admin", frozenset({"admin"}), tokens["admin"], stranger),
        "writer": Caller("writer", frozenset({"producer"}), tokens["writer"], stranger),
        "reader": Caller("reader", frozenset({"consumer"}), tokens["reader"], stranger),
        "ops": Caller("ops", frozenset({"admin", "consumer"}), None, ops),
        "peer": Caller("peer", frozenset({"node"}), tokens["peer"], stranger),
        "nobody": Caller("nobody", frozenset(), None, stranger),
    }
    world = World(
        one, two, ca, callers, f"{prefix}main", f"auth-{uid}-b-other", prefix, tso_prefix, folder
    )
    try:
        await one.start(env)
        await two.start(env)
        yield world
    finally:
        codes = [await two.terminate(), await one.terminate()]
        admin = PulsarAdmin(stack.pulsar_admin_url)
        for name in (world.main, world.other, *(f"{prefix}scratch-{c}" for c in callers)):
            topic = PulsarAdmin.topic_path(PulsarConfig(service_url=stack.pulsar_url).topic(name))
            await admin.delete(f"{topic}?force=true")
    assert codes == [0, 0], "a node did not stop cleanly"


def _requests(method: str, channel: str, tag: str, message_id: bytes) -> Iterator[Any]:
    message = pb.Message(type="insert", payload=tag.encode())
    requests: dict[str, Any] = {
        "AssignChannel": pb.AssignChannelRequest(pchannel=channel),
        "RemoveChannel": pb.RemoveChannelRequest(pchannel=channel),
        "Truncate": pb.TruncateRequest(pchannel=channel, retention_s=0),
        "DeleteChannel": pb.DeleteChannelRequest(pchannel=channel),
        "Produce": pb.ProduceRequest(pchannel=channel, message=message),
        "ProduceStream": pb.ProduceRequest(pchannel=channel, message=message),
        "ProduceBatch": pb.ProduceBatchRequest(pchannel=channel, messages=[message]),
        "ProduceBatchStream": pb.ProduceBatchRequest(pchannel=channel, messages=[message]),
        "BeginTxn": pb.BeginTxnRequest(pchannel=channel, vchannel="v"),
        "CommitTxn": pb.TxnRequest(pchannel=channel, txn_id=424242),
        "RollbackTxn": pb.TxnRequest(pchannel=channel, txn_id=424242),
        "KeepAliveTxn": pb.TxnRequest(pchannel=channel, txn_id=424242),
        "Consume": pb.ConsumeRequest(pchannel=channel, policy=pb.DeliveryPolicy(all=pb.Empty())),
        "ConsumeBatch": pb.ConsumeRequest(
            pchannel=channel, policy=pb.DeliveryPolicy(all=pb.Empty())
        ),
        "GetMVCC": pb.GetMVCCRequest(pchannel=channel),
        "Checkpoint": pb.CheckpointRequest(pchannel=channel, consumer=tag, message_id=message_id),
        "RemoveCheckpoint": pb.RemoveCheckpointRequest(pchannel=channel, consumer=tag),
        "GetRetention": pb.GetRetentionRequest(pchannel=channel),
        "ListChannels": pb.ListChannelsRequest(),
        "LookupChannel": routing_pb2.LookupChannelRequest(pchannel=channel),
        "AllocTimestamp": tso_pb2.AllocTimestampRequest(count=1),
    }
    yield requests[method]


async def _attempt(
    rpc: grpc.aio.Channel, full: str, request: Any, metadata: tuple[tuple[str, str], ...]
) -> grpc.StatusCode:
    """The call's status (OK, or what it ended with); a stream's first answer counts."""
    method = full.rpartition("/")[2]
    if full.startswith("/streamwal.cluster"):
        callable_: Any = routing_pb2_grpc.ClusterRoutingStub(rpc).LookupChannel
    elif full.startswith("/streamwal.tso"):
        callable_ = tso_pb2_grpc.TSOStub(rpc).AllocTimestamp
    elif full.startswith("/grpc.health"):
        return grpc.StatusCode.OK  # open: the health tests cover it
    else:
        callable_ = getattr(pb_grpc.StreamingNodeStub(rpc), method)
    try:
        if method in ("ProduceStream", "ProduceBatchStream"):
            call = callable_(iter([request]), metadata=metadata, timeout=10)
            answer = await asyncio.wait_for(call.read(), 10)
            call.cancel()
            # a produce stream answers a refused frame in band, as a failed append
            error = answer.error if method == "ProduceStream" else answer.results[0].error
            if error.code:
                return _CODES[error.code]
        elif method in ("Consume", "ConsumeBatch"):
            call = callable_(request, metadata=metadata, timeout=10)
            await asyncio.wait_for(call.read(), 10)
            call.cancel()
        else:
            await callable_(request, metadata=metadata, timeout=10)
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


def _allowed(caller: Caller, full: str) -> bool:
    rule = RULES[full]
    return rule.open or not rule.roles.isdisjoint(caller.roles)


async def _etcd_keys(stack: StackInfo, prefix: str) -> set[str]:
    host, _, port = stack.etcd_endpoint.rpartition(":")
    client = etcd3.client(host, int(port), timeout=5)
    try:
        found = await asyncio.to_thread(lambda: list(client.get_prefix(prefix, keys_only=True)))
        return {meta.key.decode() for _, meta in found}
    finally:
        client.close()


async def test_every_identity_tries_every_call(world: World, stack: StackInfo) -> None:
    c = world.callers
    admin_rpc, writer_rpc, reader_rpc = (world.channel(c[n]) for n in ("admin", "writer", "reader"))
    admin_stub = pb_grpc.StreamingNodeStub(admin_rpc)
    writer_stub = pb_grpc.StreamingNodeStub(writer_rpc)
    reader_stub = pb_grpc.StreamingNodeStub(reader_rpc)
    md = world.metadata
    await admin_stub.AssignChannel(
        pb.AssignChannelRequest(pchannel=world.main), metadata=md(c["admin"])
    )
    await admin_stub.AssignChannel(
        pb.AssignChannelRequest(pchannel=world.other), metadata=md(c["admin"])
    )
    first = await writer_stub.Produce(
        pb.ProduceRequest(pchannel=world.main, message=pb.Message(type="insert", payload=b"first")),
        metadata=md(c["writer"]),
    )
    keys_before = await _etcd_keys(stack, world.tso_prefix)

    wrong: list[str] = []
    written: set[str] = set()
    refused_tags: set[str] = set()
    deleted: set[str] = set()  # the callers whose DeleteChannel of their scratch went
    for who, caller in c.items():
        rpc = world.channel(caller)
        for full in RULES:
            method = full.rpartition("/")[2]
            allowed = _allowed(caller, full)
            tag = f"{who}-{method}"
            channel = world.main
            if allowed and method in _ADMIN_CALLS:
                channel = f"{world.prefix}scratch-{who}"  # the main channel stays put
            if RULES[full].open:
                continue  # health: open, covered by the gate's tests
            request = next(_requests(method, channel, tag, first.message_id))
            code = await _attempt(rpc, full, request, md(caller))
            refusal = code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
            if allowed and refusal:
                wrong.append(f"{who} {method}: refused ({code.name}) but allowed")
            if not allowed:
                refused_tags.add(tag)
                expected = (
                    grpc.StatusCode.UNAUTHENTICATED
                    if who == "nobody"
                    else grpc.StatusCode.PERMISSION_DENIED
                )
                if code != expected:
                    wrong.append(f"{who} {method}: {code.name}, expected {expected.name}")
            elif method.startswith("Produce") and code == grpc.StatusCode.OK:
                written.add(tag)
            elif method == "DeleteChannel" and code == grpc.StatusCode.OK:
                deleted.add(who)
        await rpc.close()
    assert wrong == []
    assert written == {
        f"writer-{m}" for m in ("Produce", "ProduceStream", "ProduceBatch", "ProduceBatchStream")
    }

    # the writer is limited to its prefix
    with pytest.raises(grpc.aio.AioRpcError) as outside:
        await writer_stub.Produce(
            pb.ProduceRequest(
                pchannel=world.other, message=pb.Message(type="insert", payload=b"outside")
            ),
            metadata=md(c["writer"]),
        )
    assert outside.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert world.other in (outside.value.details() or "")
    assert "Produce" in (outside.value.details() or "")

    # a refused AssignChannel on node 2 fenced nothing: node 1 still owns and writes
    tls = ClientTLS(
        ca_file=world.ca.ca_file,
        cert_file=c["writer"].cert.cert_file,
        key_file=c["writer"].cert.key_file,
    )
    two_rpc = grpc.aio.secure_channel(world.two.address, tls.credentials())
    for who in ("writer", "reader", "nobody"):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await pb_grpc.StreamingNodeStub(two_rpc).AssignChannel(
                pb.AssignChannelRequest(pchannel=world.main), metadata=md(c[who])
            )
        assert refused.value.code() in (
            grpc.StatusCode.PERMISSION_DENIED,
            grpc.StatusCode.UNAUTHENTICATED,
        )
    last = await writer_stub.Produce(
        pb.ProduceRequest(pchannel=world.main, message=pb.Message(type="insert", payload=b"last")),
        metadata=md(c["writer"]),
    )
    listed = await reader_stub.ListChannels(pb.ListChannelsRequest(), metadata=md(c["reader"]))
    mine = {ch.pchannel: ch for ch in listed.channels}
    assert world.main in mine and not mine[world.main].fenced
    assert list(listed.fenced) == []
    on_two = await pb_grpc.StreamingNodeStub(two_rpc).ListChannels(
        pb.ListChannelsRequest(), metadata=md(c["reader"])
    )
    assert world.main not in {ch.pchannel for ch in on_two.channels}

    # nothing truncated, no refused checkpoint
    retention = await reader_stub.GetRetention(
        pb.GetRetentionRequest(pchannel=world.main), metadata=md(c["reader"])
    )
    assert retention.truncated_before == b""
    consumers = {r.consumer for r in retention.consumers}
    assert consumers & refused_tags == set()
    assert {"reader-Checkpoint", "ops-Checkpoint"} <= consumers  # the allowed ones

    # the log holds the allowed writes and none of the refused ones
    payloads: list[bytes] = []
    call = reader_stub.Consume(
        pb.ConsumeRequest(pchannel=world.main, policy=pb.DeliveryPolicy(all=pb.Empty())),
        metadata=md(c["reader"]),
        timeout=30,
    )
    async for message in call:
        payloads.append(message.payload)
        if message.message_id == last.message_id:
            break
    call.cancel()
    seen = {p.decode(errors="replace") for p in payloads}
    assert "first" in seen and written <= seen
    assert seen & refused_tags == set()

    # etcd: the refused calls wrote no key (the TSO's own keys are the same set); the
    # allowed assignments of the scratch channels each claimed their channel's term,
    # which the same caller's DeleteChannel (after its RemoveChannel) forgot again
    assert deleted == {
        who for who, caller in c.items() if _allowed(caller, f"{_NODE}DeleteChannel")
    }
    claimed = {
        f"{world.tso_prefix}/terms/{world.prefix}scratch-{who}"
        for who, caller in c.items()
        if _allowed(caller, f"{_NODE}AssignChannel") and who not in deleted
    }
    assert await _etcd_keys(stack, world.tso_prefix) == keys_before | claimed

    # node 2 serves with timestamps from node 1's TSO, asked with its peer token
    scratch = f"{world.prefix}scratch-two"
    two_admin = pb_grpc.StreamingNodeStub(two_rpc)
    await two_admin.AssignChannel(
        pb.AssignChannelRequest(pchannel=scratch), metadata=md(c["admin"])
    )
    acked = await two_admin.Produce(
        pb.ProduceRequest(pchannel=scratch, message=pb.Message(type="insert", payload=b"via-peer")),
        metadata=md(c["writer"]),
    )
    assert acked.time_tick > 0
    await two_admin.RemoveChannel(
        pb.RemoveChannelRequest(pchannel=scratch), metadata=md(c["admin"])
    )
    await two_rpc.close()
    for rpc in (admin_rpc, writer_rpc, reader_rpc):
        await rpc.close()

    # the audit log: every admin call once, with identity, operation, channel, outcome
    log = world.one.log_text()
    assert f"audit: writer Truncate channel='{world.main}' outcome=PERMISSION_DENIED" in log
    assert (
        f"audit: <unauthenticated> AssignChannel channel='{world.main}' outcome=UNAUTHENTICATED"
        in log
    )
    assert f"audit: ops AssignChannel channel='{world.prefix}scratch-ops' outcome=OK" in log
    assert log.count("streamwal.audit: audit:") == (
        2  # the set-up's two assignments
        + len(c) * len(_ADMIN_CALLS)
    )
    for caller in c.values():
        if caller.token is not None:
            assert caller.token not in log and caller.token not in world.two.log_text()


async def test_clients_and_the_console_say_who_they_are(world: World) -> None:
    """``streamwal produce`` with a token file and a client certificate; without a
    token, or with one of another role, exit 1 naming the refusal, nothing written;
    ``ClusterClient`` raises a refusal at once instead of following it."""
    stranger = world.callers["nobody"].cert
    tls_options = [
        "--ca-file", world.ca.ca_file, "--cert-file", stranger.cert_file,
        "--key-file", stranger.key_file,
    ]  # fmt: skip
    where = ["--node", world.one.address, *tls_options]
    ok = await streamwal_cli(
        "produce", world.main, *where, "--token-file", str(world.folder / "writer.token"),
        "-m", "cli-hello", "--json",
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    anonymous = await streamwal_cli("produce", world.main, *where, "-m", "cli-refused")
    assert anonymous.returncode == 1
    assert "UNAUTHENTICATED" in anonymous.stderr and "Produce" in anonymous.stderr
    reader = await streamwal_cli(
        "produce", world.main, *where, "--token-file", str(world.folder / "reader.token"),
        "-m", "cli-refused",
    )  # fmt: skip
    assert reader.returncode == 1
    assert "PERMISSION_DENIED" in reader.stderr and world.main in reader.stderr
    read = await streamwal_cli(
        "consume", world.main, *where, "--token-file", str(world.folder / "reader.token"),
        "--timeout", "3", "--json",
    )  # fmt: skip
    payloads = [json.loads(line)["payload"] for line in read.stdout.splitlines()]
    assert "cli-hello" in payloads and "cli-refused" not in payloads

    tls = ClientTLS(
        ca_file=world.ca.ca_file, cert_file=stranger.cert_file, key_file=stranger.key_file
    )
    async with ClusterClient(nodes=[world.one.address], tls=tls, retry_for_s=30) as cluster:
        started = asyncio.get_running_loop().time()
        with pytest.raises(UnauthenticatedError):
            await cluster.produce(world.main, b"cluster-refused")
        assert asyncio.get_running_loop().time() - started < 5  # not retried


def test_a_node_other_hosts_reach_refuses_to_start_without_tls_and_auth(
    stack: StackInfo, tmp_path: Path
) -> None:
    port = free_port()
    path = tmp_path / "node.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "pulsar": {"service_url": stack.pulsar_url},
                "etcd": {"endpoints": [stack.etcd_endpoint]},
                "node": {
                    "listen": f"0.0.0.0:{port}",
                    "advertise_address": f"127.0.0.1:{port}",
                    "metrics_listen": "",
                },
                "tso": {"mode": "remote", "remote_addresses": ["127.0.0.1:1"]},
            }
        )
    )
    done = serve_once(path, dict(os.environ))
    assert done.returncode == 1, done.stderr
    assert "refusing to serve" in done.stderr
    assert "node.tls" in done.stderr and "auth.enabled" in done.stderr
    assert "auth.insecure: true" in done.stderr
    assert not port_in_use(port)
