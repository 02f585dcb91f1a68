"""Faulty targets: the reference server with one requirement broken, to prove that the harness notices.

    python tests/faulty/targets.py VARIANT --config SERVER_TOML   serve VARIANT over stdio
    python tests/faulty/targets.py --list                          the catalog, one JSON object a line

Each variant builds an ordinary ``ReferenceServer`` and then breaks it the way a
real implementation tends to go wrong: a lenient parser, a forgotten flag, a
cache that forget does not reach, a gate that trusts the client. Nothing in
``reference/`` knows about these faults. They are applied from here, by
wrapping or replacing methods of the one server instance (its engine, store,
oracle, confirmation gate and advertised tools) and, for the two MCP handlers
the low-level SDK server captured at construction, by a small subclass.

A variant names the requirements it breaks (each must end FAIL in the run's
footer, or WARN where all of them are SHOULDs) and the checks that must catch
it (at least one must end so), with the ``--select`` prefixes and the one
``--era`` that keep its run short: the era the fault lives in, or else one
chosen so that the catalog exercises both. ``run_variant`` and ``run_control``
run the real ``conformance`` command line and ``Judgement.verdict`` reads the
report; tests/test_faulty_targets.py and tools/kill_rate.py use them.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import json
import logging
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import jwt
import mcp_types as types
import uvicorn
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from engram_mcp.contract import binding as binding_module
from engram_mcp.contract import load, profile_digest
from engram_mcp.contract.binding import (
    CONFIRMATION_INPUT_KEY,
    HOST_BINDING_META_KEY,
    Binding,
    BindingRejected,
    StateRejected,
    check_retry,
    generate_host_key,
    is_approval,
    operation_target,
    supports_form_elicitation,
    verify_binding,
)
from engram_mcp.reference import _search as search_index
from engram_mcp.reference import _serve as reference_serve
from engram_mcp.reference import _server as reference_server
from engram_mcp.reference._config import load_config
from engram_mcp.reference._envelope import Outcome, Refusal, tool_result
from engram_mcp.reference._envelope import envelope as make_envelope
from engram_mcp.reference._http_deadlines import deadline_protocol
from engram_mcp.reference._journal import as_replay, intent, scope_of
from engram_mcp.reference._policy import AcceptAll, SecretScan
from engram_mcp.reference._ports import Scope, Sealed
from engram_mcp.reference._serve import run_stdio
from engram_mcp.reference._server import _UNKNOWN_TOOL, _UNTRUSTED, ReferenceServer, _protocol_error
from engram_mcp.reference._store import SqliteStore

CONTRACT = load()
SEARCH, GET, CAPTURE = "engram_memory_search", "engram_memory_get", "engram_memory_capture"
ADMIT, WITHDRAW, FORGET = "engram_memory_request_admission", "engram_memory_withdraw", "engram_memory_forget"
BUDGET_MAX = CONTRACT.limit("max_packet_bytes.max")
LIMIT_MAX = CONTRACT.limit("search.limit.max")
OPAQUE_MAX = CONTRACT.limit("opaque_ref.max_bytes")
APPROVAL = {"action": "accept", "content": {"confirm": True}}
# Host-owned names (contract §0 and the host profile): a lenient parser with a deny-list still refuses these.
HOST_OWNED = frozenset({
    "tenant", "workspace", "scope", "principal", "agent_id", "session", "credential", "auditId", "deadline",
    "cancellation", "confirmation", "confirmed", "elicitationRef", "trust", "decision", "status",
    "tenantId", "scope_ref", "agentId", "confirm", "request_state", "binding",
})


# -- the server the faults are applied to ---------------------------------------------------------------


Rewrite = Callable[[ServerRequestContext, types.CallToolRequestParams, dict[str, Any]], dict[str, Any]]
ListRewrite = Callable[[ServerRequestContext, types.ListToolsResult], types.ListToolsResult]
Intercept = Callable[[ServerRequestContext, types.CallToolRequestParams], Any]


@dataclass(frozen=True)
class LeakedOutcome(Outcome):
    """A refusal that carries the text of the exception behind it (only a faulty edge sends it)."""

    detail: str = ""


class FaultyServer(ReferenceServer):
    """The reference server, with seams on the two handlers the SDK server holds since construction.

    ``tools/call`` results pass through ``rewrites`` (envelope in, envelope out) and are
    rendered by ``render``; ``intercept`` may answer a call before the reference sees it;
    ``tools/list`` results pass through ``list_rewrites``. With none set it serves exactly
    what the reference serves."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.rewrites: list[Rewrite] = []
        self.list_rewrites: list[ListRewrite] = []
        self.intercept: Intercept | None = None
        self.render: Callable[[dict[str, Any]], types.CallToolResult] = tool_result
        self.leaks: dict[str, str] = {}  # auditId -> exception text, for LeakedOutcome

    async def _call_tool(self, ctx: ServerRequestContext, params: types.CallToolRequestParams) -> Any:
        if self.intercept is not None:
            early = await self.intercept(ctx, params)
            if early is not None:
                return early
        result = await super()._call_tool(ctx, params)
        if isinstance(result, types.CallToolResult) and (self.rewrites or self.render is not tool_result):
            envelope = copy.deepcopy(result.structured_content)
            for rewrite in self.rewrites:
                envelope = rewrite(ctx, params, envelope)
            result = self.render(envelope)
        return result

    async def _list_tools(
        self, ctx: ServerRequestContext, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        result = await super()._list_tools(ctx, params)
        for rewrite in self.list_rewrites:
            result = rewrite(ctx, result)
        return result


# -- the catalog -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    name: str
    breaks: tuple[str, ...]  # requirement ids the run's footer must judge FAIL
    caught_by: tuple[str, ...]  # check ids; at least one must end FAIL
    select: tuple[str, ...]  # --select prefixes for the run
    era: str  # --era for the run: the era whose code the fault sits in, else one picked to spread the load
    summary: str
    apply: Callable[[FaultyServer], None]
    expect: str = "FAIL"  # WARN where every broken requirement is a SHOULD: the run then rightly exits 0
    gap: str | None = None  # a known harness gap: the variant is expected to slip through
    configure: Callable[[Path], None] | None = None  # edits the run's copy of the configuration folder first
    transport: str = "stdio"  # "http": the variant is served over streamable HTTP behind the host bearer
    # A defect only a call sequence shows: exploration (explore.*) must catch it, and a full run with exploration
    # turned off (--explore 0) must not, which shows what exploration adds to the fixed checks.
    sequence_only: bool = False


VARIANTS: dict[str, Variant] = {}


def variant(
    name: str,
    *,
    breaks: list[str],
    caught_by: list[str],
    era: str,
    select: list[str] | None = None,
    expect: str = "FAIL",
    gap: str | None = None,
    configure: Callable[[Path], None] | None = None,
    transport: str = "stdio",
    sequence_only: bool = False,
) -> Callable[[Callable[[FaultyServer], None]], Callable[[FaultyServer], None]]:
    def register(apply: Callable[[FaultyServer], None]) -> Callable[[FaultyServer], None]:
        if name in VARIANTS:
            raise ValueError(f"variant {name} is defined twice")
        summary = (apply.__doc__ or "").strip().splitlines()[0]
        VARIANTS[name] = Variant(name, tuple(breaks), tuple(caught_by), tuple(select or caught_by), era, summary,
                                 apply, expect, gap, configure, transport, sequence_only)
        return apply

    return register


# -- what the faults share -------------------------------------------------------------------------------


def _at(node: Any, pointer: str) -> Any:
    for escaped in pointer.split("/")[1:] if pointer else []:
        part = escaped.replace("~1", "/").replace("~0", "~")
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def _opaque_names() -> frozenset[str]:
    """Property names whose schema is the contract's opaque reference, in any tool's arguments."""
    names: set[str] = set()

    def walk(node: Any, name: str | None = None) -> None:
        if isinstance(node, dict):
            if name and str(node.get("$ref", "")).endswith("/opaque_ref"):
                names.add(name)
            for key, value in node.items():
                if key == "properties" and isinstance(value, dict):
                    for prop, schema in value.items():
                        walk(schema, prop)
                else:
                    walk(value, name if key == "items" else None)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for tool in CONTRACT.tools:
        walk(CONTRACT.input_schema(tool))
    return frozenset(names)


def _named(pointer: str) -> str:
    """The last member name in a JSON Pointer (array indexes skipped)."""
    parts = [p for p in pointer.split("/")[1:] if not p.isdigit()]
    return parts[-1] if parts else ""


def _filter_verdicts(server: FaultyServer, forgive: Callable[[str, Any, Any], bool]) -> None:
    """Let the oracle forgive some violations: ``forgive(tool, arguments, violation)``."""
    oracle = server.oracle
    verdict = oracle.verdict

    def lenient(tool: str, arguments: Any, *, now: Any = None) -> Any:
        judged = verdict(tool, arguments, now=now)
        kept = [v for v in judged.violations if not forgive(tool, arguments, v)]
        return judged if len(kept) == len(judged.violations) else oracle._finish(kept)

    oracle.verdict = lenient  # type: ignore[method-assign]


def _claimed_purpose(tool: str, arguments: Any) -> Any:
    if not isinstance(arguments, dict):
        return None
    holder = arguments.get("payload") if tool == CAPTURE else arguments
    return holder.get("purpose_ref") if isinstance(holder, dict) else None


def _responses(params: types.CallToolRequestParams) -> dict[str, Any]:
    return {k: v.model_dump(by_alias=True, exclude_none=True) if hasattr(v, "model_dump") else v
            for k, v in (params.input_responses or {}).items()}


def _modern(ctx: ServerRequestContext) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def _can_elicit(ctx: ServerRequestContext) -> bool:
    """Whether the client declared form elicitation (the reference's own reading of its capabilities)."""
    capabilities = ctx.session.client_capabilities
    declared = capabilities.model_dump(by_alias=True, exclude_none=True) if capabilities is not None else None
    return supports_form_elicitation(declared, ctx.protocol_version)


def _error_rewrite(
    server: FaultyServer, change: Callable[[ServerRequestContext, Any, dict[str, Any], dict[str, Any]], None]
) -> None:
    """Rewrite failure envelopes: ``change(ctx, params, envelope, error)`` edits the error in place."""

    def rewrite(ctx: ServerRequestContext, params: Any, envelope: dict[str, Any]) -> dict[str, Any]:
        if envelope.get("ok") is False and isinstance(envelope.get("error"), dict):
            change(ctx, params, envelope, envelope["error"])
        return envelope

    server.rewrites.append(rewrite)


def _sqlite(server: FaultyServer) -> SqliteStore:
    """The faulty catalog runs on the embedded store; its raw SQL reaches past the port on purpose."""
    assert isinstance(server.store, SqliteStore)
    return server.store


def _exists_elsewhere(server: FaultyServer, ctx: ServerRequestContext, tool: str, arguments: Any) -> bool:
    """Whether the call's target id exists in a scope other than the bound one."""
    binding = server._trusted_binding(ctx)
    name = CONTRACT.tools[tool].target
    ident = arguments.get(name) if isinstance(arguments, dict) and name else None
    if binding is None or not isinstance(ident, str):
        return False
    table, column = ("records", "record_id") if name == "record_id" else ("candidates", "candidate_id")
    with _sqlite(server).read() as db:
        return db.execute(
            f"SELECT 1 FROM {table} WHERE {column} = ? AND NOT (tenant = ? AND workspace = ?) LIMIT 1",
            (ident, binding.tenant, binding.workspace),
        ).fetchone() is not None


def _wrap_operation(
    server: FaultyServer, tool: str, make: Callable[[Callable[..., dict[str, Any]]], Callable[..., dict[str, Any]]]
) -> None:
    """Replace one engine operation; the engine dispatches through a table built at construction."""
    operations = server.engine._operations
    operations[tool] = make(operations[tool])


# -- arguments -------------------------------------------------------------------------------------------


@variant("extra-field-ignored", breaks=["EMC-HOST-002"],
         caught_by=["arguments.unknown-members", "arguments.schemathesis-negative"], era="modern")
def extra_field_ignored(server: FaultyServer) -> None:
    """Unknown argument members are ignored, not refused (a deny-list still stops host-owned names)."""

    def forgive(tool: str, arguments: Any, violation: Any) -> bool:
        if violation.rule != "closed_schema":
            return False
        try:
            holder = _at(arguments, violation.path)
        except (KeyError, IndexError, TypeError, ValueError):
            return False
        return isinstance(holder, dict) and not (set(holder) & HOST_OWNED)

    _filter_verdicts(server, forgive)


@variant("null-optional-tolerated", breaks=["EMC-HOST-003"], caught_by=["arguments.null"], era="legacy")
def null_optional_tolerated(server: FaultyServer) -> None:
    """null for an optional top-level argument is read as 'left out' (Optional[...] = None)."""
    guarded = server._guarded_call

    async def tolerant(ctx: Any, params: types.CallToolRequestParams, tool: str, binding: Any, audit_id: str) -> Any:
        arguments = params.arguments
        if isinstance(arguments, dict):
            required = set(CONTRACT.input_schema(tool).get("required", []))
            kept = {k: v for k, v in arguments.items() if v is not None or k in required}
            params = params.model_copy(update={"arguments": kept})
        return await guarded(ctx, params, tool, binding, audit_id)

    server._guarded_call = tolerant  # type: ignore[method-assign]


@variant("opaque-ref-counts-characters", breaks=["EMC-ENC-001"], caught_by=["arguments.utf8-boundaries"], era="modern")
def opaque_ref_counts_characters(server: FaultyServer) -> None:
    """Opaque references are bounded in characters, not UTF-8 bytes (200 x U+20AC = 600 bytes passes)."""
    opaque = _opaque_names()

    def forgive(tool: str, arguments: Any, violation: Any) -> bool:
        if violation.rule != "utf8_bytes" or _named(violation.path) not in opaque:
            return False
        try:
            value = _at(arguments, violation.path)
        except (KeyError, IndexError, TypeError, ValueError):
            return False
        return isinstance(value, str) and 1 <= len(value) <= OPAQUE_MAX

    _filter_verdicts(server, forgive)


@variant("idempotency-key-15-bytes", breaks=["EMC-IDEM-002"], caught_by=["idempotency.key-bounds"], era="legacy")
def idempotency_key_15_bytes(server: FaultyServer) -> None:
    """An idempotency key of 15 bytes is accepted (an off-by-one in the lower bound)."""

    def forgive(tool: str, arguments: Any, violation: Any) -> bool:
        if violation.rule != "utf8_bytes" or violation.path != "/idempotency_key":
            return False
        key = arguments.get("idempotency_key") if isinstance(arguments, dict) else None
        return isinstance(key, str) and len(key.encode("utf-8", "surrogatepass")) == 15

    _filter_verdicts(server, forgive)


# -- NOT_FOUND ---------------------------------------------------------------------------------------------


@variant("not-found-tells-scope", breaks=["EMC-GET-003", "EMC-HOST-006"], caught_by=["not-found.get"], era="modern")
def not_found_tells_scope(server: FaultyServer) -> None:
    """NOT_FOUND for an id that exists in another scope says so in its message."""

    def change(ctx: Any, params: Any, envelope: dict[str, Any], error: dict[str, Any]) -> None:
        if error.get("code") == "NOT_FOUND" and _exists_elsewhere(server, ctx, params.name, params.arguments):
            error["message"] = "The requested item belongs to another workspace."

    _error_rewrite(server, change)


@variant("not-found-slower-elsewhere", breaks=["EMC-GET-003", "EMC-HOST-006"],
         caught_by=["not-found.timing-gross"], era="legacy")
def not_found_slower_elsewhere(server: FaultyServer) -> None:
    """NOT_FOUND takes 25 ms longer when the id exists in another scope (a second lookup before refusing)."""
    engine = server.engine
    visible, candidate = engine.recall.visible_record, engine.lifecycle.candidate

    def elsewhere(reader: Any, caller: Any, table: str, column: str, ident: str) -> None:
        found = reader.sql.execute(
            f"SELECT 1 FROM {table} WHERE {column} = ? AND NOT (tenant = ? AND workspace = ?) LIMIT 1",
            (ident, caller.tenant, caller.workspace),
        ).fetchone()
        if found is not None:
            time.sleep(0.025)

    def slow_record(reader: Any, caller: Any, rid: str, now: Any) -> Any:
        try:
            return visible(reader, caller, rid, now)
        except Refusal:
            elsewhere(reader, caller, "records", "record_id", rid)
            raise

    def slow_candidate(reader: Any, caller: Any, cid: str) -> Any:
        try:
            return candidate(reader, caller, cid)
        except Refusal:
            elsewhere(reader, caller, "candidates", "candidate_id", cid)
            raise

    engine.recall.visible_record = slow_record  # type: ignore[method-assign]
    engine.lifecycle.candidate = slow_candidate  # type: ignore[method-assign]


# -- the envelope --------------------------------------------------------------------------------------------


@variant("is-error-never-set", breaks=["EMC-ENV-005"], caught_by=["envelope.is-error"], era="modern")
def is_error_never_set(server: FaultyServer) -> None:
    """isError is left false on failure envelopes."""
    server.render = lambda envelope: tool_result(envelope).model_copy(update={"is_error": False})


@variant("text-copy-drifts", breaks=["EMC-ENV-001"], caught_by=["envelope.structured-content"], era="legacy")
def text_copy_drifts(server: FaultyServer) -> None:
    """The text content is serialised before auditId is added, so it lacks it."""

    def render(envelope: dict[str, Any]) -> types.CallToolResult:
        early = {k: v for k, v in envelope.items() if k != "auditId"}
        return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(early))],
                                    structured_content=envelope, is_error=not envelope["ok"])

    server.render = render


