"""PostgresStore: the store port on PostgreSQL, shared by any number of server processes.

Selected by ``[store] url = "postgresql://…"`` in server.toml and imported only
then, so a SQLite deployment never loads psycopg. ``read_only`` (for verify)
neither migrates nor writes, and starts no background work.

Exactly once across processes. A unit of work that may write first takes the
store's writers' lock (a transaction-scoped advisory lock, released at commit
or rollback) and then runs at READ COMMITTED, so each of its statements sees
every commit made before it got the lock: two replicas reserving one
idempotency key, appending a journal cursor, admitting one candidate or
burning one confirmation id run one after the other, and the second sees the
first's effect and replays it. Writes are serialized store-wide, as SQLite's
are, because the journal and audit hash chains are store-wide (see
reference/_postgres_schema.py); reads never wait for them. A serialization
failure, a deadlock or a unique violation (only a writer that bypasses the
lock can cause one) rolls the unit of work back and runs it again. Reads use a
REPEATABLE READ, READ ONLY snapshot.

Erasure. A withdraw or forget updates the row in place, so its old version is
a dead tuple until VACUUM removes it; it stays readable to any snapshot taken
before the erasure. ``flush_residues`` answers True only when no snapshot older
than the flush's start is held in this database (other sessions, prepared
transactions, replication slots and standbys' feedback), VACUUM of the erasing
tables then ran to the end without leaving a dead tuple behind for a pinned
page, the search index was rebuilt from the live rows (VACUUM leaves a GIN
index's keys, the erased words, in place) and no erased column has planner
statistics (``UNSAMPLED`` in reference/_postgres_schema.py). The role must see
other sessions' snapshots (superuser or ``pg_read_all_stats``); otherwise
nothing can be proved and every erasure stays ``pending``.

That flush costs what the whole store costs (VACUUM and the rebuild read every
row), so it never runs on a call's path: a withdraw, a forget or a rejected
admission answers ``pending`` at once, and the ledger's background thread runs
one flush for every erasure queued before it began, at most once per
``erasure_batch_seconds``. The rebuild is ``REINDEX CONCURRENTLY``, which
blocks neither reads nor writes, so one tenant's erasures never stall another
tenant's calls. What is documented in the README as out of reach: WAL segments
keep page images until they are recycled, and freed space inside a page is not
zeroed.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg import IsolationLevel, errors, sql
from psycopg_pool import PoolTimeout

from engram_mcp.reference._config import StoreUnavailable
from engram_mcp.reference._erasure import ErasureLedger
from engram_mcp.reference._periodic import Periodic
from engram_mcp.reference._ports import RankingProfile, StoreReader, StoreTransaction
from engram_mcp.reference._postgres_pool import StorePool
from engram_mcp.reference._postgres_queries import RANKING, PostgresReader, PostgresTransaction
from engram_mcp.reference._postgres_schema import MIGRATIONS, UNSAMPLED, migrate, scalar, schema_version

T = TypeVar("T")
log = logging.getLogger("engram_mcp.reference")

# Units of work that write queue on one lock per store (the database's advisory lock, keyed by the schema):
# the journal and audit chains are store-wide, so any two writers would conflict anyway, and queueing costs
# less than aborting and running again. Two-int advisory keys never meet the migration's bigint key.
# The call counters' function (migration 2, reference/_postgres_schema.py), committed without waiting for the disk.
COUNT_CALL = (
    "BEGIN; SET LOCAL synchronous_commit = off; SELECT count_call(%s, %s, %s, %s, %s) AS admitted; COMMIT"
)
WRITERS_LOCK = "SELECT pg_advisory_xact_lock(1701277281, hashtext(current_schema()))"
# Conflicts a writer outside this server could still cause (a second server version, a manual session):
# running again sees its commit. Anything else is a real failure.
RETRIABLE = (errors.SerializationFailure, errors.DeadlockDetected, errors.UniqueViolation)
MAX_ATTEMPTS = 12
RETRY_BACKOFF = 0.005  # seconds, doubled per attempt, jittered so that racing replicas spread out
FLUSH_RETRY_DELAYS = (0.0, 0.02, 0.05, 0.1)
STATISTICS_INTERVAL = 30.0  # seconds between looks for tables whose planner statistics are out of date
# autovacuum's default analyze threshold: 50 rows plus 10% of the table changed since the last ANALYZE
STALE_STATISTICS = (
    "SELECT relname FROM pg_stat_user_tables WHERE schemaname = current_schema() "
    "AND n_mod_since_analyze > 50 + 0.1 * n_live_tup ORDER BY relname"
)
ERASURE_BATCH_SECONDS = 10.0  # the shortest time between two background flushes ([store] erasure_batch_seconds)
VACUUMED = ("candidates", "records")  # the tables an erasure rewrites rows of
SEARCH_INDEX = "records_search"  # the GIN index of records' words, rebuilt by each flush
FLUSH_LOCK_TIMEOUT = "500ms"  # VACUUM gives up (pending, retried later) rather than queue behind another one
# REINDEX CONCURRENTLY waits for the transactions using the table at each of its phases; its own lock blocks no
# read or write, so it may wait longer, but not for ever behind a transaction left open.
REBUILD_LOCK_TIMEOUT = "10s"
_MISSED = "not removed due to cleanup lock contention"  # VACUUM VERBOSE's report of dead tuples it had to leave
# Copies of the search index a failed REINDEX CONCURRENTLY left behind (invalid, but holding the same words).
_LEFTOVER_INDEXES = (
    "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
    "WHERE i.indrelid = 'records'::regclass AND NOT i.indisvalid"
)
# Erased columns that ANALYZE may sample (a target other than 0) or that hold statistics: none, or no proof.
_SAMPLED = (
    "SELECT c.relname || '.' || a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
    "WHERE c.relnamespace = current_schema()::regnamespace AND (c.relname || '.' || a.attname) = ANY(%s) "
    "AND (a.attstattarget <> 0 OR EXISTS (SELECT 1 FROM pg_stats s WHERE s.schemaname = current_schema() "
    "AND s.tablename = c.relname AND s.attname = a.attname))"
)
_UNSAMPLED_COLUMNS = [f"{table}.{column}" for table, columns in UNSAMPLED.items() for column in columns]
# Everything that may still read a row version deleted before a horizon. Another database's sessions cannot
# read this one's tables, so only this database's sessions and prepared transactions count (slots and
# standbys' feedback hold every database's rows back).
_SNAPSHOTS = (
    "SELECT backend_xmin AS x FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_xmin IS NOT NULL "
    "AND datname = current_database() "
    "UNION ALL SELECT backend_xid FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_xid IS NOT NULL "
    "AND datname = current_database() "
    "UNION ALL SELECT transaction FROM pg_prepared_xacts WHERE database = current_database() "
    "UNION ALL SELECT xmin FROM pg_replication_slots WHERE xmin IS NOT NULL "
    "UNION ALL SELECT catalog_xmin FROM pg_replication_slots WHERE catalog_xmin IS NOT NULL "
    "UNION ALL SELECT backend_xmin FROM pg_stat_replication WHERE backend_xmin IS NOT NULL"
)


class PostgresStore:
    """A pool of connections to one database (or one schema of it, through the URL's search_path option)."""

    ranking: RankingProfile = RANKING
    # WAL files keep old pages, and freed space in a page is not zeroed (README)
    erasure_surfaces: tuple[str, ...] = ("records", "search_index", "dead_tuples", "planner_statistics")
    settles_on_request = False  # a flush costs the whole store: the background settles it (module docstring)

    def __init__(
        self,
        url: str,
        *,
        min_connections: int = 1,
        max_connections: int = 8,
        wait_seconds: float = 3.0,
        flush_retry_delays: tuple[float, ...] = FLUSH_RETRY_DELAYS,
        erasure_retry_interval: float = ERASURE_BATCH_SECONDS,
        background: bool = True,
        read_only: bool = False,
    ) -> None:
        self._url = url
        self.read_only = read_only
        self._flush_lock = threading.Lock()
        self._flush_retry_delays = flush_retry_delays
        self._pool = StorePool(url, min_size=min_connections, max_size=max_connections, wait_seconds=wait_seconds)
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=max(2, math.ceil(wait_seconds))) as conn:
                self.schema_version = schema_version(conn) if read_only else migrate(conn)
                self._sees_all_snapshots = bool(scalar(
                    conn, "SELECT pg_has_role(current_user, 'pg_read_all_stats', 'USAGE')::int"
                ))
            self._pool.open()
        except (PoolTimeout, psycopg.Error):  # a psycopg message may quote the URL, password included
            self._pool.close()
            raise StoreUnavailable("the PostgreSQL store cannot be reached") from None
        self.erasures = ErasureLedger(self, retry_interval=erasure_retry_interval)
        self._statistics = Periodic(self.refresh_statistics, name="engram-planner-statistics")
        if background and not read_only:
            self.erasures.start()
            self._statistics.start(STATISTICS_INTERVAL)

    @property
    def current(self) -> bool:
        """Whether the schema is at this server's version (a read-only store is never migrated)."""
        return self.schema_version == len(MIGRATIONS)

    # -- units of work -------------------------------------------------------------------------------------

    def transaction(self, work: Callable[[StoreTransaction], T]) -> T:
        for attempt in range(MAX_ATTEMPTS):
            try:
                with self._pool.connection() as conn:
                    begin(conn, IsolationLevel.READ_COMMITTED, read_only=self.read_only)
                    with conn.transaction():
                        conn.execute(WRITERS_LOCK)  # before any read: each statement after it sees the last commit
                        return work(PostgresTransaction(conn))
            except RETRIABLE:
                if attempt == MAX_ATTEMPTS - 1:
                    raise
                time.sleep(RETRY_BACKOFF * (2 ** min(attempt, 6)) * random.uniform(0.5, 1.5))
        raise AssertionError("unreachable")  # the loop returns or raises

    @contextmanager
    def snapshot(self) -> Iterator[StoreReader]:
        with self._pool.connection() as conn:
            begin(conn, IsolationLevel.REPEATABLE_READ, read_only=True)
            with conn.transaction():
                yield PostgresReader(conn)

    def count_call(self, tenant: str, principal: str, window: int, bounds: tuple[int, int]) -> bool:
        """One round trip, outside the writers' lock: the counters' row locks make it atomic on their own.

        The commit does not wait for the WAL flush (a crash may lose the last counts, which the port allows):
        that wait cost more than the rest of the call.
        """
        with self._pool.connection() as conn:
            # Several statements in one message need the parameters bound by the client (quoted by psycopg).
            cursor = psycopg.ClientCursor(conn)
            cursor.execute(COUNT_CALL, (tenant, principal, window, *bounds))
            while cursor.description is None and cursor.nextset():  # BEGIN and SET answer no rows; the SELECT does
                pass
            row: Any = cursor.fetchone()
        return bool(row and row["admitted"])

    # -- erasure residues --------------------------------------------------------------------------------------

    def flush_residues(self) -> bool:
        if not self._sees_all_snapshots:
            return False  # another role's old snapshot would be invisible: never claim complete
        with self._flush_lock:
            for delay in self._flush_retry_delays:
                time.sleep(delay)
                try:
                    if self._vacuumed():
                        return True
                except psycopg.Error:
                    log.debug("a residue flush attempt failed; it is retried", exc_info=True)
        return False

    def _vacuumed(self) -> bool:
        """One attempt, on its own connection (VACUUM runs outside any transaction, never on a pooled one)."""
        notices: list[str] = []
        with psycopg.connect(self._url, autocommit=True) as conn:
            conn.add_notice_handler(lambda diagnostic: notices.append(diagnostic.message_primary or ""))
            conn.execute(f"SET lock_timeout = '{FLUSH_LOCK_TIMEOUT}'")
            horizon = scalar(conn, "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")
            if self._older_snapshots(conn, horizon):
                return False
            sampled = self.sampled_columns(conn)
            if sampled:
                log.warning("erasures stay pending: planner statistics may sample erased columns (%s)",
                            ", ".join(sampled))
                return False
            for table in VACUUMED:
                # FREEZE makes it aggressive: it waits for a page's cleanup lock rather than skip pruning it.
                conn.execute(f"VACUUM (FREEZE, VERBOSE, INDEX_CLEANUP ON) {table}")
            if any(_MISSED in notice for notice in notices):
                return False
            # VACUUM removes a GIN index's row pointers but never its keys: the erased words would stay in the
            # index, so it is rebuilt from the live rows. CONCURRENTLY blocks no read or write; a rebuild that
            # failed half-way leaves an invalid copy holding the same words, dropped before the next one.
            conn.execute(f"SET lock_timeout = '{REBUILD_LOCK_TIMEOUT}'")
            for (leftover,) in conn.execute(_LEFTOVER_INDEXES).fetchall():
                conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(leftover)))
            conn.execute(f"REINDEX INDEX CONCURRENTLY {SEARCH_INDEX}")
            if conn.execute(_LEFTOVER_INDEXES).fetchall():
                return False
            return not self._older_snapshots(conn, horizon)

    @staticmethod
    def sampled_columns(conn: Any) -> list[str]:
        """The erased columns (``table.column``) that ANALYZE may sample or that hold planner statistics."""
        return [str(row[0]) for row in conn.execute(_SAMPLED, (_UNSAMPLED_COLUMNS,)).fetchall()]

    @staticmethod
    def _older_snapshots(conn: Any, horizon: int) -> bool:
        """Whether anything may still read row versions deleted before ``horizon`` (a full transaction id)."""
        rows = conn.execute(_SNAPSHOTS).fetchall()
        return any(_widen(int(str(row[0])), horizon) < horizon for row in rows)

    def refresh_statistics(self) -> list[str]:
        """ANALYZE this schema's tables that changed by more than autovacuum's own threshold since their last
        analysis; their names.

        Without statistics the planner cannot tell a unique key from a scope-wide prefix: it took the
        (tenant, workspace, record_id) index for a lookup by candidate id and read the whole scope on every
        capture and admission. Autovacuum refreshes them where it runs; a server where it is off relies on this.
        ANALYZE takes no lock that blocks reads or writes.
        """
        with self._pool.connection() as conn:
            rows: list[dict[str, Any]] = conn.execute(STALE_STATISTICS).fetchall()
            stale = [str(row["relname"]) for row in rows]
            for table in stale:
                conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))
        return stale

    def close(self) -> None:
        self._statistics.stop()
        self.erasures.stop()
        self._pool.close()


def begin(conn: psycopg.Connection[Any], isolation: IsolationLevel, *, read_only: bool) -> None:
    """Have the connection's next BEGIN name the isolation level and access mode itself (no SET round trip)."""
    conn.isolation_level = isolation
    conn.read_only = read_only


def _widen(xid: int, near: int) -> int:
    """A 32-bit transaction id as the full id nearest ``near`` (live ids are within 2^31 of each other)."""
    full = (near & ~0xFFFFFFFF) | xid
    if full > near + (1 << 31):
        return full - (1 << 32)
    return full + (1 << 32) if full < near - (1 << 31) else full
