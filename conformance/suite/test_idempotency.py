"""Idempotency: replays, conflicts, the key's bounds and its scope, and replay before lifecycle."""

from __future__ import annotations

import copy
import secrets
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engram_mcp.conformance._checks import Blocked, check, require
from engram_mcp.conformance._connect import Reply
from engram_mcp.conformance._head_start import head_start
from engram_mcp.conformance._run import Run
from engram_mcp.conformance._world import World, capture_arguments, fresh_key, unique, unknown_candidate, unknown_record

SEARCH, CAPTURE = "engram_memory_search", "engram_memory_capture"
ADMIT, WITHDRAW, FORGET = "engram_memory_request_admission", "engram_memory_withdraw", "engram_memory_forget"
REASON = "reason:conformance"


# -- helpers -------------------------------------------------------------------


def seen(reply: Reply) -> dict[str, Any]:
    """What a reply was, for the evidence: its kind, its code, and a status when it has one."""
    summary: dict[str, Any] = {"kind": reply.kind, "code": reply.code}
    envelope = reply.envelope
    if isinstance(envelope, dict) and envelope.get("ok") is True:
        value = envelope.get("output", {}).get("value", {})
        if isinstance(value, dict):
            status = value.get("status") or value.get("outcome", {}).get("status")
            if status:
                summary["status"] = status
            if "replayed" in value:
                summary["replayed"] = value["replayed"]
    return summary



def text_with(marker: str) -> str:
    return f"Decision {marker}: settle invoices from the ledger service only."




def admission(candidate_id: str, key: str | None = None) -> dict[str, Any]:
    return {"candidate_id": candidate_id, "idempotency_key": key or fresh_key()}


def withdrawal(candidate_id: str, key: str | None = None, reason: str = REASON) -> dict[str, Any]:
    return {"candidate_id": candidate_id, "idempotency_key": key or fresh_key(), "reason_ref": reason}


def forgetting(record_id: str, key: str | None = None, reason: str = REASON) -> dict[str, Any]:
    return {"record_id": record_id, "idempotency_key": key or fresh_key(), "reason_ref": reason}


def accepted(world: World, text: str | None = None) -> tuple[str, str, dict[str, Any]]:
    """A candidate admitted in the primary scope: (candidate_id, record_id, capture arguments)."""
    arguments, captured = world.capture(text=text)
    outcome = world.admit(captured["candidate_id"])
    require(outcome.get("status") == "accepted" and "record_id" in outcome,
            f"admission of benign content in the primary scope was {outcome.get('status')!r}, not accepted")
    return captured["candidate_id"], outcome["record_id"], arguments


def search_ids(world: World, query: str) -> list[str]:
    reply = world.call(SEARCH, {"query": query, "purpose_ref": world.profile.purpose_ref})
    value = world.value(reply, "search")
    return [entry.get("record", {}).get("record_id") for entry in value.get("records", [])]


def without_replayed(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if k != "replayed"}


def replay(world: World, tool: str, arguments: dict[str, Any]) -> tuple[Reply, bool]:
    """Send a call again; also say whether the target asked for a confirmation again (evidence only)."""
    before = world.conn.elicitations
    reply = world.call(tool, copy.deepcopy(arguments), confirm=False)
    asked = reply.kind == "input_required" or world.conn.elicitations > before
    if reply.kind == "input_required":
        reply = world.call(tool, copy.deepcopy(arguments))
    return reply, asked


# -- replays -------------------------------------------------------------------


