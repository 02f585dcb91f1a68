"""The model's own correctness, apart from any server's: generated call sequences against a second, tiny
implementation of the contract.

``Honest`` is written from the contract's words alone, in a few lines per tool (keys per principal, tombstones
per scope, NOT_FOUND for whatever a caller may not see). Hypothesis drives sequences of the six tools over two
scopes and two principals, with few keys and few words so that replays, conflicts, foreign ids and forgotten
records come up often. After every call:

- Honest's answer must be allowed, and conclusive: the model is never stricter than the contract;
- each answer the contract forbids in that state (a success where a caller must see nothing, a new candidate
  for a replay, a conflict answered as a success, a page holding a forgotten or foreign record) must be
  refused, blaming a requirement: the model is never so lax that two incompatible answers both pass.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from engram_mcp.contract.model import Call, Model, Observation, Scope, State, judged
from tests.test_model import FACTS, NOW, A, B, capture_args, record_of, tombstone_receipt, withdraw_receipt

CALLERS = [(A, "p1"), (A, "p2"), (B, "p1")]
WORDS = ["amber", "basalt", "cobalt"]
KEYS = [f"property-key-{n:04d}" for n in range(3)]
PURPOSE = "purpose:test"


@dataclass
class Candidate:
    ident: str
    scope: Scope
    text: str
    state: str = "pending"  # pending, accepted, withdrawn
    record: str | None = None


@dataclass
class Honest:
    """The contract, implemented as plainly as it reads: what a correct server answers."""

    candidates: dict[str, Candidate] = field(default_factory=dict)
    records: dict[str, tuple[Scope, str, bool]] = field(default_factory=dict)  # id -> scope, text, current
    tombstones: set[tuple[Scope, str]] = field(default_factory=set)
    keys: dict[tuple[Scope, str, str], tuple[str, Any, dict[str, Any]]] = field(default_factory=dict)

    def mutation(self, scope: Scope, principal: str, tool: str, arguments: dict[str, Any],
                 run: Any) -> Observation:
        key = (scope, principal, arguments["idempotency_key"])
        operation = {k: v for k, v in arguments.items() if k != "idempotency_key"}
        if key in self.keys:
            used_tool, used_operation, value = self.keys[key]
            if (used_tool, used_operation) != (tool, operation):
                return refusal("DIGEST_CONFLICT")
            if tool == "capture":
                return success({"status": "duplicate_exact", "candidate_id": value["candidate_id"]})
            return success({**value, "replayed": True})
        seen = run()
        if seen.kind == "success":
            self.keys[key] = (tool, operation, dict(seen.value or {}))
        return seen

    def capture(self, scope: Scope, text: str) -> Observation:
        ident = "candidate_" + hashlib.sha256(f"{len(self.candidates)}".encode()).hexdigest()
        self.candidates[ident] = Candidate(ident, scope, text)
        return success({"status": "committed_pending", "candidate_id": ident})

    def visible_candidate(self, scope: Scope, ident: str) -> Candidate | None:
        found = self.candidates.get(ident)
        return found if found is not None and found.scope == scope and found.state == "pending" else None

    def admit(self, scope: Scope, ident: str) -> Observation:
        found = self.visible_candidate(scope, ident)
        if found is None:
            return refusal("NOT_FOUND")
        if (scope, found.text) in self.tombstones:  # forgotten content is never silently admitted again
            return success({"outcome": {"status": "pending_adjudication", "candidate_id": ident}, "replayed": False})
        found.state, found.record = "accepted", record_of(ident)
        self.records[found.record] = (scope, found.text, True)
        return success({"outcome": {"status": "accepted", "candidate_id": ident, "record_id": found.record},
                        "replayed": False})

    def withdraw(self, scope: Scope, ident: str) -> Observation:
        found = self.visible_candidate(scope, ident)
        if found is None:
            return refusal("NOT_FOUND")
        found.state = "withdrawn"
        return success({"receipt": withdraw_receipt(), "replayed": False, "key_destruction": "pending"})

    def current(self, scope: Scope, rid: str) -> bool:
        found = self.records.get(rid)
        return found is not None and found[0] == scope and found[2]

    def forget(self, scope: Scope, rid: str) -> Observation:
        if not self.current(scope, rid):
            return refusal("NOT_FOUND")
        _, text, _ = self.records[rid]
        self.records[rid] = (scope, text, False)
        self.tombstones.add((scope, text))
        return success({"receipt": tombstone_receipt(), "replayed": False, "projection_invalidation": "pending"})

    def get(self, scope: Scope, rid: str) -> Observation:
        if not self.current(scope, rid):
            return refusal("NOT_FOUND")
        return success(get_value(rid, self.records[rid][1]), asked=False)

    def search(self, scope: Scope, word: str) -> Observation:
        found = sorted(rid for rid, (s, text, current) in self.records.items()
                       if s == scope and current and word in text.split())
        return success(page_value([(rid, self.records[rid][1]) for rid in found]), asked=False)


def success(value: dict[str, Any], *, asked: bool = True) -> Observation:
    return Observation("success", value=value, asked=asked)


def refusal(code: str) -> Observation:
    return Observation("refusal", code, False, asked=True)


def get_value(rid: str, text: str) -> dict[str, Any]:
    return {"record": {"record_id": rid, "components": [{"text": text}]}, "redacted_fields": [],
            "read_receipt": {"record_id": rid}}


def page_value(entries: list[tuple[str, str]]) -> dict[str, Any]:
    packets = [{"record": {"record_id": rid, "components": [{"text": text}]}, "redacted_fields": [],
                "score": 1.0 / n, "rank": n} for n, (rid, text) in enumerate(entries, 1)]
    return {"records": packets, "rank_receipt": {}, "response_digest": "sha256:" + "ab" * 32}


class AgainstHonest(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.model, self.state, self.honest = Model(FACTS), State(), Honest()
        self.steps = 0

    # -- judging -----------------------------------------------------------------------------------------

    def judge(self, made: Call, seen: Observation, forbidden: list[tuple[str, Observation]]) -> None:
        for label, wrong in forbidden:  # judged from the same state, which they do not advance
            verdict, _ = judged(self.model, self.state, made, wrong)
            assert not verdict.allowed and verdict.broken, f"{label}: {verdict.message()}"
        verdict, self.state = judged(self.model, self.state, made, seen)
        assert verdict.allowed and verdict.conclusive, verdict.message()
        self.steps += 1

    def call(self, tool: str, arguments: dict[str, Any], scope: Scope, principal: str, **extra: Any) -> Call:
        return Call(f"engram_memory_{tool}", arguments, scope, principal, NOW, **extra)

    def known_candidates(self) -> list[str]:
        return sorted(self.honest.candidates) or ["candidate_" + "0" * 64]

    def known_records(self) -> list[str]:
        return sorted(self.honest.records) or [record_of("never")]

    # -- the six tools ------------------------------------------------------------------------------------

    @rule(caller=st.sampled_from(CALLERS), words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=2),
          key=st.sampled_from(KEYS))
    def capture(self, caller: tuple[Scope, str], words: list[str], key: str) -> None:
        scope, principal = caller
        text = " ".join(words)
        arguments = capture_args(text, key)
        seen = self.honest.mutation(scope, principal, "capture", arguments, lambda: self.honest.capture(scope, text))
        forbidden = []
        if seen.kind == "success" and seen.value and seen.value["status"] == "duplicate_exact":
            forbidden.append(("a replay stored as a new candidate", success(
                {"status": "committed_pending", "candidate_id": "candidate_" + "f" * 64})))
        if seen.kind == "refusal":
            forbidden.append(("a conflicting key accepted", success(
                {"status": "committed_pending", "candidate_id": "candidate_" + "e" * 64})))
        self.judge(self.call("capture", arguments, scope, principal), seen, forbidden)

    @rule(caller=st.sampled_from(CALLERS), pick=st.integers(0, 40), key=st.sampled_from(KEYS))
    def request_admission(self, caller: tuple[Scope, str], pick: int, key: str) -> None:
        scope, principal = caller
        ident = self.known_candidates()[pick % len(self.known_candidates())]
        arguments = {"candidate_id": ident, "idempotency_key": key}
        seen = self.honest.mutation(scope, principal, "request_admission", arguments,
                                    lambda: self.honest.admit(scope, ident))
        forbidden = []
        if seen.kind == "refusal":
            forbidden.append(("a refused admission answered accepted", success(
                {"outcome": {"status": "accepted", "candidate_id": ident, "record_id": record_of("mutant" + ident)},
                 "replayed": False})))
        self.judge(self.call("request_admission", arguments, scope, principal), seen, forbidden)

    @rule(caller=st.sampled_from(CALLERS), pick=st.integers(0, 40), key=st.sampled_from(KEYS),
          reason=st.sampled_from(["reason:a", "reason:b"]))
    def withdraw(self, caller: tuple[Scope, str], pick: int, key: str, reason: str) -> None:
        scope, principal = caller
        ident = self.known_candidates()[pick % len(self.known_candidates())]
        arguments = {"candidate_id": ident, "idempotency_key": key, "reason_ref": reason}
        seen = self.honest.mutation(scope, principal, "withdraw", arguments, lambda: self.honest.withdraw(scope, ident))
        forbidden = []
        if seen.kind == "refusal":
            forbidden.append(("a refused withdraw answered withdrawn", success(
                {"receipt": withdraw_receipt(), "replayed": False, "key_destruction": "pending"})))
        self.judge(self.call("withdraw", arguments, scope, principal), seen, forbidden)

    @rule(caller=st.sampled_from(CALLERS), pick=st.integers(0, 40), key=st.sampled_from(KEYS),
          reason=st.sampled_from(["reason:a", "reason:b"]))
    def forget(self, caller: tuple[Scope, str], pick: int, key: str, reason: str) -> None:
        scope, principal = caller
        rid = self.known_records()[pick % len(self.known_records())]
        arguments = {"record_id": rid, "idempotency_key": key, "reason_ref": reason}
        seen = self.honest.mutation(scope, principal, "forget", arguments, lambda: self.honest.forget(scope, rid))
        forbidden = []
        if seen.kind == "refusal":
            forbidden.append(("a refused forget answered tombstoned", success(
                {"receipt": tombstone_receipt(), "replayed": False, "projection_invalidation": "pending"})))
        self.judge(self.call("forget", arguments, scope, principal), seen, forbidden)

    @rule(caller=st.sampled_from(CALLERS), pick=st.integers(0, 40))
    def get(self, caller: tuple[Scope, str], pick: int) -> None:
        scope, principal = caller
        rid = self.known_records()[pick % len(self.known_records())]
        seen = self.honest.get(scope, rid)
        forbidden = []
        if seen.kind == "refusal":
            text = self.honest.records.get(rid, (scope, "amber", False))[1]
            forbidden.append(("a record the caller may not see returned", success(get_value(rid, text),
                                                                                   asked=False)))
        self.judge(self.call("get", {"record_id": rid, "purpose_ref": PURPOSE}, scope, principal), seen, forbidden)

    @rule(caller=st.sampled_from(CALLERS), word=st.sampled_from(WORDS))
    def search(self, caller: tuple[Scope, str], word: str) -> None:
        scope, principal = caller
        seen = self.honest.search(scope, word)
        shown = [(p["record"]["record_id"], p["record"]["components"][0]["text"])
                 for p in (seen.value or {})["records"]]
        hidden = [(rid, text) for rid, (s, text, current) in sorted(self.honest.records.items())
                  if word in text.split() and not (s == scope and current)]
        forbidden = [("a page with a record the caller may not see", success(page_value([*shown, extra]),
                                                                             asked=False)) for extra in hidden[:2]]
        if shown:
            forbidden.append(("a page missing a match the caller owns", success(page_value(shown[1:]), asked=False)))
        self.judge(self.call("search", {"query": word, "purpose_ref": PURPOSE}, scope, principal, exhaustive=True),
                   seen, forbidden)

    @rule(pick=st.integers(0, 40))
    def recapture_forgotten_content(self, pick: int) -> None:
        """Content of a forgotten record captured again in its scope under a fresh key, then admitted."""
        forgotten = sorted((s, text) for s, text in self.honest.tombstones)
        if not forgotten:
            return
        scope, text = forgotten[pick % len(forgotten)]
        self.steps += 1
        arguments = capture_args(text, f"property-fresh-{self.steps:06d}")
        seen = self.honest.mutation(scope, "p1", "capture", arguments, lambda: self.honest.capture(scope, text))
        self.judge(self.call("capture", arguments, scope, "p1"), seen, [])
        ident = (seen.value or {})["candidate_id"]
        admission = {"candidate_id": ident, "idempotency_key": f"property-fresh-{self.steps:06d}-admit"}
        seen = self.honest.mutation(scope, "p1", "request_admission", admission,
                                    lambda: self.honest.admit(scope, ident))
        silently = success({"outcome": {"status": "accepted", "candidate_id": ident,
                                        "record_id": record_of("x" + ident)}, "replayed": False})
        self.judge(self.call("request_admission", admission, scope, "p1"), seen,
                   [("forgotten content admitted silently", silently)])

    @invariant()
    def the_model_tracks_what_honest_holds(self) -> None:
        for ident, candidate in self.honest.candidates.items():
            known = self.state.candidate(candidate.scope, ident)
            assert known is not None, ident


AgainstHonest.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                           suppress_health_check=[HealthCheck.too_slow])
test_the_model_agrees_with_a_plain_implementation_of_the_contract = AgainstHonest.TestCase
