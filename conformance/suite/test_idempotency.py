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
from engram_mcp.conformance._needs import ADMIT, CAPTURE, CASE_TOOL, FORGET, SEARCH, WITHDRAW
from engram_mcp.conformance._run import Run
from engram_mcp.conformance._words import spoken
from engram_mcp.conformance._world import World, capture_arguments, fresh_key, unique, unknown_candidate, unknown_record

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


def accepted(world: World, text: str | None = None, principal: str | None = None) -> tuple[str, str, dict[str, Any]]:
    """A candidate admitted in the check's scope: (candidate_id, record_id, capture arguments)."""
    arguments, captured = world.capture(text=text, principal=principal)
    outcome = world.admit(captured["candidate_id"], principal=principal)
    require(outcome.get("status") == "accepted" and "record_id" in outcome,
            f"admission of benign content in the check's scope was {spoken(outcome.get('status'))}, not accepted")
    return captured["candidate_id"], outcome["record_id"], arguments


def search_ids(world: World, query: str) -> list[str]:
    return world.found(world.search(query, owned=True, limit=50), f"a search for the marker {query}")


def replay(world: World, tool: str, arguments: dict[str, Any]) -> tuple[Reply, bool]:
    """Send a call again; also say whether the target asked for a confirmation again (evidence only)."""
    before = world.conn.elicitations
    reply = world.call(tool, copy.deepcopy(arguments), confirm=False)
    asked = reply.kind == "input_required" or world.conn.elicitations > before
    if reply.kind == "input_required":
        reply = world.call(tool, copy.deepcopy(arguments))
    return reply, asked


# -- replays -------------------------------------------------------------------


@check("idempotency.capture-replay", "EMC-IDEM-005", "EMC-CAP-014", "EMC-IDEM-011",
       uses=(CAPTURE, ADMIT, SEARCH, FORGET))
def test_a_repeated_capture_is_duplicate_exact_and_writes_nothing(world: World) -> None:
    """The same capture under the same key answers duplicate_exact with the first candidate, before and after
    admission, and after its record was forgotten."""
    marker = unique("idem")
    arguments = capture_arguments(world.profile.purpose_ref, text=text_with(marker))
    first = world.call(CAPTURE, copy.deepcopy(arguments))
    world.evidence.add("first", seen(first))
    world.expect(first, "a valid capture under a new key")
    candidate = first.value["candidate_id"]
    second, _ = replay(world, CAPTURE, arguments)
    world.evidence.add("replay", seen(second))
    world.expect(second, "the same capture again")
    outcome = world.admit(candidate)
    require(
        outcome.get("status") == "accepted",
        f"admission of the candidate was {spoken(outcome.get('status'))}, not accepted"
    )
    third, _ = replay(world, CAPTURE, arguments)
    world.evidence.add("replay_after_admission", seen(third))
    world.expect(third, "the same capture again, after the candidate was admitted")
    found = search_ids(world, marker)
    world.evidence.add("records_found", len(found))
    # §3.3: reusing the original capture key with the same content is a replay, even once the record is forgotten.
    forget = {"record_id": outcome["record_id"], "idempotency_key": fresh_key(), "reason_ref": "reason:conformance"}
    world.value(world.call(FORGET, forget, answer="accept"), "forget of the admitted record")
    fourth, _ = replay(world, CAPTURE, arguments)
    world.evidence.add("replay_after_forget", seen(fourth))
    world.expect(fourth, "the same capture again, after its record was forgotten")


@check("idempotency.mutation-replay", "EMC-IDEM-006", "EMC-IDEM-011", "EMC-IDEM-014",
       uses=(CAPTURE, CASE_TOOL), cases={FORGET: (ADMIT,)})
