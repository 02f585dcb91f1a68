"""Idempotency (contract §3.5) around a mutation's own situation: replays, conflicts, and keys after a refusal.

    Misma clave y mismo contenido: repetición (duplicate_exact o replayed: true).
    Misma clave y contenido, destino o herramienta diferente: DIGEST_CONFLICT.

A key belongs to the bound principal (EMC-IDEM-004). The model binds it to the first success; a retriable
refusal or gate_failed leaves it free (the caller is told to retry with the same key, or to ask the human
and try again). Whether any other refusal uses a key up the contract does not say, so after one both are
allowed: the refusal again (or DIGEST_CONFLICT for other arguments), or a first execution. The profile
narrows that (a refused call reserves nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from engram_mcp.contract._words import spoken
from engram_mcp.contract.model._call import Call, Observation, member
from engram_mcp.contract.model._expect import Alternative, Effect, Expectation, Problem, cited
from engram_mcp.contract.model._state import KeyId, KeyUse, State, operation_bytes

CAPTURE, ADMIT = "engram_memory_capture", "engram_memory_request_admission"
WITHDRAW, FORGET = "engram_memory_withdraw", "engram_memory_forget"
KEY_FREE_CODES = frozenset({"gate_failed"})  # refusals after which the same call must be able to run
ERASURE_STATUS = {WITHDRAW: "key_destruction", FORGET: "projection_invalidation"}


def key_of(call: Call) -> KeyId:
    return (call.scope, call.principal, call.arguments["idempotency_key"])


def binding_effect(call: Call, effect: Effect) -> Effect:
    """``effect``, and then the key bound to the first success."""
    key, operation = key_of(call), operation_bytes(call.tool, call.arguments)

    def bound(state: State, seen: Observation) -> State:
        return effect(state, seen).with_key(key, KeyUse(call.tool, operation, value=dict(seen.value or {})))

    return bound


def refusal_effect(call: Call) -> Effect:
    """After a refusal: a key nothing else holds may now be bound to it (unless the refusal leaves it free). A
    retriable refusal leaves it free and says so: had that call taken effect, its retry would be a replay."""
    key, operation = key_of(call), operation_bytes(call.tool, call.arguments)

    def after(state: State, seen: Observation) -> State:
        held = state.keys.get(key)
        if seen.kind != "refusal" or seen.code in KEY_FREE_CODES:
            return state
        if held is not None and held.refused is not None and not seen.retriable:
            # The key may be bound to an earlier refused use, or to this one: either may decide the next use.
            use = (call.tool, operation, str(seen.code))
            return state if use in held.refusals() else state.with_key(key, replace(held, also=(*held.also, use)))
        if held is not None and not held.lapsed:
            return state
        if seen.retriable:
            return state.with_key(key, KeyUse(call.tool, operation, lapsed=str(seen.code)))
        return state.with_key(key, KeyUse(call.tool, operation, refused=str(seen.code)))

    return after


# Which requirement a refusal that had taken effect after all breaks: the retriable codes, and the -32603 a
# purpose other than the bound one gets (that call was never the caller's to make, so its key stays free).
LAPSES = {"DEADLINE_EXCEEDED": "EMC-HOST-015", "CANCELLED": "EMC-HOST-016", "purpose": "EMC-HOST-008"}


def lapse_effect(call: Call, reason: str) -> Effect:
    """A refusal that leaves the key free, and remembers why: its retry is a first execution."""
    key, operation = key_of(call), operation_bytes(call.tool, call.arguments)

    def after(state: State, seen: Observation) -> State:
        held = state.keys.get(key)
        if held is not None and not held.lapsed:
            return state
        return state.with_key(key, KeyUse(call.tool, operation, lapsed=reason))

    return after


def with_key(call: Call, state: State, fresh: Expectation) -> Expectation:
    """The situation as the call's key decides it: ``fresh`` when the key is new to this principal."""
    key = key_of(call)
    use = state.keys.get(key)
    if use is None:
        return _keeping_key_rules(call, fresh)
    if use.lapsed is not None:
        return _after_lapse(call, use.lapsed, _keeping_key_rules(call, fresh))
    if use.doubtful:
        return replace(fresh, situation="key.doubtful", describe=f"{fresh.describe}, under a key whose first use "
                       "had an outcome that could not be judged", judged=False)
    same = use.tool == call.tool and use.operation == operation_bytes(call.tool, call.arguments)
    if use.value is not None:
        return _replay(call, use, fresh) if same else _conflict(call, fresh)
    return _after_refusal(call, use, fresh)


