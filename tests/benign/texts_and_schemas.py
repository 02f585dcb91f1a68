"""Benign variants: error texts and advertised schemas. Each server words its constant error texts in its own way,
or lays out its closed input schemas as a generator might, or advertises no outputSchema at all.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext

from tests.benign.catalog import CONTRACT, variant, walk
from tests.variant_server import Seams

# -- error texts -------------------------------------------------------------------------------------------------------


# Its own wording, in Spanish (the contract's language), so the text copy carries non-ASCII too.
OWN_TEXTS = {
    code: f"No se atendió la solicitud ({code.lower().replace('_', ' ')}). Consulte la documentación del servidor."
    for code in CONTRACT.errors
}


def _own_text(request: ServerRequestContext, params: Any, envelope: dict[str, Any]) -> dict[str, Any]:
    error = envelope.get("error")
    if isinstance(error, dict) and error.get("code") in OWN_TEXTS:
        error["message"] = OWN_TEXTS[error["code"]]
    return envelope


def _own_texts_pinned(name: str, tool: types.Tool) -> types.Tool:
    """The outputSchema with every pinned error text replaced by this server's own."""
    schema = copy.deepcopy(tool.output_schema)

    def visit(node: dict[str, Any]) -> None:
        props = node.get("properties")
        if isinstance(props, dict) and isinstance(props.get("code"), dict) and "const" in props["code"] \
                and isinstance(props.get("message"), dict) and "const" in props["message"]:
            props["message"] = {"const": OWN_TEXTS[props["code"]["const"]]}

    walk(schema, visit)
    return tool.model_copy(update={"output_schema": schema})


@variant("own-error-messages", freedom="EMC-ENV-006 asks for a constant sanitised text per code, not a given text")
def own_error_messages(seams: Seams) -> None:
    """Every error code comes with this server's own constant text; its outputSchema pins those texts."""
    seams.rewrites.append(_own_text)
    seams.retool(_own_texts_pinned)


# -- advertised schemas ------------------------------------------------------------------------------------------------


def defs_and_refs(schema: dict[str, Any], tool: str) -> dict[str, Any]:
    """The same validation, laid out as a generator might: every property schema under $defs, reached by $ref.

    Identical property schemas share one definition; the root gets an $id of its own, so every
    reference is resolved relative to it."""
    body = copy.deepcopy(schema)
    defs: dict[str, Any] = {}
    names: dict[str, str] = {}

    def hoist(node: Any, path: str) -> Any:
        if isinstance(node, list):
            return [hoist(item, path) for item in node]
        if not isinstance(node, dict):
            return node
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                out[key] = {}
                for prop, raw in value.items():
                    sub = hoist(raw, f"{path}.{prop}")
                    sub.pop("description", None)
                    text = json.dumps(sub, sort_keys=True)
                    if text not in names:
                        names[text] = f"{path}.{prop}".lstrip(".").replace(".", "_") or prop
                        defs[names[text]] = sub
                    out[key][prop] = {"$ref": f"#/$defs/{names[text]}"}
            else:
                out[key] = hoist(value, path)
        return out

    hoisted = hoist(body, "")
    hoisted.pop("title", None)
    return {"$schema": hoisted.pop("$schema", "https://json-schema.org/draft/2020-12/schema"),
            "$id": f"urn:example:memory-server:{tool}:arguments", **hoisted, "$defs": defs}


@variant("schema-defs-and-refs", freedom="EMC-HOST-002 asks for a closed schema, not for a layout")
def schema_defs_and_refs(seams: Seams) -> None:
    """Input schemas put every property schema under $defs and point at it with a relative $ref."""
    seams.retool(lambda name, tool: tool.model_copy(update={"input_schema": defs_and_refs(tool.input_schema, name)}))


def unevaluated(schema: Any) -> Any:
    """additionalProperties: false written as unevaluatedProperties: false, at every level."""
    if isinstance(schema, list):
        return [unevaluated(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "additionalProperties" and value is False:
            out["unevaluatedProperties"] = False
        else:
            out[key] = unevaluated(value)
    return out


@variant("schema-unevaluated-properties", freedom="closed is closed: unevaluatedProperties false closes an object too")
def schema_unevaluated_properties(seams: Seams) -> None:
    """Input schemas are closed with unevaluatedProperties: false instead of additionalProperties: false."""
    seams.retool(lambda name, tool: tool.model_copy(update={"input_schema": unevaluated(tool.input_schema)}))


@variant(
    "output-schema-left-out", freedom="the contract asks for the envelope in structuredContent, not for an outputSchema"
)
def output_schema_left_out(seams: Seams) -> None:
    """Tools advertise no outputSchema at all (MCP makes it optional); every result is the same envelope."""
    seams.retool(lambda name, tool: tool.model_copy(update={"output_schema": None}))
