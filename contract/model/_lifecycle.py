"""The four mutations on a key new to the principal: what each may answer given its target's lifecycle state.

    capture: committed_pending for a new key (§2, EMC-CAP-014); UNAUTHORIZED for what the host's policy does not
        authorise (EMC-CAP-012/013/018, EMC-RET-003/004); INVALID_SCHEMA for an expires_at not after the
        capture time (EMC-RET-005).
    request_admission: the host's policy decides a pending candidate (EMC-ADM-001..003); an otherwise accepting
        decision on content equal to a record tombstoned in the same scope is pending_adjudication, a policy
        rejection stays rejected (EMC-ADM-007, EMC-ADM-008).
    withdraw: ends a pending candidate (EMC-WDR-001). forget: tombstones a record in accepted_current or expired
        (EMC-FGT-001).
    An unknown target and one outside the bound scope are NOT_FOUND alike (EMC-HOST-006). A target the lifecycle
        no longer allows to move is refused without effect: ILLEGAL_TRANSITION or ALREADY_TERMINAL ("El estado
        del ciclo de vida lo prohíbe"), or NOT_FOUND for a target no longer eligible (EMC-LIFE-011); which one,
        the contract leaves open.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from engram_mcp.contract._words import spoken
from engram_mcp.contract.model._call import DECISIONS, Call, HostFacts, Observation, member
from engram_mcp.contract.model._expect import Alternative, Expectation, Problem, cited
from engram_mcp.contract.model._state import (
    Candidate,
    CandidateState,
    Record,
    RecordState,
    State,
    content_of,
)
from engram_mcp.contract.model._visibility import expiry, instant_ms

CAPTURE, ADMIT = "engram_memory_capture", "engram_memory_request_admission"
WITHDRAW, FORGET = "engram_memory_withdraw", "engram_memory_forget"
LIFECYCLE_CODES = frozenset({"ILLEGAL_TRANSITION", "ALREADY_TERMINAL", "NOT_FOUND"})
NOT_FOUND = Alternative("NOT_FOUND", "refusal", frozenset({"NOT_FOUND"}), cited("EMC-HOST-006"))
FORBIDDEN = Alternative("lifecycle-refusal", "refusal", LIFECYCLE_CODES, cited("EMC-LIFE-011"))


def unjudged(situation: str, describe: str) -> Expectation:
    return Expectation(situation, describe, (), (), judged=False)


# -- capture -----------------------------------------------------------------------------------------------------


def capture(state: State, facts: HostFacts, call: Call) -> Expectation:
    scope_facts = facts.of(call.scope)
    arguments = call.arguments
    payload, evidence = arguments["payload"], arguments["evidence"]
    retention = member(payload, "retention")
    expires = instant_ms(retention.get("expires_at"))
    refusals: list[Alternative] = []
    maybe_fine = True
    if scope_facts is not None:
        if retention.get("derivative_rule") == "retain" and not scope_facts.allow_retain:
            refusals.append(Alternative("UNAUTHORIZED:retain", "refusal", frozenset({"UNAUTHORIZED"}),
                                        cited("EMC-RET-003", "EMC-CAP-013")))
            maybe_fine = False
        families = set((payload.get("reconciliation") or {}).get("family_refs") or ())
        if families - scope_facts.consented_families:
            refusals.append(Alternative("UNAUTHORIZED:family", "refusal", frozenset({"UNAUTHORIZED"}),
                                        cited("EMC-CAP-012", "EMC-CAP-013")))
            maybe_fine = False
        if call.principal in scope_facts.capture_denied:
            refusals.append(Alternative("UNAUTHORIZED:authority", "refusal", frozenset({"UNAUTHORIZED"}),
                                        cited("EMC-CAP-018")))
            maybe_fine = False
        ceiling = scope_facts.retention_ceiling_ms
        if expires is not None and ceiling is not None:
            beyond = expires - (call.now_ms + ceiling)
            if beyond > -facts.clock_skew_ms:
                refusals.append(Alternative("UNAUTHORIZED:ceiling", "refusal", frozenset({"UNAUTHORIZED"}),
                                            cited("EMC-RET-004", "EMC-CAP-013")))
                maybe_fine = maybe_fine and beyond <= facts.clock_skew_ms
    if expires is not None and expires - call.now_ms <= facts.clock_skew_ms:
        refusals.append(Alternative("INVALID_SCHEMA:expiry", "refusal", frozenset({"INVALID_SCHEMA"}),
                                    cited("EMC-RET-005")))
        maybe_fine = maybe_fine and expires - call.now_ms > -facts.clock_skew_ms
    decisions = frozenset(scope_facts.admission(payload, evidence)) if scope_facts is not None else DECISIONS
    content = content_of(payload, expires)

    def committed(state: State, seen: Observation) -> State:
        value = seen.value or {}
        ident = value.get("candidate_id")
        return state.with_candidate(Candidate(ident, call.scope, call.principal, CandidateState.PENDING, content,
                                              call.decisions or decisions)) if isinstance(ident, str) else state

    def check(seen: Observation) -> list[Problem]:
        ident = (seen.value or {}).get("candidate_id")
        if not isinstance(ident, str) or not ident:
            return [Problem("EMC-CAP-014", "a committed capture names no candidate_id")]
        if state.issued_candidate(ident):
            return [Problem("EMC-CAP-014", "a capture under a new key was given a candidate_id already issued")]
        return []

    alternatives = tuple(refusals)
    if maybe_fine:
        alternatives += (Alternative("committed_pending", "success", cites=cited("EMC-CAP-014", "EMC-CAP-015"),
                                     check=check, effect=committed, mutates=True,
                                     shape=status_is("committed_pending")),)
    return Expectation("capture.new-key", "a capture", alternatives,
                       cited("EMC-CAP-014", "EMC-CAP-015") if maybe_fine
                       else tuple(dict.fromkeys(r for a in refusals for r in a.cites)))


def status_is(status: str) -> Any:
    return lambda seen: (seen.value or {}).get("status") == status


def outcome_is(status: str) -> Any:
    def shape(seen: Observation) -> bool:
        outcome = (seen.value or {}).get("outcome")
        return isinstance(outcome, Mapping) and outcome.get("status") == status

    return shape


# -- request_admission ---------------------------------------------------------------------------------------------


def _target_candidate(state: State, call: Call) -> tuple[Candidate | None, str]:
    """The named candidate in the bound scope, or why there is none (elsewhere, or never issued; "" when found)."""
    ident = call.arguments.get("candidate_id")
    found = state.candidate(call.scope, ident)
    return found, "" if found is not None else _absence(state.candidate_elsewhere(call.scope, ident))


def _absence(elsewhere: object) -> str:
    """Why a target is not found: it lives in another scope (``elsewhere`` is it), or it was never issued."""
    return "outside the bound scope" if elsewhere is not None else "never issued"


def _candidate_or_early(state: State, call: Call, situation: str, words: str) -> Candidate | Expectation:
    """The call's candidate; or, when there is none to judge (invisible, or of unknown state), the answer."""
    found, absent = _target_candidate(state, call)
    if found is None:
        return Expectation(f"{situation}.invisible", f"{words} of a candidate {absent}", (NOT_FOUND,),
                           cited("EMC-HOST-006"))
    if found.state is CandidateState.DOUBTFUL:
        return unjudged(f"{situation}.doubtful", f"{words} of a candidate whose state could not be judged")
    return found


