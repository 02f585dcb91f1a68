"""Faulty variants: NOT_FOUND and the envelope. Each lets a refusal tell more than its constant text (that the
id exists in another scope, by its words or by its timing; the id asked for; an exception's text), or gets the
envelope itself wrong: isError left false, a text copy that drifts from structuredContent, NOT_FOUND flagged
retriable, one auditId for every call.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext

from engram_mcp.reference._envelope import Outcome, Refusal, tool_result
from engram_mcp.reference.server import CallContext
from tests.faulty.catalog import CONTRACT, LeakedOutcome, error_rewrite, exists_elsewhere, variant
from tests.variant_server import Seams, Served, Step

# -- NOT_FOUND ---------------------------------------------------------------------------------------------


@variant("not-found-tells-scope", breaks=["EMC-GET-003", "EMC-HOST-006"], caught_by=["not-found.get"], era="modern")
def not_found_tells_scope(seams: Seams) -> None:
    """NOT_FOUND for an id that exists in another scope says so in its message."""

    def change(request: ServerRequestContext, params: Any, envelope: dict[str, Any], error: dict[str, Any]) -> None:
        if error.get("code") == "NOT_FOUND" and exists_elsewhere(seams.server, request, params.name, params.arguments):
            error["message"] = "The requested item belongs to another workspace."

    error_rewrite(seams, change)


def _pause_if_elsewhere(reader: Any, caller: Any, table: str, column: str, ident: str) -> None:
    """A second lookup, in every other scope, that takes 25 ms longer when it finds the id."""
    found = reader.sql.execute(
        f"SELECT 1 FROM {table} WHERE {column} = ? AND NOT (tenant = ? AND workspace = ?) LIMIT 1",
        (ident, caller.tenant, caller.workspace),
    ).fetchone()
    if found is not None:
        time.sleep(0.025)


@variant("not-found-slower-elsewhere", breaks=["EMC-GET-003", "EMC-HOST-006"],
         caught_by=["not-found.timing-gross"], era="legacy")
def not_found_slower_elsewhere(seams: Seams) -> None:
    """NOT_FOUND takes 25 ms longer when the id exists in another scope (a second lookup before refusing)."""

    def slow_record(visible: Callable[..., Any]) -> Callable[..., Any]:
        def lookup(reader: Any, caller: Any, rid: str, now: Any) -> Any:
            try:
                return visible(reader, caller, rid, now)
            except Refusal:
                _pause_if_elsewhere(reader, caller, "records", "record_id", rid)
                raise

        return lookup

    def slow_candidate(candidate: Callable[..., Any]) -> Callable[..., Any]:
        def lookup(reader: Any, caller: Any, cid: str) -> Any:
            try:
                return candidate(reader, caller, cid)
            except Refusal:
                _pause_if_elsewhere(reader, caller, "candidates", "candidate_id", cid)
                raise

        return lookup

    seams.override("recall", "visible_record", slow_record)
    seams.override("lifecycle", "candidate", slow_candidate)


# -- the envelope --------------------------------------------------------------------------------------------


@variant("is-error-never-set", breaks=["EMC-ENV-005"], caught_by=["envelope.is-error"], era="modern")
def is_error_never_set(seams: Seams) -> None:
    """isError is left false on failure envelopes."""
    seams.render = lambda envelope: tool_result(envelope).model_copy(update={"is_error": False})


@variant("text-copy-drifts", breaks=["EMC-ENV-001"], caught_by=["envelope.structured-content"], era="legacy")
def text_copy_drifts(seams: Seams) -> None:
    """The text content is serialised before auditId is added, so it lacks it."""

    def render(envelope: dict[str, Any]) -> types.CallToolResult:
        early = {k: v for k, v in envelope.items() if k != "auditId"}
        return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(early))],
                                    structured_content=envelope, is_error=not envelope["ok"])

    seams.render = render


@variant("not-found-retriable", breaks=["EMC-ERR-002"], caught_by=["envelope.error-codes"], era="modern")
def not_found_retriable(seams: Seams) -> None:
    """NOT_FOUND is flagged retriable (as if it were eventual consistency)."""

    def change(request: Any, params: Any, envelope: dict[str, Any], error: dict[str, Any]) -> None:
        if error.get("code") == "NOT_FOUND":
            error["retriable"] = True

    error_rewrite(seams, change)


@variant("not-found-echoes-id", breaks=["EMC-ENV-006"], caught_by=["envelope.fixed-messages"], era="legacy")
def not_found_echoes_id(seams: Seams) -> None:
    """The NOT_FOUND message names the id that was asked for."""

    def change(request: Any, params: Any, envelope: dict[str, Any], error: dict[str, Any]) -> None:
        name = CONTRACT.tools[params.name].target if params.name in CONTRACT.tools else None
        ident = params.arguments.get(name) if isinstance(params.arguments, dict) and name else None
        if error.get("code") == "NOT_FOUND" and isinstance(ident, str):
            error["message"] = f"No such item: {ident}"

    error_rewrite(seams, change)


@variant("exception-text-leaks", breaks=["EMC-ENV-006"],
         caught_by=["envelope.fixed-messages", "envelope.no-reflection"],
         select=["envelope.fixed-messages", "envelope.no-reflection"], era="modern")
def exception_text_leaks(seams: Seams) -> None:
    """A page cursor that does not open raises in the engine, and the exception text becomes the STALE_PAGE message."""
    leaks: dict[str, str] = {}  # by auditId: the exception text the envelope will carry

    def strict_open(opener: Callable[[str], Any]) -> Callable[[str], Any]:
        def opened(token: str) -> Any:
            pinned = opener(token)
            if pinned is None:
                raise ValueError(f"page_cursor {token!r} could not be decoded: bad padding or signature")
            return pinned

        return opened

    def leaky_call(call: Callable[..., Outcome]) -> Callable[..., Outcome]:
        def leaky(tool: str, caller: Any, arguments: dict[str, Any], now: Any, hooks: Any = None) -> Outcome:
            try:
                return call(tool, caller, arguments, now, hooks)
            except ValueError as exc:
                return LeakedOutcome(code="STALE_PAGE", detail=str(exc))

        return leaky

    async def remember(call: CallContext, serve: Step) -> Served:
        result = await serve(call)
        if isinstance(result, LeakedOutcome):
            leaks[call.audit_id] = result.detail
        return result

    def change(request: Any, params: Any, envelope: dict[str, Any], error: dict[str, Any]) -> None:
        if envelope.get("auditId") in leaks:
            error["message"] = leaks.pop(envelope["auditId"])

    seams.override("cursors", "open", strict_open)
    seams.override("engine", "call", leaky_call)
    seams.around.append(remember)
    error_rewrite(seams, change)


@variant("audit-id-per-session", breaks=["EMC-ENV-002", "EMC-ENV-003"], caught_by=["envelope.audit-id"], era="legacy")
def audit_id_per_session(seams: Seams) -> None:
    """One auditId for every envelope the process sends, not one per call."""
    fixed = "audit_" + secrets.token_hex(16)

    def rewrite(request: Any, params: Any, envelope: dict[str, Any]) -> dict[str, Any]:
        envelope["auditId"] = fixed
        return envelope

    seams.rewrites.append(rewrite)
