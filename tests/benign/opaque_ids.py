"""Benign variants: opaque ids. Each server hands out ids of its own form (records, page cursors, candidates) and
maps them back to the reference's before a call is judged; the host's confirmation references still name the ids
the host saw.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import re
import uuid
from collections.abc import Mapping
from typing import Any

import anyio
from mcp.server import ServerRequestContext

from engram_mcp.contract import receipt_digest
from tests.benign.catalog import (
    ADMIT,
    CAPTURE,
    SEARCH,
    WITHDRAW,
    BesideTheStore,
    ids_of_its_own,
    map_ids,
    redigest,
    value_of,
    variant,
    walk,
)
from tests.variant_server import Seams

# -- record ids --------------------------------------------------------------------------------------------------------


RECORD = re.compile(r"^mem_[a-z2-7]+$")
RECORD_KEYS = frozenset({"record_id"})


def outer_record(inner: str) -> str:
    """This server's id for a record: the reference's base32 reversed. Same alphabet and length (so a page
    the reference fits into max_packet_bytes still fits), another id; the mapping is its own inverse."""
    return "mem_" + inner.removeprefix("mem_")[::-1] if RECORD.match(inner) else inner


inner_record = outer_record


async def _inner_records(tool: str, arguments: Mapping[str, Any]) -> Mapping[str, Any]:
    mapped: Mapping[str, Any] = map_ids(arguments, RECORD_KEYS, inner_record)
    return mapped


def _outer_records(request: ServerRequestContext, params: Any, envelope: dict[str, Any]) -> dict[str, Any]:
    output = envelope.get("output")
    if envelope.get("ok") is True and isinstance(output, dict) and isinstance(output.get("value"), dict):
        output["value"] = redigest(params.name, map_ids(output["value"], RECORD_KEYS, outer_record))
    return envelope


@variant("own-record-ids", freedom="record ids are copied exactly as returned; how a server mints them is its own")
def own_record_ids(seams: Seams) -> None:
    """record_id is this server's own: the reference's base32 reversed, so every record has another id."""
    ids_of_its_own(seams, _inner_records)
    seams.rewrites.append(_outer_records)


# -- page cursors ------------------------------------------------------------------------------------------------------


def outer_cursor(inner: str) -> str:
    """This server's cursor: the reference's sealed token reversed, with letter case swapped.

    It is exactly as long as the reference's, so a page the reference fits into max_packet_bytes still fits."""
    return inner[::-1].swapcase()


def inner_cursor(outer: str) -> str:
    """The reference's cursor behind one this server handed out (anything else stays unknown, and stale)."""
    return outer.swapcase()[::-1]


async def _inner_cursors(tool: str, arguments: Mapping[str, Any]) -> Mapping[str, Any]:
    if tool != SEARCH:
        return arguments
    mapped: Mapping[str, Any] = map_ids(arguments, frozenset({"page_cursor"}), inner_cursor)
    return mapped


def _outer_cursors(request: ServerRequestContext, params: Any, envelope: dict[str, Any]) -> dict[str, Any]:
    output = envelope.get("output")
    value = output.get("value") if isinstance(output, dict) else None
    if params.name == SEARCH and isinstance(value, dict) and isinstance(value.get("next_page_cursor"), str):
        value["next_page_cursor"] = outer_cursor(value["next_page_cursor"])
        redigest(SEARCH, value)
    return envelope


@variant("own-page-cursors", freedom="page_cursor is opaque, copied exactly as returned")
def own_page_cursors(seams: Seams) -> None:
    """next_page_cursor is this server's own token (the reference's, reversed and case-swapped)."""
    ids_of_its_own(seams, _inner_cursors)
    seams.rewrites.append(_outer_cursors)


# -- candidate ids -----------------------------------------------------------------------------------------------------


# What this server's schemas say of a candidate_id: any non-empty string up to a bound, nothing about its form.
OPAQUE_CANDIDATE: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": 256,
                                    "description": "A candidate's id, copied exactly as capture returned it."}
_CANDIDATE_KEY = hashlib.sha256(b"benign/opaque-candidate-ids/v1").digest()  # fixed, so a restart mints the same ids


def outer_candidate(inner: str) -> str:
    """This server's id for a candidate: 'cand-' and a UUID4-shaped keyed hash of the reference's id."""
    mac = hmac.new(_CANDIDATE_KEY, b"issued\0" + inner.encode(), hashlib.sha256).digest()
    return "cand-" + str(uuid.UUID(bytes=mac[:16], version=4))