def admission(state: State, facts: HostFacts, call: Call) -> Expectation:
    found = _candidate_or_early(state, call, "admission", "request_admission")
    if isinstance(found, Expectation):
        return found
    if found.state in (CandidateState.PENDING, CandidateState.ADJUDICATING):
        decide = _decisions(state, call, found)
        cites = tuple(dict.fromkeys(r for a in decide for r in a.cites))
        if found.state is CandidateState.ADJUDICATING:  # the contract does not say what adjudication leaves
            return Expectation("admission.adjudicating", "request_admission of a candidate awaiting adjudication",
                               (*decide, FORBIDDEN), cites)
        tombstoned = state.tombstoned(call.scope, found.content.payload)
        return Expectation("admission.pending", "request_admission of a pending candidate" + (
            " whose content equals a record forgotten in this scope" if tombstoned else ""), decide, cites)
    situation = f"admission.candidate-{found.state.value}"
    describe = f"request_admission of a candidate {_said(found.state)}"
    alternatives: tuple[Alternative, ...] = (FORBIDDEN,)
    if found.state is CandidateState.ACCEPTED:  # what duplicate_exact means for an admission is unverified
        alternatives += (Alternative("duplicate_exact", "success", cites=cited("EMC-LIFE-011"),
                                     check=_outcome_of(call, "duplicate_exact"), shape=outcome_is("duplicate_exact")),)
    return Expectation(situation, describe, alternatives, cited("EMC-LIFE-011"))


