"""Exploration: generated sequences of the six tools, every answer judged by the model of contract 1.0.0.

The fixed checks try the situations someone wrote down; here programs drawn from the run's seed combine them
(``engram_mcp.conformance._explore``): captures under fresh and reused keys, admissions, withdraws and forgets
with their replays and conflicts, reads of own, foreign and forgotten ids, pages continued across mutations,
by another caller or after a forget. Each program runs with keys and words of its own; the model judges every
answer given the state the earlier answers led to. A failing program is shrunk, written as a counterexample
(JSON lines) that ``conformance replay FILE`` runs again, and reported with the requirements it breaks.

The budget is ``--explore N`` calls per era (``--deep`` raises it; 0 turns exploration off).
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path

import pytest

from engram_mcp.conformance._checks import Blocked, check, not_applicable
from engram_mcp.conformance._explore import (
    CounterexampleError,
    Execution,
    callers,
    draw,
    execute,
    read_counterexample,
    scopes_of,
    shrink,
    trace_lines,
    write_counterexample,
)
from engram_mcp.conformance._findings import BROKEN_REQUIREMENTS, COUNTEREXAMPLE_FILE, MODEL_BLAME_ALONE
from engram_mcp.conformance._needs import ADMIT, CAPTURE, FORGET, GET, SEARCH, TOOLS, WITHDRAW
from engram_mcp.conformance._run import Run
from engram_mcp.conformance._words import spoken
from engram_mcp.conformance._world import World

# What a default exploration must reach (its opening does, in a few calls): replay and conflict of one key, a
# foreign id, reads after a forget, a continued page. Exercised only when reached; otherwise BLOCKED.
REACHED = ("EMC-IDEM-005", "EMC-IDEM-007", "EMC-HOST-006", "EMC-FGT-002", "EMC-SRCH-009")
STEPS = 30  # calls per program: long enough for a page to outlive a forget, short enough to shrink fast
REPLAYS = 5  # executions of a counterexample before it is said to fail no longer
SHOWN = 12  # steps of a shrunk counterexample shown in the verdict


def _seed(run: Run, era: str, index: int) -> int:
    return random.Random(f"{run.seed}/{era}/{index}").getrandbits(32)


def _counterexample_path(run: Run, era: str, seed: int) -> Path:
    directory = run.report_dir / "counterexamples" if run.report_dir else Path(tempfile.gettempdir()) / \
        "engram-counterexamples"
    return directory / f"explore-{era}-{seed}.jsonl"


def _ready(world: World) -> None:
    """SKIP or BLOCK before the first call when the run cannot explore."""
    roles = callers(world.profile)
    if not roles:
        pytest.skip(world.profile.lacks(world.profile.scope_words(frozenset(TOOLS))))
    scopes = scopes_of(world.profile)
    for role in roles:
        offered = world.offered(scopes[role.scope], role.principal)
        missing = sorted(role.tools - offered)
        if missing:
            raise Blocked(f"the target does not offer {spoken(missing)} to {role.principal} in "
                          f"{scopes[role.scope].label}, which the profile grants")


def _failure_lines(execution: Execution) -> list[str]:
    failure = execution.failure
    assert failure is not None and failure.judgement is not None, "a failing execution names its failing step"
    steps = execution.outcomes[-SHOWN:]
    lines = [f"step {failure.n} of a generated sequence: {failure.judgement.message()}"]
    lines += [f"  {o.n}: {o.step.tool.removeprefix('engram_memory_')} by caller {o.step.caller} ({o.step.note}) "
              f"-> {o.answer}" for o in steps]
    return lines


@check("explore.sequences", *REACHED, uses=(SEARCH, GET, CAPTURE, ADMIT, WITHDRAW, FORGET))
def test_generated_call_sequences_get_answers_the_contract_allows(world: World, harness: Run) -> None:
    """Programs drawn from the seed, within the budget: every answer is one the contract allows in its state."""
    if harness.explore == 0:
        pytest.skip("exploration turned off (--explore 0)")
    _ready(world)
    roles = callers(world.profile)
    started, budget, calls, programs = time.monotonic(), harness.explore, 0, 0
    coverage: dict[str, int] = {}
    exercised: set[str] = set()
    trace = harness.explore_trace.open("a", encoding="utf-8") if harness.explore_trace else None
    try:
        while calls < budget:
            seed = _seed(harness, world.era, programs)
            program = draw(seed, roles, world.profile.purpose_ref, min(STEPS, budget - calls),
                           opening=programs == 0)
            execution = execute(world, program)
            programs, calls = programs + 1, calls + max(1, execution.calls)
            for key, count in execution.coverage().items():
                coverage[key] = coverage.get(key, 0) + count
            exercised |= execution.exercised()
            if trace is not None:
                trace.writelines(line + "\n" for line in trace_lines(execution, world.era, roles, world.profile,
                                                                     programs - 1))
            if execution.failure is not None:
                _report_failure(world, harness, execution)
    finally:
        if trace is not None:
            trace.close()
        world.evidence.add("explored", {"programs": programs, "calls": calls,
                                        "seconds": round(time.monotonic() - started, 2)})
        world.evidence.add("coverage", dict(sorted(coverage.items())))
    missing = [r for r in REACHED if r not in exercised]
    if missing:
        raise Blocked(f"{calls} explored calls did not reach {spoken(missing)} (each needs an answer the contract "
                      "allows in its situation)")


def _report_failure(world: World, harness: Run, execution: Execution) -> None:
    roles = callers(world.profile)
    failure = execution.failure
    assert failure is not None and failure.judgement is not None, "only a failing execution is reported"
    broken = list(failure.judgement.broken)
    original = failure.n + 1
    shrunk = shrink(execution, lambda candidate: execute(world, candidate), budget=harness.explore_shrink)
    smallest = shrunk.execution
    path = write_counterexample(_counterexample_path(harness, world.era, execution.program.seed), smallest,
                                world.era, roles, world.profile)
    world.evidence.add(COUNTEREXAMPLE_FILE, str(path))
    world.evidence.add(BROKEN_REQUIREMENTS, broken)
    world.evidence.add(MODEL_BLAME_ALONE, True)  # the model names what broke; REACHED is what exploration covers
    world.evidence.add("shrunk", {"from_steps": original, "to_steps": len(smallest.outcomes), "tries": shrunk.tries})
    lines = _failure_lines(smallest if smallest.failure else execution)
    lines.append(f"shrunk from {original} to {len(smallest.outcomes)} steps; counterexample: {path}")
    raise AssertionError("\n".join(lines))


@check("explore.replay", "EMC-SRCH-016", uses=(SEARCH, GET, CAPTURE, ADMIT, WITHDRAW, FORGET))
def test_a_counterexample_still_fails(world: World, harness: Run) -> None:
    """The counterexample given with --replay, run again (fresh keys and words): does it still fail?"""
    if harness.replay is None:
        not_applicable("no counterexample to replay (conformance replay FILE)")
    try:
        counterexample = read_counterexample(harness.replay)
    except CounterexampleError as problem:
        raise Blocked(str(problem)) from None
    if counterexample.era != world.era:
        not_applicable(f"the counterexample was found in the {counterexample.era} era")
    _ready(world)
    executions = 0
    while executions < REPLAYS:  # what a program meets can depend on its fresh words: a few tries
        executions += 1
        execution = execute(world, counterexample.program)
        if execution.failure is not None:
            break
    world.evidence.add("executions", executions)
    if execution.failure is None:
        world.evidence.add("replayed", f"in {REPLAYS} executions no step got an answer the contract does not allow: "
                                       "it no longer fails")
        return
    failure = execution.failure
    assert failure.judgement is not None, "a failing step has its judgement"
    world.evidence.add(BROKEN_REQUIREMENTS, list(failure.judgement.broken))
    world.evidence.add(MODEL_BLAME_ALONE, True)
    first, *rest = _failure_lines(execution)
    raise AssertionError("\n".join([f"it still fails: {first}", *rest]))