@check("idempotency.capture-replay", "EMC-IDEM-005", "EMC-CAP-014", "EMC-IDEM-011")
def test_a_repeated_capture_is_duplicate_exact_and_writes_nothing(world: World) -> None:
    """The same capture under the same key answers duplicate_exact with the first candidate, before and after
    admission."""
    marker = unique("idem")
    arguments = capture_arguments(world.profile.purpose_ref, text=text_with(marker))
    first = world.call(CAPTURE, copy.deepcopy(arguments))
    world.evidence.add("first", seen(first))
    first_value = first.value
    assert first_value is not None, f"a valid capture under a new key failed: {first.kind} {first.code!r}"
    assert first_value.get("status") == "committed_pending", f"a first capture answered {first_value.get('status')!r}"
    candidate = first_value.get("candidate_id")
    assert isinstance(candidate, str), f"a first capture named no candidate: {candidate!r}"

    second, _ = replay(world, CAPTURE, arguments)
    world.evidence.add("replay", seen(second))
    second_value = second.value
    assert second_value is not None, f"the replayed capture was refused: {second.kind} {second.code!r}"
    assert second_value.get("status") == "duplicate_exact", (
        f"a replayed capture answered {second_value.get('status')!r}"
    )
    assert second_value.get("candidate_id") == candidate, "the replay named another candidate than the first capture"
    if "record_digest" in first_value and "record_digest" in second_value:
        assert second_value["record_digest"] == first_value["record_digest"], (
            "the replay describes another record than the first capture")

    outcome = world.admit(candidate)
    require(
        outcome.get("status") == "accepted", f"admission of the candidate was {outcome.get('status')!r}, not accepted"
    )
    third, _ = replay(world, CAPTURE, arguments)
    world.evidence.add("replay_after_admission", seen(third))
    third_value = third.value
    assert third_value is not None and third_value.get("status") == "duplicate_exact", (
        f"a capture replay after the candidate was admitted answered {seen(third)}, not duplicate_exact")
    assert third_value.get("candidate_id") == candidate

    found = search_ids(world, marker)
    world.evidence.add("records_found", len(found))
    assert found == [outcome.get("record_id")], f"the content was stored {len(found)} times, not once"


@check("idempotency.mutation-replay", "EMC-IDEM-006", "EMC-IDEM-011")
@pytest.mark.parametrize("tool", [ADMIT, WITHDRAW, FORGET])
def test_a_repeated_mutation_returns_the_first_result_marked_replayed(world: World, tool: str) -> None:
    """A repeated admission, withdraw or forget returns the first result with replayed true, after the state has
    moved on."""
    if tool == ADMIT:
        _, captured = world.capture()
        arguments = admission(captured["candidate_id"])
    elif tool == WITHDRAW:
        _, captured = world.capture()
        arguments = withdrawal(captured["candidate_id"])
    else:
        _, record, _ = accepted(world)
        arguments = forgetting(record)
    first = world.call(tool, copy.deepcopy(arguments))
    world.evidence.add("first", seen(first))
    first_value = first.value
    if first_value is None:
        raise Blocked(f"the first {tool} failed: {first.kind} {first.code!r}")
    assert first_value.get("replayed") is False, f"a first execution said replayed={first_value.get('replayed')!r}"

    second, asked = replay(world, tool, arguments)
    world.evidence.add("replay", seen(second))
    world.evidence.add("confirmation_asked_on_replay", asked)
    second_value = second.value
    assert second_value is not None, f"the repeated {tool} was answered {second.kind} {second.code!r}, not replayed"
    assert second_value.get("replayed") is True, f"the repeated {tool} said replayed={second_value.get('replayed')!r}"
    differs = sorted(k for k in (set(first_value) | set(second_value)) - {"replayed"}
                     if first_value.get(k) != second_value.get(k))
    world.evidence.add("members_differing", differs)
    assert without_replayed(second_value) == without_replayed(first_value), (
        f"the replay differs from the first result in {differs}")


