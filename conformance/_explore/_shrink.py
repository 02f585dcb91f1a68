"""Shrinking a failing program to a small one that still fails the same way (delta debugging).

Hypothesis shrinks what it generated itself; a program here has been run against a live target, and every
candidate must run again there (fresh keys and words each time), so the search is ours: ddmin over the steps
(a step that needs a removed step's answer goes with it), bounded by a budget of executions. A candidate
"still fails" when some step gets an answer that breaks one of the requirements the original failure broke, in
each of two executions: what a program meets can depend on its fresh words (the order of equal-scored
records, say), and a counterexample that fails only now and then would not replay.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from engram_mcp.conformance._explore._execute import Execution
from engram_mcp.conformance._explore._program import Program

Runner = Callable[[Program], Execution]
CONFIRMATIONS = 2  # executions a smaller program must fail in, each with fresh keys and words


@dataclass(frozen=True)
class Shrunk:
    execution: Execution  # the smallest failing execution found
    tries: int
    seconds: float


def _same_failure(execution: Execution, broken: frozenset[str]) -> bool:
    failure = execution.failure
    return failure is not None and failure.judgement is not None and bool(set(failure.judgement.broken) & broken)


def shrink(failing: Execution, run: Runner, *, budget: int = 60, seconds: float = 20.0) -> Shrunk:
    """The smallest program found that still fails as ``failing`` did, within ``budget`` executions."""
    started = time.monotonic()
    failure = failing.failure
    if failure is None or failure.judgement is None or budget <= 0:
        return Shrunk(failing, 0, 0.0)
    broken = frozenset(failure.judgement.broken)
    best = failing
    program = failing.program.prefix(failure.n + 1)  # what came after the failure played no part
    tries = 0

    def attempt(candidate: Program) -> Execution | None:
        nonlocal tries
        found = None
        for _ in range(CONFIRMATIONS):
            tries += 1
            execution = run(candidate)
            if not _same_failure(execution, broken):
                return None
            found = found or execution
        return found

    found = attempt(program)
    if found is None:  # the failure does not come back (a race, or state outside the program)
        return Shrunk(best, tries, time.monotonic() - started)
    best = found
    chunks = 2
    while len(program.steps) > 1 and tries < budget and time.monotonic() - started < seconds:
        size = max(1, len(program.steps) // chunks)
        reduced = False
        for start in range(0, len(program.steps), size):
            if tries >= budget or time.monotonic() - started >= seconds:
                break
            candidate = program.without(range(start, start + size))
            if not candidate.steps or len(candidate.steps) >= len(program.steps):
                continue
            found = attempt(candidate)
            if found is not None:
                failed_at = found.failure.n if found.failure else len(candidate.steps) - 1
                program, best, reduced = candidate.prefix(failed_at + 1), found, True
                chunks = max(chunks - 1, 2)
                break
        if not reduced:
            if size == 1:
                break
            chunks = min(len(program.steps), chunks * 2)
    return Shrunk(best, tries, time.monotonic() - started)
