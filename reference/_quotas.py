"""Resource bounds of the reference server: quotas per tenant and per principal, and expiry.

Four quotas apply at once to each of two holders, the tenant (over all its
workspaces) and the principal within that tenant:

- ``pending_candidates``: candidates captured and not yet decided, withdrawn or expired;
- ``bytes``: sealed bytes of the candidates still held, pending or admitted and not forgotten;
- ``calls_per_window``: tool calls served in one fixed window of ``window_seconds``;
- ``ledger_bytes``: bytes of lifecycle records its mutations left for good (reference/_ledger_bytes.py).

A call over any of them is refused with RATE_LIMITED (retriable) before it
changes anything. Zero turns one quota off. All three are counted in the
store, so they hold across every process serving it: the call window as one
counter row per holder, incremented atomically (``MemoryStore.count_call``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from engram_mcp.reference._errors import ReferenceServerError

if TYPE_CHECKING:
    from engram_mcp.reference._ports import MemoryStore


@dataclass(frozen=True)
class Quota:
    """One holder's bounds; 0 means unbounded."""

    pending_candidates: int
    bytes: int
    calls_per_window: int
    ledger_bytes: int = 0  # what mutations leave for good: reservations, journal events, audit rows


@dataclass(frozen=True)
class Quotas:
    """``[quotas]`` of server.toml, with its defaults."""

    # Defaults leave room for a full conformance run (thousands of candidates, bursts of cheap calls)
    # while holding a runaway agent to about a thousand calls a second and a bounded store.
    window_seconds: int = 60
    tenant: Quota = field(
        default_factory=lambda: Quota(pending_candidates=50_000, bytes=1 << 30, calls_per_window=240_000,
                              ledger_bytes=4 << 30)
    )
    principal: Quota = field(
        default_factory=lambda: Quota(pending_candidates=5_000, bytes=256 << 20, calls_per_window=60_000,
                              ledger_bytes=1 << 30)
    )


@dataclass(frozen=True)
class Expiry:
    """``[expiry]`` of server.toml, with its defaults."""

    pending_candidate_seconds: int = 7 * 24 * 3600  # an undecided candidate is shredded after this
    refused_audit_rows: int = 100_000  # audit rows of refused calls kept; older ones are compacted


@dataclass(frozen=True)
class ResourceLimits:
    quotas: Quotas = field(default_factory=Quotas)
    expiry: Expiry = field(default_factory=Expiry)


def over(used: int, adding: int, bound: int) -> bool:
    """Whether ``used + adding`` would pass ``bound`` (0: no bound)."""
    return bound > 0 and used + adding > bound