def _said(state: CandidateState) -> str:
    return {CandidateState.ACCEPTED: "accepted earlier", CandidateState.REJECTED: "rejected earlier",
            CandidateState.WITHDRAWN: "withdrawn earlier",
            CandidateState.FORGOTTEN: "accepted earlier, whose record was then forgotten"}.get(state, state.value)


def _outcome_of(call: Call, status: str, *, record: bool = False, fresh_record: State | None = None) -> Any:
    requested = call.arguments.get("candidate_id")

    def check(seen: Observation) -> list[Problem]:
        value = seen.value or {}
        outcome = member(value, "outcome")
        problems = []
        if outcome.get("candidate_id") != requested:
            problems.append(Problem("EMC-ADM-003", "outcome.candidate_id is not the candidate the call named"))
        if record:
            ident = outcome.get("record_id")
            if not isinstance(ident, str) or not ident:
                problems.append(Problem("EMC-ADM-001", "an accepted outcome carries no record_id"))
            elif fresh_record is not None and _another_record(fresh_record, call, ident):
                problems.append(Problem("EMC-ADM-001", "an accepted outcome names a record_id already issued for "
                                                       "other content"))
        if status != "duplicate_exact" and value.get("replayed") is not False:
            problems.append(Problem("EMC-IDEM-006",
                                    f"a first admission says replayed {spoken(value.get('replayed'))}"))
        return problems

    return check


def _another_record(state: State, call: Call, ident: str) -> bool:
    """A record id already issued, other than a current record of this scope with the same content (a server may
    admit equal content into one record)."""
    if not state.issued_record(ident):
        return False
    found = state.record(call.scope, ident)
    candidate = state.candidate(call.scope, call.arguments.get("candidate_id"))
    return not (found is not None and candidate is not None and found.state is RecordState.CURRENT
                and found.content.payload == candidate.content.payload)


def _decisions(state: State, call: Call, candidate: Candidate) -> tuple[Alternative, ...]:
    """What the host's policy may decide, as the contract lets the tombstone safeguard change it (§3 item 3)."""
    allowed = set(call.decisions or candidate.decisions or DECISIONS)
    tombstoned = state.tombstoned(call.scope, candidate.content.payload)
    out: list[Alternative] = []
    for decision in sorted(allowed):
        answer = "pending_adjudication" if tombstoned and decision == "accepted" else decision
        cites = {("accepted", False): ("EMC-ADM-001", "EMC-ADM-003"), ("accepted", True): ("EMC-ADM-007",),
                 ("rejected", False): ("EMC-ADM-002",), ("rejected", True): ("EMC-ADM-008",),
                 ("pending_adjudication", False): ("EMC-ADM-002",),
                 ("pending_adjudication", True): ("EMC-ADM-002",)}[(decision, tombstoned)]
        if any(a.name == answer for a in out):
            continue
        out.append(Alternative(answer, "success", cites=cited(*cites),
                               check=_outcome_of(call, answer, record=answer == "accepted", fresh_record=state),
                               effect=_decided(call, candidate, answer), mutates=True, shape=outcome_is(answer)))
    return tuple(out)


def _decided(call: Call, candidate: Candidate, decision: str) -> Any:
    def effect(state: State, seen: Observation) -> State:
        outcome = (seen.value or {}).get("outcome") or {}
        if decision == "accepted":
            record_id = outcome.get("record_id")
            state = state.with_candidate(replace(candidate, state=CandidateState.ACCEPTED, record_id=record_id))
            return state.with_record(Record(record_id, call.scope, candidate.id, RecordState.CURRENT,
                                            candidate.content)) if isinstance(record_id, str) else state
        after = CandidateState.REJECTED if decision == "rejected" else CandidateState.ADJUDICATING
        return state.with_candidate(replace(candidate, state=after))

    return effect


