"""The executable model of contract 1.0.0: the answers it allows, the state it advances to, what it blames.

These tests feed the model answers by hand: what a correct server may say (several where the contract leaves a
choice), and what a faulty one says. The certification of the reference (tests/conformance/test_harness_e2e.py)
judges every answer of a whole run with it.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

import pytest

from engram_mcp.contract.model import (
    Call,
    CandidateState,
    HostFacts,
    Model,
    Observation,
    RecordState,
    Scope,
    ScopeFacts,
    State,
    judged,
    pins,
)

NOW = 1_800_000_000_000
A, B = Scope("acme", "research"), Scope("globex", "research")
ALL = frozenset({"engram_memory_search", "engram_memory_get", "engram_memory_capture",
                 "engram_memory_request_admission", "engram_memory_withdraw", "engram_memory_forget"})
FACTS = HostFacts({A: ScopeFacts(grants={"p1": ALL, "p2": ALL}, admission=lambda p, e: frozenset({"accepted"})),
                   B: ScopeFacts(grants={"p1": ALL}, admission=lambda p, e: frozenset({"accepted"}))})
MODEL = Model(FACTS)
DIGEST = "sha256:" + "ab" * 32


def candidate_of(seed: str) -> str:
    return "candidate_" + hashlib.sha256(seed.encode()).hexdigest()


def record_of(seed: str) -> str:
    return "mem_" + base64.b32encode(hashlib.sha256(seed.encode()).digest()).decode().lower().rstrip("=")


def capture_args(text: str, key: str) -> dict[str, Any]:
    return {"idempotency_key": key, "payload": {
        "schema_version": 2, "purpose_ref": "purpose:test", "valid_time": {"t": 1},
        "components": [{"component_id": "c", "kind": "decision", "text": text, "citation_ids": ["s"]}],
        "primary_component_id": "c", "primary_event": {"at": 1, "type_ref": "event:x", "citation_id": "s"},
        "citations": [{"citation_id": "s", "source_ref": "source:x", "locator": {"scheme": "d", "value": "v"},
                       "content_digest": DIGEST}]},
        "evidence": {"evidence_ref": "evidence:x", "evidence_digest": DIGEST, "citation_ids": ["s"]}}


def ok(value: Mapping[str, Any], *, asked: bool = True) -> Observation:
    return Observation("success", value=value, asked=asked)


def refused(code: str, retriable: bool = False) -> Observation:
    return Observation("refusal", code, retriable, asked=True)


def call(tool: str, arguments: dict[str, Any], scope: Scope = A, principal: str = "p1", **extra: Any) -> Call:
    return Call(f"engram_memory_{tool}", arguments, scope, principal, NOW, **extra)


class Run:
    """A sequence of calls against the model, keeping its state."""

    def __init__(self) -> None:
        self.state = State()
        self.counter = 0

    def key(self) -> str:
        self.counter += 1
        return f"test-key-{self.counter:012d}"

    def step(self, made: Call, seen: Observation) -> Any:
        judgement, self.state = judged(MODEL, self.state, made, seen)
        return judgement

    def capture(self, text: str, scope: Scope = A, principal: str = "p1", key: str | None = None) -> str:
        ident = candidate_of(f"{self.counter}-{text}")
        j = self.step(call("capture", capture_args(text, key or self.key()), scope, principal),
                      ok({"status": "committed_pending", "candidate_id": ident}))
        assert j.allowed, j.message()
        return ident

    def admit(self, candidate: str, scope: Scope = A, key: str | None = None) -> str:
        record = record_of(candidate)
        j = self.step(call("request_admission", {"candidate_id": candidate, "idempotency_key": key or self.key()},
                           scope), ok({"outcome": {"status": "accepted", "candidate_id": candidate,
                                                   "record_id": record}, "replayed": False}))
        assert j.allowed, j.message()
        return record

    def forget(self, record: str, scope: Scope = A) -> None:
        j = self.step(call("forget", {"record_id": record, "idempotency_key": self.key(), "reason_ref": "r"}, scope),
                      ok({"receipt": tombstone_receipt(), "replayed": False, "projection_invalidation": "pending"}))
        assert j.allowed, j.message()


def tombstone_receipt(source: str = "accepted_current") -> dict[str, Any]:
    return {"operation": "tombstone", "from_state": source, "to_state": "tombstoned", "event_id": "e"}


def withdraw_receipt() -> dict[str, Any]:
    return {"operation": "withdraw", "from_state": "pending", "to_state": "withdrawn", "event_id": "e"}


def page(*ids: str, cursor: str | None = None, texts: Mapping[str, str] | None = None) -> Observation:
    packets = [{"record": {"record_id": i, "components": [{"text": (texts or {}).get(i, "x")}]},
                "redacted_fields": [], "score": 1, "rank": n} for n, i in enumerate(ids, 1)]
    value: dict[str, Any] = {"records": packets, "rank_receipt": {}, "response_digest": DIGEST}
    if cursor:
        value["next_page_cursor"] = cursor
    return ok(value, asked=False)


# -- capture and idempotency ------------------------------------------------------------------------------------


def test_a_first_capture_is_committed_pending_and_its_replay_duplicate_exact() -> None:
    run = Run()
    key = run.key()
    candidate = run.capture("alpha", key=key)
    assert run.state.candidate(A, candidate).state is CandidateState.PENDING
    again = call("capture", capture_args("alpha", key))
    assert run.step(again, ok({"status": "duplicate_exact", "candidate_id": candidate})).allowed
    wrong = run.step(again, ok({"status": "committed_pending", "candidate_id": candidate_of("another")}))
    assert not wrong.allowed and "EMC-IDEM-005" in wrong.broken


def test_a_key_reused_for_other_content_is_a_conflict_without_effect() -> None:
    run = Run()
    key = run.key()
    run.capture("alpha", key=key)
    other = call("capture", capture_args("beta", key))
    assert run.step(other, refused("DIGEST_CONFLICT")).allowed
    judgement = run.step(other, ok({"status": "committed_pending", "candidate_id": candidate_of("c2")}))
    assert not judgement.allowed and judgement.broken == ("EMC-IDEM-007",)


def test_keys_are_scoped_to_the_principal() -> None:
    run = Run()
    key = run.key()
    first = run.capture("alpha", key=key)
    second = run.step(call("capture", capture_args("alpha", key), principal="p2"),
                      ok({"status": "committed_pending", "candidate_id": candidate_of("c-p2")}))
    assert second.allowed
    shared = run.step(call("capture", capture_args("alpha", key), principal="p2"),
                      ok({"status": "committed_pending", "candidate_id": first}))
    assert not shared.allowed  # p2's key is bound now: a replay is duplicate_exact of p2's own candidate


def test_a_withdraw_retried_with_another_reason_is_no_replay() -> None:
    run = Run()
    candidate = run.capture("alpha")
    key = run.key()
    first = call("withdraw", {"candidate_id": candidate, "idempotency_key": key, "reason_ref": "r1"})
    value = {"receipt": withdraw_receipt(), "replayed": False, "key_destruction": "pending"}
    assert run.step(first, ok(value)).allowed
    other_reason = call("withdraw", {"candidate_id": candidate, "idempotency_key": key, "reason_ref": "r2"})
    replay = run.step(other_reason, ok({**value, "replayed": True}))
    assert not replay.allowed and "EMC-IDEM-007" in replay.broken
    # The contract gives no precedence between the conflict and the target's state: both refusals are allowed,
    # and the pins DIGEST_CONFLICT.
    lifecycle = run.step(other_reason, refused("NOT_FOUND"))
    assert lifecycle.allowed and [p.requirement for p in lifecycle.pins] == ["EMC-IDEM-012"]
    assert not run.step(other_reason, refused("DIGEST_CONFLICT")).pins


def test_an_admission_replay_may_say_duplicate_exact_but_the_profile_pins_the_first_outcome() -> None:
    run = Run()
    candidate = run.capture("alpha")
    key = run.key()
    record = run.admit(candidate, key=key)
    again = call("request_admission", {"candidate_id": candidate, "idempotency_key": key})
    first = {"outcome": {"status": "accepted", "candidate_id": candidate, "record_id": record}, "replayed": True}
    assert run.step(again, ok(first)).allowed
    duplicate = run.step(again, ok({"outcome": {"status": "duplicate_exact", "candidate_id": candidate},
                                    "replayed": True}))
    assert duplicate.allowed and [p.requirement for p in duplicate.pins] == ["EMC-IDEM-014"]
    assert not run.step(again, ok({**first, "replayed": False})).allowed


def test_a_refused_capture_may_bind_its_key_but_the_profile_reserves_nothing() -> None:
    run = Run()
    key = run.key()
    arguments = capture_args("alpha", key)
    arguments["payload"]["retention"] = {"derivative_rule": "retain"}
    assert run.step(call("capture", arguments), refused("UNAUTHORIZED")).allowed
    fixed = call("capture", capture_args("alpha", key))
    conflict = run.step(fixed, refused("DIGEST_CONFLICT"))
    assert conflict.allowed and [p.requirement for p in conflict.pins] == ["EMC-HP-071"]
    fresh = run.step(fixed, ok({"status": "committed_pending", "candidate_id": candidate_of("c-fixed")}))
    assert fresh.allowed and not fresh.pins
    stored = run.step(call("capture", capture_args("alpha", run.key())), ok({"status": "duplicate_exact",
                                                                            "candidate_id": candidate_of("c-fixed")}))
    assert not stored.allowed


def test_any_refused_use_of_a_key_may_be_the_one_that_bound_it() -> None:
    run = Run()
    key = run.key()
    late = capture_args("alpha", key)
    late["payload"]["retention"] = {"derivative_rule": "make-ineligible", "expires_at": "2000-01-01T00:00:00.000Z"}
    assert run.step(call("capture", late), refused("INVALID_SCHEMA")).allowed
    unconsented = capture_args("beta", key)
    unconsented["payload"]["reconciliation"] = {"family_refs": ["family:x"]}
    assert run.step(call("capture", unconsented), refused("UNAUTHORIZED")).allowed
    # The server bound the key when it refused the second call: the first one again conflicts with it.
    again = run.step(call("capture", late), refused("DIGEST_CONFLICT"))
    assert again.allowed and [p.requirement for p in again.pins] == ["EMC-HP-071"]
    assert run.step(call("capture", unconsented), refused("UNAUTHORIZED")).allowed


def test_a_capture_refused_for_its_purpose_leaves_its_key_free() -> None:
    run = Run()
    key = run.key()
    wrong = call("capture", capture_args("alpha", key), purpose_ok=False)
    assert run.step(wrong, Observation("protocol", -32603)).allowed
    fixed = call("capture", capture_args("alpha", key))
    reserved = run.step(fixed, refused("DIGEST_CONFLICT"))
    assert not reserved.allowed and reserved.broken == ("EMC-HOST-008",)
    replayed = run.step(fixed, ok({"status": "duplicate_exact", "candidate_id": candidate_of("x")}))
    assert not replayed.allowed and replayed.broken == ("EMC-HOST-008",)
    assert run.step(fixed, ok({"status": "committed_pending", "candidate_id": candidate_of("c-fixed")})).allowed


# -- lifecycle ------------------------------------------------------------------------------------------------


def test_withdraw_of_an_accepted_candidate_is_a_lifecycle_refusal_the_profile_pins() -> None:
    run = Run()
    candidate = run.capture("alpha")
    run.admit(candidate)
    withdraw = call("withdraw", {"candidate_id": candidate, "idempotency_key": run.key(), "reason_ref": "r"})
    for code in ("ILLEGAL_TRANSITION", "ALREADY_TERMINAL", "NOT_FOUND"):
        judgement = run.step(withdraw, refused(code))
        assert judgement.allowed, code
        assert [p.requirement for p in judgement.pins] == ([] if code == "ILLEGAL_TRANSITION" else ["EMC-LIFE-006"])
    ran = run.step(withdraw, ok({"receipt": withdraw_receipt(), "replayed": False, "key_destruction": "pending"}))
    assert not ran.allowed and ran.broken == ("EMC-LIFE-011",)


def test_forgotten_content_is_adjudicated_in_its_own_scope_only() -> None:
    run = Run()
    record = run.admit(run.capture("alpha"))
    run.forget(record)
    assert run.state.record(A, record).state is RecordState.TOMBSTONED
    again = run.capture("alpha")
    admit = call("request_admission", {"candidate_id": again, "idempotency_key": run.key()})
    silent = run.step(admit, ok({"outcome": {"status": "accepted", "candidate_id": again, "record_id": record_of("x")},
                                 "replayed": False}))
    assert not silent.allowed and silent.broken == ("EMC-ADM-007",)
    elsewhere = run.capture("alpha", scope=B)
    leak = run.step(call("request_admission", {"candidate_id": elsewhere, "idempotency_key": run.key()}, B),
                    ok({"outcome": {"status": "pending_adjudication", "candidate_id": elsewhere}, "replayed": False}))
    assert not leak.allowed  # another scope's tombstone decides nothing here


def test_unknown_and_foreign_targets_are_not_found() -> None:
    run = Run()
    candidate = run.capture("alpha", scope=B)
    foreign = call("request_admission", {"candidate_id": candidate, "idempotency_key": run.key()})
    assert run.step(foreign, refused("NOT_FOUND")).allowed
    decided = run.step(foreign, ok({"outcome": {"status": "accepted", "candidate_id": candidate,
                                                "record_id": record_of("y")}, "replayed": False}))
    assert not decided.allowed and decided.broken == ("EMC-HOST-006",)


# -- gates ----------------------------------------------------------------------------------------------------


def test_a_declined_confirmation_runs_nothing() -> None:
    run = Run()
    candidate = run.capture("alpha")
    declined = call("withdraw", {"candidate_id": candidate, "idempotency_key": run.key(), "reason_ref": "r"},
                    confirmation="declined")
    assert run.step(declined, refused("gate_failed")).allowed
    ran = run.step(declined, ok({"receipt": withdraw_receipt(), "replayed": False, "key_destruction": "pending"}))
    assert not ran.allowed and "EMC-GATE-001" in ran.broken
    unasked = call("withdraw", {"candidate_id": candidate, "idempotency_key": run.key(), "reason_ref": "r"})
    silent = run.step(unasked, Observation("success", value={"receipt": withdraw_receipt(), "replayed": False,
                                                             "key_destruction": "pending"}, asked=False))
    assert not silent.allowed and "EMC-GATE-001" in silent.broken


def test_the_profile_orders_the_gate_before_the_lookup() -> None:
    run = Run()
    unknown = call("withdraw", {"candidate_id": candidate_of("never"), "idempotency_key": run.key(), "reason_ref": "r"},
                   confirmation="declined")
    looked_up = run.step(unknown, refused("NOT_FOUND"))
    assert looked_up.allowed and [p.requirement for p in looked_up.pins] == ["EMC-HP-022"]


# -- reads ------------------------------------------------------------------------------------------------------


def test_search_never_returns_what_is_not_current_in_the_bound_scope() -> None:
    run = Run()
    kept = run.admit(run.capture("alpha marker1"))
    gone = run.admit(run.capture("beta marker1"))
    other = run.admit(run.capture("gamma marker1", scope=B), scope=B)
    run.forget(gone)
    query = call("search", {"query": "marker1", "purpose_ref": "purpose:test"}, exhaustive=True)
    assert run.step(query, page(kept)).allowed
    for leaked, requirement in ((gone, "EMC-FGT-002"), (other, "EMC-HOST-005")):
        judgement = run.step(query, page(kept, leaked))
        assert not judgement.allowed and requirement in judgement.broken
    missing = run.step(query, page())
    assert not missing.allowed and "EMC-SRCH-012" in missing.broken


def test_a_cursor_minted_before_a_forget_never_serves_the_forgotten_record() -> None:
    run = Run()
    first, second = (run.admit(run.capture(f"{n} marker2")) for n in ("one", "two"))
    query = {"query": "marker2", "purpose_ref": "purpose:test", "limit": 1}
    assert run.step(call("search", query, exhaustive=True), page(first, cursor="k1")).allowed
    run.forget(second)
    served = run.step(call("search", {**query, "page_cursor": "k1"}, exhaustive=True), page(second))
    assert not served.allowed and "EMC-FGT-002" in served.broken
    stale = run.step(call("search", {**query, "page_cursor": "k1"}, exhaustive=True), refused("STALE_PAGE"))
    assert stale.allowed and not stale.pins


def test_a_cursor_replayed_in_another_scope_shows_nothing_of_its_own() -> None:
    run = Run()
    mine = run.admit(run.capture("one marker3"))
    run.admit(run.capture("two marker3"))
    query = {"query": "marker3", "purpose_ref": "purpose:test", "limit": 1}
    assert run.step(call("search", query, exhaustive=True), page(mine, cursor="k2")).allowed
    elsewhere = call("search", {**query, "page_cursor": "k2"}, B)
    assert run.step(elsewhere, page()).allowed
    assert [p.requirement for p in run.step(elsewhere, page()).pins] == ["EMC-SRCH-010"]
    leak = run.step(elsewhere, page(mine))
    assert not leak.allowed and "EMC-HOST-005" in leak.broken


def test_get_returns_exactly_the_record_asked_for() -> None:
    run = Run()
    record = run.admit(run.capture("alpha"))
    get = call("get", {"record_id": record, "purpose_ref": "purpose:test"})
    value = {"record": {"record_id": record}, "redacted_fields": [], "read_receipt": {"record_id": record}}
    assert run.step(get, ok(value, asked=False)).allowed
    other = run.step(get, ok({**value, "record": {"record_id": record_of("other")}}, asked=False))
    assert not other.allowed and other.broken == ("EMC-GET-002",)


# -- protocol and arguments ---------------------------------------------------------------------------------------


def test_an_unconfigured_scope_may_answer_either_protocol_error() -> None:
    run = Run()
    nowhere = call("get", {"record_id": "mem_a", "purpose_ref": "p"}, Scope("acme", "never"))
    for code, pinned in ((-32602, []), (-32603, ["EMC-HOST-013"])):
        judgement = run.step(nowhere, Observation("protocol", code))
        assert judgement.allowed and [p.requirement for p in judgement.pins] == pinned


def test_a_result_where_only_a_protocol_error_is_allowed_is_wrong_even_unreadable() -> None:
    run = Run()
    unknown = call("admin", {}, A)
    for seen in (Observation("unreadable"), ok({"anything": True}, asked=False)):
        judgement = run.step(unknown, seen)
        assert not judgement.allowed and judgement.conclusive and judgement.broken == ("EMC-DISC-003",)
    assert run.step(unknown, Observation("protocol", -32602)).allowed
    unreadable = run.step(call("get", {"record_id": "mem_a", "purpose_ref": "p"}), Observation("unreadable"))
    assert unreadable.allowed and not unreadable.conclusive  # an envelope was due: the envelope checks judge it


def test_a_malformed_digest_may_be_either_code_of_its_row() -> None:
    run = Run()
    arguments = capture_args("alpha", run.key())
    arguments["evidence"]["evidence_digest"] = DIGEST.upper()
    made = call("capture", arguments)
    schema = run.step(made, refused("INVALID_SCHEMA"))
    assert schema.allowed and [p.requirement for p in schema.pins] == ["EMC-ENC-014"]
    assert run.step(made, refused("INVALID_DIGEST")).allowed and not run.step(made, refused("INVALID_DIGEST")).pins


@pytest.mark.parametrize("entry", range(len(pins())))
def test_every_refinement_names_profile_requirements_and_narrows_a_real_situation(entry: int) -> None:
    pin = pins()[entry]
    assert pin.keep or pin.drop
    assert all(p for p in pin.situations)
