"""Counterexamples and traces as JSON lines, which anyone can read and ``conformance replay`` re-runs.

A counterexample file holds one header line (``"kind": "counterexample"``: the contract, the era, the seed,
the callers by scope and principal, the requirements broken, the failing step) and one line per step (the
call as the program writes it, the caller, the binding it ran under, what was sent, the answer seen in words
and, where the model did not allow it or could not read it, as it came over the wire, what the model allowed
there and its verdict). Only the steps' ``tool``, ``arguments`` and ``caller`` are needed to
run it again; the rest is for the reader.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_mcp.conformance._errors import ConformanceError
from engram_mcp.conformance._explore._execute import Execution, Outcome, scopes_of
from engram_mcp.conformance._explore._program import CallerRole, Program, Step
from engram_mcp.conformance._profile import Profile
from engram_mcp.conformance._redact import redact
from engram_mcp.conformance._words import os_reason, spoken
from engram_mcp.contract import load

KIND = "counterexample"


class CounterexampleError(ConformanceError):
    """The file is no counterexample this harness can run; the message says why."""


@dataclass(frozen=True)
class Counterexample:
    program: Program
    era: str
    broken: tuple[str, ...]
    failing_step: int | None


def _step_line(outcome: Outcome, roles: Sequence[CallerRole], profile: Profile) -> dict[str, Any]:
    role = roles[outcome.step.caller % len(roles)] if roles else None
    scopes = scopes_of(profile)
    scope = scopes[role.scope % len(scopes)] if role and scopes else None
    line: dict[str, Any] = {"kind": "step", "n": outcome.n, **outcome.step.to_json()}
    if scope is not None and role is not None:
        line["bound"] = {"tenant": scope.tenant, "workspace": scope.workspace, "principal": role.principal,
                         "purpose_ref": profile.purpose_ref}
    line["sent"] = outcome.arguments
    judgement = outcome.judgement
    line["seen"] = outcome.answer
    if outcome.reply is not None and (judgement is None or not judgement.allowed
                                      or judgement.seen.kind in ("unreadable", "protocol")):
        line["answer"] = redact(outcome.reply.wire())  # as it came over the wire: what "seen" says in words
    if judgement is not None:
        line["situation"] = judgement.expectation.situation
        line["allowed"] = judgement.expectation.allowed_text()
        line["verdict"] = "allowed" if judgement.allowed else "not allowed"
        if not judgement.allowed:
            line["broken"] = list(judgement.broken)
            line["why"] = judgement.message()
    return line


def write_counterexample(path: Path, execution: Execution, era: str, roles: Sequence[CallerRole],
                         profile: Profile) -> Path:
    failure = execution.failure
    header = {"kind": KIND, "contract": load().version, "era": era, "seed": execution.program.seed,
              "callers": [{"scope": r.scope, "principal": r.principal} for r in roles],
              "broken": list(failure.judgement.broken) if failure and failure.judgement else [],
              "failing_step": failure.n if failure else None}
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps(header) + "\n")
        for outcome in execution.outcomes:
            out.write(json.dumps(_step_line(outcome, roles, profile), default=str) + "\n")
    return path


def read_counterexample(path: Path) -> Counterexample:
    try:
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except OSError as problem:
        raise CounterexampleError(f"cannot read {path}: {os_reason(problem)}") from None
    except ValueError:
        raise CounterexampleError(f"{path} is not JSON lines") from None
    if not lines or not isinstance(lines[0], Mapping) or lines[0].get("kind") != KIND:
        raise CounterexampleError(f"{path} does not start with a counterexample header")
    header = lines[0]
    if header.get("contract") != load().version:
        raise CounterexampleError(f"{path} was written for contract {spoken(header.get('contract'))}, "
                                  f"this harness certifies {load().version}")
    try:
        steps = tuple(Step.from_json(line) for line in lines[1:] if line.get("kind") == "step")
    except (KeyError, TypeError, ValueError, AttributeError):
        raise CounterexampleError(f"{path}: a step line lacks its tool, arguments or caller") from None
    if not steps:
        raise CounterexampleError(f"{path} holds no step")
    era = header.get("era")
    if era not in ("legacy", "modern"):
        raise CounterexampleError(f"{path}: unknown era {spoken(era)}")
    return Counterexample(Program(int(header.get("seed", 0)), steps), era, tuple(header.get("broken", ())),
                          header.get("failing_step"))


def trace_lines(execution: Execution, era: str, roles: Sequence[CallerRole], profile: Profile,
                index: int) -> Iterator[str]:
    """One line per step of one program, for --explore-trace (and for ``conformance diff``)."""
    for outcome in execution.outcomes:
        line = _step_line(outcome, roles, profile)
        judgement = outcome.judgement
        line.update({"era": era, "program": index, "seed": execution.program.seed,
                     "matched": list(judgement.matched) if judgement else [],
                     "pins": [p.requirement for p in judgement.pins] if judgement else []})
        line.pop("sent", None)  # holds the execution's fresh keys and words: two runs never agree on them
        yield json.dumps(line, default=str)
