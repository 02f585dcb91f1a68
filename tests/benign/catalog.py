"""The benign catalog's registry, and what its variants share.

A variant is a function of a ``Seams`` (tests/variant_server.py) that records what another
implementer could legitimately choose differently: its own constant error texts, how its advertised
schemas are laid out, the order of tools/list, its name and version, the wording of titles and
descriptions, how the text copy is formatted, the form of its opaque ids, its timing, extra ``_meta``.
Nothing in ``reference/`` knows about them, and no variant assigns to a member of the server: each
goes through a port, a subclass of an engine part, or a hook at the MCP edge.

A variant names the freedom it uses: what the contract leaves open. It must be certified by a full
``conformance`` run at the default (contract) level, over stdio, in both eras. One that is not
certified shows a harness check that judges bytes instead of behaviour: the check is fixed, the
variant is never excused.
"""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError

from engram_mcp.contract import load, profile_digest
from engram_mcp.contract.binding import Binding
from engram_mcp.contract.validation import Verdict
from engram_mcp.reference._envelope import Outcome, envelope
from engram_mcp.reference._gates import Approval
from engram_mcp.reference._server import protocol_error
from engram_mcp.reference.server import CallContext, ConfirmationGate, GateCall
from tests.faulty.catalog import ChangedOracle
from tests.variant_server import Seams, Served, Step, VariantServer

log = logging.getLogger("benign")

CONTRACT = load()
SEARCH, GET, CAPTURE = "engram_memory_search", "engram_memory_get", "engram_memory_capture"
ADMIT, WITHDRAW, FORGET = "engram_memory_request_admission", "engram_memory_withdraw", "engram_memory_forget"
MUTATIONS = (CAPTURE, ADMIT, WITHDRAW, FORGET)
UNTRUSTED = CONTRACT.protocol_errors["trusted_context_unavailable"]


@dataclass(frozen=True)
class Variant:
    name: str
    freedom: str  # what the contract leaves open that this variant uses
    summary: str
    apply: Callable[[Seams], None]


VARIANTS: dict[str, Variant] = {}


def variant(name: str, *, freedom: str) -> Callable[[Callable[[Seams], None]], Callable[[Seams], None]]:
    def register(apply: Callable[[Seams], None]) -> Callable[[Seams], None]:
        if name in VARIANTS:
            raise ValueError(f"variant {name} is defined twice")
        summary = (apply.__doc__ or "").strip().splitlines()[0]
        VARIANTS[name] = Variant(name, freedom, summary, apply)
        return apply

    return register


# -- JSON values and envelopes -----------------------------------------------------------------------------------------


def walk(node: Any, visit: Callable[[dict[str, Any]], None]) -> None:
    """``visit`` every object of a JSON value, outermost first."""
    if isinstance(node, dict):
        visit(node)
        for value in node.values():
            walk(value, visit)
    elif isinstance(node, list):
        for item in node:
            walk(item, visit)


def value_of(envelope: dict[str, Any]) -> dict[str, Any] | None:
    """A success envelope's value, or None."""
    output = envelope.get("output")
    value = output.get("value") if envelope.get("ok") is True and isinstance(output, dict) else None
    return value if isinstance(value, dict) else None


def map_ids(node: Any, keys: frozenset[str], change: Callable[[str], str]) -> Any:
    """The JSON value with every string member named in ``keys`` changed, at any depth."""
    if isinstance(node, dict):
        return {k: change(v) if k in keys and isinstance(v, str) else map_ids(v, keys, change) for k, v in node.items()}
    if isinstance(node, list):
        return [map_ids(item, keys, change) for item in node]
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


def refusal(code: str, audit_id: str) -> dict[str, Any]:
    """The envelope of a refusal with ``code``."""
    return envelope(Outcome(code=code), audit_id)


# -- the server's edge -------------------------------------------------------------------------------------------------


def untrusted() -> MCPError:
    """The constant -32603: the host context the call needs is unavailable."""
    return protocol_error(UNTRUSTED)


def bound(seams: Seams, request: ServerRequestContext) -> Binding | None:
    """The verified binding of the request being served (None without one); asked once the reference has
    verified it, so this never raises for a binding the reference refused."""
    return seams.server.trusted_binding(request)


async def journal_refusal(server: VariantServer, binding: Binding, tool: str, outcome: str) -> None:
    """Journal a call refused before the reference saw it, as the reference journals its own refusals; a failure to
    record never changes the refusal the client gets."""
    audit_id = binding.audit_id
    assert audit_id is not None, "only a call the host named is refused here"
    try:
        await anyio.to_thread.run_sync(server.audit.append, audit_id, binding, tool, outcome)
    except Exception:
        log.exception("audit journal write failed")


def judge_arguments(seams: Seams, change: Callable[[str, Any, Verdict], Verdict]) -> None:
    """Judge arguments by ``change(tool, arguments, the reference's verdict)``."""
    seams.port("oracle", lambda oracle: ChangedOracle(oracle, lambda tool, arguments, now, judged: change(
        tool, arguments, judged)))


def changed_reference_gate(seams: Seams, change: Callable[[Any], ConfirmationGate]) -> None:
    """Judge host confirmation references by ``change(the configured HostReferenceGate)``."""
    seams.port("gates", lambda gates: dataclasses.replace(gates, reference=change(gates.reference)))


class BesideTheStore:
    """A SQLite file beside the store, shared by every server process on it. It is opened once the server is built
    (the server makes the store's folder), so that no call pays for opening it."""

    def __init__(self, seams: Seams, suffix: str, schema: str) -> None:
        self._path, self._schema = seams.config.store.with_name(seams.config.store.name + suffix), schema
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        seams.finish.append(self._open)

    def _open(self, server: VariantServer) -> None:
        self._db = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False, timeout=30)
        self._db.execute(self._schema)

    def _opened(self) -> sqlite3.Connection:
        assert self._db is not None, "the file is opened when the server is built"
        return self._db

    def row(self, sql: str, parameters: tuple[Any, ...]) -> Any:
        """The first row ``sql`` selects, or None."""
        with self._lock:
            return self._opened().execute(sql, parameters).fetchone()

    def write(self, sql: str, parameters: tuple[Any, ...]) -> None:
        with self._lock:
            self._opened().execute(sql, parameters)


# -- ids of its own ----------------------------------------------------------------------------------------------------


class ReceivedReferences:
    """Host references judged on the arguments as received: the host signed the operation it sent, with this
    server's ids, so a server with ids of its own judges the reference before it maps them to the reference's."""

    def __init__(self, inner: ConfirmationGate) -> None:
        self.inner = inner

    async def approve(self, call: GateCall) -> Approval:
        received = call.params.arguments if call.params is not None else None
        if isinstance(received, dict):
            call = dataclasses.replace(call, arguments=received)
        return await self.inner.approve(call)


Inward = Callable[[str, Mapping[str, Any]], Awaitable[Mapping[str, Any]]]


def ids_of_its_own(seams: Seams, inward: Inward) -> None:
    """The reference serves each call on its own ids: ``inward(tool, arguments)`` maps the ids a call names before
    its arguments are judged; a host reference is still judged on the ids the host signed."""

    async def mapped(call: CallContext, serve: Step) -> Served:
        call.arguments = await inward(call.tool, call.arguments)
        return await serve(call)

    seams.around.append(mapped)
    changed_reference_gate(seams, ReceivedReferences)
