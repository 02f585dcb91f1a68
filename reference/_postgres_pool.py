"""The PostgreSQL store's connections: waits bounded while the database is away, and back within a second.

psycopg_pool's defaults suit a server that may wait: a call waits 30 s for a connection, and the pool
reconnects with an exponential backoff (1, 2, 4, 8 … seconds), so after an outage of a minute the database
is back well before the pool notices. Here a call waits at most ``wait_seconds`` for a connection, and once
one wait has failed (the database is away) the next calls wait only ``AWAY_WAIT`` until a connection comes
back, so a call and its audit row never stack two long waits; the pool retries every ``RECONNECT_EVERY``
seconds, and a connection error has the idle connections checked at once, so stale ones left by the outage
are replaced before calls meet them.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout
from psycopg_pool.base import AttemptWithBackoff

log = logging.getLogger("engram_mcp.reference")

AWAY_WAIT = 0.5  # seconds a call waits for a connection while the database is known to be away
RECONNECT_EVERY = 0.25  # seconds between the pool's attempts to reconnect, however long the outage


class _SteadyRetry(AttemptWithBackoff):
    """Reconnection attempts at a steady pace (jittered), not doubling: the database's return is seen at once."""

    INITIAL_DELAY = RECONNECT_EVERY
    DELAY_JITTER = 0.2
    DELAY_BACKOFF = 1.0


class _SteadyPool(ConnectionPool):
    def _add_connection(self, attempt: AttemptWithBackoff | None, growing: bool = False) -> None:
        # psycopg_pool (pinned) starts each reconnection with a fresh attempt object; ours keeps a steady pace.
        super()._add_connection(attempt or _SteadyRetry(timeout=self.reconnect_timeout), growing=growing)


class StorePool:
    """A pool of autocommit connections returning rows as dicts, with bounded waits (module docstring)."""

    def __init__(self, url: str, *, min_size: int, max_size: int, wait_seconds: float) -> None:
        self.wait_seconds = wait_seconds
        self._away = False
        self.pool = _SteadyPool(
            url, min_size=min_size, max_size=max_size, open=False, name="engram-store", timeout=wait_seconds,
            # libpq counts whole seconds, and at least 2
            kwargs={"autocommit": True, "row_factory": dict_row, "connect_timeout": max(2, math.ceil(wait_seconds))},
        )

    def open(self) -> None:
        self.pool.open(wait=True, timeout=self.wait_seconds)

    @contextmanager
    def connection(self) -> Iterator[Any]:
        try:
            with self.pool.connection(timeout=AWAY_WAIT if self._away else self.wait_seconds) as conn:
                self._away = False
                yield conn
        except PoolTimeout:
            self._away = True
            raise
        except psycopg.OperationalError:
            self._away = True
            self._check_idle()
            raise

    def _check_idle(self) -> None:
        """Replace the idle connections that the outage broke, so the next calls do not meet them one by one."""
        try:
            self.pool.check()
        except Exception:
            log.debug("checking the pool's idle connections failed", exc_info=True)

    def close(self) -> None:
        self.pool.close()
