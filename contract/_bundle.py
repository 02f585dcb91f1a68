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


def _entered(node: dict[str, Any], resolver: Resolver[Any]) -> Resolver[Any]:
    """The resolver inside ``node``: a node with an ``$id`` is a resource of its own, its references relative to it."""
    if "$id" not in node:
        return resolver
    return resolver.in_subresource(
        referencing.Resource.from_contents(node, default_specification=referencing.jsonschema.DRAFT202012)
    )


def _inline(node: Any, resolver: Resolver[Any]) -> Any:
    if isinstance(node, list):
        return [_inline(item, resolver) for item in node]
    if not isinstance(node, dict):
        return node
    resolver = _entered(node, resolver)
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


def inline_for_validation(
    schema: dict[str, Any], registry: referencing.Registry
) -> tuple[dict[str, Any], dict[int, Any]]:
    """``schema`` with every ``$ref`` replaced by a copy of its target, for the Python validator, and a map from
    each copied node's id to the contract's node it was copied from.

    Looking references up was most of the Python validator's time on refused arguments. Every keyword stays where
    it stood (a ``$ref`` beside other keywords becomes an ``allOf`` in its place; both apply their target to the
    same instance), so the errors, their order and their instance paths are the ones the referenced schema gives;
    the map lets an error's ``schema`` still name the contract's own subschema (the rules are keyed by it).
    """
    origins: dict[int, Any] = {}
    resolver = registry.resolver_with_root(
        referencing.Resource.from_contents(schema, default_specification=referencing.jsonschema.DRAFT202012)
    )
    return _copy(schema, resolver, origins), origins


def _copy(node: Any, resolver: Resolver[Any], origins: dict[int, Any]) -> Any:
    if isinstance(node, list):
        return [_copy(item, resolver, origins) for item in node]
    if not isinstance(node, dict):
        return node
    resolver = _entered(node, resolver)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("$id", "$defs"):  # resolved already: kept, they would only make the validator look again
            continue
        if key == "$ref":
            resolved = resolver.lookup(value)
            target = _copy(resolved.contents, resolved.resolver, origins)
            if node.keys() <= {"$ref", "$id", "$defs", "$schema", "$comment"}:
                return target  # nothing else applies here: the target stands in the node's place
            if "allOf" in node:
                raise ValueError("a $ref beside an allOf: no place for it in the inlined schema")
            out["allOf"] = [target]
            continue
        out[key] = _copy(value, resolver, origins)
    origins[id(out)] = node
    return out


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
