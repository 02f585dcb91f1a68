"""[store] of server.toml: which store, and how the shared PostgreSQL store paces its work and its waits.

Read without psycopg: only a PostgreSQL deployment imports it (reference/_postgres.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from engram_mcp.reference._quotas import SettingError  # the one error of an unusable setting; it names the key

# SQLite's synchronous levels a deployment may pick, and the default.
SYNCHRONOUS_LEVELS = ("normal", "full", "extra")  # 'off' is never offered: a commit must survive a crash
DEFAULT_SYNCHRONOUS = "full"  # WAL + FULL: each commit is synced before the call returns, so power loss keeps it


@dataclass(frozen=True)
class PostgresSettings:
    """The PostgreSQL store's timing; none of it applies to the embedded SQLite store."""

    # The shortest time between two background erasure flushes (VACUUM and the search index's rebuild cost the
    # whole store, so a flood of erasures costs one flush per this many seconds, each covering all queued).
    erasure_batch_seconds: float = 10.0
    # The longest a call waits for a connection (and a new connection for the server) before it is answered
    # with the retriable STORE_UNAVAILABLE; also how long a dead connection can keep a call waiting.
    unavailable_after_seconds: float = 3.0


_BOUNDS = {"erasure_batch_seconds": (0.1, 86400.0), "unavailable_after_seconds": (0.5, 60.0)}


def parse_postgres_settings(table: Mapping[str, Any]) -> PostgresSettings:
    """The timing keys of [store] (``url`` is read by the caller), each a number of seconds within its bounds."""
    defaults = PostgresSettings()
    values: dict[str, float] = {}
    for field in fields(PostgresSettings):
        value = table.get(field.name, getattr(defaults, field.name))
        low, high = _BOUNDS[field.name]
        if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
            raise SettingError(f"store: '{field.name}' must be a number of seconds from {low:g} to {high:g}")
        values[field.name] = float(value)
    return PostgresSettings(**values)


POSTGRES_KEYS = frozenset(field.name for field in fields(PostgresSettings))


def postgres_toml_lines() -> list[str]:
    """The timing keys with their defaults, as ``engram-reference init --store postgresql://…`` writes them."""
    defaults = PostgresSettings()
    return [
        "# Erasures are flushed in the background, at most once per erasure_batch_seconds, each flush covering",
        "# every erasure queued before it; a call waits at most unavailable_after_seconds for the database",
        "# before it is answered STORE_UNAVAILABLE (retriable).",
        *(f"{field.name} = {getattr(defaults, field.name):g}" for field in fields(PostgresSettings)),
    ]