@pytest.mark.parametrize("tool", [ADMIT, WITHDRAW, FORGET])
def test_a_repeated_mutation_returns_the_first_result_marked_replayed(world: World, tool: str) -> None:
    """A repeated admission, withdraw or forget returns the first result with replayed true, after the state has
    moved on."""
    arguments = fresh_operation(world, tool)
    first = world.call(tool, copy.deepcopy(arguments))
    world.evidence.add("first", seen(first))
    if first.value is None:
        raise Blocked(f"the first {tool} failed: it was answered {first.said()}")
    world.expect(first, f"the first {tool.removeprefix('engram_memory_')}")
    second, asked = replay(world, tool, arguments)
    world.evidence.add("replay", seen(second))
    world.evidence.add("confirmation_asked_on_replay", asked)
    world.expect(second, f"the same {tool.removeprefix('engram_memory_')} again")


def fresh_operation(world: World, tool: str, principal: str | None = None, key: str | None = None) -> dict[str, Any]:
    """Arguments for a first admission, withdraw or forget of a target made for it in the check's scope."""
    if tool == FORGET:
        _, record, _ = accepted(world, principal=principal)
        return forgetting(record, key)
    _, captured = world.capture(principal=principal)
    if tool == ADMIT:
        return admission(captured["candidate_id"], key)
    return withdrawal(captured["candidate_id"], key)


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


@check(RETRY_AFTER_EXPIRY, "EMC-IDEM-013", uses=CAPTURE)
def test_a_retry_keeps_the_retention_of_its_first_capture(harness: Run, world: World) -> None:
    """A capture retried after its expires_at has passed is still the same capture: duplicate_exact, not
    INVALID_SCHEMA."""
    expires, arguments, first = harness.head_starts.take(RETRY_AFTER_EXPIRY, world)
    world.evidence.add("first", seen(first))
    first_value = first.value
    require(first_value is not None and first_value.get("status") == "committed_pending",
            f"a capture whose expires_at is {EXPIRY_AHEAD.total_seconds():.0f} s ahead was not taken ({first.said()}): "
            "the target's clock may be ahead of the harness's")
    world.expect(first, "a capture whose expires_at lies a few seconds ahead")
    time.sleep(max(0.0, (expires - datetime.now(UTC)).total_seconds() + CLOCK_MARGIN))
    # A first capture with that expires_at is refused now: the target's clock agrees that it has passed.
    fresh = world.call(CAPTURE, {**copy.deepcopy(arguments), "idempotency_key": fresh_key()})
    world.evidence.add("new_key_after_expiry", seen(fresh))
    require(fresh.code == "INVALID_SCHEMA",
            f"a first capture whose expires_at passed {CLOCK_MARGIN} s ago answered {fresh.said()}, not "
            "INVALID_SCHEMA, so the target's clock cannot be shown to have passed it")
    # The first arguments, unchanged: only the clock has moved past expires_at.
    second = world.call(CAPTURE, copy.deepcopy(arguments))
    world.evidence.add("retry_after_expiry", seen(second))
    world.expect(second, "a retry of the first capture once its expires_at had passed")


# -- conflicts -----------------------------------------------------------------

# A key used for one operation, then sent with another: other content, another target, another tool. Where the
# second call's own target would let it run, the contract allows only DIGEST_CONFLICT; where that target's state
# forbids it too, it allows that refusal as well (and the pins the conflict: idempotency.conflict-before-
# lifecycle). Never the other operation's effect, and never the first result replayed.
CONFLICTS = {
    "capture-content": (CAPTURE, CAPTURE), "admission-target": (ADMIT, ADMIT),
    "capture-then-admission": (CAPTURE, ADMIT),
    "withdraw-reason": (WITHDRAW, WITHDRAW), "withdraw-target": (WITHDRAW, WITHDRAW),
    "forget-reason": (FORGET, FORGET), "forget-target": (FORGET, FORGET),
    "withdraw-then-forget": (WITHDRAW, FORGET), "forget-then-withdraw": (FORGET, WITHDRAW),
    "admission-then-capture": (ADMIT, CAPTURE),
}