def _keyed(call: Call, alternative: Alternative) -> Alternative:
    """The alternative with what it does to the key: a success binds it, a refusal may (see refusal_effect)."""
    if alternative.kind == "success":
        return replace(alternative, effect=binding_effect(call, alternative.effect))
    if alternative.kind == "refusal":
        return replace(alternative, effect=_then(alternative.effect, refusal_effect(call)))
    return alternative


def _keeping_key_rules(call: Call, fresh: Expectation) -> Expectation:
    """A new key: the situation itself, each answer doing to the key what it does."""
    return replace(fresh, alternatives=tuple(_keyed(call, a) for a in fresh.alternatives),
                   uncertain=_doubt_key(call, fresh.uncertain))


def _then(first: Effect, second: Effect) -> Effect:
    return lambda state, seen: second(first(state, seen), seen)


def _doubt_key(call: Call, uncertain: Effect) -> Effect:
    """No answer, or MUTATION_OUTCOME_UNKNOWN: the call may have committed, so the key's next answer is free."""
    key, operation = key_of(call), operation_bytes(call.tool, call.arguments)

    def doubt(state: State, seen: Observation) -> State:
        state = uncertain(state, seen)
        held = state.keys.get(key)
        return state.with_key(key, replace(held, doubtful=True) if held else KeyUse(call.tool, operation,
                                                                                   doubtful=True))

    return doubt


def _replay(call: Call, use: KeyUse, fresh: Expectation) -> Expectation:
    first = dict(use.value or {})
    if call.tool == CAPTURE:
        alternatives: tuple[Alternative, ...] = (Alternative(
            "replay", "success", cites=cited("EMC-IDEM-005", "EMC-IDEM-011"), check=_capture_replay(first),
            shape=lambda seen: (seen.value or {}).get("status") == "duplicate_exact"),)
    else:
        alternatives = (Alternative("replay", "success", cites=cited("EMC-IDEM-006", "EMC-IDEM-011"),
                                    check=_replayed_result(call.tool, first), shape=_same_status(first)),)
        if call.tool == ADMIT:  # the admission replay may say duplicate_exact; what that means is unverified
            alternatives += (Alternative("replay:duplicate_exact", "success", cites=cited("EMC-IDEM-006"),
                                         check=_admission_duplicate(first), shape=_outcome_status("duplicate_exact")),)
    # A capture's replay is EMC-IDEM-005's (duplicate_exact); the other mutations' are EMC-IDEM-006's (replayed).
    own = "EMC-IDEM-005" if call.tool == CAPTURE else "EMC-IDEM-006"
    return Expectation("key.replay", f"{fresh.describe}, repeating the key and arguments of an earlier "
                       f"{_short(use.tool)} that succeeded", alternatives, cited(own, "EMC-IDEM-011"))


def _conflict(call: Call, fresh: Expectation) -> Expectation:
    """Another operation under a used key: DIGEST_CONFLICT; where the call's own target also forbids it, the
    contract gives no precedence, so that refusal is allowed too — never the other operation's effect."""
    refusals = tuple(a for a in fresh.alternatives if a.kind in ("refusal", "protocol") and not a.mutates)
    conflict = Alternative("DIGEST_CONFLICT", "refusal", frozenset({"DIGEST_CONFLICT"}), cited("EMC-IDEM-007"))
    return Expectation("key.conflict", f"{fresh.describe}, under a key already used for another operation",
                       (conflict, *refusals), cited("EMC-IDEM-007"))


def _after_refusal(call: Call, use: KeyUse, fresh: Expectation) -> Expectation:
    """A key only refused calls used: any of them may have bound it (the refusal again for its own operation,
    DIGEST_CONFLICT for another), or none (a first execution)."""
    operation = operation_bytes(call.tool, call.arguments)
    bound: dict[str, Alternative] = {}
    for tool, used, code in use.refusals():
        if (tool, used) == (call.tool, operation):
            bound.setdefault(f"refused-again:{code}", Alternative(f"refused-again:{code}", "refusal",
                                                                  frozenset({code}), cited("EMC-IDEM-005")))
        else:
            bound.setdefault("DIGEST_CONFLICT", Alternative("DIGEST_CONFLICT", "refusal",
                                                            frozenset({"DIGEST_CONFLICT"}), cited("EMC-IDEM-007")))
    first_run = tuple(_keyed(call, a) for a in fresh.alternatives)
    codes = ", ".join(dict.fromkeys(code for _, _, code in use.refusals()))
    return replace(fresh, situation=f"{fresh.situation}+key-after-refusal",
                   describe=f"{fresh.describe}, under a key whose earlier use was refused {codes}",
                   alternatives=(*bound.values(), *first_run))


