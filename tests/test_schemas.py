"""The published schemas: valid 2020-12, closed, and consistent with spec/limits.json."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from engram_mcp.contract import load

CONTRACT = load()
NUMERIC = ("minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "default")
CONTRACT_SCHEMAS = [p for p in CONTRACT.schema_files if not p.startswith("data/")]


def subschemas(node: Any, pointer: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema object inside a schema document, with its JSON Pointer."""
    if isinstance(node, dict):
        yield pointer, node
        for key, value in node.items():
            if key in ("properties", "$defs"):
                for name, sub in value.items():
                    yield from subschemas(sub, f"{pointer}/{key}/{name}")
            elif key in ("items", "not", "if", "then", "else", "additionalProperties", "propertyNames"):
                yield from subschemas(value, f"{pointer}/{key}")
            elif key in ("allOf", "anyOf", "oneOf"):
                for i, sub in enumerate(value):
                    yield from subschemas(sub, f"{pointer}/{key}/{i}")


def is_object_schema(schema: dict[str, Any]) -> bool:
    """A schema describing an object instance (not an if/then applicator or an allOf refinement)."""
    return schema.get("type") == "object"


@pytest.mark.parametrize("path", sorted(CONTRACT.schema_files))
def test_schema_is_valid_2020_12_with_stable_id(path: str) -> None:
    schema = CONTRACT.schema_files[path]
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == CONTRACT.schema_uri(path)


def input_and_value_objects() -> Iterator[tuple[str, str]]:
    for path in sorted(CONTRACT_SCHEMAS):
        if path.startswith("tools/"):
            for pointer, sub in subschemas(CONTRACT.schema_files[path]):
                if is_object_schema(sub):
                    yield path, pointer


@pytest.mark.parametrize(("path", "pointer"), list(input_and_value_objects()))
def test_every_object_schema_is_closed(path: str, pointer: str) -> None:
    schema = CONTRACT.resolve(f"{path}#{pointer}")
    assert schema.get("additionalProperties") is False


@pytest.mark.parametrize("tool", sorted(CONTRACT.tools))
def test_advertised_input_schema_is_closed_self_contained_and_never_null(tool: str) -> None:
    advertised = CONTRACT.advertised_input_schema(tool)
    text = repr(advertised)
    assert "$ref" not in text and "$defs" not in text
    for pointer, sub in subschemas(advertised):
        if is_object_schema(sub):
            assert sub.get("additionalProperties") is False, pointer
        assert sub.get("type") != "null" and "null" not in (sub.get("type") or []), pointer
        assert None not in sub.get("enum", []), pointer
    # Same verdicts as the referenced original on a valid and an invalid instance.
    original = CONTRACT.input_validator(tool)
    bundled = CONTRACT.validator(advertised)
    for instance in ({}, {"unknown": 1}):
        assert original.is_valid(instance) == bundled.is_valid(instance)


@pytest.mark.parametrize("tool", sorted(CONTRACT.tools))
def test_advertised_output_schema_pins_every_error_triple(tool: str) -> None:
    schema = CONTRACT.advertised_output_schema(tool)
    Draft202012Validator.check_schema(schema)
    validator = CONTRACT.validator(schema)
    for error in CONTRACT.errors_for(tool):
        envelope: dict[str, Any] = {
            "ok": False,
            "auditId": "audit-1",
            "redactionClass": "high",
            "error": {"code": error.code, "message": error.message, "retriable": error.retriable},
        }
        assert validator.is_valid(envelope)
        drifted = {**envelope, "error": {**envelope["error"], "retriable": not error.retriable}}
        assert not validator.is_valid(drifted)
        echoed = {**envelope, "error": {**envelope["error"], "message": error.message + " x"}}
        assert not validator.is_valid(echoed)
    foreign = [e for e in CONTRACT.errors.values() if tool not in e.tools]
    for error in foreign:
        envelope = {"ok": False, "auditId": "a", "redactionClass": "high",
                    "error": {"code": error.code, "message": error.message, "retriable": error.retriable}}
        assert not validator.is_valid(envelope)


def numeric_bounds() -> Iterator[tuple[str, str, int]]:
    for path in CONTRACT_SCHEMAS:
        for pointer, sub in subschemas(CONTRACT.schema_files[path]):
            for keyword in NUMERIC:
                if isinstance(sub.get(keyword), int) and not isinstance(sub.get(keyword), bool):
                    yield path, f"{pointer}/{keyword}", sub[keyword]
            for keyword, value in sub.get("x-utf8Bytes", {}).items():
                yield path, f"{pointer}/x-utf8Bytes/{keyword}", value


def test_every_limit_location_holds_the_limit_value() -> None:
    for limit in CONTRACT.limits.values():
        for path, pointer in limit.locations:
            assert CONTRACT.resolve(f"{path}#{pointer}") == limit.value, (limit.id, path, pointer)


def test_every_numeric_bound_in_a_schema_is_a_declared_limit() -> None:
    """No bound is typed into a schema without an entry in spec/limits.json.

    Two exceptions: a character count implied by a byte bound in the same
    subschema (a code point takes 1 to 4 UTF-8 bytes), which must be exact; and
    the structural lower bounds 0 and 1 (non-negative counts, 1-based ranks,
    non-empty ids) that no contract sentence states.
    """
    declared = {(path, pointer) for limit in CONTRACT.limits.values() for path, pointer in limit.locations}
    undeclared = []
    for path, pointer, value in numeric_bounds():
        if (path, pointer) in declared:
            continue
        parent_pointer, keyword = pointer.rsplit("/", 1)
        parent = CONTRACT.resolve(f"{path}#{parent_pointer}") if parent_pointer else CONTRACT.schema_files[path]
        byte_bounds = parent.get("x-utf8Bytes", {})
        if keyword == "minLength" and value == math.ceil(byte_bounds.get("minimum", -1) / 4):
            continue
        if keyword in ("minimum", "minLength") and value in (0, 1):
            continue
        undeclared.append((path, pointer, value))
    assert undeclared == []


def test_character_bounds_never_contradict_byte_bounds() -> None:
    for path in CONTRACT_SCHEMAS:
        for pointer, sub in subschemas(CONTRACT.schema_files[path]):
            if "x-utf8Bytes" in sub:
                bounds = sub["x-utf8Bytes"]
                assert sub.get("maxLength") == bounds.get("maximum"), (path, pointer)
                if "minimum" in bounds:
                    assert sub.get("minLength") == math.ceil(bounds["minimum"] / 4), (path, pointer)


def test_idempotency_key_publishes_the_runtime_byte_bound() -> None:
    key = CONTRACT.resolve("defs.json#/$defs/idempotency_key")
    assert key["x-utf8Bytes"] == {
        "minimum": CONTRACT.limit("idempotency_key.min_bytes"),
        "maximum": CONTRACT.limit("idempotency_key.max_bytes"),
    }
    assert key["x-nfc"] is True


def test_no_tool_input_schema_accepts_a_host_owned_field() -> None:
    host_owned = ("tenant", "workspace", "scope", "principal", "agent_id", "session", "credential",
                  "auditId", "deadline", "cancellation", "confirmation", "confirmed", "elicitationRef")
    for tool in CONTRACT.tools:
        properties = CONTRACT.input_schema(tool)["properties"]
        assert not set(host_owned) & set(properties)
