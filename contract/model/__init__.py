"""Contract 1.0.0 as an executable model: for each state and call, the set of answers the contract allows.

The model holds the state a client can observe (candidates and records per scope with their lifecycle,
tombstones, idempotency keys per principal with their first outcome, search pages) and, for each of the six
tools, a function from (state, call) to an ``Expectation``: the alternatives the contract allows, each citing
the requirements whose sentences allow or demand it, each with the state it leads to. ``Model.judge`` finds
the alternatives an answer fits and advances by the one seen. Nothing in it comes from a server's behaviour;
the host's own facts (grants, gates, its admission policy) come in as ``HostFacts``.

This project's profile narrows the allowed sets (``refine``, spec/refinement.json) and never widens them: a
pin can say only that an answer the contract allows is not the one the profile chose.

    model = Model(facts)
    judgement, state = judged(model, state, call, observed(result, error))
    judgement.allowed, judgement.broken, judgement.pins
"""

from __future__ import annotations

from dataclasses import replace

from engram_mcp.contract.model._arguments import ACCEPTED, ArgumentVerdict, judge_arguments, relaxed
from engram_mcp.contract.model._call import (
    DECISIONS,
    Call,
    Confirmation,
    Decision,
    HostFacts,
    Observation,
    ScopeFacts,
    observed,
)
from engram_mcp.contract.model._expect import Alternative, Expectation, Judgement, Problem
from engram_mcp.contract.model._model import Model
from engram_mcp.contract.model._refine import pins, refine
from engram_mcp.contract.model._state import (
    Candidate,
    CandidateState,
    Record,
    RecordState,
    Scope,
    State,
    words_of,
)


def judged(model: Model, state: State, call: Call, seen: Observation) -> tuple[Judgement, State]:
    """The contract's judgement of an answer, with the pins it breaks, and the state it leads to."""
    judgement, after = model.judge(state, call, seen)
    return replace(judgement, pins=refine(call, judgement)), after


__all__ = [
    "ACCEPTED",
    "DECISIONS",
    "Alternative",
    "ArgumentVerdict",
    "Call",
    "Candidate",
    "CandidateState",
    "Confirmation",
    "Decision",
    "Expectation",
    "HostFacts",
    "Judgement",
    "Model",
    "Observation",
    "Problem",
    "Record",
    "RecordState",
    "Scope",
    "ScopeFacts",
    "State",
    "judge_arguments",
    "judged",
    "observed",
    "pins",
    "refine",
    "relaxed",
    "words_of",
]
