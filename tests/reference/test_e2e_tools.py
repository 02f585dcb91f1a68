"""The six tools end to end, over stdio, in the legacy and the modern era.

Each test runs twice, once per era, against one ``engram-reference serve``
process per era on the module's own store. Tests never depend on each other:
each writes its own idempotency keys and its own marker words.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from engram_mcp.contract import (
    canonical_bytes,
    payload_digest,
    profile_digest,
    receipt_digest,
    record_digest,
    record_id,
)
from engram_mcp.contract.binding import capture_candidate_id, scope_ref
from engram_mcp.contract.validation import instant
from tests.reference.conftest import (
    CONTRACT,
    FORGERIES,
    PURPOSE,
    TOOLS,
    UNKNOWN_TOOL,
    UNTRUSTED,
    McpClient,
    Result,
    admission_args,
    admitted,
    assert_protocol_error,
    capture_args,
    captured,
    forget_args,
    get_args,
    marker,
    new_key,
    search_args,
    withdraw_args,
)

pytestmark = pytest.mark.anyio

LIMITED = ["engram_memory_search", "engram_memory_get", "engram_memory_capture"]


def fake(*parts: str) -> str:
    """Fake secrets are assembled at run time, so no scanner ever flags this file."""
    return "".join(parts)


def names(listing: Any) -> list[str]:
    return [tool.name for tool in listing.tools]


async def search(client: McpClient, query: str, **kw: Any) -> Result:
    binding = {k: kw.pop(k) for k in ("tenant", "workspace", "principal") if k in kw}
    return await client.call("engram_memory_search", search_args(query, **kw), **binding)


async def found_ids(client: McpClient, query: str, **kw: Any) -> list[str]:
    result = await search(client, query, **kw)
    return [entry["record"]["record_id"] for entry in result.value["records"]]


# -- discovery ------------------------------------------------------------------


async def test_discovery_lists_exactly_the_granted_tools(client: McpClient) -> None:
    host = client.host
    full = await client.list_tools(host.meta())
    assert names(full) == list(TOOLS)
    assert full.next_cursor is None
    assert names(await client.list_tools(host.meta(principal="agent-limited"))) == LIMITED
    assert names(await client.list_tools(host.meta("initech", "research"))) == []  # memory off
    assert names(await client.list_tools(host.meta(principal="agent-unknown"))) == []  # no grants


async def test_a_scope_not_opted_in_has_no_tools(client: McpClient) -> None:
    """EMC-HP-016: a scope of a tenant the key is trusted for that the configuration does not opt in, listed or not,
    is a scope with memory off (a tenant the key is not trusted for is refused: test_e2e_host_context)."""
    for meta in (client.host.meta("initech", "research"), client.host.meta("acme", "never-configured")):
        assert names(await client.list_tools(meta)) == []
        assert_protocol_error(await client.protocol_error("engram_memory_search", search_args("x"), meta), UNKNOWN_TOOL)


async def test_discovery_without_binding_is_an_empty_list(client: McpClient) -> None:
    assert names(await client.list_tools(None)) == []
    assert names(await client.list_tools({"io.example/other": "x"})) == []


@pytest.mark.parametrize("kind", FORGERIES)
async def test_discovery_with_a_refused_binding_is_a_protocol_error(client: McpClient, kind: str) -> None:
    with pytest.raises(MCPError) as caught:
        await client.list_tools(client.host.forged(kind))
    assert_protocol_error(caught.value, UNTRUSTED)


async def test_advertised_schemas_are_the_contract_data(client: McpClient) -> None:
    for tool in (await client.list_tools(client.host.meta())).tools:
        assert tool.input_schema == CONTRACT.advertised_input_schema(tool.name)
        assert tool.output_schema == CONTRACT.advertised_output_schema(tool.name)
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is (CONTRACT.tools[tool.name].mutability == "read-only")


# -- protocol refusals ----------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "binding"),
    [
        ("engram_memory_nonexistent", {}),
        ("engram_memory_admin", {}),
        ("search", {}),
        ("engram_memory_withdraw", {"principal": "agent-limited"}),
        ("engram_memory_forget", {"principal": "agent-limited"}),
        ("engram_memory_request_admission", {"principal": "agent-limited"}),
        ("engram_memory_search", {"tenant": "initech"}),
        ("engram_memory_capture", {"tenant": "initech"}),
    ],
)
async def test_unknown_and_ungranted_tools_look_the_same(client: McpClient, tool: str, binding: dict[str, str]) -> None:
    error = await client.protocol_error(tool, {"query": tool, "purpose_ref": PURPOSE}, client.host.meta(**binding))
    assert_protocol_error(error, UNKNOWN_TOOL)
    assert tool not in error.error.message


@pytest.mark.parametrize("kind", [*FORGERIES, "absent", "no_meta"])
async def test_a_call_without_a_trusted_binding_is_refused(client: McpClient, kind: str) -> None:
    key = new_key("forged")
    arguments = capture_args(key=key)
    if kind == "no_meta":
        meta = None
    elif kind == "absent":
        meta = {"io.example/other": "x"}
    else:
        meta = client.host.forged(kind)
    assert_protocol_error(await client.protocol_error("engram_memory_capture", arguments, meta), UNTRUSTED)
    # Nothing ran: the key is still free, so the same capture is new, not a replay.
    assert (await client.call("engram_memory_capture", arguments)).value["status"] == "committed_pending"


async def test_the_binding_is_checked_before_the_tool_name(client: McpClient) -> None:
    error = await client.protocol_error("engram_memory_nonexistent", {}, client.host.forged("expired"))
    assert_protocol_error(error, UNTRUSTED)
    assert_protocol_error(await client.protocol_error("engram_memory_nonexistent", {}, None), UNTRUSTED)


async def test_a_purpose_other_than_the_bound_one_is_refused(client: McpClient) -> None:
    meta = client.host.meta(purpose="purpose:something-else")
    for tool, arguments in (
        ("engram_memory_search", search_args("anything")),
        ("engram_memory_get", get_args("mem_aaaa")),
        ("engram_memory_capture", capture_args()),
    ):
        assert_protocol_error(await client.protocol_error(tool, arguments, meta), UNTRUSTED)
    key = new_key("purpose")
    wrong = capture_args(key=key, purpose="purpose:other")
    assert_protocol_error(await client.protocol_error("engram_memory_capture", wrong, client.host.meta()), UNTRUSTED)
    right = capture_args(key=key)
    assert (await client.call("engram_memory_capture", right)).value["status"] == "committed_pending"


HOST_CONTEXT = [
    ("engram_memory_search", [], "tenant", "acme"),
    ("engram_memory_search", [], "workspace", "research"),
    ("engram_memory_get", [], "principal", "agent-full"),
    ("engram_memory_get", [], "auditId", "aud_x"),
    ("engram_memory_capture", [], "agent_id", "agent-1"),
    ("engram_memory_capture", [], "session", "session-1"),
    ("engram_memory_capture", ["payload"], "scope_ref", "scope:acme"),
    ("engram_memory_capture", ["payload"], "trust", {"class": "verified"}),
    ("engram_memory_capture", [], "deadline", "2030-01-01T00:00:00.000Z"),
    ("engram_memory_capture", [], "credential", "Bearer x"),
    ("engram_memory_capture", [], "confirmed", True),
    ("engram_memory_capture", [], "request_state", "state"),
]


@pytest.mark.parametrize(("tool", "path", "name", "value"), HOST_CONTEXT)
async def test_host_context_in_arguments_is_invalid_schema(
    client: McpClient, tool: str, path: list[str], name: str, value: Any
) -> None:
    arguments = {
        "engram_memory_search": search_args("anything"),
        "engram_memory_get": get_args("mem_aaaa"),
        "engram_memory_capture": capture_args(),
    }[tool]
    target = arguments
    for step in path:
        target = target[step]
    target[name] = value
    assert (await client.call(tool, arguments)).code == "INVALID_SCHEMA"
    if tool == "engram_memory_capture":  # and it had no effect: the key is still free
        del target[name]
        assert (await client.call(tool, arguments)).value["status"] == "committed_pending"


# -- the envelope -----------------------------------------------------------------


async def test_envelopes_success_and_failure(client: McpClient) -> None:
    ok = await client.call("engram_memory_search", search_args(marker()))
    bad = await client.call("engram_memory_get", get_args("mem_aaaa"))
    again = await client.call("engram_memory_get", get_args("mem_aaaa"))
    assert ok.ok and ok.raw.is_error is False
    assert not bad.ok and bad.raw.is_error is True
    assert bad.env["error"] == {
        "code": "NOT_FOUND",
        "message": CONTRACT.errors["NOT_FOUND"].message,
        "retriable": False,
    }
    assert len({ok.env["auditId"], bad.env["auditId"], again.env["auditId"]}) == 3
    # The message is the table's constant: no argument, id or path is echoed.
    assert "mem_aaaa" not in bad.raw.content[0].text


# -- capture and idempotency --------------------------------------------------------


async def test_capture_replay_is_duplicate_exact(client: McpClient) -> None:
    arguments = capture_args()
    first = (await client.call("engram_memory_capture", arguments)).value
    assert first["status"] == "committed_pending"
    assert first["candidate_id"] == capture_candidate_id(client.host.binding(), arguments["idempotency_key"])
    again = (await client.call("engram_memory_capture", copy.deepcopy(arguments))).value
    assert again == {**first, "status": "duplicate_exact"}
    # Same content, new key: a new candidate, never a duplicate (EMC-CAP-015).
    fresh = (await client.call("engram_memory_capture", {**arguments, "idempotency_key": new_key()})).value
    assert fresh["status"] == "committed_pending" and fresh["candidate_id"] != first["candidate_id"]


async def test_a_replay_wins_over_the_lifecycle(client: McpClient) -> None:
    """EMC-IDEM-011: the same key and arguments replay even after the target moved on."""
    arguments = capture_args()
    first = (await client.call("engram_memory_capture", arguments)).value
    await client.call("engram_memory_withdraw", withdraw_args(first["candidate_id"]))
    assert (await client.call("engram_memory_capture", arguments)).value == {**first, "status": "duplicate_exact"}
    candidate = await captured(client)
    admission = admission_args(candidate["candidate_id"])
    outcome = (await client.call("engram_memory_request_admission", admission)).value
    await client.call("engram_memory_forget", forget_args(outcome["outcome"]["record_id"]))
    assert (await client.call("engram_memory_request_admission", admission)).value == {**outcome, "replayed": True}
    # EMC-IDEM-012: another target under a used key conflicts, even where the lifecycle would refuse anyway.
    other = admission_args(first["candidate_id"], key=admission["idempotency_key"])
    assert (await client.call("engram_memory_request_admission", other)).code == "DIGEST_CONFLICT"


async def test_same_key_different_content_is_digest_conflict(client: McpClient) -> None:
    arguments = capture_args()
    await client.call("engram_memory_capture", arguments)
    changed = copy.deepcopy(arguments)
    changed["payload"]["components"][0]["text"] += " (revised)"
    assert (await client.call("engram_memory_capture", changed)).code == "DIGEST_CONFLICT"
    changed = copy.deepcopy(arguments)
    changed["evidence"]["evidence_ref"] = "evidence:other"
    assert (await client.call("engram_memory_capture", changed)).code == "DIGEST_CONFLICT"


async def test_same_key_on_another_tool_is_digest_conflict(client: McpClient) -> None:
    arguments = capture_args()
    candidate = (await client.call("engram_memory_capture", arguments)).value["candidate_id"]
    reused = admission_args(candidate, key=arguments["idempotency_key"])
    assert (await client.call("engram_memory_request_admission", reused)).code == "DIGEST_CONFLICT"
    # The conflict had no effect: the candidate is still pending.
    outcome = (await client.call("engram_memory_request_admission", admission_args(candidate))).value["outcome"]
    assert outcome["status"] == "accepted"
    # And the capture key, reused for a forget of a record, conflicts too.
    _, rid = await admitted(client)
    assert (
        await client.call("engram_memory_forget", forget_args(rid, key=arguments["idempotency_key"]))
    ).code == "DIGEST_CONFLICT"
    assert (await client.call("engram_memory_get", get_args(rid))).ok


async def test_keys_are_scoped_to_the_principal(client: McpClient) -> None:
    key = new_key("shared")
    arguments = capture_args(key=key)
    full = (await client.call("engram_memory_capture", arguments)).value
    limited = (await client.call("engram_memory_capture", arguments, principal="agent-limited")).value
    assert full["status"] == limited["status"] == "committed_pending"
    assert full["candidate_id"] != limited["candidate_id"]
    assert limited["candidate_id"] == capture_candidate_id(client.host.binding(principal="agent-limited"), key)
    # Each principal replays its own; neither conflicts with the other.
    other = capture_args(key=key, text="Something else entirely.")
    assert (await client.call("engram_memory_capture", arguments, principal="agent-limited")).value[
        "status"
    ] == "duplicate_exact"
    assert (await client.call("engram_memory_capture", other, principal="agent-limited")).code == "DIGEST_CONFLICT"


# -- retention ------------------------------------------------------------------------


def later(**delta: float) -> str:
    return instant(datetime.now(UTC) + timedelta(**delta))


async def test_retain_needs_the_hosts_permission(client: McpClient) -> None:
    retain = {"derivative_rule": "retain"}
    assert (
        await client.call("engram_memory_capture", capture_args(retention=retain), workspace="ops")
    ).code == "UNAUTHORIZED"
    assert (await client.call("engram_memory_capture", capture_args(retention=retain))).value[
        "status"
    ] == "committed_pending"


async def test_retention_without_a_rule_is_make_ineligible(client: McpClient) -> None:
    word = marker()
    _, rid = await admitted(client, f"Default retention {word}.")
    record = (await client.call("engram_memory_get", get_args(rid))).value["record"]
    assert record["retention"] == {"derivative_rule": "make-ineligible"}


async def test_expiry_beyond_the_ceiling_is_unauthorized(client: McpClient) -> None:
    too_late = {"derivative_rule": "make-ineligible", "expires_at": later(days=31)}
    assert (await client.call("engram_memory_capture", capture_args(retention=too_late))).code == "UNAUTHORIZED"
    in_time = {"derivative_rule": "make-ineligible", "expires_at": later(days=29)}
    assert (await client.call("engram_memory_capture", capture_args(retention=in_time))).ok


async def test_expiry_in_the_past_is_invalid_schema(client: McpClient) -> None:
    past = {"derivative_rule": "make-ineligible", "expires_at": later(minutes=-1)}
    assert (await client.call("engram_memory_capture", capture_args(retention=past))).code == "INVALID_SCHEMA"


async def test_an_unconsented_family_is_unauthorized(client: McpClient) -> None:
    assert (await client.call("engram_memory_capture", capture_args(families=["family:gamma"]))).code == "UNAUTHORIZED"
    assert (
        await client.call("engram_memory_capture", capture_args(families=["family:alpha", "family:gamma"]))
    ).code == "UNAUTHORIZED"
    assert (await client.call("engram_memory_capture", capture_args(families=["family:alpha", "family:beta"]))).ok
    # acme/ops consents to no family at all.
    assert (
        await client.call("engram_memory_capture", capture_args(families=["family:alpha"]), workspace="ops")
    ).code == "UNAUTHORIZED"


# -- admission -------------------------------------------------------------------------


async def test_admission_accepts_and_names_the_record(client: McpClient) -> None:
    word = marker()
    candidate = await captured(client, f"Accepted decision {word}.")
    result = await client.call("engram_memory_request_admission", admission_args(candidate["candidate_id"]))
    outcome = result.value["outcome"]
    assert result.value["replayed"] is False
    assert outcome["status"] == "accepted" and outcome["candidate_id"] == candidate["candidate_id"]
    assert outcome["record_id"] == record_id(candidate["record_digest"])
    got = (await client.call("engram_memory_get", get_args(outcome["record_id"]))).value
    assert got["record"]["record_id"] == got["read_receipt"]["record_id"] == outcome["record_id"]
    assert await found_ids(client, word) == [outcome["record_id"]]


@pytest.mark.parametrize(
    "secret",
    [
        fake("password", ": hunter2", "xyz"),
        fake("deploy key ", "AK", "IA", "QWERTYUIOPASDFGH"),
        fake("DB_PASS", "WORD=", "s3cr3t-", "value"),
    ],
)
async def test_admission_rejects_a_secret(client: McpClient, secret: str) -> None:
    word = marker()
    candidate = await captured(client, f"Ops note {word}: {secret}")
    result = await client.call("engram_memory_request_admission", admission_args(candidate["candidate_id"]))
    assert result.ok, "a rejection is a domain outcome, not an error"
    assert result.value["outcome"]["status"] == "rejected"
    assert "record_id" not in result.value["outcome"]
    assert (await client.call("engram_memory_get", get_args(record_id(candidate["record_digest"])))).code == "NOT_FOUND"
    assert await found_ids(client, word) == []


async def test_admission_left_to_adjudication(client: McpClient) -> None:
    globex: dict[str, Any] = {"tenant": "globex", "workspace": "triage"}
    candidate = await captured(client, **globex)
    cid = candidate["candidate_id"]
    first = await client.call("engram_memory_request_admission", admission_args(cid), **globex)
    assert first.value["outcome"]["status"] == "pending_adjudication" and first.ok
    # Still pending: asking again under a new key is allowed, and so is withdrawing (EMC-LIFE-009).
    again = await client.call("engram_memory_request_admission", admission_args(cid), **globex)
    assert again.value["outcome"]["status"] == "pending_adjudication"
    withdrawn = await client.call("engram_memory_withdraw", withdraw_args(cid), **globex)
    assert withdrawn.value["receipt"]["from_state"] == "pending"


async def test_admission_replay_and_already_terminal(client: McpClient) -> None:
    candidate = await captured(client)
    arguments = admission_args(candidate["candidate_id"])
    first = (await client.call("engram_memory_request_admission", arguments)).value
    replay = (await client.call("engram_memory_request_admission", dict(arguments))).value
    assert replay == {**first, "replayed": True}
    fresh = await client.call("engram_memory_request_admission", admission_args(candidate["candidate_id"]))
    assert fresh.code == "ALREADY_TERMINAL"


async def test_forgotten_content_goes_to_adjudication_when_captured_again(client: McpClient) -> None:
    text = f"Tombstoned decision {marker()}."
    _, rid = await admitted(client, text)
    assert (await client.call("engram_memory_forget", forget_args(rid))).ok
    again = await client.call("engram_memory_capture", capture_args(text))
    assert again.value["status"] == "committed_pending"  # EMC-CAP-016: not refused
    outcome = (await client.call("engram_memory_request_admission", admission_args(again.value["candidate_id"]))).value
    assert outcome["outcome"]["status"] == "pending_adjudication"  # EMC-ADM-007
    assert "record_id" not in outcome["outcome"]


# -- withdraw and forget -------------------------------------------------------------------


async def test_withdraw_destroys_the_candidate(client: McpClient) -> None:
    cid = (await captured(client))["candidate_id"]
    arguments = withdraw_args(cid)
    result = (await client.call("engram_memory_withdraw", arguments)).value
    assert result["key_destruction"] == "complete" and result["replayed"] is False
    receipt = result["receipt"]
    assert (receipt["operation"], receipt["from_state"], receipt["to_state"]) == ("withdraw", "pending", "withdrawn")
    assert (await client.call("engram_memory_request_admission", admission_args(cid))).code == "NOT_FOUND"
    assert (await client.call("engram_memory_withdraw", withdraw_args(cid))).code == "NOT_FOUND"
    assert (await client.call("engram_memory_withdraw", dict(arguments))).value == {**result, "replayed": True}


async def test_withdrawing_an_accepted_candidate_is_illegal(client: McpClient) -> None:
    cid, rid = await admitted(client)
    assert (await client.call("engram_memory_withdraw", withdraw_args(cid))).code == "ILLEGAL_TRANSITION"
    assert (await client.call("engram_memory_get", get_args(rid))).ok


async def test_forget_removes_the_record_everywhere(client: McpClient) -> None:
    word = marker()
    cid, rid = await admitted(client, f"To be forgotten {word}.")
    assert await found_ids(client, word) == [rid]
    arguments = forget_args(rid)
    result = (await client.call("engram_memory_forget", arguments)).value
    receipt = result["receipt"]
    assert (receipt["operation"], receipt["from_state"], receipt["to_state"]) == (
        "tombstone",
        "accepted_current",
        "tombstoned",
    )
    assert result["replayed"] is False
    assert await found_ids(client, word) == []
    assert (await client.call("engram_memory_get", get_args(rid))).code == "NOT_FOUND"
    assert (await client.call("engram_memory_forget", forget_args(rid))).code == "NOT_FOUND"
    assert (await client.call("engram_memory_forget", dict(arguments))).value == {**result, "replayed": True}
    # EMC-LIFE-008: the candidate behind a forgotten record is gone too.
    assert (await client.call("engram_memory_request_admission", admission_args(cid))).code == "NOT_FOUND"
    assert (await client.call("engram_memory_withdraw", withdraw_args(cid))).code == "NOT_FOUND"


async def test_not_found_cannot_tell_why(client: McpClient) -> None:
    """Unknown, other scope, pending, withdrawn, rejected, forgotten: one envelope (EMC-LIFE-005, EMC-HOST-006)."""
    accepted_cid, accepted_rid = await admitted(client)
    pending = await captured(client)
    withdrawn = await captured(client)
    await client.call("engram_memory_withdraw", withdraw_args(withdrawn["candidate_id"]))
    rejected = await captured(client, fake("token", "=", "ghp_", "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"))
    assert (await client.call("engram_memory_request_admission", admission_args(rejected["candidate_id"]))).value[
        "outcome"
    ]["status"] == "rejected"
    forgotten_cid, forgotten_rid = await admitted(client)
    await client.call("engram_memory_forget", forget_args(forgotten_rid))
    unknown_cid = "candidate_" + "0" * 64
    unknown_rid = record_id("sha256:" + "1" * 64)
    elsewhere: tuple[dict[str, Any], ...] = ({"tenant": "globex"}, {"workspace": "ops"})

    refusals: list[Result] = []
    record_ids = [unknown_rid, record_id(pending["record_digest"]), record_id(withdrawn["record_digest"]),
                  record_id(rejected["record_digest"]), forgotten_rid]
    for rid in record_ids:
        refusals.append(await client.call("engram_memory_get", get_args(rid)))
        refusals.append(await client.call("engram_memory_forget", forget_args(rid)))
    for binding in elsewhere:
        refusals.append(await client.call("engram_memory_get", get_args(accepted_rid), **binding))
        refusals.append(await client.call("engram_memory_forget", forget_args(accepted_rid), **binding))
    for cid in (unknown_cid, withdrawn["candidate_id"], rejected["candidate_id"], forgotten_cid):
        refusals.append(await client.call("engram_memory_request_admission", admission_args(cid)))
        refusals.append(await client.call("engram_memory_withdraw", withdraw_args(cid)))
    for binding in elsewhere:
        for cid in (pending["candidate_id"], accepted_cid):
            refusals.append(await client.call("engram_memory_request_admission", admission_args(cid), **binding))
            refusals.append(await client.call("engram_memory_withdraw", withdraw_args(cid), **binding))

    envelopes = [r.without_audit_id() for r in refusals]
    assert all(env == envelopes[0] for env in envelopes), [r.code for r in refusals]
    assert envelopes[0]["error"]["code"] == "NOT_FOUND"
    # The pending candidate and the accepted record are untouched by all of that.
    assert (await client.call("engram_memory_get", get_args(accepted_rid))).ok
    admitted_now = await client.call("engram_memory_request_admission", admission_args(pending["candidate_id"]))
    assert admitted_now.value["outcome"]["status"] == "accepted"


async def test_a_candidate_id_is_not_a_record_id(client: McpClient) -> None:
    cid = (await captured(client))["candidate_id"]
    assert (await client.call("engram_memory_get", get_args(cid))).code == "INVALID_SCHEMA"
    assert (await client.call("engram_memory_forget", forget_args(cid))).code == "INVALID_SCHEMA"


# -- search ----------------------------------------------------------------------------------


async def test_search_never_shows_pending_candidates(client: McpClient) -> None:
    word = marker()
    await captured(client, f"Pending only {word}.")
    assert await found_ids(client, word) == []


async def admit_many(client: McpClient, word: str, count: int, filler: str = "") -> list[str]:
    ids = []
    for i in range(count):
        ids.append((await admitted(client, f"Paged record {word} number {i}. {filler}"))[1])
    return ids


async def test_search_limit_and_paging_to_the_end(client: McpClient) -> None:
    word = marker()
    ids = await admit_many(client, word, 5)
    seen: list[str] = []
    ranks: list[int] = []
    page = await search(client, word, limit=2)
    pages = 0
    while True:
        pages += 1
        records = page.value["records"]
        assert 1 <= len(records) <= 2
        seen += [entry["record"]["record_id"] for entry in records]
        ranks += [entry["rank"] for entry in records]
        cursor = page.value.get("next_page_cursor")
        if cursor is None:
            break
        page = await search(client, word, limit=2, page_cursor=cursor)
    assert pages == 3
    assert sorted(seen) == sorted(ids) and len(seen) == len(set(seen))
    assert ranks == [1, 2, 3, 4, 5]
    default = await search(client, word)
    assert len(default.value["records"]) == 5 and "next_page_cursor" not in default.value


async def test_search_default_limit_is_ten(client: McpClient) -> None:
    word = marker()
    await admit_many(client, word, 11)
    page = await search(client, word)
    assert len(page.value["records"]) == CONTRACT.limit("search.limit.default")
    assert "next_page_cursor" in page.value


async def test_stale_page_cursors(client: McpClient) -> None:
    word = marker()
    await admit_many(client, word, 3)
    cursor = (await search(client, word, limit=1)).value["next_page_cursor"]
    assert (await search(client, word, limit=1, page_cursor=cursor)).ok
    # The same request with defaults spelled out is the same request (EMC-HP-049).
    explicit = {"max_packet_bytes": CONTRACT.limit("max_packet_bytes.default"),
                "capability_policy": {"minimum_channels": "lexical", "network": "forbid"}}
    assert (await search(client, word, limit=1, page_cursor=cursor, **explicit)).ok
    stale = [
        await search(client, f"{word} other", limit=1, page_cursor=cursor),
        await search(client, word, limit=2, page_cursor=cursor),
        await search(client, word, limit=1, max_packet_bytes=8192, page_cursor=cursor),
        await search(client, word, limit=1, page_cursor=cursor, principal="agent-limited"),
        await search(client, word, limit=1, page_cursor=cursor, workspace="ops"),
        await search(client, word, limit=1, page_cursor=tamper(cursor)),
        await search(client, word, limit=1, page_cursor="x" * 40),
    ]
    assert [r.code for r in stale] == ["STALE_PAGE"] * len(stale)
    # Memory changed in the scope: a new admission makes the cursor stale.
    await admitted(client, f"Newcomer {word}.")
    assert (await search(client, word, limit=1, page_cursor=cursor)).code == "STALE_PAGE"
    # A cursor outside its schema bounds is a schema error, not a stale page.
    assert (await search(client, word, page_cursor="")).code == "INVALID_SCHEMA"


def tamper(token: str) -> str:
    middle = len(token) // 2
    return token[:middle] + ("A" if token[middle] != "A" else "B") + token[middle + 1:]


async def test_semantic_ranking_is_unavailable_never_silently_lexical(client: McpClient) -> None:
    word = marker()
    await admitted(client, f"Semantic {word}.")
    policy = {"minimum_channels": "lexical_and_semantic", "network": "forbid"}
    assert (await search(client, word, capability_policy=policy)).code == "RANKING_UNAVAILABLE"
    policy["network"] = "allow"
    assert (await search(client, word, capability_policy=policy)).code == "RANKING_UNAVAILABLE"


async def test_network_allow_grants_nothing(client: McpClient) -> None:
    word = marker()
    await admit_many(client, word, 3)
    plain = await search(client, word)
    forbid = await search(client, word, capability_policy={"minimum_channels": "lexical", "network": "forbid"})
    allow = await search(client, word, capability_policy={"minimum_channels": "lexical", "network": "allow"})

    def order(result: Result) -> list[tuple[str, int, float]]:
        return [(e["record"]["record_id"], e["rank"], e["score"]) for e in result.value["records"]]

    assert order(plain) == order(forbid) == order(allow)
    assert len(order(plain)) == 3


async def test_a_record_larger_than_the_packet_is_projection_oversized(client: McpClient) -> None:
    word = marker()
    _, rid = await admitted(client, f"Large record {word}. " + "lorem ipsum dolor sit amet " * 222)
    assert (await search(client, word, max_packet_bytes=4096)).code == "PROJECTION_OVERSIZED"
    assert (await client.call("engram_memory_get", get_args(rid, max_packet_bytes=4096))).code == "PROJECTION_OVERSIZED"
    assert (await search(client, word)).value["records"][0]["record"]["record_id"] == rid
    assert (await client.call("engram_memory_get", get_args(rid))).ok


@pytest.mark.parametrize("budget", [4096, 6000, 9000])
async def test_the_packet_budget_holds_for_the_whole_value(client: McpClient, budget: int) -> None:
    word = marker()
    ids = await admit_many(client, word, 4, filler="x" * 300)
    seen: list[str] = []
    cursor = None
    while True:
        extra: dict[str, Any] = {"page_cursor": cursor} if cursor else {}
        value = (await search(client, word, max_packet_bytes=budget, **extra)).value
        assert len(canonical_bytes(value, normalize=False)) <= budget
        assert value["records"], "never an empty page"
        seen += [e["record"]["record_id"] for e in value["records"]]
        cursor = value.get("next_page_cursor")
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids)
    for rid in ids:
        got = (await client.call("engram_memory_get", get_args(rid, max_packet_bytes=budget))).value
        assert len(canonical_bytes(got, normalize=False)) <= budget


async def test_tenants_and_workspaces_are_isolated(client: McpClient) -> None:
    word = marker()
    _, rid = await admitted(client, f"Isolated {word}.")
    assert await found_ids(client, word) == [rid]
    assert await found_ids(client, word, tenant="globex") == []
    assert await found_ids(client, word, workspace="ops") == []
    assert (await client.call("engram_memory_get", get_args(rid), tenant="globex")).code == "NOT_FOUND"
    assert (await client.call("engram_memory_get", get_args(rid), workspace="ops")).code == "NOT_FOUND"


async def test_digests_recompute(client: McpClient) -> None:
    """EMC-HP-046: what a client can check, it can recompute from the value alone."""
    word = marker()
    arguments = capture_args(f"Digest check {word}.")
    capture = (await client.call("engram_memory_capture", arguments)).value
    outcome = (await client.call("engram_memory_request_admission", admission_args(capture["candidate_id"]))).value
    rid = outcome["outcome"]["record_id"]

    value = (await search(client, word)).value
    body = {k: v for k, v in value.items() if k != "response_digest"}
    assert value["response_digest"] == profile_digest("search-response", body)
    rank = value["rank_receipt"]
    assert rank["receipt_digest"] == receipt_digest("rank-receipt", rank)

    got = (await client.call("engram_memory_get", get_args(rid))).value
    assert got["packet_digest"] == profile_digest("get-packet", {k: v for k, v in got.items() if k != "packet_digest"})
    receipt = got["read_receipt"]
    assert receipt["receipt_digest"] == profile_digest(
        "read-receipt", {k: v for k, v in receipt.items() if k != "receipt_digest"}
    )
    assert receipt["record_digest"] == capture["record_digest"]

    # The record is redacted of its scope only; put the bound scope back and both upstream digests hold.
    record = dict(got["record"])
    assert got["redacted_fields"] == ["/scope_ref"] and "scope_ref" not in record
    record["scope_ref"] = scope_ref(client.host.binding())
    assert record_digest(record) == record["record_digest"] == capture["record_digest"]
    assert record_id(record["record_digest"]) == rid
    effective = {**arguments["payload"], "scope_ref": record["scope_ref"],
                 "retention": {"derivative_rule": "make-ineligible"}, "reconciliation": {"family_refs": []}}
    assert record["payload_digest"] == payload_digest(effective)


async def test_a_last_record_that_fits_without_a_cursor_is_delivered(client: McpClient) -> None:
    """EMC-SRCH-013 refuses a record that does not fit *on its own*; room for a cursor nobody needs is no reason."""
    probe_word = marker()
    await admitted(client, f"Sizing probe {probe_word}. " + "y" * 2000)
    probe = (await search(client, probe_word)).value
    assert "next_page_cursor" not in probe
    slack = 64  # far less than any sealed cursor
    filler = 2000 + CONTRACT.limit("max_packet_bytes.min") - slack - len(canonical_bytes(probe, normalize=False))
    word = marker()
    _, rid = await admitted(client, f"Sizing probe {word}. " + "y" * filler)
    alone = (await search(client, word)).value
    size = len(canonical_bytes(alone, normalize=False))
    assert size <= CONTRACT.limit("max_packet_bytes.min"), size
    result = await search(client, word, max_packet_bytes=CONTRACT.limit("max_packet_bytes.min"))
    assert result.ok, f"a {size}-byte answer was refused under a {CONTRACT.limit('max_packet_bytes.min')}-byte budget"
    assert [e["record"]["record_id"] for e in result.value["records"]] == [rid]
