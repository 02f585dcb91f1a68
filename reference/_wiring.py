"""One factory builds the server's ports from its configuration.

``[store] url`` absent (or ``sqlite:``) keeps the embedded SQLite file named by
``[server] store``; ``postgresql://…`` opens the shared PostgreSQL store, imported
only then, so an SQLite deployment never needs psycopg.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from engram_mcp.contract import ArgumentOracle
from engram_mcp.contract.binding import ConfirmationSealer
from engram_mcp.contract.validation import Verdict
from engram_mcp.reference._call import BindingDeadlines, Deadlines
from engram_mcp.reference._config import ConfigError, ServerConfig
from engram_mcp.reference._core import Engine
from engram_mcp.reference._crypto import AesGcmCipher
from engram_mcp.reference._gates import ConfiguredGates, ConfirmationGate, ElicitationGate, HostReferenceGate
from engram_mcp.reference._host_binding import Grants, HostBinding, SignedBindings
from engram_mcp.reference._policy import ScopePolicy
from engram_mcp.reference._ports import Cipher, MemoryStore, Scope
from engram_mcp.reference._store import SqliteStore


class ArgumentJudge(Protocol):
    """The contract's argument rules (closed schemas, shared rules, the clock's), as the server asks them."""

    def verdict(self, tool: str, arguments: Any, *, now: datetime | None = None) -> Verdict: ...

    def clock_verdict(self, tool: str, arguments: Any, *, now: datetime) -> Verdict: ...


@dataclass(frozen=True)
class ServerPorts:
    """What a ``ReferenceServer`` is built on; a host may pass its own implementations.

    The first three are required; each other port left None is built from the configuration
    (``completed``)."""

    store: MemoryStore
    cipher: Cipher
    policies: Callable[[Scope], ScopePolicy]  # each scope's policy, its admission policy among them
    host: HostBinding | None = None  # the binding a request carries, verified
    grants: Grants | None = None  # the tools and the capture authority of a principal in a scope
    gates: ConfirmationGate | None = None  # how a gated call obtains its approval
    oracle: ArgumentJudge | None = None  # the contract's argument rules
    deadlines: Deadlines | None = None  # whether a call's host deadline has passed, at each stage
    engine: Callable[..., Engine] = Engine  # the operations over the store (Engine's signature)

    def completed(self, config: ServerConfig) -> ServerPorts:
        """These ports, with every optional one left out built from ``config``."""
        return replace(
            self,
            host=self.host or SignedBindings(config.trusted_keys, config.audience),
            grants=self.grants or config,
            gates=self.gates or default_gates(config),
            oracle=self.oracle or ArgumentOracle(),
            deadlines=self.deadlines or BindingDeadlines(),
        )


def default_gates(config: ServerConfig) -> ConfiguredGates:
    """The configured confirmation modes: host references under the configured TTL, else form elicitation."""
    confirmation = config.confirmation
    return ConfiguredGates(
        confirmation.modes,
        reference=HostReferenceGate(config.trusted_keys, config.audience, confirmation.reference_ttl_seconds),
        asking=ElicitationGate(ConfirmationSealer(config.derived_key("request-state"))),
    )


POSTGRES_DRIVERS = frozenset({"psycopg", "psycopg_pool"})
NO_POSTGRES_DRIVER = ("store: 'url' names PostgreSQL, whose driver (psycopg) is not installed: install this package "
                      "with its postgres extra (from a checkout: pip install '.[postgres]')")


def open_store(config: ServerConfig, *, inspect: bool = False) -> MemoryStore:
    """The configured store; ``inspect`` opens it for ``verify``: no background work (and SQLite read-only)."""
    if config.store_url is None:
        return SqliteStore(config.store, synchronous=config.synchronous, read_only=inspect)
    try:
        from engram_mcp.reference._postgres import PostgresStore  # lazily: only PostgreSQL deployments need psycopg
    except ImportError as missing:
        if (missing.name or "").split(".")[0] not in POSTGRES_DRIVERS:
            raise
        raise ConfigError(NO_POSTGRES_DRIVER) from None

    settings = config.postgres
    return PostgresStore(config.store_url, background=not inspect, read_only=inspect,
                         erasure_retry_interval=settings.erasure_batch_seconds,
                         wait_seconds=settings.unavailable_after_seconds)


def build_ports(config: ServerConfig) -> ServerPorts:
    """Every port the configuration names, the store opened."""
    return ServerPorts(store=open_store(config), cipher=AesGcmCipher(config.kek),
                       policies=config.policy_for).completed(config)