@check("idempotency.digest-conflict", "EMC-IDEM-007",
       uses=CAPTURE, cases={
           "admission-target": (ADMIT,), "capture-then-admission": (ADMIT,), "withdraw-reason": (WITHDRAW,),
           "withdraw-target": (WITHDRAW,), "forget-reason": (ADMIT, FORGET), "forget-target": (ADMIT, FORGET),
           "withdraw-then-forget": (ADMIT, WITHDRAW, FORGET), "forget-then-withdraw": (ADMIT, WITHDRAW, FORGET),
           "admission-then-capture": (ADMIT,)})
@pytest.mark.parametrize("change", list(CONFLICTS))
def test_a_key_reused_for_something_else_is_a_conflict_without_effect(world: World, change: str) -> None:
    """Reusing a key with other content, another target or another tool is DIGEST_CONFLICT, and changes nothing:
    the first operation still replays, and the second's target is as it was."""
    first_tool, second_tool = CONFLICTS[change]
    key = fresh_key()
    original = (capture_arguments(world.profile.purpose_ref, text=text_with(unique("idem")), key=key)
                if first_tool == CAPTURE else fresh_operation(world, first_tool, key=key))
    world.value(world.call(first_tool, copy.deepcopy(original)), f"the first {first_tool}")
    if change.endswith("-reason"):
        again = {**original, "reason_ref": REASON + "-changed"}  # the same target, another reason
    elif second_tool == CAPTURE:
        again = capture_arguments(world.profile.purpose_ref, text=text_with(unique("idem")), key=key)
    else:
        again = fresh_operation(world, second_tool, key=key)  # a target of its own, which the call could change
    reply = world.call(second_tool, again)
    world.evidence.add("reuse", seen(reply))
    world.expect(reply, f"the key of a {first_tool.removeprefix('engram_memory_')} reused for "
                        f"{'another reason' if change.endswith('-reason') else 'another operation'}")
    after = world.call(first_tool, copy.deepcopy(original))
    world.evidence.add("original_replayed", seen(after))
    world.expect(after, "the first operation again, after the conflict")
    if second_tool != CAPTURE and not change.endswith("-reason"):  # the second target: untouched, so it still runs
        unchanged = world.call(second_tool, {**again, "idempotency_key": fresh_key()})
        world.evidence.add("second_target_afterwards", seen(unchanged))
        world.expect(unchanged, "the second operation under a key of its own, after the conflict")


@check("idempotency.conflict-before-lifecycle", "EMC-IDEM-012",
       uses=CAPTURE, cases={
           "withdraw-content": (WITHDRAW,), "withdraw-target": (WITHDRAW,), "forget-content": (ADMIT, FORGET),
           "admission-then-withdraw": (ADMIT, WITHDRAW)})
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
        require(outcome.get("status") == "accepted", f"admission was {spoken(outcome.get('status'))}, not accepted")
        # Withdrawing an accepted candidate would be ILLEGAL_TRANSITION; the key decides first.
        again, tool = withdrawal(captured["candidate_id"], key), WITHDRAW
    reply = world.call(tool, again)
    world.evidence.add("reuse", seen(reply))
    world.expect(reply, f"{case}: the reused key")


# -- the key itself ------------------------------------------------------------


def _holders(world: World, tool: str) -> list[str]:
    """Principals of the check's scope that can make and use a target of ``tool`` themselves."""
    scope = world.scope
    needs = {CAPTURE, tool} | ({ADMIT} if tool == FORGET else set())
    return sorted(p for p, granted in scope.principals.items() if needs <= granted and p not in scope.capture_denied)


@check("idempotency.per-principal", "EMC-IDEM-004", "EMC-HP-048",
       uses=CASE_TOOL, cases={
           ADMIT: (CAPTURE,), WITHDRAW: (CAPTURE,), FORGET: (CAPTURE, ADMIT)}, roles="second-principal")
