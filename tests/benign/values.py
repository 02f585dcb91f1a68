"""Benign variants: values and envelopes, in shapes the contract does not fix. Each server fills a value its own
way: a rank_receipt of its own and extra record members, digests in domains of its own, an extra envelope member.
"""

from __future__ import annotations

import copy
import hashlib
import uuid
from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext

from engram_mcp.contract import canonical_bytes
from engram_mcp.reference._envelope import tool_result
from tests.benign.catalog import GET, SEARCH, redigest, value_of, variant, walk
from tests.variant_server import Seams


def _shapes_of_its_own(request: ServerRequestContext, params: Any, envelope: dict[str, Any]) -> dict[str, Any]:
    value = value_of(envelope)
    if value is None or params.name not in (SEARCH, GET):
        return envelope
    packets = value.get("records", []) if params.name == SEARCH else [value]
    for packet in packets:
        if isinstance(packet.get("record"), dict):
            packet["record"]["x_acme_revision"] = 1
    receipt = value.get("rank_receipt")
    if isinstance(receipt, dict):
        value["rank_receipt"] = {"profile": receipt.get("profile"), "version": "acme-rank/2",
                                 "issued_at": receipt.get("issued_at")}
    read = value.get("read_receipt")
    if isinstance(read, dict) and "valid_as_of" in read:
        read["valid_as_of"] = str(read["valid_as_of"])
    redigest(params.name, value)
    return envelope


@variant("value-shapes-of-its-own", freedom="EMC-ENV-004 lists a value's members, not their inner shapes; "
         "rank_receipt's content is the server's")
def value_shapes_of_its_own(seams: Seams) -> None:
    """A rank_receipt of its own, an extra member in every record, and get's valid_as_of as a string."""
    seams.rewrites.append(_shapes_of_its_own)
    seams.retool(lambda name, tool: tool.model_copy(update={"output_schema": None}))  # it pins the shapes


def acme_digest(name: str, value: Any) -> str:
    """This server's own digest domain: sha256 over 'acme-memory/NAME' and the canonical bytes."""
    return "sha256:" + hashlib.sha256(b"acme-memory/" + name.encode() + b"\n" + canonical_bytes(value)).hexdigest()


def _without(value: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in value.items() if k != key}


def _own_digests(request: ServerRequestContext, params: Any, envelope: dict[str, Any]) -> dict[str, Any]:
    value = value_of(envelope)
    if value is None:
        return envelope
    receipt = value.get("read_receipt")
    if params.name == GET and isinstance(receipt, dict) and "receipt_digest" in receipt:
        receipt["receipt_digest"] = acme_digest("read-receipt", _without(receipt, "receipt_digest"))
    if params.name == GET and "packet_digest" in value:
        value["packet_digest"] = acme_digest("packet", _without(value, "packet_digest"))
    if params.name == SEARCH and "response_digest" in value:
        value["response_digest"] = acme_digest("page", _without(value, "response_digest"))
    return envelope


@variant("own-digest-domains", freedom="EMC-GET-002 and EMC-HP-046: how packet_digest, receipt_digest and "
         "response_digest are computed is this project's profile")
def own_digest_domains(seams: Seams) -> None:
    """packet_digest, read_receipt.receipt_digest and response_digest are digests in domains of its own."""
    seams.rewrites.append(_own_digests)


def _traced(envelope: dict[str, Any]) -> types.CallToolResult:
    return tool_result({**envelope, "x_trace": "trace-" + uuid.uuid4().hex})


def _envelope_opened(name: str, tool: types.Tool) -> types.Tool:
    schema = copy.deepcopy(tool.output_schema)

    def visit(node: dict[str, Any]) -> None:
        if isinstance(node.get("properties"), dict) and "auditId" in node["properties"]:
            node.pop("additionalProperties", None)  # the envelope's own object; its members stay closed

    walk(schema, visit)
    return tool.model_copy(update={"output_schema": schema})


@variant("envelope-extra-member", freedom="EMC-ENV-002/003 list the envelope's members; 'no other members' is a "
         "pin (EMC-ENV-009)")
def envelope_extra_member(seams: Seams) -> None:
    """Every envelope carries an extra x_trace member, in structuredContent and text alike; outputSchema allows it."""
    seams.render = _traced
    seams.retool(_envelope_opened)
