"""Confirmation gates end to end (EMC-GATE-*, spec/host-wiring.md §2), over stdio in both eras.

Legacy era: the server sends ``elicitation/create`` during the call and the
test's human answers, refuses, or stays silent. Modern era: the server answers
with an ``InputRequiredResult`` and the test retries by hand, honestly or with
forged request states. After every refusal the target must be unchanged, and
the idempotency key still free.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import mcp_types as types
import pytest

from engram_mcp.contract.binding import CONFIRMATION_INPUT_KEY, CONFIRMATION_MESSAGES, CONFIRMATION_REQUESTED_SCHEMA
from tests.reference.conftest import (
    TOOLS,
    UNTRUSTED,
    McpClient,
    RawStdio,
    ReferenceDir,
    admission_args,
    admitted,
    assert_protocol_error,
    capture_args,
    captured,
    forget_args,
    get_args,
    init_reference_dir,
    search_args,
    stdio_client_for,
    stop,
    withdraw_args,
)

pytestmark = pytest.mark.anyio

REFUSALS = ("decline", "cancel", "accept_false", "accept_extra", "accept_empty", "accept_string", "error")
SHORT_TTL = 2
OPS: dict[str, Any] = {"workspace": "ops"}
APPROVE = {CONFIRMATION_INPUT_KEY: {"action": "accept", "content": {"confirm": True}}}
DECLINE = {CONFIRMATION_INPUT_KEY: {"action": "decline"}}


def with_peer(ref: ReferenceDir) -> ReferenceDir:
    """A second principal with every tool, so that a confirmation can be stolen across principals."""
    ref.grant("agent-peer", list(TOOLS), [("acme", "research"), ("acme", "ops")])
    return ref


@pytest.fixture(scope="module")
def reference_dir(tmp_path_factory: pytest.TempPathFactory) -> ReferenceDir:
    return with_peer(init_reference_dir(tmp_path_factory.mktemp("gates")))


@pytest.fixture(scope="module")
async def modern(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[McpClient]:
    """A modern-era client of its own, for retries driven by hand."""
    ref = with_peer(init_reference_dir(tmp_path_factory.mktemp("modern")))
    async with stdio_client_for(ref, "modern") as client:
        yield client


def short_ttl_dir(tmp_path_factory: pytest.TempPathFactory) -> ReferenceDir:
    ref = init_reference_dir(tmp_path_factory.mktemp("short-ttl"))
    for workspace in ("research", "ops"):
        ref.edit_scope("acme", workspace, confirmation_ttl_seconds=SHORT_TTL)
    return ref


def form(asked: dict[str, Any]) -> tuple[str | None, str, dict[str, Any]]:
    return asked.get("mode"), asked["message"], asked["requestedSchema"]


async def still_pending(client: McpClient, candidate_id: str, **binding: Any) -> None:
    """The candidate was left pending: an approved withdraw now moves it from pending."""
    client.confirmer.reset()
    result = await client.call("engram_memory_withdraw", withdraw_args(candidate_id), **binding)
    assert result.value["receipt"]["from_state"] == "pending"


# -- both eras --------------------------------------------------------------------------


async def test_withdraw_and_forget_always_ask_with_the_constant_form(client: McpClient) -> None:
    cid = (await captured(client))["candidate_id"]
    await client.call("engram_memory_withdraw", withdraw_args(cid))
    _, rid = await admitted(client)
    await client.call("engram_memory_forget", forget_args(rid))
    asked = client.confirmer.asked
    assert [form(a) for a in asked] == [
        ("form", CONFIRMATION_MESSAGES["engram_memory_withdraw"], CONFIRMATION_REQUESTED_SCHEMA),
        ("form", CONFIRMATION_MESSAGES["engram_memory_forget"], CONFIRMATION_REQUESTED_SCHEMA),
    ]
    assert cid not in str(asked) and rid not in str(asked), "the form never carries ids"


@pytest.mark.parametrize("answer", REFUSALS)
async def test_a_refused_withdraw_changes_nothing(client: McpClient, answer: str) -> None:
    cid = (await captured(client))["candidate_id"]
    arguments = withdraw_args(cid)
    client.confirmer.mode = answer
    assert (await client.call("engram_memory_withdraw", arguments)).code == "gate_failed"
    assert len(client.confirmer.asked) == 1
    # No key was reserved (EMC-HP-030): the same call, approved, runs for the first time.
    client.confirmer.reset()
    done = (await client.call("engram_memory_withdraw", arguments)).value
    assert done["replayed"] is False and done["receipt"]["from_state"] == "pending"


@pytest.mark.parametrize("answer", REFUSALS)
async def test_a_refused_forget_changes_nothing(client: McpClient, answer: str) -> None:
    _, rid = await admitted(client)
    arguments = forget_args(rid)
    client.confirmer.mode = answer
    assert (await client.call("engram_memory_forget", arguments)).code == "gate_failed"
    assert (await client.call("engram_memory_get", get_args(rid))).ok
    client.confirmer.reset()
    assert (await client.call("engram_memory_forget", arguments)).value["replayed"] is False
    assert (await client.call("engram_memory_get", get_args(rid))).code == "NOT_FOUND"


async def test_capture_and_admission_ask_only_where_the_host_gates_them(client: McpClient) -> None:
    cid = (await captured(client))["candidate_id"]
    await client.call("engram_memory_request_admission", admission_args(cid))
    assert client.confirmer.asked == [], "acme/research gates neither capture nor admission"

    arguments = capture_args()
    client.confirmer.mode = "decline"
    assert (await client.call("engram_memory_capture", arguments, **OPS)).code == "gate_failed"
    asked = [form(a)[1] for a in client.confirmer.asked]
    client.confirmer.reset()
    first = (await client.call("engram_memory_capture", arguments, **OPS)).value
    assert first["status"] == "committed_pending", "the declined capture wrote nothing"
    admission = admission_args(first["candidate_id"])
    client.confirmer.mode = "cancel"
    assert (await client.call("engram_memory_request_admission", admission, **OPS)).code == "gate_failed"
    asked += [form(a)[1] for a in client.confirmer.asked[1:]]
    client.confirmer.reset()
    outcome = (await client.call("engram_memory_request_admission", admission, **OPS)).value
    assert outcome["outcome"]["status"] == "accepted" and outcome["replayed"] is False
    assert len(client.confirmer.asked) == 1
    assert asked == [
        CONFIRMATION_MESSAGES["engram_memory_capture"],
        CONFIRMATION_MESSAGES["engram_memory_request_admission"],
    ]


async def test_a_replay_is_answered_without_asking_again(client: McpClient) -> None:
    cid = (await captured(client))["candidate_id"]
    arguments = withdraw_args(cid)
    first = (await client.call("engram_memory_withdraw", arguments)).value
    assert len(client.confirmer.asked) == 1
    client.confirmer.mode = "decline"  # would refuse, if it were asked
    assert (await client.call("engram_memory_withdraw", arguments)).value == {**first, "replayed": True}
    conflicting = {**arguments, "reason_ref": "reason:other"}
    assert (await client.call("engram_memory_withdraw", conflicting)).code == "DIGEST_CONFLICT"
    assert len(client.confirmer.asked) == 1


@pytest.mark.parametrize(
    "claim", [{"confirmed": True}, {"confirm": True}, {"elicitationRef": "elicit-1"}, {"approval": "yes"}]
)
async def test_the_agent_cannot_confirm_for_itself(client: McpClient, claim: dict[str, Any]) -> None:
    cid = (await captured(client))["candidate_id"]
    assert (await client.call("engram_memory_withdraw", {**withdraw_args(cid), **claim})).code == "INVALID_SCHEMA"
    assert client.confirmer.asked == [], "refused before any gate"
    await still_pending(client, cid)


async def test_a_host_that_cannot_carry_a_confirmation_is_refused(
    client: McpClient, reference_dir: ReferenceDir
) -> None:
    """EMC-GATE-008: a client that declared no form elicitation cannot be asked, so the call is refused."""
    cid = (await captured(client))["candidate_id"]
    _, rid = await admitted(client)
    async with stdio_client_for(reference_dir, client.era, elicitation=False) as mute:
        host = mute.host
        for tool, arguments, meta in (
            ("engram_memory_withdraw", withdraw_args(cid), host.meta()),
            ("engram_memory_forget", forget_args(rid), host.meta()),
            ("engram_memory_capture", capture_args(), host.meta(**OPS)),
        ):
            assert_protocol_error(await mute.protocol_error(tool, arguments, meta), UNTRUSTED)
        # A call that needs no confirmation still works.
        assert (await mute.call("engram_memory_capture", capture_args())).ok
        assert (await mute.call("engram_memory_get", get_args(rid))).ok
    assert client.confirmer.asked == []
    await still_pending(client, cid)


# -- legacy era ---------------------------------------------------------------------------


async def test_legacy_no_answer_within_the_ttl_fails_the_gate(tmp_path_factory: pytest.TempPathFactory) -> None:
    ref = short_ttl_dir(tmp_path_factory)
    async with stdio_client_for(ref, "legacy") as client:
        cid = (await captured(client))["candidate_id"]
        client.confirmer.delay = SHORT_TTL + 3  # the approval comes, but too late
        started = time.monotonic()
        assert (await client.call("engram_memory_withdraw", withdraw_args(cid))).code == "gate_failed"
        waited = time.monotonic() - started
        assert SHORT_TTL - 0.5 <= waited < SHORT_TTL + 3, "the server gives up at its TTL, before the late approval"
        await still_pending(client, cid)


@pytest.mark.parametrize(
    ("version", "capabilities", "can_confirm"),
    [
        ("2025-11-25", {"elicitation": {}}, True),  # an empty object means form mode
        ("2025-11-25", {"elicitation": {"form": {}}}, True),
        ("2025-11-25", {"elicitation": {"form": {}, "url": {}}}, True),
        ("2025-11-25", {"elicitation": {"url": {}}}, False),
        ("2025-11-25", {}, False),
        ("2025-03-26", {"elicitation": {"form": {}}}, False),  # before elicitation/create existed
    ],
)
def test_legacy_declared_capabilities_decide(
    reference_dir: ReferenceDir, version: str, capabilities: dict[str, Any], can_confirm: bool
) -> None:
    """EMC-HP-031, on the raw wire: only a declared form elicitation, at 2025-06-18 or later, can carry a
    confirmation."""
    raw = RawStdio(reference_dir)
    raw.elicitation_answer = {"action": "accept", "content": {"confirm": True}}
    try:
        raw.start_legacy(version, capabilities)
        arguments = withdraw_args("candidate_" + "e" * 64)
        reply = raw.request(2, "tools/call", {"name": "engram_memory_withdraw", "arguments": arguments,
                                              "_meta": reference_dir.host.meta()})
        asked = [m for m in raw.server_requests if m.get("method") == "elicitation/create"]
        if can_confirm:
            assert len(asked) == 1 and asked[0]["params"]["requestedSchema"] == CONFIRMATION_REQUESTED_SCHEMA
            assert reply["result"]["structuredContent"]["error"]["code"] == "NOT_FOUND"  # confirmed, then executed
        else:
            assert asked == [], "a client that cannot answer is never asked"
            assert reply["error"] == {"code": UNTRUSTED.jsonrpc_code, "message": UNTRUSTED.message}
    finally:
        stop(raw.process)


# -- modern era: the request for input and forged retries -----------------------------------


async def test_modern_input_required_result_changes_nothing(modern: McpClient) -> None:
    cid = (await captured(modern))["candidate_id"]
    meta = modern.host.meta()
    first = await modern.input_required("engram_memory_withdraw", withdraw_args(cid), meta)
    assert first.input_requests is not None
    assert set(first.input_requests) == {CONFIRMATION_INPUT_KEY}
    request = first.input_requests[CONFIRMATION_INPUT_KEY]
    assert isinstance(request, types.ElicitRequest)
    assert form(request.params.model_dump(by_alias=True, exclude_none=True)) == (
        "form", CONFIRMATION_MESSAGES["engram_memory_withdraw"], CONFIRMATION_REQUESTED_SCHEMA)
    assert isinstance(first.request_state, str) and first.request_state
    # Asking twice mints two different states; neither changed anything.
    second = await modern.input_required("engram_memory_withdraw", withdraw_args(cid), meta)
    assert second.request_state != first.request_state
    await still_pending(modern, cid)


async def test_modern_an_approved_retry_runs_once(modern: McpClient) -> None:
    cid = (await captured(modern))["candidate_id"]
    arguments = withdraw_args(cid)
    state = (await modern.input_required("engram_memory_withdraw", arguments, modern.host.meta())).request_state
    # A freshly minted binding for the same principal and session carries the answer (EMC-HP-036).
    done = await modern.raw(
        "engram_memory_withdraw", arguments, modern.host.meta(), request_state=state, input_responses=APPROVE
    )
    assert isinstance(done, types.CallToolResult) and done.structured_content["ok"]
    assert done.structured_content["output"]["value"]["replayed"] is False


async def gate_failed(
    client: McpClient, tool: str, arguments: dict[str, Any], meta: dict[str, Any], **retry: Any
) -> None:
    result = await client.raw(tool, arguments, meta, **retry)
    assert isinstance(result, types.CallToolResult), "a retry is never asked again"
    assert result.structured_content["error"]["code"] == "gate_failed"


async def test_modern_forged_retries_fail_the_gate(modern: McpClient) -> None:
    host = modern.host
    a = (await captured(modern))["candidate_id"]
    b = (await captured(modern))["candidate_id"]
    args_a, args_b = withdraw_args(a), withdraw_args(b)
    meta = host.meta()
    state_a = (await modern.input_required("engram_memory_withdraw", args_a, meta)).request_state
    assert state_a is not None
    state_b = (await modern.input_required("engram_memory_withdraw", args_b, meta)).request_state
    withdraw = "engram_memory_withdraw"

    await gate_failed(modern, withdraw, args_a, meta, input_responses=APPROVE)  # no request_state at all
    await gate_failed(modern, withdraw, args_a, meta, request_state="garbage", input_responses=APPROVE)
    await gate_failed(modern, withdraw, args_a, meta, request_state=tamper(state_a), input_responses=APPROVE)
    await gate_failed(modern, withdraw, args_a, meta, request_state=state_b, input_responses=APPROVE)  # another target
    await gate_failed(modern, withdraw, args_b, meta, request_state=state_a, input_responses=APPROVE)
    changed = {**args_a, "reason_ref": "reason:changed"}  # another operation on the same target
    await gate_failed(modern, withdraw, changed, meta, request_state=state_a, input_responses=APPROVE)
    await gate_failed(
        modern, withdraw, args_a, host.meta(principal="agent-peer"), request_state=state_a, input_responses=APPROVE
    )
    await gate_failed(
        modern, withdraw, args_a, host.meta(session="session-2"), request_state=state_a, input_responses=APPROVE
    )
    await gate_failed(modern, withdraw, args_a, host.meta(**OPS), request_state=state_a, input_responses=APPROVE)
    # None of those matched the call, so none burnt state_a (EMC-HP-038): it still approves, once.
    ok = await modern.raw(withdraw, args_a, meta, request_state=state_a, input_responses=APPROVE)
    assert (
        isinstance(ok, types.CallToolResult)
        and ok.structured_content["output"]["value"]["receipt"]["from_state"] == "pending"
    )
    # A matching state without an approving answer fails the gate and is burnt, whatever the answer was.
    await gate_failed(modern, withdraw, args_b, meta, request_state=state_b)  # no answer at all
    await gate_failed(modern, withdraw, args_b, meta, request_state=state_b, input_responses=APPROVE)
    state_b = (await modern.input_required(withdraw, args_b, meta)).request_state
    await gate_failed(
        modern,
        withdraw,
        args_b,
        meta,
        request_state=state_b,
        input_responses={"other/key": APPROVE[CONFIRMATION_INPUT_KEY]},
    )
    await gate_failed(modern, withdraw, args_b, meta, request_state=state_b, input_responses=APPROVE)
    await still_pending(modern, b)


async def test_modern_an_approved_state_is_single_use(modern: McpClient) -> None:
    """A state that approved a call whose key was never reserved (NOT_FOUND) cannot approve again."""
    unknown = withdraw_args("candidate_" + "f" * 64)
    meta = modern.host.meta()
    state = (await modern.input_required("engram_memory_withdraw", unknown, meta)).request_state
    first = await modern.raw("engram_memory_withdraw", unknown, meta, request_state=state, input_responses=APPROVE)
    assert first.structured_content["error"]["code"] == "NOT_FOUND"  # confirmed first, then executed
    await gate_failed(modern, "engram_memory_withdraw", unknown, meta, request_state=state, input_responses=APPROVE)


async def test_modern_a_state_for_another_tool_fails_the_gate(modern: McpClient) -> None:
    ops = modern.host.meta(**OPS)
    modern.confirmer.reset()
    cid = (await modern.call("engram_memory_capture", capture_args(), **OPS)).value["candidate_id"]
    withdraw_state = (await modern.input_required("engram_memory_withdraw", withdraw_args(cid), ops)).request_state
    admission = admission_args(cid)
    await gate_failed(
        modern, "engram_memory_request_admission", admission, ops, request_state=withdraw_state, input_responses=APPROVE
    )
    outcome = (await modern.call("engram_memory_request_admission", admission, **OPS)).value
    assert outcome["outcome"]["status"] == "accepted", "the candidate was still pending"


async def test_modern_an_expired_state_fails_the_gate(tmp_path_factory: pytest.TempPathFactory) -> None:
    ref = short_ttl_dir(tmp_path_factory)
    async with stdio_client_for(ref, "modern") as client:
        cid = (await captured(client))["candidate_id"]
        arguments = withdraw_args(cid)
        meta = client.host.meta()
        state = (await client.input_required("engram_memory_withdraw", arguments, meta)).request_state
        await anyio.sleep(SHORT_TTL + 0.2)  # the TTL is wall-clock time; nothing to poll
        await gate_failed(
            client, "engram_memory_withdraw", arguments, meta, request_state=state, input_responses=APPROVE
        )
        await still_pending(client, cid)


async def test_modern_request_state_is_ignored_where_no_confirmation_is_needed(modern: McpClient) -> None:
    retry: dict[str, Any] = {"request_state": "garbage", "input_responses": DECLINE}
    found = await modern.raw("engram_memory_search", search_args("anything"), modern.host.meta(), **retry)
    assert found.structured_content["ok"]
    captured_now = await modern.raw("engram_memory_capture", capture_args(), modern.host.meta(), **retry)
    assert captured_now.structured_content["output"]["value"]["status"] == "committed_pending"


def tamper(token: str) -> str:
    middle = len(token) // 2
    return token[:middle] + ("A" if token[middle] != "A" else "B") + token[middle + 1:]


async def test_modern_a_declined_state_cannot_be_answered_again(modern: McpClient) -> None:
    _, rid = await admitted(modern)
    arguments = forget_args(rid)
    meta = modern.host.meta()
    state = (await modern.input_required("engram_memory_forget", arguments, meta)).request_state
    await gate_failed(modern, "engram_memory_forget", arguments, meta, request_state=state, input_responses=DECLINE)
    await gate_failed(modern, "engram_memory_forget", arguments, meta, request_state=state, input_responses=APPROVE)
    assert (await modern.call("engram_memory_get", get_args(rid))).ok
    new_round = await modern.call("engram_memory_forget", arguments)
    assert new_round.value["replayed"] is False, "the key was never reserved by the refused rounds"

