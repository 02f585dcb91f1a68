"""Advertised schemas judged by what they validate, not by how they are written.

A target may lay its schemas out as it likes: inline, under ``$defs`` behind
``$ref``, closed with ``additionalProperties`` or ``unevaluatedProperties``,
with or without titles and descriptions. What the contract asks of an input
schema is behaviour, and that is what is judged here: run through a standard
2020-12 validator, resolving references only within the schema itself (never
over the network), it must accept every valid argument fixture, refuse every
fixture the contract's own schema refuses at the schema level, and refuse an
unknown member at every object level a call can reach.

Fixtures refused only by rules JSON Schema cannot express (UTF-8 byte bounds,
NFC, calendar instants, the cross-field rules of spec/rules.json) are not asked
of the advertised schema: the contract's schema is run through the same plain
validator, which ignores the project's x- keywords, and only what it refuses
must be refused. Nor are fixtures its schema refuses only for a pin
(see _pins: a candidate_id outside this project's form, a capability_policy
lacking a member): those refusals are reported as the pins, for --level pins.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from engram_mcp.conformance import _pins
from engram_mcp.contract import load

CONTRACT = load()
# Where an advertised schema without its own $id lives, so that its internal references resolve.
ADVERTISED_BASE = "urn:engram-conformance:advertised:"
# An argument member no schema of the contract defines.
PROBE_MEMBER = "conformance_unknown_member"


class UnusableSchema(Exception):
    """The advertised schema cannot be used by a standard 2020-12 validator; the message says why."""


@dataclass(frozen=True)
class Case:
    label: str
    arguments: Any
    accept: bool  # what the contract's schema says at the schema level
    pins: tuple[str, ...] = ()  # pins the refusal rests on alone: not asked at the contract level


def validator(schema: Any, name: str) -> Draft202012Validator:
    """A plain 2020-12 validator over the schema, its references resolved against itself alone."""
    if not isinstance(schema, dict):
        raise UnusableSchema(f"the schema is {type(schema).__name__}, not an object")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        raise UnusableSchema(f"not a valid 2020-12 schema: {error.message[:160]}") from None
    uri = schema["$id"] if isinstance(schema.get("$id"), str) else ADVERTISED_BASE + name
    resource = referencing.Resource.from_contents(schema, default_specification=referencing.jsonschema.DRAFT202012)
    # A registry with no retrieval: a $ref that leaves the schema is unresolvable, never fetched.
    registry: referencing.Registry[Any] = referencing.Registry().with_resource(uri, resource)
    return Draft202012Validator(schema, registry=registry)


def accepts(checker: Draft202012Validator, instance: Any) -> bool:
    try:
        return checker.is_valid(instance)
    except referencing.exceptions.Unresolvable as error:
        raise UnusableSchema(f"a $ref does not resolve within the schema: {error}") from None


def _objects(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every object in a JSON value, the value itself first."""
    if isinstance(node, dict):
        yield path
        for key, value in node.items():
            yield from _objects(value, path + (key,))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _objects(item, path + (i,))


def _with_probe(arguments: Any, path: tuple[Any, ...]) -> Any:
    if not path:
        return {**arguments, PROBE_MEMBER: True}
    head, rest = path[0], path[1:]
    if isinstance(arguments, list):
        return [_with_probe(item, rest) if i == head else item for i, item in enumerate(arguments)]
    return {**arguments, head: _with_probe(arguments[head], rest)}


@cache
def cases(tool: str) -> tuple[Case, ...]:
    """Every argument fixture of the tool with the contract schema's plain verdict, and a probe for an
    unknown member at each object level the valid fixtures reach (refused wherever the contract refuses it).

    One probe per level: levels are told apart by member names, array positions counting as one."""
    contract = Draft202012Validator(CONTRACT.advertised_input_schema(tool))
    entries = CONTRACT.fixture(f"arguments/{tool}.json")["cases"]
    out = [_fixture_case(tool, contract, e) for e in entries]
    probed: set[tuple[Any, ...]] = set()
    for entry in sorted((e for e in entries if e["valid"]), key=lambda e: len(json.dumps(e["arguments"]))):
        for path in _objects(entry["arguments"]):
            level = tuple("*" if isinstance(p, int) else p for p in path)
            if level in probed:
                continue
            probed.add(level)
            probe = _with_probe(entry["arguments"], path)
            if not contract.is_valid(probe):
                where = "/" + "/".join(str(p) for p in path)
                out.append(Case(f"an unknown member at {where} of fixture '{entry['description']}'", probe, False))
    return tuple(out)


def _fixture_case(tool: str, contract: Draft202012Validator, entry: dict[str, Any]) -> Case:
    arguments = entry["arguments"]
    accept = contract.is_valid(arguments)
    if not accept:
        loose, pins = _pins.relaxed(tool, arguments, any_text=True)
        if pins and contract.is_valid(loose):
            return Case(f"fixture '{entry['description']}'", arguments, accept, pins)
    return Case(f"fixture '{entry['description']}'", arguments, accept)


def pinned_verdicts(tool: str, schema: Any) -> list[tuple[str, bool, str]]:
    """For each case refused only by a pin: the pin, whether the advertised schema refuses it too, and the case.
    Empty when the schema is unusable (disagreement says so)."""
    try:
        checker = validator(schema, tool)
        return [(pin, not accepts(checker, case.arguments), case.label) for case in cases(tool) for pin in case.pins]
    except UnusableSchema:
        return []


def disagreement(tool: str, schema: Any) -> str | None:
    """The first case on which the advertised input schema and the contract's disagree, or why it is unusable.
    Refusals that rest on a pin alone are left to pinned_verdicts."""
    try:
        checker = validator(schema, tool)
        for case in cases(tool):
            if case.pins:
                continue
            if accepts(checker, case.arguments) != case.accept:
                verb = "refuses" if case.accept else "accepts"
                why = "the contract accepts it" if case.accept else "the contract's schema refuses it"
                return f"{verb} {case.label}: {why}"
    except UnusableSchema as unusable:
        return str(unusable)
    return None