@pytest.mark.parametrize("tool", [CAPTURE, ADMIT, WITHDRAW, FORGET], ids=lambda t: t.removeprefix("engram_memory_"))
def test_keys_belong_to_one_principal(world: World, tool: str) -> None:
    """Two principals using one key neither replay nor conflict: the second's call is its own first execution."""
    holders = _holders(world, tool)
    if len(holders) < 2:
        pytest.skip(f"the profile grants {tool} (and what makes its targets) to {len(holders)} principal(s) of "
                    f"{world.scope.label}: keys scoped per principal need two, so naming a second principal "
                    "granted them there unlocks this case")
    first, second = holders[:2]
    purpose = world.profile.purpose_ref
    # The same arguments under one key: a replay across principals would return the first one's result.
    key = fresh_key()
    same = (capture_arguments(purpose, text=text_with(unique("idem")), key=key) if tool == CAPTURE
            else fresh_operation(world, tool, principal=first, key=key))
    world.value(world.call(tool, copy.deepcopy(same), principal=first), f"the {tool} by {first}")
    b_reply = world.call(tool, copy.deepcopy(same), principal=second)
    world.evidence.add("same_arguments", seen(b_reply))
    world.expect(b_reply, f"{second} sending {first}'s {tool.removeprefix('engram_memory_')} under the same key")
    # Another operation under one key: a conflict across principals would answer DIGEST_CONFLICT.
    other_key = fresh_key()
    mine = (capture_arguments(purpose, key=other_key) if tool == CAPTURE
            else fresh_operation(world, tool, principal=first, key=other_key))
    world.value(world.call(tool, mine, principal=first), f"the {tool} by {first}")
    theirs = (capture_arguments(purpose, key=other_key) if tool == CAPTURE
              else fresh_operation(world, tool, principal=second, key=other_key))
    c_reply = world.call(tool, theirs, principal=second)
    world.evidence.add("other_operation", seen(c_reply))
    world.expect(c_reply, f"{second}'s own {tool.removeprefix('engram_memory_')} under a key {first} used")


@check("idempotency.key-required", "EMC-IDEM-001", uses=(CAPTURE, ADMIT, WITHDRAW, FORGET))
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
        reply = world.call(tool, arguments)
        codes[tool] = reply.code
        world.expect(reply, f"{tool} without idempotency_key")
    world.evidence.add("codes", codes)


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


@check("idempotency.key-bounds", "EMC-IDEM-002", uses=(CAPTURE, ADMIT, WITHDRAW, FORGET))
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
    replies = {tool: world.call(tool, arguments) for tool, arguments in calls.items()}
    world.evidence.add("codes", {tool: reply.code for tool, reply in replies.items()})
    for tool, reply in replies.items():
        world.expect(reply, f"{tool} under a {case} key")
    reply = world.call(CAPTURE, capture_arguments(world.profile.purpose_ref, key=good))
    world.evidence.add("within_bounds", seen(reply))
    world.expect(reply, f"a capture under a key of {len(good.encode())} bytes in NFC, within the bounds")


@check("idempotency.new-key-same-content", "EMC-CAP-015", "EMC-CAP-014", uses=(CAPTURE, ADMIT))
def test_equal_content_under_a_new_key_is_a_new_candidate(world: World) -> None:
    """Content equal to an earlier capture, or to a current record, under a new key is committed_pending again."""
    arguments = capture_arguments(world.profile.purpose_ref, text=text_with(unique("idem")))
    first = world.value(world.call(CAPTURE, copy.deepcopy(arguments)), "capture")
    again = world.call(CAPTURE, {**copy.deepcopy(arguments), "idempotency_key": fresh_key()})
    world.evidence.add("equal_to_a_capture", seen(again))
    world.expect(again, "content equal to an earlier capture, under a new key")
    outcome = world.admit(first["candidate_id"])
    require(outcome.get("status") == "accepted", f"admission was {spoken(outcome.get('status'))}, not accepted")
    third = world.call(CAPTURE, {**copy.deepcopy(arguments), "idempotency_key": fresh_key()})
    world.evidence.add("equal_to_a_record", seen(third))
    world.expect(third, "content equal to a current record, under a new key")