def _never_issued(outer: str) -> str:
    """A reference id no candidate has, for an id this server never issued: the reference answers NOT_FOUND."""
    return "candidate_" + hmac.new(_CANDIDATE_KEY, b"unknown\0" + outer.encode("utf-8", "surrogatepass"),
                                   hashlib.sha256).hexdigest()


def _opaque_candidate_schema(schema: Any) -> Any:
    """The schema with every candidate_id property replaced by the opaque one."""
    schema = copy.deepcopy(schema)

    def visit(node: dict[str, Any]) -> None:
        props = node.get("properties")
        if isinstance(props, dict) and "candidate_id" in props:
            props["candidate_id"] = dict(OPAQUE_CANDIDATE)

    walk(schema, visit)
    return schema


class CandidateIds:
    """The two-way map, kept in a file beside the store: every server process on the store shares it, and a
    lookup costs one indexed read whether the id was issued or not (a cache would make unknown ids slower)."""

    def __init__(self, seams: Seams) -> None:
        self._ids = BesideTheStore(seams, ".candidate-ids",
                                   "CREATE TABLE IF NOT EXISTS ids (outer_id TEXT PRIMARY KEY, inner_id TEXT NOT NULL)")

    def issue(self, inner: str) -> str:
        outer = outer_candidate(inner)
        self._ids.write("INSERT OR IGNORE INTO ids (outer_id, inner_id) VALUES (?, ?)", (outer, inner))
        return outer

    def inner(self, outer: str) -> str | None:
        row = self._ids.row("SELECT inner_id FROM ids WHERE outer_id = ?", (outer,))
        return row[0] if row else None

    def translate(self, value: Any) -> Any:
        """The reference's id behind a value this server's schema accepts; anything else reaches the reference as
        sent and is refused there as it would be (a lone surrogate, an empty or overlong string, another type)."""
        if not isinstance(value, str) or not 1 <= len(value) <= OPAQUE_CANDIDATE["maxLength"] \
                or any(0xD800 <= ord(ch) <= 0xDFFF for ch in value):
            return value
        return self.inner(value) or _never_issued(value)

    def issued(self, tool: str, value: dict[str, Any] | None) -> None:
        """Replace the reference's candidate ids in a success value by this server's."""
        if tool == CAPTURE and value is not None and isinstance(value.get("candidate_id"), str):
            value["candidate_id"] = self.issue(value["candidate_id"])
        outcome = value.get("outcome") if tool == ADMIT and value is not None else None
        if isinstance(outcome, dict) and isinstance(outcome.get("candidate_id"), str):
            outcome["candidate_id"] = self.issue(outcome["candidate_id"])
            if outcome.get("status") == "pending_adjudication":  # this receipt covers the candidate's id (EMC-HP-047)
                outcome["transaction_receipt_digest"] = receipt_digest(
                    "admission-pending", {"candidate_id": outcome["candidate_id"], "cursor": outcome.get("cursor"),
                                          "decision_receipt_digest": outcome.get("decision_receipt_digest")})


@variant(
    "opaque-candidate-ids", freedom="candidate_id is opaque, copied exactly as returned; its form is the server's own"
)
def opaque_candidate_ids(seams: Seams) -> None:
    """candidate_id is 'cand-' and a UUID4-shaped keyed hash of the reference's id; schemas call it any string."""
    ids = CandidateIds(seams)

    async def inward(tool: str, arguments: Mapping[str, Any]) -> Mapping[str, Any]:
        if tool not in (ADMIT, WITHDRAW) or "candidate_id" not in arguments:
            return arguments
        return {**arguments, "candidate_id": await anyio.to_thread.run_sync(ids.translate, arguments["candidate_id"])}

    def outward(request: ServerRequestContext, params: Any, envelope: dict[str, Any]) -> dict[str, Any]:
        ids.issued(params.name, value_of(envelope))
        return envelope

    ids_of_its_own(seams, inward)
    seams.rewrites.append(outward)
    seams.retool(lambda name, tool: tool.model_copy(update={
        "input_schema": _opaque_candidate_schema(tool.input_schema),
        "output_schema": _opaque_candidate_schema(tool.output_schema) if tool.output_schema is not None else None}))
