"""Benign targets: servers that differ from the reference only where contract 1.0.0 leaves them free.

    python tests/benign/targets.py VARIANT --config SERVER_TOML   serve VARIANT over stdio
    python tests/benign/targets.py --list                          the catalog, one JSON object a line

Each variant builds an ordinary ``ReferenceServer`` and changes what another
implementer could legitimately choose differently: its own constant error
texts, how its advertised schemas are laid out, the order of tools/list, its
name and version, the wording of titles and descriptions, how the text copy is
formatted, the form of its opaque ids, its timing, extra ``_meta``. Nothing in
``reference/`` knows about them; like tests/faulty/targets.py, they are applied
from here by wrapping the one server instance and by a small subclass of the
two MCP handlers the SDK server captured at construction.

A variant must be certified by a full ``conformance`` run at the default
(contract) level, over stdio, in both eras. One that is not certified shows a
harness check that judges bytes instead of behaviour: the check is fixed, the
variant is never excused. tests/test_benign_variants.py runs the catalog.
"""

from __future__ import annotations

import argparse
import contextlib
import contextvars
import copy
import hashlib
import hmac
import importlib.util
import json
import logging
import math
import random
import re
import sqlite3
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import jwt
import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError

from engram_mcp.contract import canonical_bytes, load, profile_digest, receipt_digest
from engram_mcp.contract.binding import (
    BINDING_ALGORITHM,
    BINDING_CLOCK_SKEW,
    BINDING_TOKEN_TYPE,
    HOST_BINDING_META_KEY,
    Binding,
    BindingRejected,
    TrustedHost,
    check_reference,
    deadline_passed,
    idempotency_intent,
    operation_target,
    verify_binding,
)
from engram_mcp.contract.validation import Verdict, Violation
from engram_mcp.reference._config import load_config
from engram_mcp.reference._core import scope_of
from engram_mcp.reference._envelope import Outcome, envelope, tool_result
from engram_mcp.reference._serve import run_stdio
from engram_mcp.reference._server import ReferenceServer, _integral

CONTRACT = load()
SEARCH, GET = "engram_memory_search", "engram_memory_get"


# -- the server the variations are applied to --------------------------------------------------------------

Before = Callable[[ServerRequestContext, types.CallToolRequestParams], Awaitable[types.CallToolRequestParams]]
# An answer given before the reference sees the call: an envelope (rewritten and rendered like the reference's), a
# finished result (sent as it is), or None to let the reference answer.
Intercept = Callable[[ServerRequestContext, types.CallToolRequestParams],
                     Awaitable["dict[str, Any] | types.CallToolResult | None"]]
After = Callable[[ServerRequestContext, types.CallToolRequestParams, dict[str, Any]], Awaitable[dict[str, Any]]]
Rewrite = Callable[[types.CallToolRequestParams, dict[str, Any]], dict[str, Any]]
ListRewrite = Callable[[types.ListToolsResult], types.ListToolsResult]


_RECEIVED: contextvars.ContextVar[Any] = contextvars.ContextVar("received_arguments", default=None)
# The request being served, so a rewrite can read its verified binding (``bound``).
_CONTEXT: contextvars.ContextVar[ServerRequestContext | None] = contextvars.ContextVar("request_context", default=None)


class VariantServer(ReferenceServer):
    """The reference server with seams at its MCP edge.

    ``before`` may rewrite a call's parameters (or just wait) before the reference
    sees it, and ``intercept`` may answer it instead; the reference's envelopes pass
    through ``after`` (which may read the store) and ``rewrites``, and are rendered by
    ``render``; ``tools/list`` results pass through ``list_rewrites`` after
    ``list_delay``. A modern-era request for input passes through untouched."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.before: list[Before] = []
        self.intercept: list[Intercept] = []
        self.after: list[After] = []
        self.rewrites: list[Rewrite] = []
        self.list_rewrites: list[ListRewrite] = []
        self.list_delay: Callable[[], Awaitable[None]] | None = None
        self.render: Callable[[dict[str, Any]], types.CallToolResult] = tool_result

    async def _call_tool(self, ctx: ServerRequestContext, params: types.CallToolRequestParams) -> Any:
        _RECEIVED.set(params.arguments)
        _CONTEXT.set(ctx)
        for step in self.before:
            params = await step(ctx, params)
        for answer in self.intercept:
            early = await answer(ctx, params)
            if isinstance(early, types.CallToolResult):
                return early
            if early is not None:
                return self._finish(params, early)
        result = await super()._call_tool(ctx, params)
        if isinstance(result, types.CallToolResult) and self.after:
            envelope = copy.deepcopy(result.structured_content)
            for step_after in self.after:
                envelope = await step_after(ctx, params, envelope)
            return self._finish(params, envelope)
        if isinstance(result, types.CallToolResult) and (self.rewrites or self.render is not tool_result):
            return self._finish(params, copy.deepcopy(result.structured_content))
        return result

    def _finish(self, params: types.CallToolRequestParams, envelope: dict[str, Any]) -> types.CallToolResult:
        for rewrite in self.rewrites:
            envelope = rewrite(params, envelope)
        return self.render(envelope)

    async def _confirm_reference(
        self, token: Any, tool: str, binding: Any, arguments: dict[str, Any]
    ) -> float | None:
        # The host signed the operation it sent: a server with ids of its own judges the reference on the
        # arguments as received, before it maps them to the reference's ids.
        received = _RECEIVED.get()
        return await super()._confirm_reference(
            token, tool, binding, received if isinstance(received, dict) else arguments)

    async def _list_tools(
        self, ctx: ServerRequestContext, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        _CONTEXT.set(ctx)
        if self.list_delay is not None:
            await self.list_delay()
        result = await super()._list_tools(ctx, params)
        for rewrite in self.list_rewrites:
            result = rewrite(result)
        return result


def bound(server: VariantServer) -> Binding | None:
    """The verified binding of the request being served (None without one); only once the reference has
    verified it, so this never raises for a binding the reference refused."""
    ctx = _CONTEXT.get()
    return server._binding(ctx) if ctx is not None else None


# -- the catalog -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    name: str
    freedom: str  # what the contract leaves open that this variant uses
    summary: str
    apply: Callable[[VariantServer], None]


VARIANTS: dict[str, Variant] = {}


def variant(name: str, *, freedom: str) -> Callable[[Callable[[VariantServer], None]], Callable[[VariantServer], None]]:
    def register(apply: Callable[[VariantServer], None]) -> Callable[[VariantServer], None]:
        if name in VARIANTS:
            raise ValueError(f"variant {name} is defined twice")
        summary = (apply.__doc__ or "").strip().splitlines()[0]
        VARIANTS[name] = Variant(name, freedom, summary, apply)
        return apply

    return register


def _retool(server: VariantServer, change: Callable[[str, types.Tool], types.Tool]) -> None:
    """Replace every advertised tool by ``change(name, tool)``."""
    for name, tool in list(server.tools.items()):
        server.tools[name] = change(name, tool)


def _walk(node: Any, visit: Callable[[dict[str, Any]], None]) -> None:
    if isinstance(node, dict):
        visit(node)
        for value in node.values():
            _walk(value, visit)
    elif isinstance(node, list):
        for item in node:
            _walk(item, visit)


# -- error texts ------------------------------------------------------------------------------------------------


# Its own wording, in Spanish (the contract's language), so the text copy carries non-ASCII too.
OWN_TEXTS = {
    code: f"No se atendió la solicitud ({code.lower().replace('_', ' ')}). Consulte la documentación del servidor."
    for code in CONTRACT.errors
}


@variant("own-error-messages", freedom="EMC-ENV-006 asks for a constant sanitised text per code, not a given text")
def own_error_messages(server: VariantServer) -> None:
    """Every error code comes with this server's own constant text; its outputSchema pins those texts."""
    texts = OWN_TEXTS

    def rewrite(params: Any, envelope: dict[str, Any]) -> dict[str, Any]:
        error = envelope.get("error")
        if isinstance(error, dict) and error.get("code") in texts:
            error["message"] = texts[error["code"]]
        return envelope

    def own_schema(name: str, tool: types.Tool) -> types.Tool:
        schema = copy.deepcopy(tool.output_schema)

        def visit(node: dict[str, Any]) -> None:
            props = node.get("properties")
            if isinstance(props, dict) and isinstance(props.get("code"), dict) and "const" in props["code"] \
                    and isinstance(props.get("message"), dict) and "const" in props["message"]:
                props["message"] = {"const": texts[props["code"]["const"]]}

        _walk(schema, visit)
        return tool.model_copy(update={"output_schema": schema})

    server.rewrites.append(rewrite)
    _retool(server, own_schema)