def instant(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


EXPIRY_AHEAD = timedelta(seconds=3)  # far enough for the first capture to be in time, near enough to wait out
CLOCK_MARGIN = 1.5  # seconds waited past expires_at, so the target's clock agrees that it has passed


RETRY_AFTER_EXPIRY = "idempotency.retry-after-expiry"


@head_start(RETRY_AFTER_EXPIRY)
def capture_expiring_soon(world: World) -> tuple[datetime, dict[str, Any], Reply]:
    """The first capture, whose expires_at lies EXPIRY_AHEAD ahead: (expires_at, its arguments, its reply)."""
    expires = datetime.now(UTC) + EXPIRY_AHEAD
    retention = {"derivative_rule": "make-ineligible", "expires_at": instant(expires)}
    arguments = capture_arguments(world.profile.purpose_ref, text=text_with(unique("idem")), retention=retention)
    return expires, arguments, world.call(CAPTURE, copy.deepcopy(arguments))


@check(RETRY_AFTER_EXPIRY, "EMC-IDEM-013")
def test_a_retry_keeps_the_retention_of_its_first_capture(harness: Run, world: World) -> None:
    """A capture retried after its expires_at has passed is still the same capture: duplicate_exact, not
    INVALID_SCHEMA."""
    expires, arguments, first = harness.head_starts.take(RETRY_AFTER_EXPIRY, world)
    world.evidence.add("first", seen(first))
    first_value = first.value
    require(first_value is not None and first_value.get("status") == "committed_pending",
            f"a capture whose expires_at is {EXPIRY_AHEAD.total_seconds():.0f} s ahead was not taken ({seen(first)}): "
            "the target's clock may be ahead of the harness's")
    time.sleep(max(0.0, (expires - datetime.now(UTC)).total_seconds() + CLOCK_MARGIN))
    # A first capture with that expires_at is refused now: the target's clock agrees that it has passed.
    fresh = world.call(CAPTURE, {**copy.deepcopy(arguments), "idempotency_key": fresh_key()})
    world.evidence.add("new_key_after_expiry", seen(fresh))
    require(fresh.code == "INVALID_SCHEMA",
            f"a first capture whose expires_at passed {CLOCK_MARGIN} s ago answered {seen(fresh)}, not INVALID_SCHEMA, "
            "so the target's clock cannot be shown to have passed it")
    # The first arguments, unchanged: only the clock has moved past expires_at.
    second = world.call(CAPTURE, copy.deepcopy(arguments))
    world.evidence.add("retry_after_expiry", seen(second))
    second_value = second.value
    assert second_value is not None, (
        f"a retry of a capture the target took was refused once its expires_at had passed ({second.kind} "
        f"{second.code!r}): a retry reuses the retention resolved at the first capture")
    assert second_value.get("status") == "duplicate_exact", (
        f"a retry after expires_at answered {second_value.get('status')!r}, not duplicate_exact")
    assert second_value.get("candidate_id") == first_value.get("candidate_id"), (
        "the retry named another candidate than the first capture")


# -- conflicts -----------------------------------------------------------------


@check("idempotency.digest-conflict", "EMC-IDEM-007")
@pytest.mark.parametrize("change", ["content", "target", "tool"])
def test_a_key_reused_for_something_else_is_a_conflict_without_effect(world: World, change: str) -> None:
    """Reusing a key with other content, another target or another tool is DIGEST_CONFLICT, and changes nothing."""
    key = fresh_key()
    if change == "content":
        original = capture_arguments(world.profile.purpose_ref, text=text_with(unique("idem")), key=key)
        candidate = world.value(world.call(CAPTURE, copy.deepcopy(original)), "capture")["candidate_id"]
        changed = copy.deepcopy(original)
        changed["payload"]["components"][0]["text"] = text_with(unique("idem"))
        reply = world.call(CAPTURE, changed)
        world.evidence.add("reuse", seen(reply))
        assert reply.code == "DIGEST_CONFLICT", f"a capture key reused with other content answered {seen(reply)}"
        after = world.call(CAPTURE, copy.deepcopy(original))
        world.evidence.add("original_replayed", seen(after))
        after_value = after.value or {}
        assert after_value.get("status") == "duplicate_exact" and after_value.get("candidate_id") == candidate, (
            f"after the conflict the original capture no longer replays: {seen(after)}")
        return
    _, captured = world.capture()
    candidate = captured["candidate_id"]
    if change == "target":
        _, other = world.capture()
        world.value(world.call(ADMIT, admission(other["candidate_id"], key)), "request_admission")
    else:
        world.value(world.call(CAPTURE, capture_arguments(world.profile.purpose_ref, key=key)), "capture")
    reply = world.call(ADMIT, admission(candidate, key))
    world.evidence.add("reuse", seen(reply))
    assert reply.code == "DIGEST_CONFLICT", f"a key reused with another {change} answered {seen(reply)}"
    # No effect: the candidate is still pending, so an admission under a new key decides it.
    after = world.call(ADMIT, admission(candidate))
    world.evidence.add("admission_afterwards", seen(after))
    assert after.value is not None, f"after the conflict the candidate is no longer pending: {seen(after)}"


@check("idempotency.conflict-before-lifecycle", "EMC-IDEM-012")
@pytest.mark.parametrize("case", ["withdraw-content", "withdraw-target", "forget-content", "admission-then-withdraw"])
def test_a_conflict_wins_over_a_lifecycle_refusal(world: World, case: str) -> None:
    """A reused key is DIGEST_CONFLICT even where the target's state would also refuse the call."""
    key = fresh_key()
    if case.startswith("withdraw"):
        _, captured = world.capture()
        first = withdrawal(captured["candidate_id"], key)
        world.value(world.call(WITHDRAW, first), "withdraw")
        # The candidate is withdrawn now; without the key, either call would be NOT_FOUND.
        again = (withdrawal(captured["candidate_id"], key, reason=REASON + "-changed") if case == "withdraw-content"
                 else withdrawal(unknown_candidate(), key))
        tool = WITHDRAW
    elif case == "forget-content":
        _, record, _ = accepted(world)
        world.value(world.call(FORGET, forgetting(record, key)), "forget")
        again, tool = forgetting(record, key, reason=REASON + "-changed"), FORGET
    else:
        _, captured = world.capture()
        outcome = world.value(world.call(ADMIT, admission(captured["candidate_id"], key)), "request_admission")[
            "outcome"
        ]
        require(outcome.get("status") == "accepted", f"admission was {outcome.get('status')!r}, not accepted")
        # Withdrawing an accepted candidate would be ILLEGAL_TRANSITION; the key decides first.
        again, tool = withdrawal(captured["candidate_id"], key), WITHDRAW
    reply = world.call(tool, again)
    world.evidence.add("reuse", seen(reply))
    assert reply.code == "DIGEST_CONFLICT", f"{case}: the reused key answered {seen(reply)}, not DIGEST_CONFLICT"


# -- the key itself ------------------------------------------------------------


@check("idempotency.per-principal", "EMC-IDEM-004", "EMC-HP-048")
def test_keys_belong_to_one_principal(world: World) -> None:
    """Two principals using one key neither replay nor conflict: each gets its own candidate."""
    scope = world.primary
    capturers = sorted(
        p for p, granted in scope.principals.items() if CAPTURE in granted and p not in scope.capture_denied
    )
    if len(capturers) < 2:
        pytest.skip(f"the profile grants capture to {len(capturers)} principal(s) of {scope.label}: keys scoped per "
                    "principal need two, so naming a second principal granted capture there unlocks this check")
    first, second = capturers[:2]
    purpose = world.profile.purpose_ref
    # Identical content under one key: a replay across principals would answer duplicate_exact.
    same = capture_arguments(purpose, text=text_with(unique("idem")))
    a = world.value(world.call(CAPTURE, copy.deepcopy(same), principal=first), "capture by the first principal")
    b_reply = world.call(CAPTURE, copy.deepcopy(same), principal=second)
    world.evidence.add("same_content", seen(b_reply))
    b = b_reply.value
    assert b is not None, f"the second principal's capture under the first's key answered {seen(b_reply)}"
    assert b.get("status") == "committed_pending", f"the second principal's capture answered {b.get('status')!r}"
    assert b.get("candidate_id") != a.get("candidate_id"), "two principals were given one candidate for one key"
    # Other content under one key: a conflict across principals would answer DIGEST_CONFLICT.
    key = fresh_key()
    world.value(
        world.call(CAPTURE, capture_arguments(purpose, key=key), principal=first), "capture by the first principal"
    )
    c_reply = world.call(CAPTURE, capture_arguments(purpose, key=key), principal=second)
    world.evidence.add("other_content", seen(c_reply))
    c = c_reply.value
    assert c is not None and c.get("status") == "committed_pending", (
        f"other content under another principal's key answered {seen(c_reply)}")


@check("idempotency.key-required", "EMC-IDEM-001")
def test_a_mutation_without_a_key_is_invalid(world: World) -> None:
    """capture, request_admission, withdraw and forget without idempotency_key are INVALID_SCHEMA."""
    calls = {
        CAPTURE: capture_arguments(world.profile.purpose_ref),
        ADMIT: admission(unknown_candidate()),
        WITHDRAW: withdrawal(unknown_candidate()),
        FORGET: forgetting(unknown_record()),
    }
    codes = {}
    for tool, arguments in calls.items():
        del arguments["idempotency_key"]
        codes[tool] = world.call(tool, arguments).code
    world.evidence.add("codes", codes)
    wrong = {tool: code for tool, code in codes.items() if code != "INVALID_SCHEMA"}
    assert not wrong, f"a mutation without idempotency_key was not refused with INVALID_SCHEMA: {wrong}"


def _keys(case: str) -> tuple[str, str]:
    """(a key the case must refuse, the nearest key that is valid)."""
    token = secrets.token_hex(8)  # 16 ASCII bytes, unique to the call
    if case == "too-short":
        return token[:15], token
    if case == "too-long":
        # 'é' is two UTF-8 bytes: 16 + 120*2 = 256 bytes in 136 characters; one more byte is too long.
        valid = token + "é" * 120
        return valid + "a", valid
    return token + "cafe\u0301", token + "caf\u00e9"  # decomposed versus composed


@check("idempotency.key-bounds", "EMC-IDEM-002")
@pytest.mark.parametrize("case", ["too-short", "too-long", "not-nfc"])
def test_a_key_outside_its_bounds_is_invalid(world: World, case: str) -> None:
    """A key under 16 or over 256 UTF-8 bytes, or not in NFC, is INVALID_SCHEMA for all four mutations; the bounds
    are accepted."""
    bad, good = _keys(case)
    world.evidence.add("bytes", {"refused": len(bad.encode()), "accepted": len(good.encode())})
    calls = {
        CAPTURE: capture_arguments(world.profile.purpose_ref, key=bad),
        ADMIT: admission(unknown_candidate(), bad),
        WITHDRAW: withdrawal(unknown_candidate(), bad),
        FORGET: forgetting(unknown_record(), bad),
    }
    codes = {tool: world.call(tool, arguments).code for tool, arguments in calls.items()}
    world.evidence.add("codes", codes)
    wrong = {tool: code for tool, code in codes.items() if code != "INVALID_SCHEMA"}
    assert not wrong, f"a {case} key was not refused with INVALID_SCHEMA: {wrong}"
    reply = world.call(CAPTURE, capture_arguments(world.profile.purpose_ref, key=good))
    world.evidence.add("within_bounds", seen(reply))
    value = reply.value
    assert value is not None and value.get("status") == "committed_pending", (
        f"a key of {len(good.encode())} bytes in NFC, within the bounds, was refused: {seen(reply)}")


@check("idempotency.new-key-same-content", "EMC-CAP-015", "EMC-CAP-014")
def test_equal_content_under_a_new_key_is_a_new_candidate(world: World) -> None:
    """Content equal to an earlier capture, or to a current record, under a new key is committed_pending again."""
    arguments = capture_arguments(world.profile.purpose_ref, text=text_with(unique("idem")))
    first = world.value(world.call(CAPTURE, copy.deepcopy(arguments)), "capture")
    again = world.call(CAPTURE, {**copy.deepcopy(arguments), "idempotency_key": fresh_key()})
    world.evidence.add("equal_to_a_capture", seen(again))
    again_value = again.value
    assert again_value is not None and again_value.get("status") == "committed_pending", (
        f"content equal to an earlier capture, under a new key, answered {seen(again)}")
    assert again_value.get("candidate_id") != first.get("candidate_id"), "a new key was given the earlier candidate"
    outcome = world.admit(first["candidate_id"])
    require(outcome.get("status") == "accepted", f"admission was {outcome.get('status')!r}, not accepted")
    third = world.call(CAPTURE, {**copy.deepcopy(arguments), "idempotency_key": fresh_key()})
    world.evidence.add("equal_to_a_record", seen(third))
    third_value = third.value
    assert third_value is not None and third_value.get("status") == "committed_pending", (
        f"content equal to a current record, under a new key, answered {seen(third)}")