class CallWindow:
    """Counts calls per tenant and per (tenant, principal) in fixed windows, in the store.

    The store keeps one counter row per holder, reset when a later window
    begins, so it grows with the holders ever served, never with time; every
    replica on the store increments the same rows, so together they hold the bound.
    """

    def __init__(self, quotas: Quotas, store: MemoryStore) -> None:
        self.quotas = quotas
        self.store = store

    def admit(self, tenant: str, principal: str, now: float) -> bool:
        """Count one call and answer True, or answer False (and count nothing) when a bound is reached."""
        bounds = (self.quotas.tenant.calls_per_window, self.quotas.principal.calls_per_window)
        if not any(bounds):
            return True  # both off: nothing to count, no round trip
        return self.store.count_call(tenant, principal, int(now // self.quotas.window_seconds), bounds)


# -- server.toml -----------------------------------------------------------------


class SettingError(ReferenceServerError, ValueError):
    """A quota or expiry setting is unusable; the message names it."""


def _count(table: Mapping[str, Any], key: str, default: int, where: str, *, minimum: int = 0) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SettingError(f"{where}: '{key}' must be an integer of at least {minimum}")
    return value


def _known(table: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise SettingError(f"{where}: unknown setting '{unknown[0]}'")


def _quota(table: Any, default: Quota, where: str) -> Quota:
    if not isinstance(table, Mapping):
        raise SettingError(f"{where} must be a table")
    names = {f.name for f in fields(Quota)}
    _known(table, names, where)
    return Quota(**{name: _count(table, name, getattr(default, name), where) for name in sorted(names)})


def parse_limits(quotas: Any, expiry: Any) -> ResourceLimits:
    """``[quotas]`` and ``[expiry]`` as read from TOML (absent tables are empty)."""
    if not isinstance(quotas, Mapping) or not isinstance(expiry, Mapping):
        raise SettingError("quotas and expiry must be tables")
    base = ResourceLimits()
    _known(quotas, {"window_seconds", "tenant", "principal"}, "quotas")
    _known(expiry, {f.name for f in fields(Expiry)}, "expiry")
    return ResourceLimits(
        quotas=Quotas(
            window_seconds=_count(quotas, "window_seconds", base.quotas.window_seconds, "quotas", minimum=1),
            tenant=_quota(quotas.get("tenant", {}), base.quotas.tenant, "quotas.tenant"),
            principal=_quota(quotas.get("principal", {}), base.quotas.principal, "quotas.principal"),
        ),
        expiry=Expiry(
            pending_candidate_seconds=_count(
                expiry, "pending_candidate_seconds", base.expiry.pending_candidate_seconds, "expiry", minimum=1
            ),
            refused_audit_rows=_count(
                expiry, "refused_audit_rows", base.expiry.refused_audit_rows, "expiry", minimum=1
            ),
        ),
    )


def toml_lines(limits: ResourceLimits | None = None) -> list[str]:
    """The ``[quotas]`` and ``[expiry]`` tables with their values, as ``engram-reference init`` writes them."""
    limits = limits or ResourceLimits()
    q, e = limits.quotas, limits.expiry

    def quota(name: str, value: Quota) -> list[str]:
        return [f"[quotas.{name}]", f"pending_candidates = {value.pending_candidates}",
                f"bytes = {value.bytes}", f"calls_per_window = {value.calls_per_window}",
                f"ledger_bytes = {value.ledger_bytes}"]

    return [
        "# Quotas per tenant (all its workspaces) and per principal within a tenant; 0 turns one off.",
        "# ledger_bytes: what mutations leave for good (reservations, journal events, audit rows).",
        "# A call over one is refused with RATE_LIMITED and changes nothing.",
        "[quotas]",
        f"window_seconds = {q.window_seconds}",
        *quota("tenant", q.tenant),
        *quota("principal", q.principal),
        "",
        "# A pending candidate not decided within this time is shredded like a withdraw;",
        "# audit rows of refused calls beyond this count are compacted into a checkpoint.",
        "[expiry]",
        f"pending_candidate_seconds = {e.pending_candidate_seconds}",
        f"refused_audit_rows = {e.refused_audit_rows}",
    ]


# Each holder's quota holdings summed afresh over the candidates and records they count (what the stores'
# ``holdings`` table, kept by triggers, must equal); the same SQL on SQLite and PostgreSQL.
COUNTED_HOLDINGS_SQL = """
    SELECT c.tenant, k.holder, CASE k.holder WHEN 'tenant' THEN '' ELSE c.principal END AS principal,
           SUM(CASE WHEN c.state = 'pending' THEN 1 ELSE 0 END) AS pending, SUM(c.body_bytes) AS bytes
    FROM candidates c
    LEFT JOIN records r ON r.tenant = c.tenant AND r.workspace = c.workspace AND r.record_id = c.record_id
    CROSS JOIN (SELECT 'tenant' AS holder UNION ALL SELECT 'principal') AS k
    WHERE c.state = 'pending' OR (c.state = 'accepted' AND r.state = 'accepted_current')
    GROUP BY c.tenant, k.holder, CASE k.holder WHEN 'tenant' THEN '' ELSE c.principal END
"""

# Holders whose counters differ from their recount; ``verify`` reports any.
HOLDINGS_DRIFT_SQL = f"""
SELECT COALESCE(h.tenant, c.tenant) AS tenant FROM holdings h FULL JOIN ({COUNTED_HOLDINGS_SQL}) AS c
    ON c.tenant = h.tenant AND c.holder = h.holder AND c.principal = h.principal
WHERE COALESCE(h.pending, 0) <> COALESCE(c.pending, 0) OR COALESCE(h.bytes, 0) <> COALESCE(c.bytes, 0)
LIMIT 1
"""


def recount_holdings_sql(placeholder: str) -> str:
    """One holder's recount, with the driver's parameter placeholder for its tenant, holder kind and principal
    (``holder_key``)."""
    return (f"SELECT COALESCE(SUM(pending), 0) AS pending, COALESCE(SUM(bytes), 0) AS bytes "
            f"FROM ({COUNTED_HOLDINGS_SQL}) AS counted "
            f"WHERE tenant = {placeholder} AND holder = {placeholder} AND principal = {placeholder}")


def holder_key(tenant: str, principal: str | None) -> tuple[str, str, str]:
    """The (tenant, holder, principal) key of a holdings row: the tenant's own row has holder 'tenant' and
    principal ''."""
    return tenant, "tenant" if principal is None else "principal", principal or ""