@variant("not-found-retriable", breaks=["EMC-ERR-002"], caught_by=["envelope.error-codes"], era="modern")
def not_found_retriable(server: FaultyServer) -> None:
    """NOT_FOUND is flagged retriable (as if it were eventual consistency)."""

    def change(ctx: Any, params: Any, envelope: dict[str, Any], error: dict[str, Any]) -> None:
        if error.get("code") == "NOT_FOUND":
            error["retriable"] = True

    _error_rewrite(server, change)


@variant("not-found-echoes-id", breaks=["EMC-ENV-006"], caught_by=["envelope.fixed-messages"], era="legacy")
def not_found_echoes_id(server: FaultyServer) -> None:
    """The NOT_FOUND message names the id that was asked for."""

    def change(ctx: Any, params: Any, envelope: dict[str, Any], error: dict[str, Any]) -> None:
        name = CONTRACT.tools[params.name].target if params.name in CONTRACT.tools else None
        ident = params.arguments.get(name) if isinstance(params.arguments, dict) and name else None
        if error.get("code") == "NOT_FOUND" and isinstance(ident, str):
            error["message"] = f"No such item: {ident}"

    _error_rewrite(server, change)


@variant("exception-text-leaks", breaks=["EMC-ENV-006"],
         caught_by=["envelope.fixed-messages", "envelope.no-reflection"],
         select=["envelope.fixed-messages", "envelope.no-reflection"], era="modern")
def exception_text_leaks(server: FaultyServer) -> None:
    """A page cursor that does not open raises in the engine, and the exception text becomes the STALE_PAGE message."""
    engine = server.engine
    opener = engine.recall.cursors.open
    call = engine.call
    guarded = server._guarded_call

    def strict_open(token: str) -> Any:
        pinned = opener(token)
        if pinned is None:
            raise ValueError(f"page_cursor {token!r} could not be decoded: bad padding or signature")
        return pinned

    def leaky_call(tool: str, caller: Any, arguments: dict[str, Any], now: Any, audit: Any = None,
                   guard: Any = None) -> Outcome:
        try:
            return call(tool, caller, arguments, now, audit, guard)
        except ValueError as exc:
            return LeakedOutcome(code="STALE_PAGE", detail=str(exc))

    async def remember(ctx: Any, params: Any, tool: str, binding: Any, audit_id: str) -> Any:
        result = await guarded(ctx, params, tool, binding, audit_id)
        if isinstance(result, LeakedOutcome):
            server.leaks[audit_id] = result.detail
        return result

    def change(ctx: Any, params: Any, envelope: dict[str, Any], error: dict[str, Any]) -> None:
        if envelope.get("auditId") in server.leaks:
            error["message"] = server.leaks.pop(envelope["auditId"])

    engine.recall.cursors.open = strict_open  # type: ignore[method-assign]
    engine.call = leaky_call  # type: ignore[method-assign]
    server._guarded_call = remember  # type: ignore[method-assign]
    _error_rewrite(server, change)


@variant("audit-id-per-session", breaks=["EMC-ENV-002", "EMC-ENV-003"], caught_by=["envelope.audit-id"], era="legacy")
def audit_id_per_session(server: FaultyServer) -> None:
    """One auditId for every envelope the process sends, not one per call."""
    fixed = "audit_" + secrets.token_hex(16)

    def rewrite(ctx: Any, params: Any, envelope: dict[str, Any]) -> dict[str, Any]:
        envelope["auditId"] = fixed
        return envelope

    server.rewrites.append(rewrite)


# -- idempotency -------------------------------------------------------------------------------------------


@variant("capture-replay-new-candidate", breaks=["EMC-IDEM-005"],
         caught_by=["idempotency.capture-replay"], era="modern")
