"""Running a program against a target: each step bound by the host, answered, and judged by the model.

The calls go through ``World``, so every one is bound, confirmed and judged the way the fixed checks' calls
are (``_tracker``): the judgement of a step is the contract model's, given everything the run did before.
Keys and marker words are made fresh per execution (a salt), so a program runs again on the same target, or
another one, from a state that holds nothing of an earlier execution's.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engram_mcp.conformance._connect import Reply
from engram_mcp.conformance._explore._program import FIELDS, SEARCH, TOOLS, CallerRole, Program, Step
from engram_mcp.conformance._host import Answer
from engram_mcp.conformance._profile import ACCEPTS_BENIGN, Profile, ScopeProfile
from engram_mcp.conformance._tracker import Intent
from engram_mcp.conformance._world import World
from engram_mcp.contract import record_id
from engram_mcp.contract.model import Judgement

TEMPLATE = re.compile(r"\$\{([kw])(\d+)\}")
MAX_FULL_PRINCIPALS = 2  # per scope: two principals granted everything (keys are per principal)


def scopes_of(profile: Profile) -> list[ScopeProfile]:
    """The scopes a program may call into: memory on, one where a principal holds every tool first, then up to two
    others."""
    primary = profile.scope_for(TOOLS)
    others = [s for s in profile.scopes if s.memory and s is not primary]
    others.sort(key=lambda s: (s.tenant == (primary.tenant if primary else ""), s.label))  # another tenant first
    return ([primary] if primary else []) + others[:2]


def callers(profile: Profile) -> list[CallerRole]:
    """Who calls: in each scope two principals granted all six tools, and one granted fewer, where there is one."""
    roles: list[CallerRole] = []
    for index, scope in enumerate(scopes_of(profile)):
        full = [p for p, tools in sorted(scope.principals.items()) if set(TOOLS) <= tools]
        fewer = [p for p, tools in sorted(scope.principals.items()) if not set(TOOLS) <= tools and tools]
        admits = scope.admission_policy in ACCEPTS_BENIGN
        roles += [CallerRole(index, p, frozenset(scope.principals[p]), admits) for p in full[:MAX_FULL_PRINCIPALS]]
        if index == 0 and fewer:
            roles.append(CallerRole(index, fewer[0], frozenset(scope.principals[fewer[0]]), admits))
    return roles


@dataclass(frozen=True)
class Outcome:
    """One step as it ran."""

    n: int
    step: Step
    arguments: Any  # resolved: what was sent
    reply: Reply | None  # None: the step was not sent (a cursor no earlier answer gave)
    judgement: Judgement | None

    @property
    def wrong(self) -> bool:
        j = self.judgement
        return j is not None and j.expectation.judged and not j.allowed

    @property
    def answer(self) -> str:
        if self.reply is None:
            return "not sent (no earlier answer gave what it continues)"
        return self.judgement.seen.describe() if self.judgement is not None else self.reply.kind


@dataclass
class Execution:
    """What a program did: every step's outcome, the first the contract does not allow, what was reached."""

    program: Program
    salt: str
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def failure(self) -> Outcome | None:
        return next((o for o in self.outcomes if o.wrong), None)

    @property
    def calls(self) -> int:
        return sum(1 for o in self.outcomes if o.reply is not None)

    def coverage(self) -> Counter[str]:
        """tool: situation -> outcome, for every step the model judged."""
        seen: Counter[str] = Counter()
        for o in self.outcomes:
            if o.judgement is not None:
                tool = o.step.tool.removeprefix("engram_memory_")
                seen[f"{tool}: {o.judgement.expectation.situation} -> {o.judgement.seen.outcome}"] += 1
        return seen

    def exercised(self) -> set[str]:
        """The requirements whose situations a conclusive, allowed answer reached."""
        return {r for o in self.outcomes if o.judgement is not None and o.judgement.conclusive
                and o.judgement.allowed for r in o.judgement.expectation.requirements()}


