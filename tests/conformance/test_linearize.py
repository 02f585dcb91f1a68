"""Linearizability of concurrent histories against the contract model (conformance/_linearize), by hand-made
histories: what several clients could see of a correct store, and what only a faulty one shows."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from engram_mcp.conformance._linearize import Linearizable, Operation, Undecided, Violation, check
from engram_mcp.conformance._profile import load_profile
from engram_mcp.conformance._tracker import HistoryRecorder, RecordingHost, Sent, Tracker
from engram_mcp.conformance._world import capture_arguments
from engram_mcp.conformance.hosts import host_from_profile
from engram_mcp.contract.model import Call, Observation
from engram_mcp.reference._init import write_configuration
from tests.test_model import MODEL, NOW, A, candidate_of, capture_args, ok, record_of, refused, tombstone_receipt

KEY, OTHER = "race-key-000000000001", "race-key-000000000002"
TEXT = "Decision: settle invoices from the ledger only."


def call(tool: str, arguments: dict[str, Any]) -> Call:
    return Call(f"engram_memory_{tool}", arguments, A, "p1", NOW)


def op(client: str, made: Call, seen: Observation, invoked: float, returned: float | None) -> Operation:
    return Operation(client, made, seen, invoked, returned)


def captured(ident: str) -> Observation:
    return ok({"status": "committed_pending", "candidate_id": ident})


def duplicate(ident: str) -> Observation:
    return ok({"status": "duplicate_exact", "candidate_id": ident})


def admitted(candidate: str, record: str, replayed: bool = False) -> Observation:
    return ok({"outcome": {"status": "accepted", "candidate_id": candidate, "record_id": record},
               "replayed": replayed})


def record_seen(record: str) -> Observation:
    return ok({"record": {"record_id": record, "components": [{"text": TEXT}]}, "redacted_fields": [],
               "read_receipt": {"record_id": record}})


CAPTURE = call("capture", capture_args(TEXT, KEY))
CANDIDATE, SECOND = candidate_of("one"), candidate_of("two")
RECORD = record_of(CANDIDATE)
ADMIT = call("request_admission", {"candidate_id": CANDIDATE, "idempotency_key": OTHER})
FORGET = call("forget", {"record_id": RECORD, "idempotency_key": "race-key-000000000003", "reason_ref": "r"})
GET = call("get", {"record_id": RECORD, "purpose_ref": "purpose:test"})
FORGOTTEN = ok({"receipt": tombstone_receipt(), "replayed": False, "projection_invalidation": "pending"})


def admitted_record() -> list[Operation]:
    """A capture and its admission, one after the other: the setup of the races below."""
    return [op("setup", CAPTURE, captured(CANDIDATE), 0.0, 0.1), op("setup", ADMIT, admitted(CANDIDATE, RECORD),
                                                                    0.2, 0.3)]


def test_a_sequential_history_is_linearizable_in_its_own_order() -> None:
    history = [*admitted_record(), op("c1", GET, record_seen(RECORD), 0.4, 0.5),
               op("c2", FORGET, FORGOTTEN, 0.6, 0.7), op("c3", GET, refused("NOT_FOUND"), 0.8, 0.9)]
    verdict = check(MODEL, history)
    assert isinstance(verdict, Linearizable), verdict
    assert verdict.order == (0, 1, 2, 3, 4)


def test_one_key_answered_with_two_effects_is_a_violation() -> None:
    # Two overlapping first uses of one key: one may win, the other must replay it (EMC-IDEM-005).
    history = [op("c1", CAPTURE, captured(CANDIDATE), 0.0, 0.2), op("c2", CAPTURE, captured(SECOND), 0.1, 0.3)]
    verdict = check(MODEL, history)
    assert isinstance(verdict, Violation), verdict
    assert "EMC-IDEM-005" in verdict.broken
    assert len(verdict.operations) == 2
    assert "c1 [0.000s–0.200s] capture(idempotency_key=race-key-000000000001)" in verdict.message


def test_overlapping_uses_of_one_key_may_replay_in_either_order() -> None:
    # The second to arrive may answer first: only the order in which the store applied them matters.
    history = [op("c1", CAPTURE, duplicate(CANDIDATE), 0.0, 0.2), op("c2", CAPTURE, captured(CANDIDATE), 0.1, 0.3)]
    verdict = check(MODEL, history)
    assert isinstance(verdict, Linearizable), verdict
    assert verdict.order == (1, 0)


def test_a_replay_answering_another_outcome_is_a_violation() -> None:
    replay = call("request_admission", {"candidate_id": CANDIDATE, "idempotency_key": OTHER})
    history = [op("setup", CAPTURE, captured(CANDIDATE), 0.0, 0.1),
               op("c1", ADMIT, admitted(CANDIDATE, RECORD), 0.2, 0.4),
               op("c2", replay, ok({"outcome": {"status": "rejected", "candidate_id": CANDIDATE},
                                    "replayed": True}), 0.3, 0.5)]
    verdict = check(MODEL, history)
    assert isinstance(verdict, Violation), verdict
    assert "EMC-IDEM-006" in verdict.broken


def test_a_get_that_returns_the_record_after_its_forget_returned_is_a_violation() -> None:
    history = [*admitted_record(), op("c1", FORGET, FORGOTTEN, 0.4, 0.5), op("c2", GET, record_seen(RECORD), 0.6, 0.7)]
    verdict = check(MODEL, history)
    assert isinstance(verdict, Violation), verdict
    assert "EMC-FGT-002" in verdict.broken


def test_the_same_get_overlapping_the_forget_is_linearizable() -> None:
    history = [*admitted_record(), op("c1", FORGET, FORGOTTEN, 0.4, 0.6), op("c2", GET, record_seen(RECORD), 0.5, 0.7)]
    verdict = check(MODEL, history)
    assert isinstance(verdict, Linearizable), verdict
    assert verdict.order == (0, 1, 3, 2)


def test_a_call_with_no_answer_may_have_taken_effect_or_not() -> None:
    history = [*admitted_record(), op("c1", FORGET, Observation("none"), 0.4, None),
               op("c2", GET, record_seen(RECORD), 0.6, 0.7)]
    assert isinstance(check(MODEL, history), Linearizable)


def test_the_minimal_sub_history_drops_the_unrelated_operations() -> None:
    other = call("capture", capture_args("Decision: something else entirely.", "race-key-000000000009"))
    history = [*admitted_record(),
               op("c3", other, captured(candidate_of("other")), 0.35, 0.45),
               op("c1", GET, record_seen(RECORD), 0.36, 0.39),  # before the forget: it may see the record
               op("c1", FORGET, FORGOTTEN, 0.4, 0.5),
               op("c2", GET, record_seen(RECORD), 0.6, 0.7),
               op("c3", GET, refused("NOT_FOUND"), 0.61, 0.72)]
    verdict = check(MODEL, history)
    assert isinstance(verdict, Violation), verdict
    # The capture and the admission stay: without them the get would fail for another reason (no such record).
    kept = [(o.client, o.call.tool.removeprefix("engram_memory_"), o.invoked) for o in verdict.operations]
    assert kept == [("setup", "capture", 0.0), ("setup", "request_admission", 0.2), ("c1", "forget", 0.4),
                    ("c2", "get", 0.6)]
    assert verdict.broken and "EMC-FGT-002" in verdict.broken


def test_a_search_beyond_its_step_budget_is_undecided() -> None:
    # Many overlapping reads: a budget of a handful of steps cannot place them all.
    reads = [op(f"c{n}", GET, refused("NOT_FOUND"), 0.0, 1.0) for n in range(8)]
    verdict = check(MODEL, reads, budget=5)
    assert isinstance(verdict, Undecided), verdict
    assert isinstance(check(MODEL, reads), Linearizable)


# -- the run's side: sessions that record instead of judging ----------------------------------------------------


def test_a_recorded_session_keeps_its_calls_out_of_the_shared_state(tmp_path: Path) -> None:
    write_configuration(tmp_path, seed="linearize")
    profile = load_profile(tmp_path / "conformance-profile.toml")
    tracker = Tracker(profile)
    host = RecordingHost(host_from_profile(profile)[0], tracker, profile.purpose_ref)
    scope = profile.scope_for()
    assert scope is not None
    principal = scope.principal_with(set())
    assert principal is not None
    arguments = capture_arguments(profile.purpose_ref, key=KEY)

    def sent(ident: str) -> Sent:
        value = {"status": "committed_pending", "candidate_id": ident}
        return Sent("legacy", "engram_memory_capture", arguments, host.meta(scope, principal), "accept", None, None,
                    None, "result", {"structuredContent": {"ok": True, "output": {"value": value}}}, None, False,
                    time.time())

    recorder = HistoryRecorder(tracker)
    recorder.record("c2", sent(SECOND), 1.5, 2.5)
    recorder.record("c1", sent(CANDIDATE), 1.0, 2.0)
    history = recorder.take()
    assert [op.client for op in history] == ["c1", "c2"]  # by invocation
    assert not tracker.state.candidates and not tracker.state.keys and not tracker.violations
    assert recorder.take() == []
    verdict = check(tracker.model, history)
    assert isinstance(verdict, Violation) and "EMC-IDEM-005" in verdict.broken
