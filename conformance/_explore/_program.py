"""Generated call sequences: programs of the six tools, drawn from a seed, that any target can run.

A program is data. Its steps name a caller by index (a scope and a principal of the profile), a tool and its
arguments, written symbolically so the same program runs again anywhere:

- ``${k3}``, ``${w1}`` inside a string are an idempotency key and a marker word, made fresh for each execution
  (``_execute``): two executions never share a key or a word, so a second run meets none of the first's state;
- ``{"$step": 4, "at": "candidate_id"}`` is a value an earlier step's answer gave (``candidate_id``,
  ``record_id``, ``next_page_cursor``), resolved when the step runs.

``draw`` makes a program from a seed: a fixed opening that reaches the situations the exploration must cover,
then steps chosen at random from what earlier steps made (candidates, records, keys, cursors), each from a
fixture-style valid base with one thing chosen: a fresh or reused key, same or other content, own, foreign or
forgotten ids, paging interleaved with mutations, cursors continued by another caller or after a forget.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

SEARCH, GET, CAPTURE = "engram_memory_search", "engram_memory_get", "engram_memory_capture"
ADMIT, WITHDRAW, FORGET = "engram_memory_request_admission", "engram_memory_withdraw", "engram_memory_forget"
TOOLS = (SEARCH, GET, CAPTURE, ADMIT, WITHDRAW, FORGET)
REASONS = ("reason:explore-first", "reason:explore-other")
DIGEST = "sha256:" + "ab" * 32
# What a reference names in an earlier step's success value.
FIELDS = {"candidate_id": ("candidate_id",), "record_id": ("outcome", "record_id"),
          "next_page_cursor": ("next_page_cursor",)}


def ref(step: int, at: str) -> dict[str, Any]:
    return {"$step": step, "at": at}


@dataclass(frozen=True)
class Step:
    tool: str
    arguments: Mapping[str, Any]
    caller: int
    note: str = ""
    answer: str = "accept"  # how the host answers a confirmation: accept or decline

    def refs(self) -> set[int]:
        return set(_refs(self.arguments))

    def to_json(self) -> dict[str, Any]:
        return {"tool": self.tool, "arguments": self.arguments, "caller": self.caller, "note": self.note,
                "answer": self.answer}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Step:
        return cls(str(data["tool"]), dict(data["arguments"]), int(data["caller"]), str(data.get("note", "")),
                   str(data.get("answer", "accept")))


def _refs(node: Any) -> Iterable[int]:
    if isinstance(node, Mapping):
        if "$step" in node:
            yield int(node["$step"])
        else:
            for value in node.values():
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def _renumber(node: Any, numbers: Mapping[int, int]) -> Any:
    if isinstance(node, Mapping):
        if "$step" in node:
            return {**node, "$step": numbers[int(node["$step"])]}
        return {key: _renumber(value, numbers) for key, value in node.items()}
    if isinstance(node, list):
        return [_renumber(item, numbers) for item in node]
    return node


@dataclass(frozen=True)
class Program:
    seed: int
    steps: tuple[Step, ...]

    def without(self, dropped: Iterable[int]) -> Program:
        """The program with these steps left out, and every step that needs a value one of them gave."""
        gone = set(dropped)
        kept: list[int] = []
        for n, step in enumerate(self.steps):
            if n in gone or step.refs() & gone:
                gone.add(n)
            else:
                kept.append(n)
        numbers = {old: new for new, old in enumerate(kept)}
        steps = tuple(replace(self.steps[n], arguments=_renumber(self.steps[n].arguments, numbers)) for n in kept)
        return Program(self.seed, steps)

    def prefix(self, length: int) -> Program:
        return Program(self.seed, self.steps[:length])


@dataclass
class _Drawing:
    """What the steps drawn so far made, for the next step to use."""

    rng: random.Random
    callers: Sequence[CallerRole]
    purpose: str
    steps: list[Step] = field(default_factory=list)
    keys: int = 0
    words: int = 0
    captures: list[int] = field(default_factory=list)  # steps that capture (a candidate_id)
    admissions: list[int] = field(default_factory=list)  # steps that request admission (a record_id)
    searches: list[int] = field(default_factory=list)  # first-page searches (a next_page_cursor)
    keyed: list[int] = field(default_factory=list)  # steps that carry an idempotency key

    def key(self) -> str:
        self.keys += 1
        return f"${{k{self.keys}}}"

    def word(self) -> str:
        if self.words and self.rng.random() < 0.7:
            return f"${{w{self.rng.randint(1, self.words)}}}"
        self.words += 1
        return f"${{w{self.words}}}"

    def add(self, step: Step) -> int:
        self.steps.append(step)
        n = len(self.steps) - 1
        bucket = {CAPTURE: self.captures, ADMIT: self.admissions}.get(step.tool)
        if bucket is not None:
            bucket.append(n)
        if step.tool == SEARCH and "page_cursor" not in step.arguments:
            self.searches.append(n)
        if "idempotency_key" in step.arguments:
            self.keyed.append(n)
        return n

    def caller(self, tool: str, *, near: int | None = None) -> int:
        """A caller granted the tool: mostly the one that made ``near`` (or one of its scope), sometimes another
        (a foreign call), now and then one the tool is not granted to."""
        granted = [i for i, c in enumerate(self.callers) if tool in c.tools] or list(range(len(self.callers)))
        if self.rng.random() < 0.05:
            return self.rng.randrange(len(self.callers))
        if near is not None and self.rng.random() < 0.85:
            if near in granted:
                return near
            same = [i for i in granted if self.callers[i].scope == self.callers[near].scope]
            if same:
                return self.rng.choice(same)
        if near is None and self.rng.random() < 0.6:  # a new thread of calls: mostly where records can come of it
            admitting = [i for i in granted if self.callers[i].admits and ADMIT in self.callers[i].tools]
            if admitting:
                return self.rng.choice(admitting)
        return self.rng.choice(granted)

    def recorded(self) -> list[int]:
        """Admissions likely to have made a record: by a caller granted admission where benign content is
        admitted, of a candidate captured in the same scope."""
        likely = []
        for n in self.admissions:
            step, source = self.steps[n], self.steps[n].arguments.get("candidate_id")
            role = self.callers[step.caller]
            made = self.steps[source["$step"]] if isinstance(source, Mapping) else None
            if ADMIT in role.tools and role.admits and made is not None \
                    and self.callers[made.caller].scope == role.scope:
                likely.append(n)
        return likely

    def record_source(self) -> int:
        likely = self.recorded()
        return self.rng.choice(likely if likely and self.rng.random() < 0.85 else self.admissions)


@dataclass(frozen=True)
class CallerRole:
    """A caller as a program sees it: which scope (by index), which principal, which tools it is granted."""

    scope: int
    principal: str
    tools: frozenset[str]
    admits: bool = True  # the scope's admission policy accepts benign content: an admission there makes a record


def capture_arguments(purpose: str, key: str, word: str, n: int) -> dict[str, Any]:
    """A valid capture (the fixtures' base shape): one decision about ``word``, citing one source."""
    return {
        "idempotency_key": key,
        "payload": {
            "schema_version": 2, "purpose_ref": purpose, "valid_time": {"t": 1_700_000_000_000},
            "components": [{"component_id": "component:decision", "kind": "decision",
                            "text": f"Decision {word} number {n}: keep the ledger in one database.",
                            "citation_ids": ["citation:source"]}],
            "primary_component_id": "component:decision",
            "primary_event": {"at": 1_700_000_000_000, "type_ref": "event:decided", "citation_id": "citation:source"},
            "citations": [{"citation_id": "citation:source", "source_ref": "source:explore",
                           "locator": {"scheme": "document", "value": f"explore#{n}"}, "content_digest": DIGEST}],
        },
        "evidence": {"evidence_ref": "evidence:explore", "evidence_digest": DIGEST,
                     "citation_ids": ["citation:source"]},
    }


def _other_content(arguments: Mapping[str, Any], n: int) -> dict[str, Any]:
    changed = copy.deepcopy(dict(arguments))
    component = changed["payload"]["components"][0]
    component["text"] = component["text"].replace("keep the ledger", f"split the ledger ({n})")
    return changed


# -- the steps -----------------------------------------------------------------------------------------------------


def _capture(d: _Drawing) -> None:
    reuse = [n for n in d.captures if d.rng.random() < 0.5]
    if reuse and d.rng.random() < 0.35:
        earlier = d.rng.choice(reuse)
        step = d.steps[earlier]
        roll = d.rng.random()
        if roll < 0.45:
            d.add(replace(step, note=f"replay of step {earlier}"))
        elif roll < 0.8:
            d.add(replace(step, arguments=_other_content(step.arguments, len(d.steps)),
                          note=f"step {earlier}'s key with other content"))
        elif roll < 0.9:
            d.add(replace(step, caller=d.caller(CAPTURE), note=f"step {earlier}'s key and content, any caller"))
        else:  # the same content under a fresh key: after a forget, the tombstone's to judge
            d.add(replace(step, arguments={**step.arguments, "idempotency_key": d.key()},
                          note=f"step {earlier}'s content under a fresh key"))
        return
    caller = d.caller(CAPTURE)
    d.add(Step(CAPTURE, capture_arguments(d.purpose, d.key(), d.word(), len(d.steps)), caller, "fresh capture"))


def _keyed(d: _Drawing, tool: str, target: dict[str, Any], caller: int, what: str, reason: bool) -> None:
    """A mutation: a fresh key, or an earlier key of the same caller (a replay, or a conflict)."""
    arguments: dict[str, Any] = {**target, "idempotency_key": d.key()}
    if reason:
        arguments["reason_ref"] = REASONS[0]
    same = [n for n in d.keyed if d.steps[n].caller == caller]
    if same and d.rng.random() < 0.3:
        earlier = d.rng.choice(same)
        arguments["idempotency_key"] = d.steps[earlier].arguments["idempotency_key"]
        what = f"{what} under step {earlier}'s key"
    d.add(Step(tool, arguments, caller, what))


def _mutation_replay(d: _Drawing) -> bool:
    """Repeat an earlier admission, withdraw or forget: the same call, or its key with another reason."""
    earlier = [n for n in d.keyed if d.steps[n].tool in (ADMIT, WITHDRAW, FORGET)]
    if not earlier:
        return False
    n = d.rng.choice(earlier)
    step = d.steps[n]
    if step.tool != ADMIT and d.rng.random() < 0.4:
        arguments = {**step.arguments, "reason_ref": REASONS[1]}
        d.add(replace(step, arguments=arguments, note=f"step {n} again with another reason"))
    else:
        d.add(replace(step, note=f"replay of step {n}"))
    return True


def _mutate(d: _Drawing, tool: str) -> None:
    """An admission or withdraw of an earlier capture's candidate, or a forget of an earlier admission's record;
    with nothing of that kind yet, the step that makes one."""
    if tool == FORGET and not d.admissions:
        _mutate(d, ADMIT)
        return
    if not d.captures:
        _capture(d)
        return
    if tool == FORGET:
        source, target, what = d.record_source(), "record_id", "record"
    else:
        source, target, what = d.rng.choice(d.captures), "candidate_id", "candidate"
    caller = d.caller(tool, near=d.steps[source].caller)
    _keyed(d, tool, {target: ref(source, target)}, caller,
           f"{tool.removeprefix('engram_memory_')} of step {source}'s {what}", tool != ADMIT)


def _get(d: _Drawing) -> None:
    if not d.admissions:
        _capture(d)
        return
    source = d.record_source()
    caller = d.caller(GET, near=d.steps[source].caller)
    d.add(Step(GET, {"record_id": ref(source, "record_id"), "purpose_ref": d.purpose}, caller,
               f"get of step {source}'s record"))


def _search(d: _Drawing) -> None:
    if d.searches and d.rng.random() < 0.45:  # continue an earlier page, perhaps as another caller
        first = d.rng.choice(d.searches)
        step = d.steps[first]
        caller = d.caller(SEARCH, near=step.caller)
        d.add(Step(SEARCH, {**step.arguments, "page_cursor": ref(first, "next_page_cursor")}, caller,
                   f"continuation of step {first}"))
        return
    word = f"${{w{d.rng.randint(1, d.words)}}}" if d.words else d.word()
    near = d.steps[d.captures[-1]].caller if d.captures else None
    d.add(Step(SEARCH, {"query": word, "purpose_ref": d.purpose, "limit": d.rng.choice((1, 1, 2, 2, 10))},
               d.caller(SEARCH, near=near), "search"))


MOVES = ((_capture, 5), (partial(_mutate, tool=ADMIT), 4), (_search, 4), (_get, 3), (partial(_mutate, tool=FORGET), 2),
         (partial(_mutate, tool=WITHDRAW), 2))


def _opening(d: _Drawing, length: int) -> None:
    """Steps that reach what every exploration must cover, in a few calls: capture replay and conflict, a key
    another principal uses, admission replay, a continued page, foreign reads, reads and pages after a forget."""
    full = [i for i, c in enumerate(d.callers) if set(TOOLS) <= c.tools]
    if not full:
        return
    own = full[0]
    peer = next((i for i in full if d.callers[i].scope == d.callers[own].scope and i != own), own)
    foreign = next((i for i in full if d.callers[i].scope != d.callers[own].scope), peer)
    key, word = d.key(), d.word()
    first = capture_arguments(d.purpose, key, word, 0)
    steps = [
        Step(CAPTURE, first, own, "fresh capture"),
        Step(CAPTURE, first, own, "replay of step 0"),
        Step(CAPTURE, _other_content(first, 2), own, "step 0's key with other content"),
        Step(CAPTURE, capture_arguments(d.purpose, key, word, 3), peer, "step 0's key, another principal"),
        Step(ADMIT, {"candidate_id": ref(0, "candidate_id"), "idempotency_key": d.key()}, own, "admission of step 0"),
    ]
    steps.append(replace(steps[4], note="replay of step 4"))
    steps += [
        Step(CAPTURE, capture_arguments(d.purpose, d.key(), word, 6), own, "fresh capture"),
        Step(ADMIT, {"candidate_id": ref(6, "candidate_id"), "idempotency_key": d.key()}, own, "admission of step 6"),
        Step(SEARCH, {"query": word, "purpose_ref": d.purpose, "limit": 1}, own, "search"),
    ]
    steps += [
        Step(SEARCH, {**steps[8].arguments, "page_cursor": ref(8, "next_page_cursor")}, own, "continuation of step 8"),
        Step(GET, {"record_id": ref(4, "record_id"), "purpose_ref": d.purpose}, foreign, "foreign get of step 4's"),
        Step(FORGET, {"record_id": ref(4, "record_id"), "idempotency_key": d.key(), "reason_ref": REASONS[0]}, own,
             "forget of step 4's record"),
        Step(GET, {"record_id": ref(4, "record_id"), "purpose_ref": d.purpose}, own, "get after forget"),
        Step(GET, {"record_id": ref(4, "record_id"), "purpose_ref": d.purpose}, peer, "get after forget, peer"),
        Step(SEARCH, {"query": word, "purpose_ref": d.purpose, "limit": 10}, own, "search after forget"),
        # Both records of step 8's query forgotten: whichever the next page holds, it must not come back.
        Step(FORGET, {"record_id": ref(7, "record_id"), "idempotency_key": d.key(), "reason_ref": REASONS[0]}, own,
             "forget of step 7's record"),
        Step(SEARCH, {**steps[8].arguments, "page_cursor": ref(8, "next_page_cursor")}, own,
             "continuation of step 8 after forget"),
    ]
    steps.append(replace(steps[11], note="replay of step 11"))
    steps.append(replace(steps[11], arguments={**steps[11].arguments, "reason_ref": REASONS[1]},
                         note="step 11 again with another reason"))
    steps.append(Step(WITHDRAW, {"candidate_id": ref(3, "candidate_id"), "idempotency_key": d.key(),
                                 "reason_ref": REASONS[0]}, peer, "withdraw of step 3"))
    steps.append(replace(steps[-1], note="replay of step 19"))
    steps.append(replace(steps[0], note="replay of step 0 after its record was forgotten"))
    for step in steps[:length]:
        d.add(step)


def draw(seed: int, callers: Sequence[CallerRole], purpose: str, length: int, *, opening: bool = True) -> Program:
    """A program of ``length`` steps from ``seed``: the same seed and callers give the same program."""
    d = _Drawing(random.Random(seed), callers, purpose)
    if opening:
        _opening(d, length)
    moves, weights = zip(*MOVES, strict=True)
    while len(d.steps) < length:
        if d.rng.random() < 0.12 and _mutation_replay(d):
            continue
        d.rng.choices(moves, weights)[0](d)
    return Program(seed, tuple(d.steps[:length]))
