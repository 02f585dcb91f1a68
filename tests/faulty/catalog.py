"""The faulty catalog's registry, and what its variants share.

A variant is a function of a ``Seams`` (tests/variant_server.py) that records how the reference goes
wrong: a lenient parser, a forgotten flag, a cache that forget does not reach, a gate that trusts the
client. Nothing in ``reference/`` knows about these faults, and no variant assigns to a member of the
server: each goes through a port, a subclass of an engine part, or a hook at the MCP edge.

A variant names the requirements it breaks (each must end FAIL in the run's footer, or WARN where all
of them are SHOULDs) and the checks that must catch it (at least one must end so), with the
``--select`` prefixes and the one ``--era`` that keep its run short: the era the fault lives in, or
else one chosen so that the catalog exercises both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext

from engram_mcp.contract import load
from engram_mcp.contract.validation import ArgumentOracle, Verdict, Violation
from engram_mcp.reference._envelope import Outcome
from engram_mcp.reference._store import SqliteStore
from tests.variant_server import Seams, VariantServer

CONTRACT = load()
SEARCH, GET, CAPTURE = "engram_memory_search", "engram_memory_get", "engram_memory_capture"
ADMIT, WITHDRAW, FORGET = "engram_memory_request_admission", "engram_memory_withdraw", "engram_memory_forget"
BUDGET_MAX = CONTRACT.limit("max_packet_bytes.max")
LIMIT_MAX = CONTRACT.limit("search.limit.max")
OPAQUE_MAX = CONTRACT.limit("opaque_ref.max_bytes")
APPROVAL = {"action": "accept", "content": {"confirm": True}}
UNTRUSTED = CONTRACT.protocol_errors["trusted_context_unavailable"]
UNKNOWN_TOOL = CONTRACT.protocol_errors["unknown_tool"]
# Host-owned names (contract §0 and the host wiring): a lenient parser with a deny-list still refuses these.
HOST_OWNED = frozenset({
    "tenant", "workspace", "scope", "principal", "agent_id", "session", "credential", "auditId", "deadline",
    "cancellation", "confirmation", "confirmed", "elicitationRef", "trust", "decision", "status",
    "tenantId", "scope_ref", "agentId", "confirm", "request_state", "binding",
})


@dataclass(frozen=True)
class Variant:
    name: str
    breaks: tuple[str, ...]  # requirement ids the run's footer must judge FAIL
    caught_by: tuple[str, ...]  # check ids; at least one must end FAIL
    select: tuple[str, ...]  # --select prefixes for the run
    era: str  # --era for the run: the era whose code the fault sits in, else one picked to spread the load
    summary: str
    apply: Callable[[Seams], None]
    expect: str = "FAIL"  # WARN where every broken requirement is a SHOULD: the run then rightly exits 0
    gap: str | None = None  # a known harness gap: the variant is expected to slip through
    configure: Callable[[Path], None] | None = None  # edits the run's copy of the configuration folder first
    transport: str = "stdio"  # "http": the variant is served over streamable HTTP behind the host bearer
    # A defect only a call sequence shows: exploration (explore.*) must catch it, and a full run with exploration
    # turned off (--explore 0) must not, which shows what exploration adds to the fixed checks.
    sequence_only: bool = False
    # A fault outside the server's seams (bytes the process writes before serving): no seam records it.
    outside_seams: bool = False


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
    outside_seams: bool = False,
) -> Callable[[Callable[[Seams], None]], Callable[[Seams], None]]:
    def register(apply: Callable[[Seams], None]) -> Callable[[Seams], None]:
        if name in VARIANTS:
            raise ValueError(f"variant {name} is defined twice")
        summary = (apply.__doc__ or "").strip().splitlines()[0]
        VARIANTS[name] = Variant(name, tuple(breaks), tuple(caught_by), tuple(select or caught_by), era, summary,
                                 apply, expect, gap, configure, transport, sequence_only, outside_seams)
        return apply

    return register


# -- what the faults share -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LeakedOutcome(Outcome):
    """A refusal that carries the text of the exception behind it (only a faulty edge sends it)."""

    detail: str = ""


class Everything(frozenset[str]):
    """A trust set that holds every name: a key trusted beyond what any configuration says."""

    def __contains__(self, item: object) -> bool:
        return True


def at(node: Any, pointer: str) -> Any:
    """The value at a JSON Pointer."""
    for escaped in pointer.split("/")[1:] if pointer else []:
        part = escaped.replace("~1", "/").replace("~0", "~")
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def opaque_names() -> frozenset[str]:
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


def named(pointer: str) -> str:
    """The last member name in a JSON Pointer (array indexes skipped)."""
    parts = [p for p in pointer.split("/")[1:] if not p.isdigit()]
    return parts[-1] if parts else ""


class ChangedOracle:
    """The argument oracle with its verdicts passed through ``change(tool, arguments, now, verdict)``."""

    def __init__(self, inner: Any, change: Callable[[str, Any, Any, Verdict], Verdict]) -> None:
        self.inner, self.change = inner, change

    def verdict(self, tool: str, arguments: Any, *, now: Any = None) -> Verdict:
        return self.change(tool, arguments, now, self.inner.verdict(tool, arguments, now=now))

    def clock_verdict(self, tool: str, arguments: Any, *, now: Any) -> Verdict:
        return self.inner.clock_verdict(tool, arguments, now=now)


_VERDICTS = ArgumentOracle()


def verdict_of(violations: list[Violation]) -> Verdict:
    """A verdict from its violations, its code chosen as the oracle chooses it."""
    return _VERDICTS.verdict_of(violations)


def filter_verdicts(seams: Seams, forgive: Callable[[str, Any, Any], bool]) -> None:
    """Let the oracle forgive some violations: ``forgive(tool, arguments, violation)``."""

    def lenient(tool: str, arguments: Any, now: Any, judged: Verdict) -> Verdict:
        kept = [v for v in judged.violations if not forgive(tool, arguments, v)]
        return judged if len(kept) == len(judged.violations) else verdict_of(kept)

    seams.port("oracle", lambda oracle: ChangedOracle(oracle, lenient))


def claimed_purpose(tool: str, arguments: Any) -> Any:
    """The purpose_ref the arguments claim, wherever the tool carries it."""
    if not isinstance(arguments, dict):
        return None
    holder = arguments.get("payload") if tool == CAPTURE else arguments
    return holder.get("purpose_ref") if isinstance(holder, dict) else None


def error_rewrite(
    seams: Seams, change: Callable[[ServerRequestContext, Any, dict[str, Any], dict[str, Any]], None]
) -> None:
    """Rewrite failure envelopes: ``change(request, params, envelope, error)`` edits the error in place."""

    def rewrite(request: ServerRequestContext, params: Any, envelope: dict[str, Any]) -> dict[str, Any]:
        if envelope.get("ok") is False and isinstance(envelope.get("error"), dict):
            change(request, params, envelope, envelope["error"])
        return envelope

    seams.rewrites.append(rewrite)


def sqlite(server: VariantServer) -> SqliteStore:
    """The faulty catalog runs on the embedded store; its raw SQL reaches past the port on purpose."""
    assert isinstance(server.store, SqliteStore), "the faulty catalog serves the embedded SQLite store"
    return server.store


def exists_elsewhere(server: VariantServer, request: ServerRequestContext, tool: str, arguments: Any) -> bool:
    """Whether the call's target id exists in a scope other than the bound one."""
    binding = server.trusted_binding(request)
    name = CONTRACT.tools[tool].target
    ident = arguments.get(name) if isinstance(arguments, dict) and name else None
    if binding is None or not isinstance(ident, str):
        return False
    table, column = ("records", "record_id") if name == "record_id" else ("candidates", "candidate_id")
    with sqlite(server).read() as db:
        return db.execute(
            f"SELECT 1 FROM {table} WHERE {column} = ? AND NOT (tenant = ? AND workspace = ?) LIMIT 1",
            (ident, binding.tenant, binding.workspace),
        ).fetchone() is not None


def all_tools(server: VariantServer) -> list[types.Tool]:
    """Every tool the server advertises, in the contract's order."""
    return [server.tools[name] for name in CONTRACT.tools]


def changed_gate(seams: Seams, part: str, change: Callable[[Any], Any]) -> None:
    """Replace one gate of the configured pair: ``part`` is "reference" (host references) or "asking"."""
    seams.port("gates", lambda gates: replace(gates, **{part: change(getattr(gates, part))}))