# -- advertised schemas -------------------------------------------------------------------------------------------


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
def schema_defs_and_refs(server: VariantServer) -> None:
    """Input schemas put every property schema under $defs and point at it with a relative $ref."""
    _retool(server, lambda name, tool: tool.model_copy(update={"input_schema": defs_and_refs(tool.input_schema, name)}))


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
def schema_unevaluated_properties(server: VariantServer) -> None:
    """Input schemas are closed with unevaluatedProperties: false instead of additionalProperties: false."""
    _retool(server, lambda name, tool: tool.model_copy(update={"input_schema": unevaluated(tool.input_schema)}))


@variant(
    "output-schema-left-out", freedom="the contract asks for the envelope in structuredContent, not for an outputSchema"
)
def output_schema_left_out(server: VariantServer) -> None:
    """Tools advertise no outputSchema at all (MCP makes it optional); every result is the same envelope."""
    _retool(server, lambda name, tool: tool.model_copy(update={"output_schema": None}))


# -- identity and presentation --------------------------------------------------------------------------------------


@variant("reversed-tool-order", freedom="tools/list is a set of tools; the contract fixes no order")
def reversed_tool_order(server: VariantServer) -> None:
    """tools/list names the granted tools in reverse order."""
    server.list_rewrites.append(lambda result: result.model_copy(update={"tools": list(reversed(result.tools))}))


@variant("other-server-identity", freedom="serverInfo is the implementation's own")
def other_server_identity(server: VariantServer) -> None:
    """serverInfo says another name, version and title, and the server gives instructions."""
    sdk = server.server
    sdk.name, sdk.version, sdk.title = "acme-memory", "7.3.1-rc.2", "Acme durable memory"
    sdk.instructions = "Search before you capture; cite what you use."


@variant(
    "other-titles-and-annotations", freedom="titles, descriptions and annotations are hints the contract leaves open"
)
def other_titles_and_annotations(server: VariantServer) -> None:
    """Tools carry other titles and descriptions, and no annotations at all."""

    def change(name: str, tool: types.Tool) -> types.Tool:
        short = name.removeprefix("engram_memory_").replace("_", " ")
        return tool.model_copy(update={"title": f"Memory: {short}", "description": f"Acme memory, {short} operation.",
                                       "annotations": None})

    _retool(server, change)


def _reordered(node: Any) -> Any:
    """The same JSON value with every object's members in reverse order."""
    if isinstance(node, dict):
        return {key: _reordered(node[key]) for key in reversed(list(node))}
    if isinstance(node, list):
        return [_reordered(item) for item in node]
    return node


@variant("pretty-text-copy", freedom="EMC-ENV-001 asks for the same JSON value, not the same bytes")
def pretty_text_copy(server: VariantServer) -> None:
    """The text copy is indented, ASCII-escaped and key-sorted; structuredContent lists members in reverse order."""

    def render(envelope: dict[str, Any]) -> types.CallToolResult:
        text = json.dumps(envelope, indent=2, sort_keys=True, ensure_ascii=True)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    structured_content=_reordered(envelope), is_error=not envelope["ok"])

    server.render = render


@variant(
    "deadline-clock-behind",
    freedom="a server judges a deadline on its own clock, within binding.clock_skew of the host's",
)
def deadline_clock_behind(server: VariantServer) -> None:
    """The server's clock runs one second behind the host's when it judges deadlines."""
    import time

    import engram_mcp.reference._server as reference_server

    real = reference_server.deadline_passed

    def behind(binding: Any, now: float | None = None) -> bool:
        return real(binding, (time.time() if now is None else now) - 1.0)

    reference_server.deadline_passed = behind


@variant("result-meta", freedom="MCP lets any result carry _meta; the envelope itself stays exact")
def result_meta(server: VariantServer) -> None:
    """Every tools/call and tools/list result carries an extra _meta member."""
    counter = iter(range(1, 1 << 62))

    def render(envelope: dict[str, Any]) -> types.CallToolResult:
        meta = {"com.example.memory/served-by": "node-3", "com.example.memory/sequence": next(counter)}
        return tool_result(envelope).model_copy(update={"meta": meta})

    server.render = render
    server.list_rewrites.append(lambda result: result.model_copy(update={"meta": {"com.example.memory/catalog": "v2"}}))