def capture_replay_new_candidate(server: FaultyServer) -> None:
    """A repeated capture under the same key and content is stored again as a new candidate."""
    engine = server.engine
    reserved = engine.lifecycle.replay_of

    def no_capture_replay(db: Any, tool: str, caller: Any, arguments: dict[str, Any]) -> Any:
        value = reserved(db, tool, caller, arguments)
        return None if tool == CAPTURE and value is not None else value

    def make(capture: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def recapture(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            with engine.store.snapshot() as reader:
                seen = reserved(reader, CAPTURE, caller, args) is not None
            if seen:  # the key is taken, so the store derives a fresh one
                args = {**args, "idempotency_key": f"{args['idempotency_key']}#{secrets.token_hex(4)}"}
            return capture(caller, args, now)

        return recapture

    engine.lifecycle.replay_of = no_capture_replay  # type: ignore[method-assign,assignment]
    _wrap_operation(server, CAPTURE, make)


@variant("reused-key-other-content-replays", breaks=["EMC-IDEM-007"],
         caught_by=["idempotency.digest-conflict"], era="legacy")
def reused_key_other_content_replays(server: FaultyServer) -> None:
    """A key reused for other content, target or tool replays the first result instead of DIGEST_CONFLICT."""
    engine = server.engine
    reserved = engine.lifecycle.replay_of

    def key_only(db: Any, tool: str, caller: Any, arguments: dict[str, Any]) -> Any:
        try:
            return reserved(db, tool, caller, arguments)
        except Refusal as refusal:
            if refusal.code != "DIGEST_CONFLICT":
                raise
        found = db.reservation(scope_of(caller), caller.principal, arguments["idempotency_key"])
        return as_replay(tool, found.value)

    engine.lifecycle.replay_of = key_only  # type: ignore[method-assign,assignment]


@variant("keys-shared-by-principals", breaks=["EMC-IDEM-004", "EMC-HP-048"],
         caught_by=["idempotency.per-principal"], era="modern")
def keys_shared_by_principals(server: FaultyServer) -> None:
    """Idempotency keys are looked up per scope, not per principal: another principal's key conflicts."""
    engine = server.engine

    def per_scope(db: Any, tool: str, caller: Any, arguments: dict[str, Any]) -> Any:
        row = db.sql.execute("SELECT intent, value FROM reservations WHERE tenant = ? AND workspace = ? "
                         "AND idempotency_key = ? ORDER BY rowid LIMIT 1",
                         (caller.tenant, caller.workspace, arguments["idempotency_key"])).fetchone()
        if row is None:
            return None
        if row["intent"] != intent(tool, arguments, caller):
            raise Refusal("DIGEST_CONFLICT")
        return as_replay(tool, json.loads(row["value"]))

    engine.lifecycle.replay_of = per_scope  # type: ignore[method-assign,assignment]


@variant("replay-not-marked", breaks=["EMC-IDEM-006"], caught_by=["idempotency.mutation-replay"], era="legacy")
def replay_not_marked(server: FaultyServer) -> None:
    """A replayed admission, withdraw or forget returns the stored result verbatim, replayed still false."""
    engine = server.engine
    reserved = engine.lifecycle.replay_of

    def verbatim(db: Any, tool: str, caller: Any, arguments: dict[str, Any]) -> Any:
        value = reserved(db, tool, caller, arguments)
        return {**value, "replayed": False} if isinstance(value, dict) and "replayed" in value else value

    engine.lifecycle.replay_of = verbatim  # type: ignore[method-assign,assignment]


# -- confirmation gates ---------------------------------------------------------------------------------------


@variant("legacy-gate-auto-approves", breaks=["EMC-GATE-001"], caught_by=["gate.refusal", "gate.approval-runs"],
         era="legacy")
def legacy_gate_auto_approves(server: FaultyServer) -> None:
    """In the legacy era the gate approves without sending an elicitation."""
    confirm = server._confirm

    async def auto(ctx: Any, params: Any, tool: str, binding: Any, arguments: Any, ttl: int) -> Any:
        if _modern(ctx):
            return await confirm(ctx, params, tool, binding, arguments, ttl)
        return time.time()

    server._confirm = auto  # type: ignore[method-assign]


@variant("modern-gate-ignores-answer", breaks=["EMC-GATE-001", "EMC-HP-029"], caught_by=["gate.refusal"], era="modern")
def modern_gate_ignores_answer(server: FaultyServer) -> None:
    """In the 2026-07-28 era a retry with a valid state is approved whatever the answer says."""
    confirm = server._confirm

    async def deaf(
        ctx: Any, params: types.CallToolRequestParams, tool: str, binding: Any, arguments: Any, ttl: int
    ) -> Any:
        if _modern(ctx) and params.input_responses is not None:
            params = params.model_copy(update={"input_responses": {CONFIRMATION_INPUT_KEY: APPROVAL}})
        return await confirm(ctx, params, tool, binding, arguments, ttl)

    server._confirm = deaf  # type: ignore[method-assign]


@variant("state-not-bound-to-target", breaks=["EMC-GATE-003", "EMC-HP-027"],
         caught_by=["gate.state-for-another-operation"], era="modern")
def state_not_bound_to_target(server: FaultyServer) -> None:
    """A request state is checked for tool, principal, scope, session and expiry, but not its target or arguments."""
    confirm = server._confirm

    async def loose(
        ctx: Any, params: types.CallToolRequestParams, tool: str, binding: Any, arguments: Any, ttl: int
    ) -> Any:
        if not (_modern(ctx) and params.request_state is not None):
            return await confirm(ctx, params, tool, binding, arguments, ttl)
        try:
            state = server.sealer.open_state(params.request_state)
        except StateRejected:
            return None
        bound = (state.capability, state.principal, state.tenant, state.workspace, state.session)
        if time.time() >= state.expires_at or bound != (tool, binding.principal, binding.tenant, binding.workspace,
                                                        binding.session):
            return None
        if not await anyio.to_thread.run_sync(server.engine.consume_state, state.nonce):
            return None
        return time.time() if is_approval(_responses(params).get(CONFIRMATION_INPUT_KEY)) else None

    server._confirm = loose  # type: ignore[method-assign]


@variant("answer-without-state", breaks=["EMC-HP-026"], caught_by=["gate.forged-state"], era="modern")
def answer_without_state(server: FaultyServer) -> None:
    """A 2026-07-28 retry carrying an approving answer but no request_state is approved."""
    confirm = server._confirm

    async def trusting(
        ctx: Any, params: types.CallToolRequestParams, tool: str, binding: Any, arguments: Any, ttl: int
    ) -> Any:
        if _modern(ctx) and params.request_state is None and params.input_responses is not None:
            return time.time() if is_approval(_responses(params).get(CONFIRMATION_INPUT_KEY)) else None
        return await confirm(ctx, params, tool, binding, arguments, ttl)

    server._confirm = trusting  # type: ignore[method-assign]


@variant("state-reusable", breaks=["EMC-HP-038"], caught_by=["gate.reused-state"], era="modern")
def state_reusable(server: FaultyServer) -> None:
    """Request states are never burnt: a declined state can be answered again."""
    def reusable(nonce: str, now: datetime | None = None) -> bool:
        return True

    server.engine.consume_state = reusable  # type: ignore[method-assign]


@variant("state-never-expires", breaks=["EMC-GATE-004"], caught_by=["gate.unanswered"], era="modern")
def state_never_expires(server: FaultyServer) -> None:
    """A request state answered after its TTL is still honoured (expiry is judged at the state's issue time)."""
    confirm = server._confirm

    async def ageless(
        ctx: Any, params: types.CallToolRequestParams, tool: str, binding: Any, arguments: Any, ttl: int
    ) -> Any:
        if not (_modern(ctx) and params.request_state is not None):
            return await confirm(ctx, params, tool, binding, arguments, ttl)
        try:
            issued = server.sealer.open_state(params.request_state).issued_at
        except StateRejected:
            return None
        verdict = check_retry(server.sealer, request_state=params.request_state, input_responses=_responses(params),
                              tool=tool, target=operation_target(tool, arguments), arguments=arguments,
                              binding=binding, now=issued)
        if verdict.consume is not None and not await anyio.to_thread.run_sync(
            server.engine.consume_state, verdict.consume
        ):
            return None
        return time.time() if verdict.approved else None

    server._confirm = ageless  # type: ignore[method-assign]


@variant("no-elicitation-runs-unconfirmed", breaks=["EMC-GATE-008"],
         caught_by=["gate.no-confirmation-channel"], era="legacy")
def no_elicitation_runs_unconfirmed(server: FaultyServer) -> None:
    """A client that declared no elicitation capability gets its gated calls run without confirmation."""
    confirm = server._confirm

    async def skip(ctx: Any, params: Any, tool: str, binding: Any, arguments: Any, ttl: int) -> Any:
        if not _can_elicit(ctx):
            return time.time()
        return await confirm(ctx, params, tool, binding, arguments, ttl)

    server._confirm = skip  # type: ignore[method-assign]


# -- host-reference confirmation ------------------------------------------------------------------------------


@variant("reference-window-from-receipt", breaks=["EMC-GATE-005", "EMC-HP-066"],
         caught_by=["confirmation-ref.execution-window"], era="legacy")
def reference_window_from_receipt(server: FaultyServer) -> None:
    """The 30 s execution window runs from when the reference arrived, not from the host's approval."""
    judge = server._confirm_reference

    async def on_arrival(token: Any, tool: str, binding: Any, arguments: Any) -> Any:
        approved_at = await judge(token, tool, binding, arguments)
        return None if approved_at is None else time.time()

    server._confirm_reference = on_arrival  # type: ignore[method-assign]


@variant("reference-replayable", breaks=["EMC-HP-065"],
         caught_by=["confirmation-ref.reused-id", "confirmation-ref.reused-token"],
         era="modern")
def reference_replayable(server: FaultyServer) -> None:
    """Reference ids are never recorded: a spent reference, or its id under a new signature, confirms again."""
    consume = server.engine.consume_state
    server.engine.consume_state = lambda nonce, now=None: True if nonce.startswith("ref:") else consume(nonce, now)  # type: ignore[method-assign]


@variant("reference-not-bound-to-target", breaks=["EMC-GATE-003"], caught_by=["confirmation-ref.other-operation"],
         era="modern")
def reference_not_bound_to_target(server: FaultyServer) -> None:
    """A reference is checked for its signature, expiry, window, capability and id, but not its target or digest."""

    async def loose(token: Any, tool: str, binding: Any, arguments: Any) -> Any:
        try:
            claims, _ = binding_module._signed_claims(
                token, server.config.trusted_keys, binding_module.REFERENCE_TOKEN_TYPE
            )
        except BindingRejected:
            return None
        if claims.get("capability") != tool or time.time() >= claims.get("exp", 0):
            return None
        spent = binding_module.reference_consume_id(binding_module.host_kid(token), str(claims.get("jti")))
        return claims.get("approved_at") if await anyio.to_thread.run_sync(server.engine.consume_state, spent) else None

    server._confirm_reference = loose  # type: ignore[method-assign]


@variant("reference-missing-runs-unconfirmed", breaks=["EMC-GATE-008", "EMC-HP-067"],
         caught_by=["confirmation-ref.missing"], era="legacy")
def reference_missing_runs_unconfirmed(server: FaultyServer) -> None:
    """A gated call with no reference, from a client that cannot be asked either, runs unconfirmed."""
    gate = server._gate

    async def lenient(ctx: Any, params: Any, tool: str, binding: Any, arguments: Any, ttl: int) -> Any:
        if binding_module.CONFIRMATION_REF_META_KEY not in (ctx.meta or {}) and not _can_elicit(ctx):
            return time.time()
        return await gate(ctx, params, tool, binding, arguments, ttl)

    server._gate = lenient  # type: ignore[method-assign]


@variant("reference-ignored-server-asks", breaks=["EMC-HP-061"], caught_by=["confirmation-ref.approval-runs"],
         era="legacy")
def reference_ignored_server_asks(server: FaultyServer) -> None:
    """A carried reference is ignored: the server asks the client by elicitation anyway."""
    confirm = server._confirm

    async def asks(ctx: Any, params: Any, tool: str, binding: Any, arguments: Any, ttl: int) -> Any:
        return await confirm(ctx, params, tool, binding, arguments, ttl)

    server._gate = asks  # type: ignore[method-assign]


@variant("reference-signature-unchecked", breaks=["EMC-GATE-001", "EMC-HP-062"], caught_by=["confirmation-ref.forged"],
         era="modern")
def reference_signature_unchecked(server: FaultyServer) -> None:
    """A reference whose signature does not verify, or whose key is unknown, is read anyway."""
    strict = binding_module._signed_claims

    def unchecked(token: str, trusted: Any, token_type: str) -> Any:
        try:
            return strict(token, trusted, token_type)
        except BindingRejected as rejected:
            unsigned = rejected.reason in ("bad_signature", "untrusted_key")
            if token_type != binding_module.REFERENCE_TOKEN_TYPE or not unsigned:
                raise
            claims = jwt.decode(token, options={"verify_signature": False})
            return claims, binding_module.TrustedHost(generate_host_key()[1], _Everything(), _Everything())

    binding_module._signed_claims = unchecked  # type: ignore[assignment]


@variant("reference-expiry-unchecked", breaks=["EMC-GATE-004"], caught_by=["confirmation-ref.expired"], era="legacy")
def reference_expiry_unchecked(server: FaultyServer) -> None:
    """A reference is judged at its approval time, so its exp never passes."""

    async def ageless(token: Any, tool: str, binding: Any, arguments: Any) -> Any:
        try:
            approved_at = float(jwt.decode(token, options={"verify_signature": False})["approved_at"])
        except (jwt.PyJWTError, KeyError, TypeError, ValueError):
            return None
        verdict = binding_module.check_reference(
            token, server.config.trusted_keys, audience=server.config.audience, tool=tool,
            target=operation_target(tool, arguments), arguments=arguments, binding=binding, now=approved_at)
        if not verdict.approved or verdict.consume is None:
            return None
        if not await anyio.to_thread.run_sync(server.engine.consume_state, verdict.consume):
            return None
        return verdict.approved_at

    server._confirm_reference = ageless  # type: ignore[method-assign]


@variant("reference-policy-gate-unbound", breaks=["EMC-GATE-002"], caught_by=["confirmation-ref.policy-gated"],
         era="modern")
def reference_policy_gate_unbound(server: FaultyServer) -> None:
    """For policy-gated capture and admission any signed reference of the host passes, whatever call it names."""
    judge = server._confirm_reference

    async def lax(token: Any, tool: str, binding: Any, arguments: Any) -> Any:
        if tool not in (CAPTURE, ADMIT):
            return await judge(token, tool, binding, arguments)
        try:
            binding_module._signed_claims(token, server.config.trusted_keys, binding_module.REFERENCE_TOKEN_TYPE)
        except BindingRejected:
            return None
        return time.time()

    server._confirm_reference = lax  # type: ignore[method-assign]


@variant("reference-ttl-ceiling-ignored", breaks=["EMC-GATE-004", "EMC-HP-063"],
         caught_by=["confirmation-ref.ttl-ceiling"], era="legacy")
def reference_ttl_ceiling_ignored(server: FaultyServer) -> None:
    """A reference is honoured until its exp however far after the approval the host put it."""
    unbounded = 10**9
    binding_module.CONFIRMATION_TTL_MAX = unbounded
    server.config = dataclasses.replace(server.config, confirmation=dataclasses.replace(
        server.config.confirmation, reference_ttl_seconds=unbounded))


# -- lifecycle and visibility ------------------------------------------------------------------------------------


@variant("pending-visible-in-search", breaks=["EMC-LIFE-001"], caught_by=["search.only-current"], era="modern")
def pending_visible_in_search(server: FaultyServer) -> None:
    """Search also matches pending candidates (indexed at capture, not at admission)."""
    engine = server.engine

    def make(search: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def with_pending(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            value = search(caller, args, now)
            if "page_cursor" in args:
                return value
            wanted = set(search_index.query_tokens(args["query"]))
            scope = scope_of(caller)
            with _sqlite(server).read() as db:
                rows = db.execute("SELECT * FROM candidates WHERE tenant = ? AND workspace = ? AND state = 'pending' "
                                  "ORDER BY created_cursor", (caller.tenant, caller.workspace)).fetchall()
            records = list(value["records"])
            for row in rows:
                opened = json.loads(engine.cipher.open(Sealed(row["ciphertext"], row["wrapped_key"]), scope=scope,
                                                       candidate_id=row["candidate_id"]))
                record = opened["record"]
                words = set(search_index.query_tokens(" ".join(search_index.field_texts(record))))
                if wanted & words:
                    rank = len(records) + 1
                    records.append({**engine.recall.packet_of(record),
                                    "score": search_index.fused_score(rank), "rank": rank})
            if len(records) == len(value["records"]):
                return value
            value = {k: v for k, v in value.items() if k != "response_digest"}
            value["records"] = records
            value["response_digest"] = profile_digest("search-response", value)
            return value

        return with_pending

    _wrap_operation(server, SEARCH, make)


@variant("get-cache-outlives-forget", breaks=["EMC-FGT-002"], caught_by=["lifecycle.forget"], era="legacy")
def get_cache_outlives_forget(server: FaultyServer) -> None:
    """get serves from a read cache that forget does not invalidate."""
    cache: dict[tuple[str, str, str], dict[str, Any]] = {}

    def make(get: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def cached(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            key = (caller.tenant, caller.workspace, args["record_id"])
            try:
                value = get(caller, args, now)
            except Refusal as refusal:
                if refusal.code == "NOT_FOUND" and key in cache:
                    return cache[key]
                raise
            cache[key] = value
            return value

        return cached

    _wrap_operation(server, GET, make)


@variant("forget-search-keeps-serving", breaks=["EMC-FGT-002"], caught_by=["lifecycle.forget"], era="modern")
def forget_search_keeps_serving(server: FaultyServer) -> None:
    """forget answers `projection_invalidation: "complete"`, yet search keeps serving the record it returned before."""
    served: dict[tuple[str, str, str], dict[str, Any]] = {}  # (tenant, workspace, record_id) -> last packet served
    forgotten: set[tuple[str, str, str]] = set()

    def remember(search: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def stale(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            value = search(caller, args, now)
            scope = (caller.tenant, caller.workspace)
            for packet in value["records"]:
                served[(*scope, packet["record"]["record_id"])] = packet
            ghosts = [served[key] for key in sorted(forgotten) if key[:2] == scope and key in served]
            if not ghosts:
                return value
            records = [*value["records"], *ghosts][: args.get("limit", 10)]
            records = [{**packet, "rank": rank} for rank, packet in enumerate(records, start=1)]
            value = {k: v for k, v in value.items() if k != "response_digest"} | {"records": records}
            return value | {"response_digest": profile_digest("search-response", value)}

        return stale

    def note(forget: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def noting(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            value = forget(caller, args, now)
            forgotten.add((caller.tenant, caller.workspace, args["record_id"]))
            return value

        return noting

    _wrap_operation(server, SEARCH, remember)
    _wrap_operation(server, FORGET, note)


@variant("forget-keeps-no-tombstone", breaks=["EMC-ADM-007"],
         caught_by=["lifecycle.forgotten-content-adjudicated"], era="modern")
def forget_keeps_no_tombstone(server: FaultyServer) -> None:
    """Forget drops the tombstone digest, so re-captured forgotten content is accepted silently."""

    def make(forget: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def forgetful(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            value = forget(caller, args, now)
            with _sqlite(server).write() as db:
                db.execute("DELETE FROM tombstones WHERE tenant = ? AND workspace = ? AND payload_digest IN "
                           "(SELECT payload_digest FROM records WHERE tenant = ? AND workspace = ? AND record_id = ?)",
                           (caller.tenant, caller.workspace, caller.tenant, caller.workspace, args["record_id"]))
            return value

        return forgetful

    _wrap_operation(server, FORGET, make)


_TOMBSTONED_CANDIDATE: ContextVar[bool] = ContextVar("tombstoned_candidate", default=False)


class _HoldsForgottenContent:
    """An admission policy that turns every decision on forgotten content into adjudication, rejections too."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.policy_id, self.policy_version = inner.policy_id, inner.policy_version

    def decide(self, candidate: Any) -> Any:
        decided = self.inner.decide(candidate)
        return dataclasses.replace(decided, decision="adjudicate") if _TOMBSTONED_CANDIDATE.get() else decided


@variant("rejection-turned-adjudication", breaks=["EMC-ADM-008"], caught_by=["lifecycle.forgotten-content-rejected"],
         era="modern")
def rejection_turned_adjudication(server: FaultyServer) -> None:
    """Content equal to a forgotten record is held for adjudication whatever the policy decided, a rejection too."""
    lifecycle = server.engine.lifecycle
    policy_for = lifecycle.policy_for
    lifecycle.policy_for = lambda scope: dataclasses.replace(policy_for(scope),
                                                             admission=_HoldsForgottenContent(policy_for(scope).admission))

    def make(admit: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def holding(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            with _sqlite(server).read() as db:
                tombstoned = db.execute(
                    "SELECT 1 FROM candidates c JOIN tombstones t ON t.tenant = c.tenant AND t.workspace = c.workspace "
                    "AND t.payload_digest = c.payload_digest WHERE c.tenant = ? AND c.workspace = ? "
                    "AND c.candidate_id = ?", (caller.tenant, caller.workspace, args["candidate_id"])).fetchone()
            token = _TOMBSTONED_CANDIDATE.set(tombstoned is not None)
            try:
                return admit(caller, args, now)
            finally:
                _TOMBSTONED_CANDIDATE.reset(token)

        return holding

    _wrap_operation(server, ADMIT, make)


@variant("withdraw-accepted-allowed", breaks=["EMC-LIFE-006"], caught_by=["lifecycle.withdraw-accepted"], era="legacy")
def withdraw_accepted_allowed(server: FaultyServer) -> None:
    """Withdraw of an accepted candidate succeeds instead of ILLEGAL_TRANSITION."""

    def make(withdraw: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def lenient(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            try:
                return withdraw(caller, args, now)
            except Refusal as refusal:
                if refusal.code != "ILLEGAL_TRANSITION":
                    raise
            with _sqlite(server).write() as db:
                db.execute(
                    "UPDATE candidates SET state = 'pending' WHERE tenant = ? AND workspace = ? AND candidate_id = ?",
                    (caller.tenant, caller.workspace, args["candidate_id"]),
                )
            return withdraw(caller, args, now)

        return lenient

    _wrap_operation(server, WITHDRAW, make)


@variant("search-crosses-scopes", breaks=["EMC-HOST-005"], caught_by=["lifecycle.tenant-isolation"], era="modern")
def search_crosses_scopes(server: FaultyServer) -> None:
    """Search ranks the records of every scope in the store, not only the bound one."""
    recall = server.engine.recall
    ranked = recall.ranked

    def everywhere(reader: Any, scope: Scope, query: str, valid_as_of: int) -> list[str]:
        scopes = [scope] + [Scope(r["tenant"], r["workspace"]) for r in reader.sql.execute(
            "SELECT DISTINCT tenant, workspace FROM records") if Scope(r["tenant"], r["workspace"]) != scope]
        return [rid for s in scopes for rid in ranked(reader, s, query, valid_as_of)]

    def in_any_scope(reader: Any, caller: Any, rid: str) -> Any:
        row = reader.sql.execute("SELECT tenant, workspace FROM records WHERE record_id = ?", (rid,)).fetchone()
        return reader.record(Scope(row["tenant"], row["workspace"]), rid)

    recall.ranked = everywhere  # type: ignore[method-assign]
    recall.ranked_record = in_any_scope  # type: ignore[method-assign]


@variant("secret-scan-off", breaks=["EMC-SEC-002"], caught_by=["secrets.never-admitted"], era="legacy", expect="WARN")
def secret_scan_off(server: FaultyServer) -> None:
    """Scopes configured to scan for secrets admit everything."""
    lifecycle = server.engine.lifecycle
    policy_for = lifecycle.policy_for

    def lax(scope: Scope) -> Any:
        policy = policy_for(scope)
        return (
            dataclasses.replace(policy, admission=AcceptAll()) if isinstance(policy.admission, SecretScan) else policy
        )

    lifecycle.policy_for = lax


@variant("retain-without-permission", breaks=["EMC-RET-003"], caught_by=["lifecycle.retain-permission"], era="modern")
def retain_without_permission(server: FaultyServer) -> None:
    """derivative_rule retain is accepted in every scope, whatever the host allows."""
    lifecycle = server.engine.lifecycle
    policy_for = lifecycle.policy_for
    lifecycle.policy_for = lambda scope: dataclasses.replace(policy_for(scope), allow_retain=True)


# -- search ------------------------------------------------------------------------------------------------------


@variant("semantic-falls-back-to-lexical", breaks=["EMC-SRCH-008"],
         caught_by=["search.semantic-unavailable"], era="legacy")
def semantic_falls_back_to_lexical(server: FaultyServer) -> None:
    """lexical_and_semantic is answered with the lexical ranking when no semantic channel exists."""

    def make(search: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def fallback(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            policy = args.get("capability_policy")
            if isinstance(policy, dict) and policy.get("minimum_channels") == "lexical_and_semantic":
                args = {**args, "capability_policy": {**policy, "minimum_channels": "lexical"}}
            return search(caller, args, now)

        return fallback

    _wrap_operation(server, SEARCH, make)


@variant("cursor-leaks-scope", breaks=["EMC-HOST-005"], caught_by=["search.cursor-isolation"], era="modern")
def cursor_leaks_scope(server: FaultyServer) -> None:
    """A page cursor carries its chain's binding: sent under another scope's binding, it goes on with the chain of
    the scope that minted it."""
    minted: dict[str, Any] = {}

    def make(search: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def chained(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            cursor = args.get("page_cursor")
            caller = minted.get(cursor, caller) if isinstance(cursor, str) else caller
            value = search(caller, args, now)
            if "next_page_cursor" in value:
                minted[value["next_page_cursor"]] = caller
            return value

        return chained

    _wrap_operation(server, SEARCH, make)


@variant("cursor-serves-forgotten", breaks=["EMC-FGT-002"], caught_by=["search.cursor-after-forget"], era="legacy")
def cursor_serves_forgotten(server: FaultyServer) -> None:
    """Every page of a search is computed with its first page and served from that cache, which forget does not
    reach."""
    pages: dict[str, dict[str, Any]] = {}

    def make(search: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def cached(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            cursor = args.get("page_cursor")
            if isinstance(cursor, str) and cursor in pages:
                return copy.deepcopy(pages[cursor])
            value = following = search(caller, args, now)
            while "next_page_cursor" in following and len(pages) < 10_000:
                after = following["next_page_cursor"]
                following = pages[after] = search(caller, {**args, "page_cursor": after}, now)
            return value

        return cached

    _wrap_operation(server, SEARCH, make)


# -- sequence variants: defects only a combination of calls shows (caught by exploration, not by fixed checks) ----


def _value_of(envelope: dict[str, Any]) -> dict[str, Any]:
    value = (envelope.get("output") or {}).get("value") if envelope.get("ok") is True else None
    return value if isinstance(value, dict) else {}


def _text_at(arguments: Any, name: str) -> str | None:
    """A string argument, or None: a schema-mutation case may send a list or an object where a key belongs, and a
    fault must not turn that into a crash the harness would read as a second defect."""
    value = arguments.get(name) if isinstance(arguments, dict) else None
    return value if isinstance(value, str) else None


def _code_of(envelope: dict[str, Any]) -> Any:
    failure = envelope.get("error") if envelope.get("ok") is False else None
    return failure.get("code") if isinstance(failure, dict) else None


@variant("withdraw-frees-capture-key", breaks=["EMC-IDEM-005"], caught_by=["explore.sequences"], era="modern",
         sequence_only=True)
def withdraw_frees_capture_key(server: FaultyServer) -> None:
    """Withdrawing a candidate releases the key it was captured under: the same capture again then makes a new
    candidate instead of answering duplicate_exact (and other content under it, instead of DIGEST_CONFLICT)."""
    captured: dict[str, str] = {}  # candidate_id -> the key it was captured under
    freed: set[str] = set()

    async def intercept(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> Any:
        arguments = params.arguments
        key = _text_at(arguments, "idempotency_key")
        if params.name == CAPTURE and isinstance(arguments, dict) and key in freed:
            arguments["idempotency_key"] = f"{key}-{secrets.token_hex(4)}"  # runs as fresh
        return None

    def rewrite(ctx: ServerRequestContext, params: types.CallToolRequestParams,
                envelope: dict[str, Any]) -> dict[str, Any]:
        arguments = params.arguments or {}
        value = _value_of(envelope)
        key, withdrawn = _text_at(arguments, "idempotency_key"), _text_at(arguments, "candidate_id")
        if params.name == CAPTURE and isinstance(value.get("candidate_id"), str) and key is not None:
            captured.setdefault(value["candidate_id"], key)
        if params.name == WITHDRAW and value and withdrawn in captured:
            freed.add(captured[withdrawn])
        return envelope

    server.intercept = intercept
    server.rewrites.append(rewrite)


@variant("retry-other-reason-replays", breaks=["EMC-IDEM-007"], caught_by=["explore.sequences"], era="legacy")
def retry_other_reason_replays(server: FaultyServer) -> None:
    """A withdraw or forget retried under its key with another reason is answered as a replay of the first call,
    instead of DIGEST_CONFLICT."""
    first: dict[tuple[str, Any], tuple[Any, dict[str, Any]]] = {}

    def rewrite(ctx: ServerRequestContext, params: types.CallToolRequestParams,
                envelope: dict[str, Any]) -> dict[str, Any]:
        if params.name not in (WITHDRAW, FORGET):
            return envelope
        arguments = params.arguments or {}
        held = (params.name, _text_at(arguments, "idempotency_key"))
        target = _text_at(arguments, "record_id") or _text_at(arguments, "candidate_id")
        if _value_of(envelope):
            first.setdefault(held, (target, copy.deepcopy(envelope)))
        elif _code_of(envelope) == "DIGEST_CONFLICT" and held in first and first[held][0] == target:
            earlier = copy.deepcopy(first[held][1])
            earlier["output"]["value"]["replayed"] = True
            return earlier
        return envelope

    server.rewrites.append(rewrite)


_NETWORK_ALLOWED: ContextVar[bool] = ContextVar("network_allowed", default=False)


@variant("network-allow-changes-ranking", breaks=["EMC-SRCH-007"], caught_by=["search.capability-policy"],
         era="modern")
def network_allow_changes_ranking(server: FaultyServer) -> None:
    """network: allow is read as licence for a remote re-ranker: the matches come back in another order."""
    recall = server.engine.recall
    ranked = recall.ranked

    def reranked(reader: Any, scope: Scope, query: str, valid_as_of: int) -> list[str]:
        order = ranked(reader, scope, query, valid_as_of)
        return order[::-1] if _NETWORK_ALLOWED.get() else order

    def make(search: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def allowing(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            policy = args.get("capability_policy")
            token = _NETWORK_ALLOWED.set(isinstance(policy, dict) and policy.get("network") == "allow")
            try:
                return search(caller, args, now)
            finally:
                _NETWORK_ALLOWED.reset(token)

        return allowing

    recall.ranked = reranked  # type: ignore[method-assign]
    _wrap_operation(server, SEARCH, make)


@variant("get-receipt-names-last-read", breaks=["EMC-GET-002"], caught_by=["get.record-id"], era="legacy")
def get_receipt_names_last_read(server: FaultyServer) -> None:
    """Read receipts come from a cache keyed by the session: a get's receipt names the record read before it."""
    last: list[str] = []

    def make(get: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def cached(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            value = get(caller, args, now)
            receipt = value.get("read_receipt")
            if isinstance(receipt, dict):
                asked = receipt.get("record_id")
                if last and last[-1] != asked:
                    value = {**value, "read_receipt": {**receipt, "record_id": last[-1]}}
                last.append(str(asked))
            return value

        return cached

    _wrap_operation(server, GET, make)


@variant("purpose-refusal-reserves-key", breaks=["EMC-HOST-008"], caught_by=["binding.purpose-mismatch"],
         era="legacy")
def purpose_refusal_reserves_key(server: FaultyServer) -> None:
    """A capture refused for its purpose_ref still reserves its idempotency key: the corrected call conflicts."""
    spent: set[tuple[str, str, str, str]] = set()
    admitted = server._admitted

    def key_of(caller: Any, arguments: Any) -> tuple[str, str, str, str]:
        return caller.tenant, caller.workspace, caller.principal, str(arguments.get("idempotency_key"))

    def reserving(tool: str, binding: Any, arguments: dict[str, Any], now: Any) -> Any:
        if tool == CAPTURE and _claimed_purpose(tool, arguments) not in (None, binding.purpose_ref):
            spent.add(key_of(binding, arguments))
        return admitted(tool, binding, arguments, now)

    def make(capture: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def conflicting(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            if key_of(caller, args) in spent:
                raise Refusal("DIGEST_CONFLICT")
            return capture(caller, args, now)

        return conflicting

    server._admitted = reserving  # type: ignore[method-assign]
    _wrap_operation(server, CAPTURE, make)


@variant("bad-cursor-restarts", breaks=["EMC-SRCH-010", "EMC-HP-050"], caught_by=["search.stale-cursor"], era="modern")
def bad_cursor_restarts(server: FaultyServer) -> None:
    """A page cursor that does not open is read as offset 0: the first page again."""
    engine = server.engine

    def make(search: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def restart(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            if "page_cursor" in args and engine.recall.cursors.open(args["page_cursor"]) is None:
                args = {k: v for k, v in args.items() if k != "page_cursor"}
            return search(caller, args, now)

        return restart

    _wrap_operation(server, SEARCH, make)


@variant("packet-budget-ignored", breaks=["EMC-SRCH-005"], caught_by=["search.packet-budget"], era="legacy")
def packet_budget_ignored(server: FaultyServer) -> None:
    """Search packs pages against the largest budget, whatever max_packet_bytes asked for."""

    def make(search: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        return lambda caller, args, now: search(caller, {**args, "max_packet_bytes": BUDGET_MAX}, now)

    _wrap_operation(server, SEARCH, make)


@variant("limit-ignored", breaks=["EMC-SRCH-003"], caught_by=["search.limit"], era="modern")
def limit_ignored(server: FaultyServer) -> None:
    """Search fills every page up to the largest limit, whatever limit asked for."""

    def make(search: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        return lambda caller, args, now: search(caller, {**args, "limit": LIMIT_MAX}, now)

    _wrap_operation(server, SEARCH, make)


# -- binding, discovery and the order of checks ----------------------------------------------------------------------


@variant("purpose-mismatch-tolerated", breaks=["EMC-HOST-008"], caught_by=["binding.purpose-mismatch"], era="legacy")
def purpose_mismatch_tolerated(server: FaultyServer) -> None:
    """The purpose_ref in the arguments is trusted over the host-bound one."""
    guarded = server._guarded_call

    async def trusting(ctx: Any, params: types.CallToolRequestParams, tool: str, binding: Any, audit_id: str) -> Any:
        claimed = _claimed_purpose(tool, params.arguments)
        if isinstance(claimed, str):
            binding = dataclasses.replace(binding, purpose_ref=claimed)
        return await guarded(ctx, params, tool, binding, audit_id)

    server._guarded_call = trusting  # type: ignore[method-assign]


@variant("purpose-before-arguments", breaks=["EMC-HP-022"], caught_by=["wiring.order-of-checks"], era="modern")
def purpose_before_arguments(server: FaultyServer) -> None:
    """The purpose is compared before the arguments are validated."""
    guarded = server._guarded_call

    async def early(ctx: Any, params: types.CallToolRequestParams, tool: str, binding: Any, audit_id: str) -> Any:
        claimed = _claimed_purpose(tool, params.arguments)
        if isinstance(claimed, str) and claimed != binding.purpose_ref:
            raise _protocol_error(_UNTRUSTED)
        return await guarded(ctx, params, tool, binding, audit_id)

    server._guarded_call = early  # type: ignore[method-assign]


@variant("maintenance-tool-listed", breaks=["EMC-DISC-001"], caught_by=["discovery.no-maintenance-tool"], era="legacy")
def maintenance_tool_listed(server: FaultyServer) -> None:
    """tools/list also advertises an engram_memory_admin tool to every bound principal."""
    admin = types.Tool(name="engram_memory_admin", description="Backup, restore and key rotation.",
                       input_schema={"type": "object", "properties": {"operation": {"enum": ["backup", "restore"]}},
                                     "required": ["operation"], "additionalProperties": False})

    def rewrite(ctx: Any, result: types.ListToolsResult) -> types.ListToolsResult:
        return result.model_copy(update={"tools": [*result.tools, admin]}) if result.tools else result

    server.list_rewrites.append(rewrite)


@variant("input-schema-open", breaks=["EMC-HOST-002"], caught_by=["discovery.input-schemas"], era="modern")
def input_schema_open(server: FaultyServer) -> None:
    """Advertised input schemas lose additionalProperties: false at the top (validation stays closed)."""
    for name, tool in list(server.tools.items()):
        schema = {k: v for k, v in tool.input_schema.items() if k != "additionalProperties"}
        server.tools[name] = tool.model_copy(update={"input_schema": schema})


@variant("input-schema-nested-open", breaks=["EMC-HOST-002"], caught_by=["discovery.input-schemas"], era="legacy")
def input_schema_nested_open(server: FaultyServer) -> None:
    """Advertised schemas lose additionalProperties: false below the top (payload, evidence, capability_policy)."""

    def opened(node: Any, depth: int = 0) -> Any:
        if isinstance(node, list):
            return [opened(item, depth) for item in node]
        if not isinstance(node, dict):
            return node
        return {k: opened(v, depth + 1) for k, v in node.items() if not (k == "additionalProperties" and depth > 0)}

    for name, tool in list(server.tools.items()):
        server.tools[name] = tool.model_copy(update={"input_schema": opened(tool.input_schema)})


@variant("output-schema-contradicts-messages", breaks=["EMC-ENV-004"], caught_by=["discovery.output-schemas"],
         era="modern")
def output_schema_contradicts_messages(server: FaultyServer) -> None:
    """The server words its refusals its own way, but its advertised outputSchema still pins other texts."""

    def change(ctx: Any, params: Any, envelope: dict[str, Any], error: dict[str, Any]) -> None:
        error["message"] = "Request refused; see the operator's guide."

    _error_rewrite(server, change)


@variant("message-carries-request-number", breaks=["EMC-ENV-006"], caught_by=["envelope.fixed-messages"], era="legacy")
def message_carries_request_number(server: FaultyServer) -> None:
    """Every refusal's message ends with a per-call request number: no input echoed, but no constant text either."""
    numbers = iter(range(1000, 1 << 62))

    def change(ctx: Any, params: Any, envelope: dict[str, Any], error: dict[str, Any]) -> None:
        error["message"] = f"{error['message']} (request {next(numbers)})"

    _error_rewrite(server, change)


@variant("unknown-tool-is-result", breaks=["EMC-DISC-003"], caught_by=["discovery.unknown-tool"], era="legacy")
def unknown_tool_is_result(server: FaultyServer) -> None:
    """A tool name the contract does not define is answered with an isError result, not -32602."""

    async def intercept(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> Any:
        if params.name in CONTRACT.tools or server._trusted_binding(ctx) is None:
            return None
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"Unknown tool: {params.name}")],
                                    is_error=True)

    server.intercept = intercept


@variant("unbound-list-shows-all", breaks=["EMC-HP-013"], caught_by=["wiring.unbound-list-is-empty"], era="modern")
def unbound_list_shows_all(server: FaultyServer) -> None:
    """tools/list without a binding lists all six tools."""

    def rewrite(ctx: ServerRequestContext, result: types.ListToolsResult) -> types.ListToolsResult:
        if HOST_BINDING_META_KEY not in (ctx.meta or {}):
            return result.model_copy(update={"tools": [server.tools[name] for name in CONTRACT.tools]})
        return result

    server.list_rewrites.append(rewrite)


@variant(
    "binding-signature-unchecked",
    breaks=["EMC-HOST-011", "EMC-HP-004"],
    caught_by=["binding.untrusted-signer"],
    era="legacy",
)
def binding_signature_unchecked(server: FaultyServer) -> None:
    """The binding's signature is never verified; header, kid, audience and times still are."""
    private, public = generate_host_key()
    binding = server._binding

    def unverified(ctx: ServerRequestContext) -> Any:
        token: Any = (ctx.meta or {}).get(HOST_BINDING_META_KEY)
        try:
            header = jwt.get_unverified_header(token)
            claims = jwt.decode(token, options={"verify_signature": False, "verify_exp": False, "verify_nbf": False,
                                                "verify_iat": False, "verify_aud": False, "verify_iss": False})
        except Exception:  # anything unreadable goes the reference's way
            return binding(ctx)
        if header.get("alg") != "EdDSA" or header.get("kid") not in server.config.trusted_keys:
            return binding(ctx)
        # Re-signed here, so that every other check of the binding runs unchanged.
        resigned = jwt.encode(
            claims, private, algorithm="EdDSA", headers={k: v for k, v in header.items() if k != "alg"}
        )
        try:
            trusted = dataclasses.replace(server.config.trusted_keys[header["kid"]], public_key=public)
            return verify_binding(resigned, {header["kid"]: trusted}, audience=server.config.audience)
        except BindingRejected:
            raise _protocol_error(_UNTRUSTED) from None

    server._binding = unverified  # type: ignore[method-assign]


# -- refusals that must name themselves and leave nothing behind ----------------------------------------------------


@variant("ranking-failure-empty-success", breaks=["EMC-SRCH-012"], caught_by=["search.no-match"], era="legacy")
def ranking_failure_empty_success(server: FaultyServer) -> None:
    """A search requiring semantic ranking, which no channel can give, is answered as an empty success."""

    def make(search: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def hollow(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            policy = args.get("capability_policy")
            if not (isinstance(policy, dict) and policy.get("minimum_channels") == "lexical_and_semantic"):
                return search(caller, args, now)
            value = search(caller, {**args, "capability_policy": {**policy, "minimum_channels": "lexical"}}, now)
            value = {k: v for k, v in value.items() if k not in ("next_page_cursor", "response_digest")}
            value["records"] = []
            value["response_digest"] = profile_digest("search-response", value)
            return value

        return hollow

    _wrap_operation(server, SEARCH, make)


@variant("oversized-marked-retriable", breaks=["EMC-ERR-002"], caught_by=["envelope.error-codes"], era="modern",
         select=["envelope.error-codes", "search.oversized-record"])
def oversized_marked_retriable(server: FaultyServer) -> None:
    """PROJECTION_OVERSIZED is sent with retriable true, though the table says the same call cannot succeed."""

    def change(ctx: Any, params: Any, envelope: dict[str, Any], error: dict[str, Any]) -> None:
        if error.get("code") == "PROJECTION_OVERSIZED":
            error["retriable"] = True

    _error_rewrite(server, change)


@variant("refused-capture-kept", breaks=["EMC-CAP-013"],
         caught_by=["lifecycle.retain-permission", "lifecycle.reconciliation-consent", "lifecycle.retention-ceiling"],
         era="legacy")
def refused_capture_kept(server: FaultyServer) -> None:
    """A capture the host's policy refuses is still stored, minus what the policy objected to, under its key."""

    def make(capture: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def keeping(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            try:
                return capture(caller, args, now)
            except Refusal as refusal:
                if refusal.code == "UNAUTHORIZED":
                    payload = {k: v for k, v in args["payload"].items() if k not in ("retention", "reconciliation")}
                    with contextlib.suppress(Refusal):
                        capture(caller, {**args, "payload": payload}, now)
                raise

        return keeping

    _wrap_operation(server, CAPTURE, make)


@variant("retry-rejudged-by-clock", breaks=["EMC-IDEM-013"], caught_by=["idempotency.retry-after-expiry"],
         era="modern")
def retry_rejudged_by_clock(server: FaultyServer) -> None:
    """The clock rule runs before the replay lookup: a capture retried after its expires_at passed is INVALID_SCHEMA."""
    oracle = server.oracle
    verdict = oracle.verdict

    def clocked(tool: str, arguments: Any, *, now: Any = None) -> Any:
        return verdict(tool, arguments, now=now or datetime.now(UTC))

    oracle.verdict = clocked  # type: ignore[method-assign]


# -- host-owned call context: auditId, deadline, cancellation, key trust, capture authority ---------------------------


@variant(
    "audit-id-minted-by-server", breaks=["EMC-HOST-014", "EMC-HP-052"], caught_by=["host.audit-echo"], era="modern"
)
def audit_id_minted_by_server(server: FaultyServer) -> None:
    """The envelope carries an auditId the server made up, not the one the host bound to the call."""

    def rewrite(ctx: Any, params: Any, envelope: dict[str, Any]) -> dict[str, Any]:
        envelope["auditId"] = "audit_" + secrets.token_hex(16)
        return envelope

    server.rewrites.append(rewrite)


@variant("audit-id-filled-in", breaks=["EMC-HP-053"], caught_by=["host.audit-required"], era="legacy")
def audit_id_filled_in(server: FaultyServer) -> None:
    """A binding without audit_id is served: the server names the call itself instead of refusing it."""
    binding = server._binding

    def filled(ctx: ServerRequestContext) -> Any:
        bound = binding(ctx)
        if bound is not None and bound.audit_id is None:
            return dataclasses.replace(bound, audit_id="audit_" + secrets.token_hex(16))
        return bound

    server._binding = filled  # type: ignore[method-assign]


# Host-owned names taken from the wrong place, binding checks left out, discovery that ignores the configuration.


def _lenient_claims(fill: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Judge the binding's claims after ``fill`` has patched them; the server then reads the claims as sent."""
    strict = binding_module._claims_valid

    def lenient(claims: Any) -> bool:
        return strict(fill(claims)) if isinstance(claims, dict) else strict(claims)

    binding_module._claims_valid = lenient


@variant("audit-id-format-unchecked", breaks=["EMC-HP-072"], caught_by=["host.audit-malformed"], era="modern")
def audit_id_format_unchecked(server: FaultyServer) -> None:
    """Any string is taken as the binding's audit_id: one with a space, non-ASCII or over the length runs."""
    well_formed = "audit_" + "0" * 32
    _lenient_claims(lambda claims: {**claims, "audit_id": well_formed} if isinstance(claims.get("audit_id"), str)
                    else claims)


@variant("audit-id-from-arguments", breaks=["EMC-HOST-001", "EMC-HOST-014"],
         caught_by=["arguments.host-owned-fields", "host.audit-echo"], era="legacy")
def audit_id_from_arguments(server: FaultyServer) -> None:
    """An auditId in the arguments is taken as the call's auditId instead of being refused, and echoed."""
    guarded = server._guarded_call

    async def taking(ctx: Any, params: types.CallToolRequestParams, tool: str, binding: Any, audit_id: str) -> Any:
        arguments = params.arguments
        if isinstance(arguments, dict) and "auditId" in arguments:
            params = params.model_copy(update={"arguments": {k: v for k, v in arguments.items() if k != "auditId"}})
        return await guarded(ctx, params, tool, binding, audit_id)

    def echo(ctx: Any, params: Any, envelope: dict[str, Any]) -> dict[str, Any]:
        claimed = params.arguments.get("auditId") if isinstance(params.arguments, dict) else None
        if isinstance(claimed, str):
            envelope["auditId"] = claimed
        return envelope

    server._guarded_call = taking  # type: ignore[method-assign]
    server.rewrites.append(echo)


_APPROVED_IN_ARGUMENTS: ContextVar[bool] = ContextVar("approved_in_arguments", default=False)


@variant("self-approval-honoured", breaks=["EMC-GATE-006"], caught_by=["gate.self-approval"], era="modern")
def self_approval_honoured(server: FaultyServer) -> None:
    """An argument confirmed: true is read as the approval: it is stripped, and the gate is skipped."""
    guarded, gate = server._guarded_call, server._gate

    async def trusting(ctx: Any, params: types.CallToolRequestParams, tool: str, binding: Any, audit_id: str) -> Any:
        arguments = params.arguments
        if not (isinstance(arguments, dict) and arguments.get("confirmed") is True):
            return await guarded(ctx, params, tool, binding, audit_id)
        params = params.model_copy(update={"arguments": {k: v for k, v in arguments.items() if k != "confirmed"}})
        token = _APPROVED_IN_ARGUMENTS.set(True)
        try:
            return await guarded(ctx, params, tool, binding, audit_id)
        finally:
            _APPROVED_IN_ARGUMENTS.reset(token)

    async def skipped(ctx: Any, params: Any, tool: str, binding: Any, arguments: Any, ttl: int) -> Any:
        if _APPROVED_IN_ARGUMENTS.get():
            return time.time()
        return await gate(ctx, params, tool, binding, arguments, ttl)

    server._guarded_call = trusting  # type: ignore[method-assign]
    server._gate = skipped  # type: ignore[method-assign]


@variant("binding-agent-id-optional", breaks=["EMC-HP-005"], caught_by=["binding.claims"], era="legacy")
def binding_agent_id_optional(server: FaultyServer) -> None:
    """A binding without agent_id is served, as if the host's agent were unnamed."""

    def unnamed(claims: dict[str, Any]) -> dict[str, Any]:
        claims.setdefault("agent_id", "agent-unnamed")  # in place: the server reads this dict next
        return claims

    _lenient_claims(unnamed)


@variant("binding-audience-unchecked", breaks=["EMC-HP-006"], caught_by=["binding.audience"], era="modern")
def binding_audience_unchecked(server: FaultyServer) -> None:
    """A binding is checked against the audience it names itself, so one minted for another server passes."""

    def any_audience(ctx: ServerRequestContext) -> Any:
        token: Any = (ctx.meta or {}).get(HOST_BINDING_META_KEY)
        if token is None:
            return None
        try:
            named = jwt.decode(token, options={"verify_signature": False}).get("aud")
        except Exception:  # anything unreadable is refused as the reference refuses it
            named = None
        try:
            return verify_binding(token, server.config.trusted_keys,
                                  audience=named if isinstance(named, str) else server.config.audience)
        except BindingRejected:
            raise _protocol_error(_UNTRUSTED) from None

    server._binding = any_audience  # type: ignore[method-assign]


@variant("binding-lifetime-uncapped", breaks=["EMC-HP-007"], caught_by=["binding.max-lifetime"], era="legacy")
def binding_lifetime_uncapped(server: FaultyServer) -> None:
    """A binding's lifetime is not capped: one valid for a day is served."""
    binding_module.BINDING_MAX_LIFETIME = 10**9


@variant("unbound-call-unknown-tool", breaks=["EMC-HP-011"], caught_by=["binding.untrusted-call"], era="modern")
def unbound_call_unknown_tool(server: FaultyServer) -> None:
    """A call with no binding is answered -32602 'Unknown tool', as if an unbound caller were granted nothing."""

    async def intercept(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> Any:
        if HOST_BINDING_META_KEY not in (ctx.meta or {}):
            raise _protocol_error(_UNKNOWN_TOOL)
        return None

    server.intercept = intercept


@variant("untrusted-list-is-empty", breaks=["EMC-HP-014"], caught_by=["binding.tools-list-untrusted"], era="legacy")
def untrusted_list_is_empty(server: FaultyServer) -> None:
    """tools/list with an invalid binding is answered as an unbound one (an empty list), not -32603."""
    trusted = server._trusted_binding

    def lenient(ctx: ServerRequestContext) -> Any:
        try:
            return trusted(ctx)
        except MCPError:
            if sys._getframe(1).f_code.co_name != "_list_tools":
                raise
            return None

    server._trusted_binding = lenient  # type: ignore[method-assign]


@variant("every-tool-listed", breaks=["EMC-DISC-002"], caught_by=["discovery.granted-tools"], era="modern")
def every_tool_listed(server: FaultyServer) -> None:
    """tools/list shows all six tools to every principal of a served scope, whatever it was granted."""

    def rewrite(ctx: ServerRequestContext, result: types.ListToolsResult) -> types.ListToolsResult:
        if not result.tools:
            return result
        return result.model_copy(update={"tools": [server.tools[name] for name in CONTRACT.tools]})

    server.list_rewrites.append(rewrite)


@variant("opted-out-scope-listed", breaks=["EMC-DISC-004", "EMC-HP-016"],
         caught_by=["discovery.opted-out-sees-nothing"], era="legacy")
def opted_out_scope_listed(server: FaultyServer) -> None:
    """A trusted binding for a scope with memory off lists the six tools (calls are still refused)."""

    def rewrite(ctx: ServerRequestContext, result: types.ListToolsResult) -> types.ListToolsResult:
        if result.tools or server._trusted_binding(ctx) is None:
            return result
        return result.model_copy(update={"tools": [server.tools[name] for name in CONTRACT.tools]})

    server.list_rewrites.append(rewrite)


TTL_MAX = CONTRACT.limit("confirmation.ttl.max")


def _shorter_reference_ttl(config: Path) -> None:
    """The server configures, and its profile declares, half the contract's ceiling for a host reference."""
    for name in ("server.toml", "conformance-profile.toml"):
        path = config / name
        path.write_text(re.sub(r"(?m)^reference_ttl_seconds = \d+$", f"reference_ttl_seconds = {TTL_MAX // 2}",
                               path.read_text(encoding="utf-8")), encoding="utf-8")


@variant("reference-ttl-configured-ignored", breaks=["EMC-HP-063", "EMC-HP-064"],
         caught_by=["confirmation-ref.ttl-ceiling"], era="modern", configure=_shorter_reference_ttl)
def reference_ttl_configured_ignored(server: FaultyServer) -> None:
    """A reference is held to the contract's ceiling, not to the shorter TTL the server was configured with."""
    server.config = dataclasses.replace(server.config, confirmation=dataclasses.replace(
        server.config.confirmation, reference_ttl_seconds=TTL_MAX))


class _OptionalBearer(reference_serve.BearerGuard):
    """A bearer guard that checks a token when one is sent, and lets a request with none through."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and b"authorization" not in dict(scope.get("headers", [])):
            await self.app(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


@variant("http-bearer-optional", breaks=["EMC-HP-023"], caught_by=["wiring.http-bearer"], era="legacy",
         transport="http")
def http_bearer_optional(server: FaultyServer) -> None:
    """Over HTTP a wrong bearer token is refused, but a request with no Authorization header is served."""
    reference_serve.BearerGuard = _OptionalBearer  # type: ignore[misc]


def _deadline_judge(judge: Callable[[str], bool]) -> None:
    """Replace the server's deadline test; ``judge`` gets the name of the function asking."""
    real = reference_server.deadline_passed

    def patched(binding: Any, now: float | None = None) -> bool:
        return judge(sys._getframe(1).f_code.co_name) and real(binding, now)

    reference_server.deadline_passed = patched


@variant("deadline-ignored", breaks=["EMC-HOST-015", "EMC-HP-054"], caught_by=["host.deadline-passed"], era="legacy")
def deadline_ignored(server: FaultyServer) -> None:
    """The binding's deadline is read and never acted on: a call past it runs."""
    _deadline_judge(lambda caller: False)


@variant("deadline-judged-on-arrival-only", breaks=["EMC-HP-055"],
         caught_by=["host.deadline-during-confirmation"], era="legacy")
def deadline_judged_on_arrival_only(server: FaultyServer) -> None:
    """The deadline is judged when the call arrives, not again once the human has answered."""
    _deadline_judge(lambda caller: caller == "_call_tool")


@variant("cancelled-call-executes", breaks=["EMC-HOST-016", "EMC-HP-056"], caught_by=["host.cancel-before-commit"],
         era="legacy")
def cancelled_call_executes(server: FaultyServer) -> None:
    """notifications/cancelled does not stop a call: it keeps waiting for the approval, then commits."""
    guarded = server._guarded_call

    async def shielded(ctx: ServerRequestContext, params: types.CallToolRequestParams, tool: str, binding: Binding,
                       audit_id: str) -> Any:
        with anyio.CancelScope(shield=True):
            return await guarded(ctx, params, tool, binding, audit_id)

    server._guarded_call = shielded  # type: ignore[method-assign]


class _Everything(frozenset[str]):
    """A trust set that holds every name: a key trusted beyond what its configuration says."""

    def __contains__(self, item: object) -> bool:
        return True


def _trust_widened(server: FaultyServer, **widened: Any) -> None:
    keys = server.config.trusted_keys
    for kid, host in list(keys.items()):
        keys[kid] = dataclasses.replace(host, **widened)


@variant("foreign-tenant-memory-off", breaks=["EMC-HOST-011", "EMC-HP-008"], caught_by=["host.foreign-tenant"],
         era="modern")
def foreign_tenant_memory_off(server: FaultyServer) -> None:
    """A key is trusted for any tenant: a tenant it was never trusted for reads as memory off (-32602, empty list)."""
    _trust_widened(server, tenants=_Everything())


@variant("foreign-issuer-accepted", breaks=["EMC-HOST-011", "EMC-HP-008"], caught_by=["host.foreign-issuer"],
         era="legacy")
def foreign_issuer_accepted(server: FaultyServer) -> None:
    """A key is trusted whatever issuer the binding names."""
    _trust_widened(server, issuers=_Everything())


@variant("capture-without-authority", breaks=["EMC-CAP-018", "EMC-HP-057"], caught_by=["host.capture-unauthorized"],
         era="modern")
def capture_without_authority(server: FaultyServer) -> None:
    """A principal granted capture may capture in every scope, whatever authority the scope denies it."""
    object.__setattr__(server.config, "may_capture", lambda scope, principal: True)


class _ReadWatch:
    """A server's read stream that shows each message to ``seen`` before the server gets it."""

    def __init__(self, inner: Any, seen: Callable[[Any], Any]) -> None:
        self._inner, self._seen = inner, seen

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def __aenter__(self) -> _ReadWatch:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)

    def __aiter__(self) -> _ReadWatch:
        return self

    async def __anext__(self) -> Any:
        item = await self._inner.__anext__()
        await self._seen(item)
        return item

    async def receive(self) -> Any:
        item = await self._inner.receive()
        await self._seen(item)
        return item


CancelAnswer = Callable[[Any, str, str], Any]  # (request id, tool, audit id) -> the JSON-RPC message to send


def answer_cancelled_calls(server: ReferenceServer, answer: CancelAnswer) -> None:
    """Answer each cancelled tools/call with ``answer``, beside the reference's own handling of the cancellation
    (which stops the call and, as the SDK does, sends nothing). The benign catalog uses it too."""
    run = server.server.run
    calls: dict[str, tuple[str, str]] = {}

    async def answering(read: Any, write: Any, *args: Any, **kwargs: Any) -> Any:
        async def seen(item: Any) -> None:
            message = getattr(item, "message", None)
            method, params = getattr(message, "method", None), getattr(message, "params", None) or {}
            if method == "tools/call":
                token = str((params.get("_meta") or {}).get(HOST_BINDING_META_KEY))
                with contextlib.suppress(Exception):
                    claims = jwt.decode(token, options={"verify_signature": False})
                    calls[str(message.id)] = (str(params.get("name")), claims["audit_id"])
            elif method == "notifications/cancelled" and str(params.get("requestId")) in calls:
                tool, audit_id = calls.pop(str(params.get("requestId")))
                await write.send(SessionMessage(answer(params["requestId"], tool, audit_id)))

        return await run(_ReadWatch(read, seen), write, *args, **kwargs)

    server.server.run = answering  # type: ignore[method-assign,assignment]


def envelope_answer(request_id: Any, code: str, audit_id: str) -> types.JSONRPCResponse:
    """A JSON-RPC response carrying the envelope of a refusal with ``code``."""
    result = tool_result(make_envelope(Outcome(code=code), audit_id))
    return types.JSONRPCResponse(jsonrpc="2.0", id=request_id,
                                 result=result.model_dump(by_alias=True, exclude_none=True, mode="json"))


@variant("cancelled-call-answered-outcome-unknown", breaks=["EMC-HOST-016", "EMC-HP-056"],
         caught_by=["host.cancel-before-commit"], era="legacy")
def cancelled_call_answered_outcome_unknown(server: FaultyServer) -> None:
    """A cancelled call is stopped, but answered MUTATION_OUTCOME_UNKNOWN, as if the cancellation left it in doubt."""
    answer_cancelled_calls(
        server, lambda request_id, tool, audit_id: envelope_answer(request_id, "MUTATION_OUTCOME_UNKNOWN", audit_id))


@variant("deadline-skipped-on-confirmed-retry", breaks=["EMC-HP-055"],
         caught_by=["host.deadline-during-confirmation"], era="modern")
def deadline_skipped_on_confirmed_retry(server: FaultyServer) -> None:
    """A 2026-07-28 retry that carries the answer to a confirmation is run whatever its binding's deadline says."""
    binding = server._binding

    def undated(ctx: ServerRequestContext) -> Any:
        bound = binding(ctx)
        if bound is not None and (ctx.params or {}).get("requestState") is not None:
            return dataclasses.replace(bound, deadline=None)
        return bound

    server._binding = undated  # type: ignore[method-assign]


@variant("replay-refused-after-first-deadline", breaks=["EMC-HP-055"],
         caught_by=["host.deadline-after-commit"], era="modern")
def replay_refused_after_first_deadline(server: FaultyServer) -> None:
    """The first call's deadline is kept with the idempotency key, and a replay after it is DEADLINE_EXCEEDED."""
    engine = server.engine
    call, replay = engine.call, engine.replay
    deadlines: dict[tuple[str, str], float] = {}

    def keyed(tool: str, arguments: Any) -> tuple[str, str]:
        return tool, str((arguments or {}).get("idempotency_key"))

    def remembering(tool: str, caller: Binding, arguments: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        outcome = call(tool, caller, arguments, *args, **kwargs)
        if outcome.ok and caller.deadline is not None:
            deadlines.setdefault(keyed(tool, arguments), caller.deadline)
        return outcome

    def judged(tool: str, caller: Binding, arguments: dict[str, Any]) -> Any:
        outcome = replay(tool, caller, arguments)
        first = deadlines.get(keyed(tool, arguments))
        if outcome is not None and first is not None and time.time() > first:
            return Outcome(code="DEADLINE_EXCEEDED")
        return outcome

    engine.call, engine.replay = remembering, judged  # type: ignore[method-assign]


# -- running the harness against a variant -----------------------------------------------------------------------------


@dataclass
class Judgement:
    """What one conformance run concluded about a variant (or about the plain reference)."""

    name: str
    exit_code: int | None
    seconds: float
    statuses: dict[str, set[str]] = field(default_factory=dict)  # check id -> statuses over eras and params
    requirements: dict[str, str] = field(default_factory=dict)  # requirement id -> footer verdict
    problem: str = ""  # why the run could not be judged (timeout, no report)
    output: str = ""
    introspection: list[str] = field(default_factory=list)  # checks whose verdict quotes pytest, not the target

    def flagged(self, check_id: str, status: str = "FAIL") -> bool:
        return status in self.statuses.get(check_id, set())

    @property
    def errors(self) -> list[str]:
        return sorted(c for c, s in self.statuses.items() if "ERROR" in s)

    @property
    def failing_checks(self) -> list[str]:
        return sorted(c for c, s in self.statuses.items() if "FAIL" in s)

    def caught(self, variant: Variant) -> list[str]:
        return [c for c in variant.caught_by if self.flagged(c, variant.expect)]

    def verdict(self, variant: Variant) -> str:
        """KILLED when the run judges the variant as the catalog says; otherwise why not."""
        if self.problem:
            return f"NOT JUDGED: {self.problem}"
        wrong = []
        # Every variant run is a --select run: a failure exits 1, anything else is at best incomplete (5).
        expected_exit = 1 if variant.expect == "FAIL" else 5
        if self.exit_code != expected_exit:
            wrong.append(f"exit code {self.exit_code}, not {expected_exit}")
        if not self.caught(variant):
            seen = {c: sorted(self.statuses.get(c, {"NOT RUN"})) for c in variant.caught_by}
            wrong.append(f"no {variant.expect} from {', '.join(variant.caught_by)} ({seen})")
        unjudged = [r for r in variant.breaks if self.requirements.get(r) != variant.expect]
        if unjudged:
            wrong.append(f"requirements not judged {variant.expect}: "
                         + ", ".join(f"{r}={self.requirements.get(r)}" for r in unjudged))
        if self.errors:
            wrong.append("ERROR in " + ", ".join(self.errors))
        if self.introspection:
            wrong.append("pytest's assertion introspection in the verdict of " + ", ".join(self.introspection))
        return "KILLED" if not wrong else "SURVIVED: " + "; ".join(wrong)


def command(target: str, profile: Path, select: tuple[str, ...] | list[str], report_dir: Path, *, era: str = "both",
            call_timeout: float = 10.0, level: str = "contract", options: tuple[str, ...] = ()) -> list[str]:
    conformance = Path(sys.executable).with_name("conformance")
    program = [str(conformance)] if conformance.exists() else [sys.executable, "-m", "engram_mcp.conformance._cli"]
    line = [*program, "--target", target, "--profile", str(profile), "--report-dir", str(report_dir),
            "--era", era, "--call-timeout", str(call_timeout), "--level", level]
    for prefix in select:
        line += ["--select", prefix]
    return [*line, *options]


def variant_target(name: str, config: Path) -> str:
    return "stdio:" + shlex.join([sys.executable, str(Path(__file__).resolve()), name, "--config", str(config)])


def reference_target(config: Path) -> str:
    return "stdio:" + shlex.join([sys.executable, "-m", "engram_mcp.reference._cli", "serve", "--config", str(config)])


def fresh_copy(template: Path, workdir: Path) -> Path:
    """A private copy of an initialised configuration folder (keys, profile, no store yet)."""
    copy_dir = workdir / "config"
    shutil.copytree(template, copy_dir, ignore=shutil.ignore_patterns("store"))
    return copy_dir


# What pytest writes about an assertion, which no verdict may quote: its rewritten `assert` line and diff hints.
PYTEST_ARTEFACTS = re.compile(r"(^|\n)\s*assert |Use -v to get more diff|use -vv to show|Full diff:|\+  where ")


def introspection_in(report: Path) -> list[str]:
    """The checks whose message or detail in report.jsonl carries pytest's introspection of an assertion."""
    quoting = set()
    for line in report.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        said = f"{entry.get('message', '')}\n{entry.get('detail', '')}"
        if entry["type"] == "check" and PYTEST_ARTEFACTS.search(said):
            quoting.add(entry["check"])
    return sorted(quoting)


def read_report(report: Path) -> tuple[int | None, dict[str, set[str]], dict[str, str]]:
    statuses: dict[str, set[str]] = {}
    requirements: dict[str, str] = {}
    exit_code = None
    for line in report.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry["type"] == "check":
            statuses.setdefault(entry["check"], set()).add(entry["status"])
        elif entry["type"] == "footer":
            exit_code = entry["exit_code"]
            requirements = {rid: v["verdict"] for rid, v in entry["requirements"].items()}
    return exit_code, statuses, requirements


def run(name: str, target: str, profile: Path, select: tuple[str, ...] | list[str], workdir: Path, *,
        era: str = "both", timeout: float = 240.0, level: str = "contract", options: tuple[str, ...] = ()) -> Judgement:
    """One conformance run as a subprocess, judged from its report.jsonl."""
    report_dir = workdir / "report"
    started = time.monotonic()
    # A session of its own, so that a run that overstays is ended with the servers it started, and nothing else.
    process = subprocess.Popen(
        command(target, profile, select, report_dir, era=era, level=level, options=options),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=workdir,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        return Judgement(name, None, time.monotonic() - started, problem=f"the run took over {timeout:.0f} s",
                         output=output[-3000:])
    seconds = time.monotonic() - started
    report = report_dir / "report.jsonl"
    if not report.exists():
        return Judgement(name, process.returncode, seconds, problem=f"no report (exit {process.returncode})",
                         output=output[-3000:])
    exit_code, statuses, requirements = read_report(report)
    if exit_code != process.returncode:
        return Judgement(name, process.returncode, seconds, statuses, requirements, output=output[-3000:],
                         problem=f"the report says exit {exit_code}, the process exited {process.returncode}")
    return Judgement(name, exit_code, seconds, statuses, requirements, output=output[-3000:],
                     introspection=introspection_in(report))


def run_variant(item: Variant, template: Path, workdir: Path, *, timeout: float = 240.0) -> Judgement:
    config = fresh_copy(template, workdir)
    if item.configure is not None:
        item.configure(config)
    # Some variants break only this project's profile pins: the catalog is judged at the profile level.
    if item.transport == "http":
        with _served_over_http(item.name, config / "server.toml", workdir) as url:
            return run(item.name, url, config / "conformance-profile.toml", item.select, workdir, era=item.era,
                       timeout=timeout, level="profile")
    return run(item.name, variant_target(item.name, config / "server.toml"), config / "conformance-profile.toml",
               item.select, workdir, era=item.era, timeout=timeout, level="profile")


@contextlib.contextmanager
def _served_over_http(name: str, config: Path, workdir: Path) -> Iterator[str]:
    """The variant served over streamable HTTP on a free loopback port, for as long as the block runs."""
    import httpx2

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    url = f"http://127.0.0.1:{port}/mcp"
    with open(workdir / "server.log", "w") as log:  # the server writes to its own copy of the handle
        process = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), name, "--config", str(config),
                                    "--http", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=log,
                                   start_new_session=True)
    try:
        ready_by = time.monotonic() + 30
        while time.monotonic() < ready_by and process.poll() is None:
            try:
                httpx2.get(url, timeout=1)
                break
            except httpx2.HTTPError:
                time.sleep(0.1)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _serve_http(server: FaultyServer, address: str) -> None:
    """As engram-reference serve --http does, for a server the variant has already broken."""
    host, _, port = address.rpartition(":")
    limits = server.config.transport
    try:
        uvicorn.Server(uvicorn.Config(
            reference_serve.http_app(server, host, int(port)), host=host, port=int(port), log_level="warning",
            lifespan="on", http=deadline_protocol(limits.http_header_timeout_seconds, limits.http_body_timeout_seconds),
            limit_concurrency=limits.http_max_connections,
        )).run()
    finally:
        server.close()


def run_without_exploration(item: Variant, template: Path, workdir: Path, *, timeout: float = 240.0) -> Judgement:
    """The variant under every fixed check (no --select) with exploration turned off: what it slips past."""
    config = fresh_copy(template, workdir)
    if item.configure is not None:
        item.configure(config)
    return run(item.name, variant_target(item.name, config / "server.toml"), config / "conformance-profile.toml",
               (), workdir, era=item.era, timeout=timeout, level="profile", options=("--explore", "0"))


def run_control(selections: list[str], template: Path, workdir: Path, *, timeout: float = 240.0) -> Judgement:
    """The unmodified reference, over the union of every variant's selections."""
    config = fresh_copy(template, workdir)
    return run("reference (control)", reference_target(config / "server.toml"), config / "conformance-profile.toml",
               selections, workdir, timeout=timeout, level="profile")


def all_selections() -> list[str]:
    return sorted({prefix for item in VARIANTS.values() for prefix in item.select})


def table(items: list[Variant], judged: dict[str, Judgement]) -> Iterator[str]:
    """The kill-rate table, one line per variant, and the rate."""
    rows = [("variant", "breaks", "caught by", "status")]
    for item in items:
        result = judged.get(item.name)
        caught = ", ".join(result.caught(item)) if result else ""
        status = result.verdict(item) if result else "NOT RUN"
        if item.gap:
            status += " (known gap)"
        if status == "KILLED" and item.expect != "FAIL":
            status += f" ({item.expect})"
        rows.append((item.name, ", ".join(item.breaks), caught or "-", status.split(": ")[0]))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        yield " | ".join(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)) + " | " + row[3]
    killed = sum(1 for item in items if item.name in judged and judged[item.name].verdict(item) == "KILLED")
    yield f"kill rate: {killed}/{len(items)} ({100 * killed / max(1, len(items)):.0f}%)"


# -- command line ---------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve a faulty variant of the reference server over stdio.")
    parser.add_argument(
        "variant", nargs="?", help="a variant name (see --list); 'none' serves the wrapper without a fault"
    )
    parser.add_argument("--config", type=Path, help="the server.toml of an engram-reference init")
    parser.add_argument("--list", action="store_true", help="print the catalog as JSON lines")
    parser.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP on this address, not stdio")
    args = parser.parse_args(argv)
    if args.list:
        for item in VARIANTS.values():
            print(json.dumps({"name": item.name, "breaks": item.breaks, "caught_by": item.caught_by,
                              "select": item.select, "era": item.era, "expect": item.expect,
                              "summary": item.summary, "gap": item.gap}))
        return 0
    if args.variant is None or args.config is None or (args.variant != "none" and args.variant not in VARIANTS):
        parser.error("give a variant from --list (or 'none') and --config")
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format=f"faulty[{args.variant}]: %(message)s")
    server = FaultyServer(load_config(args.config))
    if args.variant != "none":
        VARIANTS[args.variant].apply(server)
    if args.http:
        _serve_http(server, args.http)
        return 0
    with contextlib.suppress(KeyboardInterrupt):
        run_stdio(server)  # as engram-reference serves: the bounded stdio transport
    return 0


# -- concurrency variants -----------------------------------------------------------------------------------------
# Defects only calls from several sessions at once show: each stdio session is a server process of its own, all of
# them on one SQLite store. Exploration (explore.concurrent) races such calls; no fixed check does.

KEY_PAUSE = 0.1  # seconds between looking a capture's key up and reserving it


@variant("key-reserved-after-a-pause", breaks=["EMC-IDEM-005"], caught_by=["explore.concurrent"], era="modern",
         sequence_only=True)
def key_reserved_after_a_pause(server: FaultyServer) -> None:
    """A capture's key is looked up, then reserved only after a pause: concurrent first uses both take effect."""
    engine = server.engine
    reserved = engine.lifecycle.replay_of

    def make(capture: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def late(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            with engine.store.snapshot() as reader:
                free = reserved(reader, CAPTURE, caller, args) is None
            if not free:  # a plain replay: the key was reserved before this call looked
                return capture(caller, args, now)
            time.sleep(KEY_PAUSE)
            value = capture(caller, args, now)
            if value.get("status") == "duplicate_exact":  # another first use won the pause: this one trusts its look
                own = f"{args['idempotency_key']}#{secrets.token_hex(4)}"  # a fresh key, so a fresh candidate
                value = capture(caller, {**args, "idempotency_key": own}, now)
            return value

        return late

    _wrap_operation(server, CAPTURE, make)


@variant("read-cache-per-process", breaks=["EMC-FGT-002"], caught_by=["explore.concurrent"], era="legacy",
         sequence_only=True)
def read_cache_per_process(server: FaultyServer) -> None:
    """get serves from a per-process read cache; a forget clears it in its own process only, not in the others."""
    cache: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}  # record -> the get's arguments -> value

    def make_get(get: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def cached(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            held = cache.setdefault((caller.tenant, caller.workspace, args["record_id"]), {})
            asked = json.dumps([caller.principal, args], sort_keys=True)
            if asked not in held:
                held[asked] = get(caller, args, now)
            return held[asked]

        return cached

    def make_forget(forget: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        def invalidating(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            cache.pop((caller.tenant, caller.workspace, args["record_id"]), None)
            return forget(caller, args, now)

        return invalidating

    _wrap_operation(server, GET, make_get)
    _wrap_operation(server, FORGET, make_forget)


# -- transport variants -------------------------------------------------------------------------------------------


@variant("banner-on-stdout", breaks=["EMC-HP-073"], caught_by=["transport.stdout-only-mcp"], era="legacy")
def banner_on_stdout(server: FaultyServer) -> None:
    """Two banner lines on stdout before serving, as a wrapper script that echoes its start writes them."""
    print("Engram memory server starting", flush=True)
    print("listening on stdio", flush=True)


def _write_at_start(message: dict[str, Any]) -> None:
    """One JSON-RPC message on stdout before serving: what a server's own code might write outside the SDK."""
    print(json.dumps(message), flush=True)


@variant("null-id-request", breaks=["EMC-HP-074"], caught_by=["transport.jsonrpc-frames"], era="modern")
def null_id_request(server: FaultyServer) -> None:
    """A ping request whose id is null at start, which MCP forbids (a null id is no request id)."""
    _write_at_start({"jsonrpc": "2.0", "id": None, "method": "ping"})


@variant("response-to-unknown-id", breaks=["EMC-HP-075"], caught_by=["transport.responses-answer-requests"],
         era="legacy")
def response_to_unknown_id(server: FaultyServer) -> None:
    """A result at start for a request id the client never sent, as a server replaying a stale answer would."""
    _write_at_start({"jsonrpc": "2.0", "id": "engram-startup", "result": {}})


@variant("progress-unasked", breaks=["EMC-HP-076"], caught_by=["transport.notifications-asked-for"], era="modern")
def progress_unasked(server: FaultyServer) -> None:
    """Progress at start for a token no request carried."""
    _write_at_start({"jsonrpc": "2.0", "method": "notifications/progress",
                     "params": {"progressToken": "engram-startup", "progress": 0}})


if __name__ == "__main__":
    raise SystemExit(main())
