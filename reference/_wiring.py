"""One factory builds the server's ports from its configuration.

``[store] url`` absent (or ``sqlite:``) keeps the embedded SQLite file named by
``[server] store``; ``postgresql://…`` opens the shared PostgreSQL store, imported
only then, so an SQLite deployment never needs psycopg.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engram_mcp.reference._config import ConfigError, ServerConfig
from engram_mcp.reference._crypto import AesGcmCipher
from engram_mcp.reference._policy import ScopePolicy
from engram_mcp.reference._ports import Cipher, MemoryStore, Scope
from engram_mcp.reference._store import SqliteStore


@dataclass(frozen=True)
class ServerPorts:
    """What a ``ReferenceServer`` is built on; a host may pass its own implementations."""

    store: MemoryStore
    cipher: Cipher
    policies: Callable[[Scope], ScopePolicy]  # each scope's policy, its admission policy among them


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
    return ServerPorts(store=open_store(config), cipher=AesGcmCipher(config.kek), policies=config.policy_for)