def new_salt() -> str:
    return "x" + secrets.token_hex(5)


def _fill(node: Any, salt: str, answers: Mapping[int, Mapping[str, Any]]) -> Any:
    if isinstance(node, str):
        return TEMPLATE.sub(lambda m: f"{salt}{m.group(1)}{m.group(2)}"
                            + ("-explore-key" if m.group(1) == "k" else ""), node)
    if isinstance(node, Mapping):
        if "$step" in node:
            return _resolve(int(node["$step"]), str(node["at"]), salt, answers)
        return {key: _fill(value, salt, answers) for key, value in node.items()}
    if isinstance(node, list):
        return [_fill(item, salt, answers) for item in node]
    return node


class _Unresolved(Exception):
    pass


def _resolve(step: int, at: str, salt: str, answers: Mapping[int, Mapping[str, Any]]) -> Any:
    value: Any = answers.get(step, {})
    for part in FIELDS[at]:
        value = value.get(part) if isinstance(value, Mapping) else None
    if isinstance(value, str):
        return value
    if at == "next_page_cursor":
        raise _Unresolved
    # An id no answer gave: a well-formed one nobody issued, the same for the same step of one execution.
    digest = hashlib.sha256(f"{salt}/{step}/{at}".encode()).hexdigest()
    return record_id("sha256:" + digest) if at == "record_id" else "candidate_" + digest


def _value(reply: Reply) -> Mapping[str, Any]:
    envelope = reply.envelope
    if reply.kind == "result" and isinstance(envelope, Mapping) and envelope.get("ok") is True:
        output = envelope.get("output")
        value = output.get("value") if isinstance(output, Mapping) else None
        if isinstance(value, Mapping):
            return value
    return {}


def run_step(world: World, roles: Sequence[CallerRole], scopes: Sequence[ScopeProfile], step: Step,
             arguments: Any, words: set[str]) -> Reply:
    role = roles[step.caller % len(roles)]
    scope = scopes[role.scope % len(scopes)]
    exhaustive = step.tool == SEARCH and isinstance(arguments, Mapping) and arguments.get("query") in words
    answer: Answer = "accept" if step.answer == "accept" else "decline"
    if step.tool in role.tools:  # bound afresh for the call and for its confirmed retry alike
        return world.call(step.tool, arguments, scope=scope, principal=role.principal, answer=answer,
                          intent=Intent(exhaustive=exhaustive))
    # A tool the principal is not granted: refused before any confirmation, so one binding serves.
    return world.call(step.tool, arguments, meta=world.host.meta(scope, role.principal), answer=answer,
                      intent=Intent(exhaustive=exhaustive))


def execute(world: World, program: Program, *, stop_at_failure: bool = True, salt: str | None = None) -> Execution:
    """Run the program once with fresh keys and words; stop after the first answer the contract does not allow."""
    roles = callers(world.profile)
    scopes = scopes_of(world.profile)
    execution = Execution(program, salt or new_salt())
    if not roles:
        return execution
    answers: dict[int, Mapping[str, Any]] = {}
    words = {f"{execution.salt}w{m.group(2)}" for step in program.steps
             for m in TEMPLATE.finditer(json.dumps(step.arguments)) if m.group(1) == "w"}
    tracker = world.conn.tracker
    for n, step in enumerate(program.steps):
        try:
            arguments = _fill(step.arguments, execution.salt, answers)
        except _Unresolved:
            execution.outcomes.append(Outcome(n, step, None, None, None))
            continue
        reply = run_step(world, roles, scopes, step, arguments, words)
        judgement = reply.judgement if isinstance(reply.judgement, Judgement) else None
        if tracker is not None and judgement is not None:
            tracker.claim(judgement)  # exploration reports its own findings
        answers[n] = _value(reply)
        outcome = Outcome(n, step, arguments, reply, judgement)
        execution.outcomes.append(outcome)
        if stop_at_failure and outcome.wrong:
            break
    return execution