# -- withdraw ------------------------------------------------------------------------------------------------------


def withdraw(state: State, facts: HostFacts, call: Call) -> Expectation:
    found = _candidate_or_early(state, call, "withdraw", "withdraw")
    if isinstance(found, Expectation):
        return found
    if found.state in (CandidateState.PENDING, CandidateState.ADJUDICATING):
        ended = Alternative("withdrawn", "success", cites=cited("EMC-WDR-001"),
                            check=_receipt("withdraw", ("pending",), "withdrawn", "EMC-WDR-001"),
                            effect=lambda s, seen: s.with_candidate(replace(found, state=CandidateState.WITHDRAWN)),
                            mutates=True)
        if found.state is CandidateState.PENDING:
            return Expectation("withdraw.pending", "withdraw of a pending candidate", (ended,), cited("EMC-WDR-001"))
        return Expectation("withdraw.adjudicating", "withdraw of a candidate awaiting adjudication",
                           (ended, FORBIDDEN), cited("EMC-WDR-001"))
    return Expectation(f"withdraw.candidate-{found.state.value}", f"withdraw of a candidate {_said(found.state)}",
                       (FORBIDDEN,), cited("EMC-LIFE-011"))


def _receipt(operation: str, sources: tuple[str, ...], target: str, requirement: str) -> Any:
    def check(seen: Observation) -> list[Problem]:
        value = seen.value or {}
        receipt = member(value, "receipt")
        got = (receipt.get("operation"), receipt.get("from_state"), receipt.get("to_state"))
        problems = []
        if got[0] != operation or got[1] not in sources or got[2] != target:
            said = f"{spoken(got[0])} from {spoken(got[1])} to {spoken(got[2])}"
            problems.append(Problem(requirement, f"the receipt says {said}, not "
                                                 f"{operation} from {' or '.join(sources)} to {target}"))
        if value.get("replayed") is not False:
            problems.append(Problem("EMC-IDEM-006",
                                    f"a first execution says replayed {spoken(value.get('replayed'))}"))
        return problems

    return check


# -- forget --------------------------------------------------------------------------------------------------------


def _target_record(state: State, call: Call) -> tuple[Record | None, str]:
    ident = call.arguments.get("record_id")
    found = state.record(call.scope, ident)
    return found, "" if found is not None else _absence(state.record_elsewhere(call.scope, ident))


def forget(state: State, facts: HostFacts, call: Call) -> Expectation:
    found, absent = _target_record(state, call)
    if found is None:
        return Expectation("forget.invisible", f"forget of a record {absent}", (NOT_FOUND,), cited("EMC-HOST-006"))
    if found.state is RecordState.DOUBTFUL:
        return unjudged("forget.doubtful", "forget of a record whose state could not be judged")
    if found.state is RecordState.TOMBSTONED:
        return Expectation("forget.record-tombstoned", "forget of a record forgotten earlier", (FORBIDDEN,),
                           cited("EMC-LIFE-011"))
    sources = {"current": ("accepted_current",), "expired": ("expired",),
               "either": ("accepted_current", "expired")}[expiry(found.content, call.now_ms, facts.clock_skew_ms)]

    def tombstoned(state: State, seen: Observation) -> State:
        state = state.with_record(replace(found, state=RecordState.TOMBSTONED)).with_tombstone(
            call.scope, found.content.payload)
        owner = state.candidate(call.scope, found.candidate_id)
        return state.with_candidate(replace(owner, state=CandidateState.FORGOTTEN)) if owner is not None else state

    forgotten = Alternative("tombstoned", "success", cites=cited("EMC-FGT-001"),
                            check=_receipt("tombstone", sources, "tombstoned", "EMC-FGT-001"), effect=tombstoned,
                            mutates=True)
    return Expectation("forget.current", f"forget of a record in {' or '.join(sources)}", (forgotten,),
                       cited("EMC-FGT-001"))


BUILDERS = {CAPTURE: capture, ADMIT: admission, WITHDRAW: withdraw, FORGET: forget}
