"""Concurrent histories checked for linearizability against the contract model (Wing & Gong, as Porcupine does).

A history is what several clients saw: each operation's model ``Call``, its ``Observation`` and when it was
invoked and when it returned, on one monotonic clock. It is linearizable when some order of its operations that
respects real time (an operation that returned before another was invoked comes first) is a sequence the model
allows, every answer judged in the state the ones before it led to. The search is depth first over such orders,
each step one ``model.judge``; a pair (operations placed, state) seen once is not explored again; a step budget
bounds it, and a history the budget cannot decide is *undecided*, never a verdict.

An operation with no answer (a timeout: ``returned`` None) may take effect at any point after its invocation or
not at all: the model allows any answer of kind ``none`` and leaves what it touched in doubt, so the operation
is placed like any other, with no return to bound it.

A violation comes with its smallest failing sub-history, found by dropping operations while the rest still fails:
a read can always be dropped (it changes nothing another operation depends on); a mutation only when the rest
still breaks the same requirements, so that a drop never manufactures a failure the history did not have (a get
with its capture dropped would fail for another reason).

Pure: no I/O, no clock; the caller records the history.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from enum import Enum
from typing import Any

from engram_mcp.contract.model import Call, Judgement, Model, Observation, State

READS = frozenset({"engram_memory_search", "engram_memory_get"})
BUDGET = 20_000  # model steps one search may take


@dataclass(frozen=True)
class Operation:
    client: str  # which session made the call, for the message
    call: Call
    seen: Observation
    invoked: float
    returned: float | None  # None: no answer came (it may have taken effect, or not)

    @property
    def ends(self) -> float:
        return math.inf if self.returned is None else self.returned

    def describe(self, origin: float = 0.0) -> str:
        until = "no answer" if self.returned is None else f"{self.returned - origin:.3f}s"
        return (f"{self.client} [{self.invoked - origin:.3f}s–{until}] {_call_words(self.call)} "
                f"→ {self.seen.describe()}")


@dataclass(frozen=True)
class Linearizable:
    order: tuple[int, ...]  # the history's operations, by index, in an order the model allows
    steps: int


@dataclass(frozen=True)
class Violation:
    operations: tuple[Operation, ...]  # the smallest sub-history found that is not linearizable
    broken: tuple[str, ...]  # requirement ids the model says are broken at the furthest point reached
    message: str
    steps: int
    refused: Operation | None = None  # the operation whose answer the model refused there


@dataclass(frozen=True)
class Undecided:
    reason: str
    steps: int


Verdict = Linearizable | Violation | Undecided


def check(model: Model, history: Sequence[Operation], *, initial: State | None = None,
          budget: int = BUDGET) -> Verdict:
    """Whether ``history`` is linearizable from ``initial``; a violation comes minimised."""
    found = _search(model, tuple(history), initial or State(), budget)
    if not isinstance(found, _Failed):
        return found
    kept, failed = _minimise(model, tuple(history), initial or State(), budget, found)
    return Violation(kept, failed.broken, _message(kept, failed), found.steps, failed.operation)


# -- the search ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Failed:
    """No order is allowed; where the search got furthest, which answer the model refused and why."""

    depth: int
    operation: Operation | None
    judgement: Judgement | None
    broken: tuple[str, ...]
    steps: int


def _search(model: Model, ops: tuple[Operation, ...], initial: State, budget: int) -> Verdict | _Failed:
    steps = 0
    seen: set[tuple[int, Any]] = set()
    furthest: list[tuple[int, Operation, Judgement]] = []  # the refusals at the greatest depth reached
    order: list[int] = []
    everything = (1 << len(ops)) - 1

    def placeable(done: int) -> list[int]:
        pending = [i for i in range(len(ops)) if not done >> i & 1]
        horizon = min(ops[i].ends for i in pending)  # what returned first must come before what began after it
        return [i for i in pending if ops[i].invoked <= horizon]

    def visit(done: int, state: State) -> bool | None:
        """True: the rest can be placed; False: it cannot; None: the budget ran out first."""
        nonlocal steps
        if done == everything:
            return True
        memo = (done, fingerprint(state))
        if memo in seen:
            return False
        seen.add(memo)
        depth = len(order)
        for i in placeable(done):
            if steps >= budget:
                return None
            steps += 1
            judgement, after = model.judge(state, ops[i].call, ops[i].seen)
            if not judgement.allowed:
                if not furthest or depth > furthest[0][0]:
                    furthest[:] = [(depth, ops[i], judgement)]
                elif depth == furthest[0][0]:
                    furthest.append((depth, ops[i], judgement))
                continue
            order.append(i)
            placed = visit(done | 1 << i, after)
            if placed is not False:
                return placed
            order.pop()
        return False

    placed = visit(0, initial)
    if placed is None:
        return Undecided(f"no order of {len(ops)} operations found within {budget} model steps", steps)
    if placed:
        return Linearizable(tuple(order), steps)
    if not furthest:  # every order was cut short by one the memo had already refused
        return _Failed(0, None, None, (), steps)
    broken = tuple(dict.fromkeys(r for _, _, j in furthest for r in j.broken))
    depth, operation, judgement = furthest[0]
    return _Failed(depth, operation, judgement, broken, steps)


def _minimise(model: Model, ops: tuple[Operation, ...], initial: State, budget: int,
              failed: _Failed) -> tuple[tuple[Operation, ...], _Failed]:
    """Drop operations while what is left still fails the same way: reads first, then mutations, until no drop
    holds (each trial a search of its own; an undecided trial keeps the operation)."""
    kept = list(ops)
    cursors = any("page_cursor" in (op.call.arguments or {}) for op in ops)
    changed = True
    while changed:
        changed = False
        for reads in (True, False):
            i = 0
            while i < len(kept):
                op = kept[i]
                read = op.call.tool in READS and not (cursors and op.call.tool == "engram_memory_search")
                if read != reads:
                    i += 1
                    continue
                trial = _search(model, (*kept[:i], *kept[i + 1:]), initial, budget)
                if isinstance(trial, _Failed) and (read or set(trial.broken) == set(failed.broken)):
                    del kept[i]
                    failed, changed = trial, True
                else:
                    i += 1
    return tuple(kept), failed


# -- words ------------------------------------------------------------------------------------------------------


def _call_words(call: Call) -> str:
    arguments = call.arguments if isinstance(call.arguments, Mapping) else {}
    named = [f"{name}={arguments[name]}" for name in ("candidate_id", "record_id", "query", "idempotency_key")
             if isinstance(arguments.get(name), str)]
    return f"{call.tool.removeprefix('engram_memory_')}({', '.join(named)}) as {call.principal}"


def _message(kept: tuple[Operation, ...], failed: _Failed) -> str:
    origin = min((op.invoked for op in kept), default=0.0)
    lines = [f"no order of these {len(kept)} operations is one the contract allows (times from the first "
             "invocation):", *(f"  {op.describe(origin)}" for op in sorted(kept, key=lambda o: o.invoked))]
    if failed.judgement is not None and failed.operation is not None:
        lines.append(f"furthest order found: {failed.depth} operation(s) placed, then "
                     f"{_call_words(failed.operation.call)}: {failed.judgement.message()}")
    return "\n".join(lines)


def fingerprint(value: Any) -> Any:
    """A hashable stand-in for a model state (its mappings are read-only views, not hashable): equal states,
    equal fingerprints."""
    if isinstance(value, Mapping):
        return ("map", frozenset((fingerprint(k), fingerprint(v)) for k, v in value.items()))
    if is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, *(fingerprint(getattr(value, f.name)) for f in fields(value)))
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple | list):
        return tuple(fingerprint(item) for item in value)
    if isinstance(value, set | frozenset):
        return frozenset(fingerprint(item) for item in value)
    return value