@variant("timing-jitter", freedom="latency is not part of the contract; noise must not read as a leak")
def timing_jitter(server: VariantServer) -> None:
    """Every tools/call and tools/list waits a random 0 to 15 ms first (a busy host)."""
    rng = random.SystemRandom()

    async def wait(ctx: Any = None, params: Any = None) -> Any:
        await anyio.sleep(rng.uniform(0.0, 0.015))
        return params

    server.before.append(wait)

    async def list_wait() -> None:
        await wait()

    server.list_delay = list_wait


# -- clocks -----------------------------------------------------------------------------------------------------------


def _reference_clock(server: VariantServer, offset: float) -> None:
    """Judge confirmation references, and their execution window, on a clock ``offset`` seconds off."""

    async def skewed(token: Any, tool: str, binding: Any, arguments: Any) -> float | None:
        verdict = check_reference(token, server.config.trusted_keys, audience=server.config.audience, tool=tool,
                                  target=operation_target(tool, arguments), arguments=arguments, binding=binding,
                                  ttl=server.config.confirmation.reference_ttl_seconds, now=time.time() + offset)
        if not verdict.approved or verdict.consume is None or verdict.approved_at is None:
            return None
        if not await anyio.to_thread.run_sync(server.engine.consume_state, verdict.consume):
            return None
        return verdict.approved_at - offset  # the window, measured on the skewed clock too

    server._confirm_reference = skewed  # type: ignore[method-assign]


CLOCK_OFFSET = CONTRACT.limit("binding.clock_skew") - 1


@variant("reference-clock-ahead", freedom="clocks differ: a server may run up to binding.clock_skew ahead of its host")
def reference_clock_ahead(server: VariantServer) -> None:
    """Its clock runs just under the allowed skew ahead of the host's when it judges confirmation references."""
    _reference_clock(server, CLOCK_OFFSET)


@variant("reference-clock-behind", freedom="clocks differ: a server may run up to binding.clock_skew behind its host")
def reference_clock_behind(server: VariantServer) -> None:
    """Its clock runs just under the allowed skew behind the host's when it judges confirmation references."""
    _reference_clock(server, -CLOCK_OFFSET)


# -- opaque ids -------------------------------------------------------------------------------------------------------


RECORD = re.compile(r"^mem_[a-z2-7]+$")


def outer_record(inner: str) -> str:
    """This server's id for a record: the reference's base32 reversed. Same alphabet and length (so a page
    the reference fits into max_packet_bytes still fits), another id; the mapping is its own inverse."""
    return "mem_" + inner.removeprefix("mem_")[::-1] if RECORD.match(inner) else inner


inner_record = outer_record


def _map_ids(node: Any, keys: frozenset[str], change: Callable[[str], str]) -> Any:
    if isinstance(node, dict):
        return {
            k: change(v) if k in keys and isinstance(v, str) else _map_ids(v, keys, change) for k, v in node.items()
        }
    if isinstance(node, list):
        return [_map_ids(item, keys, change) for item in node]
    return node


def redigest(tool: str, value: dict[str, Any]) -> dict[str, Any]:
    """Recompute the MCP-layer digests that cover a record id, as this server's own ids enter them."""
    if tool == GET:
        receipt = value.get("read_receipt")
        if isinstance(receipt, dict) and "receipt_digest" in receipt:
            receipt["receipt_digest"] = profile_digest("read-receipt",
                                                       {k: v for k, v in receipt.items() if k != "receipt_digest"})
        if "packet_digest" in value:
            value["packet_digest"] = profile_digest(
                "get-packet", {k: v for k, v in value.items() if k != "packet_digest"}
            )
    if tool == SEARCH and "response_digest" in value:
        value["response_digest"] = profile_digest("search-response",
                                                  {k: v for k, v in value.items() if k != "response_digest"})
    return value