def _after_lapse(call: Call, lapsed: str, fresh: Expectation) -> Expectation:
    """The key's last use was refused with a retriable code: this call is a first execution. A replay would
    show that the refused call had taken effect after all."""
    requirement = LAPSES.get(lapsed, "EMC-ERR-002")

    def lapse(seen: Observation) -> list[Problem]:
        return [Problem(requirement, f"the call refused {lapsed} (retriable: no effect) had taken effect: its "
                                     "retry was answered as a repetition")]

    def reserved(seen: Observation) -> list[Problem]:
        return [Problem(requirement, f"the call refused {lapsed} (no effect) had reserved its key: its retry "
                                     "was refused DIGEST_CONFLICT")]

    replayed = Alternative("replay-after-retriable", "success", cites=cited(requirement), check=lapse,
                           shape=lambda seen: (seen.value or {}).get("replayed") is True
                           or (seen.value or {}).get("status") == "duplicate_exact")
    conflict = Alternative("conflict-after-retriable", "refusal", frozenset({"DIGEST_CONFLICT"}),
                           cited(requirement), check=reserved)
    fresh_codes = {c for a in fresh.alternatives if a.kind == "refusal" for c in a.codes}
    extra = (replayed,) if "DIGEST_CONFLICT" in fresh_codes else (replayed, conflict)
    return replace(fresh, situation=fresh.situation + "+after-retriable",
                   describe=f"{fresh.describe}, retried after a {lapsed} refusal",
                   alternatives=(*fresh.alternatives, *extra))


def _short(tool: str) -> str:
    return tool.removeprefix("engram_memory_")


def _status_of(value: Mapping[str, Any] | None) -> Any:
    value = value or {}
    outcome = value.get("outcome")
    receipt = value.get("receipt")
    if isinstance(outcome, Mapping):
        return outcome.get("status")
    return receipt.get("to_state") if isinstance(receipt, Mapping) else value.get("status")


def _same_status(first: Mapping[str, Any]) -> Any:
    return lambda seen: _status_of(seen.value) == _status_of(first)


def _outcome_status(status: str) -> Any:
    return lambda seen: _status_of(seen.value) == status


def _capture_replay(first: Mapping[str, Any]) -> Any:
    def check(seen: Observation) -> list[Problem]:
        value = seen.value or {}
        problems = []
        if value.get("candidate_id") != first.get("candidate_id"):
            problems.append(Problem("EMC-IDEM-005", "the repeated capture names another candidate than the first"))
        if "record_digest" in first and "record_digest" in value and value["record_digest"] != first["record_digest"]:
            problems.append(Problem("EMC-IDEM-005", "the repeated capture describes another record than the first"))
        return problems

    return check


def _replayed_result(tool: str, first: Mapping[str, Any]) -> Any:
    """The earlier result again, marked replayed; a withdraw's or forget's erasure may have completed since."""
    progressing = ERASURE_STATUS.get(tool)

    def check(seen: Observation) -> list[Problem]:
        value = dict(seen.value or {})
        if value.get("replayed") is not True:
            return [Problem("EMC-IDEM-006",
                            f"the repeated {_short(tool)} says replayed {spoken(value.get('replayed'))}")]
        differs = sorted(k for k in set(first) | set(value) if k != "replayed" and first.get(k) != value.get(k)
                         and not (k == progressing and first.get(k) == "pending" and value.get(k) == "complete"))
        return [Problem("EMC-IDEM-006",
                        f"the repeated {_short(tool)} differs from the first result in {spoken(differs)}")] \
            if differs else []

    return check


def _admission_duplicate(first: Mapping[str, Any]) -> Any:
    def check(seen: Observation) -> list[Problem]:
        value = seen.value or {}
        outcome = member(value, "outcome")
        first_outcome = member(first, "outcome")
        problems = []
        if value.get("replayed") is not True:
            problems.append(Problem("EMC-IDEM-006", "a repeated admission answered duplicate_exact without "
                                                    "replayed true"))
        elif outcome.get("candidate_id") != first_outcome.get("candidate_id"):
            problems.append(Problem("EMC-IDEM-006", "the repeated admission names another candidate"))
        return problems

    return check
