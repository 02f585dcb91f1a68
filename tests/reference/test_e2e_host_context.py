"""Host-owned call context end to end (spec/host-wiring.md §1.7, EMC-HP-008, EMC-HP-057), over stdio in both eras:
the host's auditId, the deadline, cancellation, keys trusted for named issuers and tenants, capture authority."""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from tests.reference.conftest import (
    UNKNOWN_TOOL,
    UNTRUSTED,
    McpClient,
    ReferenceDir,
    assert_protocol_error,
    bound_audit_id,
    capture_args,
    captured,
    init_reference_dir,
    search_args,
    withdraw_args,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def reference_dir(tmp_path_factory: pytest.TempPathFactory) -> ReferenceDir:
    return init_reference_dir(tmp_path_factory.mktemp("host-context"))


def audit_id() -> str:
    return "host-audit:" + secrets.token_hex(8)


async def test_the_envelope_echoes_the_hosts_audit_id(client: McpClient) -> None:
    ids = [audit_id() for _ in range(3)]
    ok = await client.call("engram_memory_search", search_args("ledger"), client.host.meta(audit_id=ids[0]))
    refused = await client.call("engram_memory_search", search_args(""), client.host.meta(audit_id=ids[1]))
    planted = await client.call("engram_memory_search", {**search_args("ledger"), "auditId": "from-the-agent"},
                                client.host.meta(audit_id=ids[2]))
    assert ok.ok and refused.code == planted.code == "INVALID_SCHEMA"
    assert [r.env["auditId"] for r in (ok, refused, planted)] == ids


async def test_a_call_without_an_audit_id_is_refused_but_a_list_is_not(client: McpClient) -> None:
    meta = client.host.meta(audit_id=None)
    assert_protocol_error(await client.protocol_error("engram_memory_search", search_args("ledger"), meta), UNTRUSTED)
    assert (await client.list_tools(meta)).tools, "tools/list needs no audit id"


@pytest.mark.parametrize("claim", [{"audit_id": "two words"}, {"audit_id": "x" * 257}, {"deadline": "soon"}])
async def test_a_malformed_audit_id_or_deadline_is_refused(client: McpClient, claim: dict) -> None:
    meta = client.host.meta(**claim)
    assert_protocol_error(await client.protocol_error("engram_memory_search", search_args("ledger"), meta), UNTRUSTED)


async def test_a_passed_deadline_changes_nothing(client: McpClient) -> None:
    arguments = capture_args()
    late = await client.call("engram_memory_capture", arguments, deadline=time.time() - 60)
    assert late.code == "DEADLINE_EXCEEDED" and late.env["error"]["retriable"] is True
    on_time = await client.call("engram_memory_capture", arguments, deadline=time.time() + 60)
    assert on_time.value["status"] == "committed_pending"
    cid = (await captured(client))["candidate_id"]
    just_late = await client.call("engram_memory_withdraw", withdraw_args(cid), deadline=time.time() - 0.5)
    assert just_late.code == "DEADLINE_EXCEEDED"
    assert client.confirmer.asked == [], "a call past its deadline never reaches the gate"


async def test_a_deadline_that_passes_while_the_human_decides_stops_the_mutation(client: McpClient) -> None:
    if client.modern:
        pytest.skip("in 2026-07-28 the server never waits for the answer within a call")
    cid = (await captured(client))["candidate_id"]
    arguments = withdraw_args(cid)
    client.confirmer.delay = 1.5
    late = await client.call("engram_memory_withdraw", arguments, deadline=time.time() + 0.5)
    assert late.code == "DEADLINE_EXCEEDED" and len(client.confirmer.asked) == 1
    client.confirmer.reset()
    assert (await client.call("engram_memory_withdraw", arguments)).value["replayed"] is False


async def test_a_call_cancelled_while_the_human_decides_changes_nothing(
    client: McpClient, reference_dir: ReferenceDir
) -> None:
    if client.modern:
        pytest.skip("in 2026-07-28 the server never waits for the answer within a call")
    cid = (await captured(client))["candidate_id"]
    arguments = withdraw_args(cid)
    client.confirmer.delay = 1.0  # the approval arrives after the cancellation
    meta = client.host.meta(audit_id=audit_id())
    with anyio.move_on_after(0.5) as scope:  # the SDK sends notifications/cancelled when the caller gives up
        await client.call("engram_memory_withdraw", arguments, meta)
    assert scope.cancelled_caught and len(client.confirmer.asked) == 1
    await anyio.sleep(1.5)
    client.confirmer.reset()
    assert (await client.call("engram_memory_withdraw", arguments)).value["replayed"] is False
    assert journal(reference_dir)[bound_audit_id(meta)] == ("refused", "cancelled")


def journal(ref: ReferenceDir) -> dict[str, tuple[str, str]]:
    """auditId -> (chain, outcome) of every journal row (the journal holds no content, only these facts)."""
    with sqlite3.connect(f"file:{ref.store}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT entry, chain FROM audit").fetchall()
    return {json.loads(entry)["audit_id"]: (chain, json.loads(entry)["outcome"]) for entry, chain in rows}


async def test_refused_calls_are_journaled_under_the_hosts_audit_id(
    client: McpClient, reference_dir: ReferenceDir
) -> None:
    refused = client.host.meta(principal="agent-limited", audit_id=audit_id())
    late = client.host.meta(audit_id=audit_id(), deadline=time.time() - 60)
    await client.protocol_error("engram_memory_forget", {}, refused)
    await client.call("engram_memory_search", search_args("ledger"), late)
    rows = journal(reference_dir)
    assert rows[bound_audit_id(refused)] == ("refused", "-32602")
    assert rows[bound_audit_id(late)] == ("refused", "DEADLINE_EXCEEDED")


@pytest.mark.parametrize("claim", [{"tenant": "umbrella"}, {"iss": "another-host"}])
async def test_a_tenant_or_issuer_the_key_is_not_trusted_for_is_refused(client: McpClient, claim: dict) -> None:
    meta = client.host.meta(**claim)
    assert_protocol_error(await client.protocol_error("engram_memory_search", search_args("ledger"), meta), UNTRUSTED)
    with pytest.raises(MCPError) as caught:
        await client.list_tools(meta)
    assert_protocol_error(caught.value, UNTRUSTED)


async def test_an_opted_out_tenant_the_key_is_trusted_for_is_memory_off(client: McpClient) -> None:
    assert (await client.list_tools(client.host.meta("initech"))).tools == []


async def test_a_capture_without_capture_authority_is_unauthorized(client: McpClient) -> None:
    observer: dict[str, Any] = {"principal": "agent-observer"}
    listed = {t.name for t in (await client.list_tools(client.host.meta(**observer))).tools}
    assert "engram_memory_capture" in listed, "the principal is granted the tool"
    assert (await client.call("engram_memory_capture", capture_args(), **observer)).code == "UNAUTHORIZED"
    error = await client.protocol_error("engram_memory_withdraw", withdraw_args("candidate_" + "0" * 64),
                                        client.host.meta(**observer))
    assert_protocol_error(error, UNKNOWN_TOOL)
    elsewhere = await client.call("engram_memory_capture", capture_args(), tenant="globex", **observer)
    assert elsewhere.value["status"] == "committed_pending", "the authority is denied in one scope only"


class _StoreLocked:
    """Another writer holding the store's write lock for ``seconds``: a mutation waits for it before its unit runs."""

    def __init__(self, ref: ReferenceDir, seconds: float) -> None:
        self.ref, self.seconds = ref, seconds
        self.taken = threading.Event()

    def hold(self) -> None:
        db = sqlite3.connect(self.ref.store, isolation_level=None, timeout=30)
        try:
            db.execute("BEGIN IMMEDIATE")
            self.taken.set()
            time.sleep(self.seconds)
            db.execute("ROLLBACK")
        finally:
            db.close()

    def __enter__(self) -> _StoreLocked:
        self.thread = threading.Thread(target=self.hold)
        self.thread.start()
        assert self.taken.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.thread.join()


async def test_a_deadline_that_passes_while_waiting_for_the_store_commits_nothing(
    client: McpClient, reference_dir: ReferenceDir
) -> None:
    arguments = capture_args()
    before = _reservations(reference_dir)
    with _StoreLocked(reference_dir, 1.5):
        late = await client.call("engram_memory_capture", arguments, deadline=time.time() + 0.7)
    assert late.code == "DEADLINE_EXCEEDED"
    assert _reservations(reference_dir) == before, "the capture committed after its deadline"


async def test_a_call_cancelled_while_waiting_for_the_store_commits_nothing(
    client: McpClient, reference_dir: ReferenceDir
) -> None:
    arguments = capture_args()
    meta = client.host.meta(audit_id=audit_id())
    before = _reservations(reference_dir)
    with _StoreLocked(reference_dir, 1.5):
        with anyio.move_on_after(0.5) as scope:  # the SDK sends notifications/cancelled when the caller gives up
            await client.call("engram_memory_capture", arguments, meta)
        assert scope.cancelled_caught
    await anyio.sleep(0.5)
    assert _reservations(reference_dir) == before, "the capture committed after its cancellation"


def _reservations(ref: ReferenceDir) -> int:
    with sqlite3.connect(f"file:{ref.store}?mode=ro", uri=True) as db:
        return int(db.execute("SELECT count(*) FROM reservations").fetchone()[0])