@variant("own-record-ids", freedom="record ids are copied exactly as returned; how a server mints them is its own")
def own_record_ids(server: VariantServer) -> None:
    """record_id is this server's own: the reference's base32 reversed, so every record has another id."""
    keys = frozenset({"record_id"})

    async def inward(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolRequestParams:
        if isinstance(params.arguments, dict):
            return params.model_copy(update={"arguments": _map_ids(params.arguments, keys, inner_record)})
        return params

    def outward(params: Any, envelope: dict[str, Any]) -> dict[str, Any]:
        output = envelope.get("output")
        if envelope.get("ok") is True and isinstance(output, dict) and isinstance(output.get("value"), dict):
            output["value"] = redigest(params.name, _map_ids(output["value"], keys, outer_record))
        return envelope

    server.before.append(inward)
    server.rewrites.append(outward)


def outer_cursor(inner: str) -> str:
    """This server's cursor: the reference's sealed token reversed, with letter case swapped.

    It is exactly as long as the reference's, so a page the reference fits into max_packet_bytes still fits."""
    return inner[::-1].swapcase()


def inner_cursor(outer: str) -> str:
    """The reference's cursor behind one this server handed out (anything else stays unknown, and stale)."""
    return outer.swapcase()[::-1]


@variant("own-page-cursors", freedom="page_cursor is opaque, copied exactly as returned")
def own_page_cursors(server: VariantServer) -> None:
    """next_page_cursor is this server's own token (the reference's, reversed and case-swapped)."""
    keys = frozenset({"page_cursor"})

    async def inward(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolRequestParams:
        if params.name == SEARCH and isinstance(params.arguments, dict):
            return params.model_copy(update={"arguments": _map_ids(params.arguments, keys, inner_cursor)})
        return params

    def outward(params: Any, envelope: dict[str, Any]) -> dict[str, Any]:
        output = envelope.get("output")
        value = output.get("value") if isinstance(output, dict) else None
        if params.name == SEARCH and isinstance(value, dict) and isinstance(value.get("next_page_cursor"), str):
            value["next_page_cursor"] = outer_cursor(value["next_page_cursor"])
            redigest(SEARCH, value)
        return envelope

    server.before.append(inward)
    server.rewrites.append(outward)


CAPTURE, ADMIT, WITHDRAW = "engram_memory_capture", "engram_memory_request_admission", "engram_memory_withdraw"
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

    _walk(schema, visit)
    return schema


class CandidateIds:
    """The two-way map, kept in a file beside the store: every server process on the store shares it, and a
    lookup costs one indexed read whether the id was issued or not (a cache would make unknown ids slower)."""

    def __init__(self, store: Path) -> None:
        self._lock = threading.Lock()
        self._db = sqlite3.connect(store.with_name(store.name + ".candidate-ids"), isolation_level=None,
                                   check_same_thread=False, timeout=30)
        self._db.execute("CREATE TABLE IF NOT EXISTS ids (outer_id TEXT PRIMARY KEY, inner_id TEXT NOT NULL)")

    def issue(self, inner: str) -> str:
        outer = outer_candidate(inner)
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO ids (outer_id, inner_id) VALUES (?, ?)", (outer, inner))
        return outer

    def inner(self, outer: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT inner_id FROM ids WHERE outer_id = ?", (outer,)).fetchone()
        return row[0] if row else None


@variant(
    "opaque-candidate-ids", freedom="candidate_id is opaque, copied exactly as returned; its form is the server's own"
)
def opaque_candidate_ids(server: VariantServer) -> None:
    """candidate_id is 'cand-' and a UUID4-shaped keyed hash of the reference's id; schemas call it any string."""
    ids = CandidateIds(server.config.store)

    def translate(value: Any) -> Any:
        # Only a value this server's schema accepts is mapped; anything else reaches the reference as sent and is
        # refused there as it would be (a lone surrogate, an empty or overlong string, another type).
        if not isinstance(value, str) or not 1 <= len(value) <= OPAQUE_CANDIDATE["maxLength"] \
                or any(0xD800 <= ord(ch) <= 0xDFFF for ch in value):
            return value
        return ids.inner(value) or _never_issued(value)

    async def inward(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolRequestParams:
        if (
            params.name in (ADMIT, WITHDRAW)
            and isinstance(params.arguments, dict)
            and "candidate_id" in params.arguments
        ):
            arguments = {**params.arguments, "candidate_id": await anyio.to_thread.run_sync(
                translate, params.arguments["candidate_id"])}
            return params.model_copy(update={"arguments": arguments})
        return params

    def outward(params: Any, envelope: dict[str, Any]) -> dict[str, Any]:
        output = envelope.get("output")
        value = output.get("value") if envelope.get("ok") is True and isinstance(output, dict) else None
        if params.name == CAPTURE and isinstance(value, dict) and isinstance(value.get("candidate_id"), str):
            value["candidate_id"] = ids.issue(value["candidate_id"])
        outcome = value.get("outcome") if params.name == ADMIT and isinstance(value, dict) else None
        if isinstance(outcome, dict) and isinstance(outcome.get("candidate_id"), str):
            outcome["candidate_id"] = ids.issue(outcome["candidate_id"])
            if outcome.get("status") == "pending_adjudication":  # this receipt covers the candidate's id (EMC-HP-047)
                outcome["transaction_receipt_digest"] = receipt_digest(
                    "admission-pending", {"candidate_id": outcome["candidate_id"], "cursor": outcome.get("cursor"),
                                          "decision_receipt_digest": outcome.get("decision_receipt_digest")})
        return envelope

    server.before.append(inward)
    server.rewrites.append(outward)
    _retool(server, lambda name, tool: tool.model_copy(update={
        "input_schema": _opaque_candidate_schema(tool.input_schema),
        "output_schema": _opaque_candidate_schema(tool.output_schema) if tool.output_schema is not None else None}))


@variant("cancelled-call-answered", freedom="a cancelled request may get no answer, the JSON-RPC error -32800 or a "
         "CANCELLED envelope (EMC-HP-056)")
def cancelled_call_answered(server: VariantServer) -> None:
    """A cancelled call is stopped and its request still ended: withdraw with -32800, the rest with CANCELLED."""

    def answer(request_id: Any, tool: str, audit_id: str) -> Any:
        if tool == "engram_memory_withdraw":
            return types.JSONRPCError(jsonrpc="2.0", id=request_id,
                                      error=types.ErrorData(code=-32800, message="Request cancelled"))
        return _faulty().envelope_answer(request_id, "CANCELLED", audit_id)

    _faulty().answer_cancelled_calls(server, answer)


# -- arguments: readings the contract leaves open ----------------------------------------------------------------------


def _judged(violations: list[Violation]) -> Verdict:
    """A verdict from its violations, the code chosen as the oracle chooses it."""
    unique = tuple(dict.fromkeys(violations))
    codes = {v.code for v in unique}
    return Verdict(unique, next((c for c in CONTRACT.code_precedence if c in codes), None))


def _wrap_verdict(server: VariantServer, change: Callable[[str, Any, Verdict], Verdict]) -> None:
    """Judge arguments by ``change(tool, arguments, the reference's verdict)``."""
    reference = server.oracle.verdict

    def verdict(tool: str, arguments: Any, *, now: Any = None) -> Verdict:
        return change(tool, arguments, reference(tool, arguments, now=now))

    server.oracle.verdict = verdict  # type: ignore[method-assign]


ARGUMENTS_MAX = CONTRACT.limit("arguments.max_bytes")


def escaped_size(arguments: Any) -> int:
    """The length of the arguments as compact JSON with every non-ASCII character escaped, keys sorted."""
    return len(json.dumps(arguments, ensure_ascii=True, separators=(",", ":"), sort_keys=True).encode("ascii"))


@variant("size-measured-escaped", freedom="EMC-ENC-005: 'El objeto de argumento serializado tiene como máximo "
         "1.048.576 bytes UTF-8' names no serialisation")
def size_measured_escaped(server: VariantServer) -> None:
    """The argument size bound is measured on compact ASCII-escaped JSON, so non-ASCII text weighs more."""
    code = CONTRACT.rules["arguments_size"].code

    def change(tool: str, arguments: Any, verdict: Verdict) -> Verdict:
        if escaped_size(arguments) > ARGUMENTS_MAX:
            return _judged([Violation("arguments_size", code, "")])
        return verdict

    _wrap_verdict(server, change)


@variant("digest-invalid-schema", freedom="EMC-ENC-007: INVALID_SCHEMA and INVALID_DIGEST share one row of the "
         "error table")
def digest_invalid_schema(server: VariantServer) -> None:
    """A malformed digest is refused INVALID_SCHEMA, never INVALID_DIGEST."""

    def change(tool: str, arguments: Any, verdict: Verdict) -> Verdict:
        if verdict.code != "INVALID_DIGEST":
            return verdict
        return Verdict(tuple(Violation(v.rule, "INVALID_SCHEMA", v.path) for v in verdict.violations), "INVALID_SCHEMA")

    _wrap_verdict(server, change)


def _family_refs(arguments: Any) -> list[Any]:
    payload = arguments.get("payload") if isinstance(arguments, dict) else None
    reconciliation = payload.get("reconciliation") if isinstance(payload, dict) else None
    refs = reconciliation.get("family_refs") if isinstance(reconciliation, dict) else None
    return refs if isinstance(refs, list) else []


@variant("family-refs-code-point-order", freedom="EMC-CAP-011: family_refs are 'ordenados', in no named order")
def family_refs_code_point_order(server: VariantServer) -> None:
    """reconciliation.family_refs must ascend strictly in Unicode code-point order, not UTF-16 code-unit order."""
    code = CONTRACT.rules["family_refs_sorted"].code

    def change(tool: str, arguments: Any, verdict: Verdict) -> Verdict:
        if tool != CAPTURE or any(v.rule in ("unicode_scalars", "arguments_size") for v in verdict.violations):
            return verdict  # judged before anything else, and alone
        kept = [v for v in verdict.violations if v.rule != "family_refs_sorted"]
        refs = _family_refs(arguments)
        kept += [Violation("family_refs_sorted", code, f"/payload/reconciliation/family_refs/{i}")
                 for i in range(1, len(refs))
                 if isinstance(refs[i - 1], str) and isinstance(refs[i], str) and refs[i - 1] >= refs[i]]
        return _judged(kept)

    _wrap_verdict(server, change)


CURSOR_MAX = CONTRACT.limit("page_cursor.max_bytes")


@variant("long-cursors", freedom="EMC-HOST-002 asks for closed schemas; the page_cursor byte bound is this "
         "project's (EMC-HP-050)")
def long_cursors(server: VariantServer) -> None:
    """page_cursor has no upper bound: an overlong one is not refused INVALID_SCHEMA but answered STALE_PAGE."""

    def change(tool: str, arguments: Any, verdict: Verdict) -> Verdict:
        cursor = arguments.get("page_cursor") if tool == SEARCH and isinstance(arguments, dict) else None
        if not isinstance(cursor, str) or len(cursor.encode("utf-8", "surrogatepass")) <= CURSOR_MAX:
            return verdict
        # A long string breaks only the bound (its type and minimum hold): those are the violations dropped.
        return _judged([v for v in verdict.violations
                        if not (v.path == "/page_cursor" and v.rule in ("schema_keyword", "utf8_bytes"))])

    def unbounded(name: str, tool: types.Tool) -> types.Tool:
        if name != SEARCH:
            return tool
        schema = copy.deepcopy(tool.input_schema)
        cursor = schema["properties"]["page_cursor"]
        cursor.pop("maxLength", None)
        cursor.get("x-utf8Bytes", {}).pop("maximum", None)
        return tool.model_copy(update={"input_schema": schema})

    _wrap_verdict(server, change)
    _retool(server, unbounded)


# -- values and envelopes: shapes the contract does not fix ------------------------------------------------------------


def _value(envelope: dict[str, Any]) -> dict[str, Any] | None:
    """A success envelope's value, or None."""
    output = envelope.get("output")
    value = output.get("value") if envelope.get("ok") is True and isinstance(output, dict) else None
    return value if isinstance(value, dict) else None


@variant("value-shapes-of-its-own", freedom="EMC-ENV-004 lists a value's members, not their inner shapes; "
         "rank_receipt's content is the server's")
def value_shapes_of_its_own(server: VariantServer) -> None:
    """A rank_receipt of its own, an extra member in every record, and get's valid_as_of as a string."""

    def rewrite(params: Any, envelope: dict[str, Any]) -> dict[str, Any]:
        value = _value(envelope)
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

    server.rewrites.append(rewrite)
    _retool(server, lambda name, tool: tool.model_copy(update={"output_schema": None}))  # it pins the shapes


def acme_digest(name: str, value: Any) -> str:
    """This server's own digest domain: sha256 over 'acme-memory/NAME' and the canonical bytes."""
    return "sha256:" + hashlib.sha256(b"acme-memory/" + name.encode() + b"\n" + canonical_bytes(value)).hexdigest()


@variant("own-digest-domains", freedom="EMC-GET-002 and EMC-HP-046: how packet_digest, receipt_digest and "
         "response_digest are computed is this project's profile")
def own_digest_domains(server: VariantServer) -> None:
    """packet_digest, read_receipt.receipt_digest and response_digest are digests in domains of its own."""

    def without(value: dict[str, Any], key: str) -> dict[str, Any]:
        return {k: v for k, v in value.items() if k != key}

    def rewrite(params: Any, envelope: dict[str, Any]) -> dict[str, Any]:
        value = _value(envelope)
        if value is None:
            return envelope
        receipt = value.get("read_receipt")
        if params.name == GET and isinstance(receipt, dict) and "receipt_digest" in receipt:
            receipt["receipt_digest"] = acme_digest("read-receipt", without(receipt, "receipt_digest"))
        if params.name == GET and "packet_digest" in value:
            value["packet_digest"] = acme_digest("packet", without(value, "packet_digest"))
        if params.name == SEARCH and "response_digest" in value:
            value["response_digest"] = acme_digest("page", without(value, "response_digest"))
        return envelope

    server.rewrites.append(rewrite)


@variant("envelope-extra-member", freedom="EMC-ENV-002/003 list the envelope's members; 'no other members' is a "
         "profile pin (EMC-ENV-009)")
def envelope_extra_member(server: VariantServer) -> None:
    """Every envelope carries an extra x_trace member, in structuredContent and text alike; outputSchema allows it."""

    def render(envelope: dict[str, Any]) -> types.CallToolResult:
        return tool_result({**envelope, "x_trace": "trace-" + uuid.uuid4().hex})

    def opened(name: str, tool: types.Tool) -> types.Tool:
        schema = copy.deepcopy(tool.output_schema)

        def visit(node: dict[str, Any]) -> None:
            if isinstance(node.get("properties"), dict) and "auditId" in node["properties"]:
                node.pop("additionalProperties", None)  # the envelope's own object; its members stay closed

        _walk(schema, visit)
        return tool.model_copy(update={"output_schema": schema})

    server.render = render
    _retool(server, opened)


# -- lifecycle and idempotency: codes and orders the contract leaves open ----------------------------------------------


FORGET = "engram_memory_forget"
MUTATIONS = (CAPTURE, ADMIT, WITHDRAW, FORGET)


def _refusal(code: str, audit_id: str) -> dict[str, Any]:
    return envelope(Outcome(code=code), audit_id)


def _target_state(server: VariantServer, binding: Binding, tool: str, ident: str) -> str | None:
    """The state of the call's target in the bound scope (a worker thread's job), None when it has none there.

    One read keyed by the bound scope and the id: it costs the same for an unknown id and another scope's."""
    with server.store.snapshot() as reader:
        found: Any = (reader.record(scope_of(binding), ident) if tool == FORGET
                      else reader.candidate(scope_of(binding), ident))
    return None if found is None else str(found.state)


def _target(tool: str, params: types.CallToolRequestParams) -> str | None:
    name = CONTRACT.tools[tool].target if tool in CONTRACT.tools else None
    ident = params.arguments.get(name) if name and isinstance(params.arguments, dict) else None
    return ident if isinstance(ident, str) else None


@variant("lifecycle-codes", freedom="EMC-LIFE-011: ILLEGAL_TRANSITION, ALREADY_TERMINAL — 'El estado del ciclo de "
         "vida lo prohíbe'; NOT_FOUND is for an unknown or out-of-scope target (§0)")
def lifecycle_codes(server: VariantServer) -> None:
    """A target of the bound scope the lifecycle no longer lets move is ILLEGAL_TRANSITION or ALREADY_TERMINAL."""

    async def after(ctx: Any, params: types.CallToolRequestParams, envelope: dict[str, Any]) -> dict[str, Any]:
        error = envelope.get("error")
        ident = _target(params.name, params)
        if params.name not in (ADMIT, WITHDRAW, FORGET) or not isinstance(error, dict) \
                or error.get("code") != "NOT_FOUND" or ident is None:
            return envelope
        binding = bound(server)
        if binding is None:
            return envelope
        state = await anyio.to_thread.run_sync(_target_state, server, binding, params.name, ident)
        if state is None:
            return envelope  # unknown here: NOT_FOUND, whether or not another scope holds the id
        code = "ALREADY_TERMINAL" if params.name == FORGET and state == "tombstoned" else "ILLEGAL_TRANSITION"
        return _refusal(code, envelope["auditId"])

    server.after.append(after)


@variant("admission-replay-duplicate-exact", freedom="EMC-IDEM-006: 'repetición (duplicate_exact o replayed: "
         "true)'; the admission meaning of duplicate_exact is unverified")
def admission_replay_duplicate_exact(server: VariantServer) -> None:
    """A repeated admission answers outcome.status duplicate_exact (still replayed: true, without record_id)."""

    def rewrite(params: Any, envelope: dict[str, Any]) -> dict[str, Any]:
        value = _value(envelope)
        outcome = value.get("outcome") if params.name == ADMIT and value is not None else None
        if value is not None and value.get("replayed") is True and isinstance(outcome, dict):
            outcome["status"] = "duplicate_exact"
            outcome.pop("record_id", None)
        return envelope

    server.rewrites.append(rewrite)


def _purpose(tool: str, arguments: dict[str, Any]) -> Any:
    """The purpose_ref a call names (capture's is in its payload), None for a tool without one."""
    payload = arguments.get("payload")
    return payload.get("purpose_ref") if tool == CAPTURE and isinstance(payload, dict) else arguments.get("purpose_ref")


def _reaches_operation(server: VariantServer, ctx: ServerRequestContext, tool: str) -> Binding | None:
    """The binding of a call the reference would judge on its arguments and target (bound, named by the host,
    granted, its deadline not passed), else None: the reference answers the rest itself."""
    binding = server._trusted_binding(ctx)
    if binding is None or binding.audit_id is None or deadline_passed(binding):
        return None
    return binding if tool in server.config.tools_for(scope_of(binding), binding.principal) else None


@variant("lookup-before-gate", freedom="EMC-HP-022's order is this project's: the contract does not say whether "
         "the confirmation gate or the target lookup comes first")
def lookup_before_gate(server: VariantServer) -> None:
    """withdraw and forget of a target the bound scope does not hold are NOT_FOUND at once, never confirmed first."""

    async def intercept(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> dict[str, Any] | None:
        ident = _target(params.name, params) if params.name in (WITHDRAW, FORGET) else None
        binding = _reaches_operation(server, ctx, params.name) if ident is not None else None
        if binding is None or ident is None or not server.oracle.verdict(params.name, params.arguments).valid:
            return None
        if await anyio.to_thread.run_sync(_target_state, server, binding, params.name, ident) is not None:
            return None
        await server._audit_quietly(binding, params.name, "NOT_FOUND")
        return _refusal("NOT_FOUND", str(binding.audit_id))

    server.intercept.append(intercept)


RESERVING = frozenset({"UNAUTHORIZED", "NOT_FOUND", "ILLEGAL_TRANSITION", "ALREADY_TERMINAL"})


class RefusedKeys:
    """Keys used up by a refusal, in a file beside the store: every server process on the store shares them."""

    def __init__(self, store: Path) -> None:
        self._lock = threading.Lock()
        self._db = sqlite3.connect(store.with_name(store.name + ".refused-keys"), isolation_level=None,
                                   check_same_thread=False, timeout=30)
        self._db.execute("CREATE TABLE IF NOT EXISTS refused (tenant TEXT, workspace TEXT, principal TEXT, "
                         "idempotency_key TEXT, intent TEXT NOT NULL, code TEXT NOT NULL, "
                         "PRIMARY KEY (tenant, workspace, principal, idempotency_key))")

    def find(self, binding: Binding, key: str) -> tuple[str, str] | None:
        with self._lock:
            row = self._db.execute("SELECT intent, code FROM refused WHERE tenant = ? AND workspace = ? AND "
                                   "principal = ? AND idempotency_key = ?",
                                   (binding.tenant, binding.workspace, binding.principal, key)).fetchone()
        return (row[0], row[1]) if row else None

    def bind(self, binding: Binding, key: str, intent: str, code: str) -> None:
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO refused VALUES (?, ?, ?, ?, ?, ?)",
                             (binding.tenant, binding.workspace, binding.principal, key, intent, code))


@variant("refusals-reserve-keys", freedom="whether a refusal uses an idempotency key up the contract does not say "
         "(EMC-HP-071 is this project's choice)")
def refusals_reserve_keys(server: VariantServer) -> None:
    """A definite refusal of valid arguments binds its key: the same call is refused again, another DIGEST_CONFLICT."""
    keys = RefusedKeys(server.config.store)

    def keyed(params: types.CallToolRequestParams) -> tuple[str, dict[str, Any]] | None:
        arguments = params.arguments
        if params.name not in MUTATIONS or not isinstance(arguments, dict):
            return None
        key = arguments.get("idempotency_key")
        return (key, arguments) if isinstance(key, str) else None

    def intent(binding: Binding, tool: str, arguments: dict[str, Any]) -> str:
        arguments = _integral(arguments)  # as the reference keys them: 10.0 is the integer 10 (EMC-ENC-012)
        return idempotency_intent(tool, operation_target(tool, arguments), arguments, binding)

    async def intercept(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> dict[str, Any] | None:
        call = keyed(params)
        binding = _reaches_operation(server, ctx, params.name) if call is not None else None
        if binding is None or call is None or not server.oracle.verdict(params.name, call[1]).valid \
                or _purpose(params.name, call[1]) not in (None, binding.purpose_ref):
            return None  # the reference refuses these first, whatever the key
        held = await anyio.to_thread.run_sync(keys.find, binding, call[0])
        if held is None:
            return None
        code = held[1] if held[0] == intent(binding, params.name, call[1]) else "DIGEST_CONFLICT"
        await server._audit_quietly(binding, params.name, code)
        return _refusal(code, str(binding.audit_id))

    async def after(ctx: Any, params: types.CallToolRequestParams, envelope: dict[str, Any]) -> dict[str, Any]:
        error = envelope.get("error")
        call = keyed(params)
        if call is None or not isinstance(error, dict) or error.get("code") not in RESERVING:
            return envelope
        binding = bound(server)
        if binding is not None and server.oracle.verdict(params.name, call[1]).valid:
            await anyio.to_thread.run_sync(keys.bind, binding, call[0], intent(binding, params.name, call[1]),
                                           error["code"])
        return envelope

    server.intercept.append(intercept)
    server.after.append(after)


@variant("reference-ids-reusable", freedom="EMC-GATE-003 binds a confirmation to capability, target and operation "
         "digest; single use of a reference id is this project's (EMC-HP-065)")
def reference_ids_reusable(server: VariantServer) -> None:
    """A host's confirmation reference is checked as the reference checks it, but its id is never spent."""

    async def reusable(token: Any, tool: str, binding: Any, arguments: Any) -> float | None:
        verdict = check_reference(token, server.config.trusted_keys, audience=server.config.audience, tool=tool,
                                  target=operation_target(tool, arguments), arguments=arguments, binding=binding,
                                  ttl=server.config.confirmation.reference_ttl_seconds)
        return verdict.approved_at if verdict.approved else None

    server._confirm_reference = reusable  # type: ignore[method-assign]


# -- host context and discovery ----------------------------------------------------------------------------------------


UNTRUSTED = CONTRACT.protocol_errors["trusted_context_unavailable"]


def _untrusted() -> MCPError:
    return MCPError(code=UNTRUSTED.jsonrpc_code, message=UNTRUSTED.message)


@variant("unconfigured-scope-32603", freedom="EMC-HOST-007 / EMC-DISC-004: §0 names '-32603 ... principal, tenant o "
         "fuente no coincidente' as well as '-32602 Unknown tool'")
def unconfigured_scope_32603(server: VariantServer) -> None:
    """A verified binding whose scope grants its principal nothing gets -32603, on tools/call and tools/list."""

    def no_memory(binding: Binding | None) -> bool:
        return binding is not None and not server.config.tools_for(scope_of(binding), binding.principal)

    async def intercept(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> None:
        binding = server._trusted_binding(ctx)
        if binding is not None and binding.audit_id is not None and no_memory(binding):
            tool = params.name if params.name in CONTRACT.tools else "unknown"
            await server._audit_quietly(binding, tool, str(UNTRUSTED.jsonrpc_code))
            raise _untrusted()

    def listed(result: types.ListToolsResult) -> types.ListToolsResult:
        if no_memory(bound(server)):
            raise _untrusted()
        return result

    server.intercept.append(intercept)
    server.list_rewrites.append(listed)


CLOCK_TOOL = types.Tool(
    name="acme_clock_now", title="Server clock",
    description="Reads this server's clock: the current UTC instant. Reads and writes no memory.",
    input_schema={"type": "object", "properties": {}, "additionalProperties": False},
    annotations=types.ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=False,
                                      open_world_hint=False),
)


@variant("extra-tool", freedom="EMC-DISC-001 forbids maintenance tools, not other tools")
def extra_tool(server: VariantServer) -> None:
    """tools/list also offers acme_clock_now, a harmless tool that reads the server's clock."""

    async def intercept(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> types.CallToolResult | None:
        if params.name != CLOCK_TOOL.name:
            return None
        if server._trusted_binding(ctx) is None:
            raise _untrusted()
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return types.CallToolResult(content=[types.TextContent(type="text", text=now)])

    server.intercept.append(intercept)
    server.list_rewrites.append(lambda result: result.model_copy(update={"tools": [*result.tools, CLOCK_TOOL]}))


CLAIMS_SCHEMA = CONTRACT.data_schema("binding-claims")
KNOWN_CLAIMS = frozenset(CLAIMS_SCHEMA["properties"])
CLAIMS_VALID = CONTRACT.validator(CLAIMS_SCHEMA)
LENIENT_REASONS = frozenset({"bad_claims", "too_long_lived"})  # the profile's closed claims and lifetime bound


def _finite(value: Any) -> bool:
    """No NaN or infinity anywhere in a claim set (JSON parsers let them through)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict | list):
        return all(_finite(v) for v in (value.values() if isinstance(value, dict) else value))
    return True


def lenient_binding_of(token: str, trusted: Any, audience: str, now: float | None = None) -> Binding | None:
    """The binding a server that ignores unknown claims and sets no lifetime bound reads, or None.

    Everything else is judged as the reference judges it: header, trusted key and signature, the known claims'
    schema, exp after iat, issuer and tenant trust, audience, expiry and not-before, with the same skew."""
    with contextlib.suppress(jwt.PyJWTError, KeyError, TypeError):
        header = jwt.get_unverified_header(token)
        host = trusted.get(header["kid"]) if set(header) == {"alg", "kid", "typ"} else None
        if not isinstance(host, TrustedHost) or header["alg"] != BINDING_ALGORITHM \
                or header["typ"] != BINDING_TOKEN_TYPE:
            return None
        claims = jwt.decode(token, host.public_key, algorithms=[BINDING_ALGORITHM], options={
            "verify_signature": True, "verify_exp": False, "verify_nbf": False, "verify_iat": False,
            "verify_aud": False, "verify_iss": False})
        known = {k: v for k, v in claims.items() if k in KNOWN_CLAIMS}
        if not _finite(claims) or not CLAIMS_VALID.is_valid(known) or known["exp"] <= known["iat"]:
            return None
        clock = time.time() if now is None else now
        if known["iss"] not in host.issuers or known["tenant"] not in host.tenants \
                or (host.scopes is not None and (known["tenant"], known["workspace"]) not in host.scopes) \
                or known["aud"] != audience or clock >= known["exp"] + BINDING_CLOCK_SKEW \
                or max(known["iat"], known.get("nbf", 0)) > clock + BINDING_CLOCK_SKEW:
            return None
        return Binding(tenant=known["tenant"], workspace=known["workspace"], principal=known["principal"],
                       agent_id=known["agent_id"], session=known["session"], purpose_ref=known["purpose_ref"],
                       issuer=known["iss"], audience=known["aud"], issued_at=known["iat"], expires_at=known["exp"],
                       token_id=known["jti"], audit_id=known.get("audit_id"), deadline=known.get("deadline"))
    return None


@variant("lenient-binding", freedom="EMC-HP-069 (closed claims) and EMC-HP-007 (maximum lifetime) are this "
         "project's profile choices")
def lenient_binding(server: VariantServer) -> None:
    """A binding with an extra claim, or one outliving binding.max_lifetime, is trusted when otherwise valid."""
    reference = server._binding
    keys, audience = server.config.trusted_keys, server.config.audience

    def binding(ctx: ServerRequestContext) -> Binding | None:
        try:
            return reference(ctx)
        except MCPError:
            token = (ctx.meta or {}).get(HOST_BINDING_META_KEY)
            if not isinstance(token, str):
                raise
            try:  # again, for the reason the reference logged
                verify_binding(token, keys, audience=audience)
            except BindingRejected as rejected:
                found = lenient_binding_of(token, keys, audience) if rejected.reason in LENIENT_REASONS else None
                if found is not None:
                    return found
            raise

    server._binding = binding  # type: ignore[method-assign]


# -- running the harness against a variant --------------------------------------------------------------------------


_LOADING = threading.Lock()  # runs start from several threads; the module must be loaded once, whole


def _faulty() -> ModuleType:
    """tests/faulty/targets.py, for its run machinery (one command line, one report reader for both catalogs)."""
    name = "engram_faulty_targets"
    with _LOADING:
        if name in sys.modules:
            return sys.modules[name]
        path = Path(__file__).resolve().parent.parent / "faulty" / "targets.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the class is built
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
        return module


def variant_target(name: str, config: Path) -> str:
    import shlex

    return "stdio:" + shlex.join([sys.executable, str(Path(__file__).resolve()), name, "--config", str(config)])


VERDICT_LINE = re.compile(r"^VERDICT: (.*)$", re.MULTILINE)
FLAGGED = {"FAIL", "ERROR", "XPASS"}


def footer_verdicts(report: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(scored, unscored) requirement verdicts from a report's footer: the level's requirements, and the rest
    (the profile pins a contract-level run reports without scoring)."""
    scored: dict[str, str] = {}
    unscored: dict[str, str] = {}
    if report.exists():
        for line in report.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            if entry.get("type") == "footer":
                for rid, verdict in entry["requirements"].items():
                    (scored if verdict.get("scored") else unscored)[rid] = verdict["verdict"]
    return scored, unscored


def certified(result: Any) -> tuple[bool, str]:
    """Whether a full run certified the variant: exit 0, a conformant verdict, no scored requirement judged
    FAIL, ERROR or XPASS, and no check ending ERROR (the harness failing is never a certificate)."""
    if result.problem:
        return False, result.problem
    wrong = []
    if result.exit_code != 0:
        wrong.append(f"exit code {result.exit_code}")
    verdicts = VERDICT_LINE.findall(result.output)
    if not verdicts or not verdicts[-1].startswith("conformant"):
        wrong.append(f"verdict {verdicts[-1] if verdicts else 'missing'!r}")
    scored, _ = getattr(result, "footer", ({}, {}))
    flagged = sorted(f"{rid}={v}" for rid, v in scored.items() if v in FLAGGED)
    if flagged:
        wrong.append("scored requirements " + ", ".join(flagged))
    errors = sorted(c for c, s in result.statuses.items() if "ERROR" in s)
    if errors:
        wrong.append("ERROR in " + ", ".join(errors))
    return not wrong, "; ".join(wrong)


def profile_differences(result: Any) -> list[str]:
    """The profile pins the variant does not keep: reported by the run, never scored at the contract level."""
    _, unscored = getattr(result, "footer", ({}, {}))
    return sorted(rid for rid, v in unscored.items() if v in FLAGGED)


def run_variant(item: Variant, template: Path, workdir: Path, *, timeout: float = 300.0) -> Any:
    """A full conformance run (every check, both eras, default level) against the variant over stdio."""
    faulty = _faulty()
    config = faulty.fresh_copy(template, workdir)
    result = faulty.run(item.name, variant_target(item.name, config / "server.toml"),
                        config / "conformance-profile.toml", [], workdir, era="both", timeout=timeout)
    result.footer = footer_verdicts(workdir / "report" / "report.jsonl")
    return result


# -- command line ---------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve a benign variant of the reference server over stdio.")
    parser.add_argument("variant", nargs="?", help="a variant name (see --list)")
    parser.add_argument("--config", type=Path, help="the server.toml of an engram-reference init")
    parser.add_argument("--list", action="store_true", help="print the catalog as JSON lines")
    args = parser.parse_args(argv)
    if args.list:
        for item in VARIANTS.values():
            print(json.dumps({"name": item.name, "freedom": item.freedom, "summary": item.summary}))
        return 0
    if args.variant not in VARIANTS or args.config is None:
        parser.error("give a variant from --list and --config")
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format=f"benign[{args.variant}]: %(message)s")
    server = VariantServer(load_config(args.config))
    VARIANTS[args.variant].apply(server)
    with contextlib.suppress(KeyboardInterrupt):
        run_stdio(server)  # as engram-reference serves: the bounded stdio transport
    return 0


# -- transport variants -------------------------------------------------------------------------------------------


@variant("logs-on-stderr", freedom="MCP's stdio transport lets a server write anything on stderr; stdout is MCP's")
def logs_on_stderr(server: VariantServer) -> None:
    """A banner at start and a log line for every tools/call, all on stderr."""
    print("Engram memory server starting (logs on stderr)", file=sys.stderr, flush=True)

    async def log(ctx: Any, params: Any) -> Any:
        print(f"tools/call {params.name}", file=sys.stderr, flush=True)
        return params

    server.before.append(log)


if __name__ == "__main__":
    raise SystemExit(main())
