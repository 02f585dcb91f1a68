"""The judges behind discovery.input-schemas and envelope.fixed-messages, on schemas and texts made here.

An advertised schema is judged by what it validates: other layouts of the same
validation pass, a schema that opens one level or drifts on one keyword fails
and names the case. A message is judged by being sanitised, not by its wording.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from engram_mcp.conformance import _messages as messages
from engram_mcp.conformance import _schemas as schemas
from engram_mcp.contract import load
from tests.benign import texts_and_schemas as benign

CONTRACT = load()
TOOLS = list(CONTRACT.tools)


def _object_levels(node: Any, path: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Every object level of a schema, by member names ('*' for array items)."""
    found: set[tuple[str, ...]] = set()
    if isinstance(node, dict):
        if node.get("type") == "object" or "properties" in node:
            found.add(path)
        for key, value in node.items():
            if key == "properties":
                for name, sub in value.items():
                    found |= _object_levels(sub, path + (name,))
            elif key == "items":
                found |= _object_levels(value, path + ("*",))
            elif key in ("allOf", "anyOf", "oneOf"):
                for sub in value:
                    found |= _object_levels(sub, path)
            elif key in ("if", "then", "else", "not"):
                found |= _object_levels(value, path)
    return found


@pytest.mark.parametrize("tool", TOOLS)
def test_the_bundle_and_other_layouts_of_it_agree(tool: str) -> None:
    bundle = CONTRACT.advertised_input_schema(tool)
    assert schemas.disagreement(tool, bundle) is None
    assert schemas.disagreement(tool, benign.defs_and_refs(bundle, tool)) is None
    assert schemas.disagreement(tool, benign.unevaluated(bundle)) is None


@pytest.mark.parametrize("tool", TOOLS)
def test_every_object_level_is_probed_for_closure(tool: str) -> None:
    """The valid fixtures reach every object level of the schema, so each gets an unknown-member probe."""
    probed = set()
    for case in schemas.cases(tool):
        if case.label.startswith("an unknown member at "):
            where = case.label.removeprefix("an unknown member at ").split(" of fixture ")[0].strip("/")
            probed.add(tuple("*" if p.isdigit() else p for p in where.split("/")) if where else ())
    assert _object_levels(CONTRACT.advertised_input_schema(tool)) <= probed


def _open_at(schema: dict[str, Any], member: str) -> dict[str, Any]:
    """The schema with the object under ``member`` (at any depth) left open."""
    opened = copy.deepcopy(schema)

    def walk(node: Any) -> bool:
        if isinstance(node, dict):
            props = node.get("properties")
            if isinstance(props, dict) and isinstance(props.get(member), dict) and \
                    props[member].get("additionalProperties") is False:
                del props[member]["additionalProperties"]
                return True
            return any(walk(v) for v in node.values())
        if isinstance(node, list):
            return any(walk(v) for v in node)
        return False

    assert walk(opened), f"no closed object under {member}"
    return opened


def test_an_open_level_is_named() -> None:
    bundle = CONTRACT.advertised_input_schema("engram_memory_capture")
    top = {k: v for k, v in bundle.items() if k != "additionalProperties"}
    assert schemas.disagreement("engram_memory_capture", top).startswith("accepts ")
    nested = schemas.disagreement("engram_memory_capture", _open_at(bundle, "payload"))
    assert nested is not None and "payload" in nested, nested
    policy = schemas.disagreement(
        "engram_memory_search", _open_at(CONTRACT.advertised_input_schema("engram_memory_search"), "capability_policy")
    )
    assert policy is not None and "capability_policy" in policy, policy


def test_a_looser_or_stricter_keyword_is_named() -> None:
    bundle = CONTRACT.advertised_input_schema("engram_memory_get")
    looser = copy.deepcopy(bundle)
    del looser["properties"]["record_id"]["pattern"]
    assert schemas.disagreement("engram_memory_get", looser).startswith("accepts fixture ")
    stricter = copy.deepcopy(bundle)
    stricter["properties"]["max_packet_bytes"]["maximum"] = 65536
    assert schemas.disagreement("engram_memory_get", stricter).startswith("refuses fixture ")


def test_rules_a_schema_cannot_express_are_not_asked() -> None:
    """Without its x- keywords the bundle still agrees: byte bounds, NFC and calendars are the server's checks."""
    bundle = CONTRACT.advertised_input_schema("engram_memory_capture")

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if not k.startswith("x-")}
        return [strip(v) for v in node] if isinstance(node, list) else node

    assert schemas.disagreement("engram_memory_capture", strip(bundle)) is None


def test_an_unusable_schema_is_named_not_fetched() -> None:
    remote = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$ref": "https://schemas.example/get.json"}
    assert "does not resolve" in (schemas.disagreement("engram_memory_get", remote) or "")
    assert "not a valid 2020-12 schema" in (schemas.disagreement("engram_memory_get", {"type": "objekt"}) or "")
    assert "not an object" in (schemas.disagreement("engram_memory_get", None) or "")


def test_the_table_texts_and_other_wordings_are_sanitised() -> None:
    for entry in CONTRACT.errors.values():
        assert messages.leak(entry.message) is None, entry.code
    for text in benign.OWN_TEXTS.values():
        assert messages.leak(text) is None, text
    assert messages.leak("See https://docs.example/errors/not-found for what to do.") is None


@pytest.mark.parametrize(("message", "sign"), [
    ("Traceback (most recent call last):\n  File \"/srv/app.py\", line 3", "a stack trace"),
    ("KeyError: 'payload'", "an exception name"),
    ("cannot open /var/lib/engram/store.sqlite3", "a file or JSON path"),
    ("invalid value at /payload/components/0/text", "a file or JSON path"),
    ("failed in C:\\engram\\store", "a file path"),
    ("see engine.py", "a source or data file name"),
    ("bad member $.payload.purpose_ref", "a JSON path"),
    ("<Store object at 0x7f15f375a520>", "a memory address"),
])
def test_leaks_are_named(message: str, sign: str) -> None:
    assert messages.leak(message) == sign


def test_an_echoed_argument_is_found() -> None:
    arguments = {"record_id": "mem_" + "q" * 52, "purpose_ref": "p", "max_packet_bytes": 4096}
    assert messages.echo(f"No such item: {arguments['record_id']}", arguments) == arguments["record_id"]
    assert messages.echo("The target is not available.", arguments) is None
    assert messages.echo("p is short: never counted as an echo", arguments) is None


def test_a_constant_text_is_no_echo_by_chance() -> None:
    """Plain words, enum values and parts of longer words are not echoes: a constant text may hold them."""
    arguments = {"evidence": {"kind": "document"}, "capability_policy": {"minimum_channels": "lexical_and_semantic"}}
    assert messages.echo("Request not served. See the server's documentation.", arguments) is None
    assert messages.echo("Ask for lexical ranking, not lexical_and_semantic.", arguments) is None
    cursor = {"page_cursor": "conformance-cursor"}
    assert messages.echo("page_cursor 'conformance-cursor' could not be decoded", cursor) == "conformance-cursor"
