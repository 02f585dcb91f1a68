"""Self-contained schemas for advertising in tools/list.

A client sees no registry, so what a server advertises has every ``$ref``
inlined (the contract's schemas are not recursive) and no ``$id``/``$defs``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import referencing

if TYPE_CHECKING:
    # What Registry.resolver_with_root returns; referencing exports the class only from its _core module.
    from referencing._core import Resolver

    from engram_mcp.contract._loader import Contract

DIALECT = "https://json-schema.org/draft/2020-12/schema"
_DROPPED = {"$id", "$schema", "$defs"}


def inline(schema: dict[str, Any], registry: referencing.Registry) -> dict[str, Any]:
    resolver = registry.resolver_with_root(
        referencing.Resource.from_contents(schema, default_specification=referencing.jsonschema.DRAFT202012)
    )
    body = _inline(schema, resolver)
    return {"$schema": DIALECT, **body}


def _inline(node: Any, resolver: Resolver[Any]) -> Any:
    if isinstance(node, list):
        return [_inline(item, resolver) for item in node]
    if not isinstance(node, dict):
        return node
    if "$id" in node:
        resolver = resolver.in_subresource(
            referencing.Resource.from_contents(node, default_specification=referencing.jsonschema.DRAFT202012)
        )
    out: dict[str, Any] = {}
    target = None
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "$ref":
            resolved = resolver.lookup(value)
            target = _inline(resolved.contents, resolved.resolver)
            continue
        out[key] = _inline(value, resolver)
    if target is None:
        return out
    if not out:
        return target
    return {"allOf": [target], **out}


def specialise_envelope(contract: Contract, tool: str) -> dict[str, Any]:
    """The envelope with value set to the tool's value schema and error to its triples."""
    registry = contract.registry
    envelope = inline(contract.schema_files["envelope.json"], registry)
    value = inline(contract.value_schema(tool), registry)
    value.pop("$schema")
    success, failure = envelope["oneOf"]
    success["properties"]["output"]["properties"]["value"] = value
    failure["properties"]["error"] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["code", "message", "retriable"],
        "properties": {
            "code": {"enum": [e.code for e in contract.errors_for(tool)]},
            "message": {"type": "string"},
            "retriable": {"type": "boolean"},
        },
        "oneOf": [
            {
                "properties": {
                    "code": {"const": e.code},
                    "message": {"const": e.message},
                    "retriable": {"const": e.retriable},
                }
            }
            for e in contract.errors_for(tool)
        ],
    }
    return envelope
