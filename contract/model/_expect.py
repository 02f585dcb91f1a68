"""The allowed set of one call, and the judgement of the answer it got.

An Expectation names the call's situation (a stable key, such as ``withdraw.candidate-withdrawn``) and lists
its alternatives: each answer the contract allows there, the requirements whose sentences allow or demand it,
the further conditions a success must meet, and the state that answer leads to. A judgement finds the
alternatives the answer fits; when none does, it says which requirement the answer breaks. Where the
contract leaves a choice open (two codes in one table row, a replay signalled either way, whether a refusal
uses a key up) every choice is an alternative; this project's profile narrows them afterwards
(``_refine``), never here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

from engram_mcp.contract._loader import load
from engram_mcp.contract.model._call import Kind, Observation
from engram_mcp.contract.model._state import State

Effect = Callable[[State, Observation], State]


@dataclass(frozen=True)
class Problem:
    """A condition the answer broke, and the requirement whose sentence states it."""

    requirement: str
    text: str

    def __str__(self) -> str:
        return f"{self.text} ({self.requirement})"


Check = Callable[[Observation], list[Problem]]


def _unchanged(state: State, seen: Observation) -> State:
    return state


@dataclass(frozen=True)
class Alternative:
    """One answer the contract allows in a situation."""

    name: str  # stable: what a profile refinement keeps or drops
    kind: Kind
    codes: frozenset[object] = frozenset()  # the envelope or JSON-RPC codes it covers (refusal, protocol)
    cites: tuple[str, ...] = ()
    check: Check | None = None  # further conditions on the answer (a success's value)
    effect: Effect = _unchanged
    mutates: bool = False  # a first execution: what a missing confirmation or a passed deadline rules out
    shape: Callable[[Observation], bool] | None = None  # what tells this success apart (its status, say)

    def fits(self, seen: Observation) -> bool:
        """Whether the answer is of this alternative's kind, code and shape: its further conditions come after."""
        if seen.kind != self.kind or (self.codes and seen.code not in self.codes):
            return False
        return self.shape is None or self.shape(seen)

    def describe(self) -> str:
        if self.kind in ("refusal", "protocol") and self.codes:
            codes = " or ".join(sorted(str(c) for c in self.codes))
            return (f"the JSON-RPC error {codes}" if self.kind == "protocol" else codes) + (
                f" ({self.name})" if self.name not in {str(c) for c in self.codes} else "")
        return self.name


# Retriable codes (the error table's "Reintentable" row) any call may get without effect: the caller backs off
# and retries, so such an answer judges nothing until a definite one comes. MUTATION_OUTCOME_UNKNOWN is apart:
# it may have committed ("Puede haberse confirmado").
TRANSIENT = frozenset({"RATE_LIMITED", "DEADLINE_EXCEEDED", "CANCELLED", "STORE_UNAVAILABLE", "FENCE_LOST",
                       "CURSOR_GAP", "POLICY_UNAVAILABLE", "POLICY_STALE", "PROJECTION_STALE",
                       "RANKING_UNAVAILABLE"})
OUTCOME_UNKNOWN = "MUTATION_OUTCOME_UNKNOWN"


@dataclass(frozen=True)
class Expectation:
    situation: str
    describe: str  # the situation in words, for a verdict a reader understands
    alternatives: tuple[Alternative, ...]
    cites: tuple[str, ...]  # the requirements this situation exercises, broken by an answer outside the set
    judged: bool = True  # False: the model cannot judge this call (its target is doubtful)
    transient: frozenset[str] = TRANSIENT
    doubt: Effect = _unchanged  # the state after an answer that fits no alternative (its targets made doubtful)
    uncertain: Effect = _unchanged  # the state after an answer whose effect is unknown (no answer, outcome unknown)

    def allowed_text(self) -> str:
        return "; ".join(a.describe() for a in self.alternatives) or "nothing"

    def requirements(self) -> tuple[str, ...]:
        """Every requirement the situation can exercise: its own and its alternatives' citations."""
        return tuple(dict.fromkeys([*self.cites, *(r for a in self.alternatives for r in a.cites)]))


@dataclass(frozen=True)
class Judgement:
    expectation: Expectation
    seen: Observation
    allowed: bool
    conclusive: bool  # False: a retriable or missing answer; the call should be retried before concluding
    matched: tuple[str, ...] = ()
    problems: tuple[Problem, ...] = ()
    pins: tuple[Problem, ...] = field(default=())  # this project's pins the answer breaks (see _refine)

    @property
    def broken(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.requirement for p in self.problems))

    def message(self) -> str:
        e = self.expectation
        head = f"{e.describe}: answered {self.seen.describe()}"
        if self.allowed:
            return head
        return f"{head}; the contract allows {e.allowed_text()}" + (
            "" if not self.problems else " — " + "; ".join(str(p) for p in self.problems[:3]))


def judge(expectation: Expectation, state: State, seen: Observation) -> tuple[Judgement, State]:
    """The judgement of one answer in its situation, and the state it leads to."""
    if not expectation.judged:
        return Judgement(expectation, seen, True, False), expectation.uncertain(state, seen)
    protocol_only = bool(expectation.alternatives) and all(a.kind == "protocol" for a in expectation.alternatives)
    if seen.kind == "none" or (seen.kind == "unreadable" and not protocol_only):
        return Judgement(expectation, seen, True, False), expectation.uncertain(state, seen)
    # An unreadable result is still a result: where the contract allows only a JSON-RPC error, it is wrong.
    fitting = [a for a in expectation.alternatives if a.fits(seen)]
    if seen.kind == "refusal" and not fitting:
        if seen.code == OUTCOME_UNKNOWN:
            return Judgement(expectation, seen, True, False), expectation.uncertain(state, seen)
        if seen.code in expectation.transient:
            return Judgement(expectation, seen, True, False), state
    found: list[tuple[Alternative, list[Problem]]] = [(a, a.check(seen) if a.check else []) for a in fitting]
    clean = [a for a, problems in found if not problems]
    if clean:
        return (Judgement(expectation, seen, True, True, tuple(a.name for a in clean)),
                clean[0].effect(state, seen))
    if found:  # the answer is of an allowed kind, but breaks that alternative's conditions
        problems = tuple(dict.fromkeys(p for _, ps in found for p in ps))
    else:
        problems = tuple(Problem(rid, f"{expectation.describe}: the contract allows {expectation.allowed_text()}")
                         for rid in expectation.cites)
    return Judgement(expectation, seen, False, True, problems=problems), expectation.doubt(state, seen)


def cited(*requirements: str) -> tuple[str, ...]:
    """Requirement ids as the model cites them; an id the catalog does not hold is a bug, found at import."""
    known = _contract_ids()
    unknown = [r for r in requirements if r not in known]
    if unknown:
        raise ValueError(f"the model cites {', '.join(unknown)}, which are no contract or wiring requirements")
    return requirements


@cache
def _contract_ids() -> frozenset[str]:
    return frozenset(r["id"] for r in load().requirements["requirements"] if r["source"] in ("contract", "wiring"))
