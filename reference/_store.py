"""The embedded store: one SQLite file in WAL mode, private to the user that runs the server.

Every mutation touches only the rows it changes (no whole-table rewrites) and
runs inside ``BEGIN IMMEDIATE``, so there is one writer at a time. A commit is
durable once the call returns, through power loss too: ``synchronous = FULL``
syncs the WAL at every commit (configurable; see the README). Units of work that
wait while one commits are committed together, each in a savepoint, so writers
at once share a sync rather than queue for one each.

Pending candidates are stored sealed. An erasure (withdraw, forget) deletes the
data with ``secure_delete`` on, so freed space is zeroed, and queues itself in
the erasure ledger (reference/_erasure.py) until a truncating checkpoint has
pushed the old page images out of the WAL. The search indexes have FTS5
secure-delete on, so forget takes a record's terms out of its scope's index in
place, at a cost that does not grow with the store (reference/_sqlite.py).

Several server processes may share one store (the conformance harness opens a
process per session): SQLite serializes their writes, ``<store>.lock`` is held
while a process opens and migrates the store, and an erasure that another
process's read still pins stays pending until any of them settles it.
``verify`` opens the store read-only and takes no lock. The directory is
created 0700 and the database file 0600; SQLite gives its -wal and -shm files
the database file's mode.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Generic, TypeVar

from engram_mcp.reference import _call_counts, _ledger_bytes
from engram_mcp.reference import _search as search_index
from engram_mcp.reference._erasure import ErasureLedger
from engram_mcp.reference._group_commit import GroupCommit
from engram_mcp.reference._ports import Scope, StoreReader, StoreTransaction
from engram_mcp.reference._sqlite import sqlite3
from engram_mcp.reference._sqlite_tx import SqliteTransaction
from engram_mcp.reference._store_config import DEFAULT_SYNCHRONOUS, SYNCHRONOUS_LEVELS

try:
    import fcntl
except ImportError:  # pragma: no cover - not a POSIX system: no inter-process lock
    fcntl = None  # type: ignore[assignment]  # None says: no inter-process lock here

# -- quota holdings (schema version 5) ----------------------------------------------------------------------------

# Both holders of a changed row: its tenant (principal '') and its principal.
_HOLDERS = "(SELECT 'tenant' AS holder UNION ALL SELECT 'principal') AS h"
_HOLDER_PRINCIPAL = "CASE h.holder WHEN 'tenant' THEN '' ELSE c.principal END"


def _candidate_side(sign: int, row: str) -> str:
    """The OLD or NEW candidate row as a one-row source, with the sign its contribution is counted with."""
    return (f"SELECT {sign} AS sign, {row}.tenant AS tenant, {row}.workspace AS workspace, "
            f"{row}.principal AS principal, {row}.state AS state, {row}.record_id AS record_id, "
            f"{row}.body_bytes AS body_bytes")


def _record_side(sign: int, row: str) -> str:
    """The OLD or NEW record row, when accepted_current, as a one-row source with its sign."""
    return (f"SELECT {sign} AS sign, {row}.tenant AS tenant, {row}.workspace AS workspace, "
            f"{row}.record_id AS record_id WHERE {row}.state = 'accepted_current'")


def _candidate_trigger(event: str, sides: list[str]) -> str:
    """Takes back the changed candidate's old contribution and adds its new one."""
    return f"""
    CREATE TRIGGER holdings_candidate_{event.split(maxsplit=1)[0].lower()} AFTER {event} ON candidates BEGIN
        INSERT INTO holdings (tenant, holder, principal, pending, bytes)
        SELECT tenant, holder, principal, SUM(pending), SUM(bytes) FROM (
            SELECT c.tenant, h.holder, {_HOLDER_PRINCIPAL} AS principal,
                   c.sign * (c.state = 'pending') AS pending,
                   c.sign * CASE WHEN c.state = 'pending' OR (c.state = 'accepted' AND EXISTS (
                       SELECT 1 FROM records r WHERE r.tenant = c.tenant AND r.workspace = c.workspace
                       AND r.record_id = c.record_id AND r.state = 'accepted_current'))
                   THEN c.body_bytes ELSE 0 END AS bytes
            FROM ({" UNION ALL ".join(sides)}) AS c, {_HOLDERS}
        ) WHERE true GROUP BY tenant, holder, principal HAVING SUM(pending) <> 0 OR SUM(bytes) <> 0
        ON CONFLICT (tenant, holder, principal) DO UPDATE
            SET pending = pending + excluded.pending, bytes = bytes + excluded.bytes;
    END;
"""


def _record_trigger(event: str, sides: list[str]) -> str:
    """A record entering or leaving accepted_current adds or takes back the bytes of its accepted candidates."""
    return f"""
    CREATE TRIGGER holdings_record_{event.split(maxsplit=1)[0].lower()} AFTER {event} ON records BEGIN
        INSERT INTO holdings (tenant, holder, principal, pending, bytes)
        SELECT tenant, holder, principal, 0, SUM(bytes) FROM (
            SELECT c.tenant, h.holder, {_HOLDER_PRINCIPAL} AS principal, r.sign * c.body_bytes AS bytes
            FROM ({" UNION ALL ".join(sides)}) AS r, candidates c, {_HOLDERS}
            WHERE c.tenant = r.tenant AND c.workspace = r.workspace AND c.record_id = r.record_id
              AND c.state = 'accepted'
        ) WHERE true GROUP BY tenant, holder, principal HAVING SUM(bytes) <> 0
        ON CONFLICT (tenant, holder, principal) DO UPDATE SET bytes = bytes + excluded.bytes;
    END;
"""


_HOLDINGS_MIGRATION = f"""
    -- Quota holdings (reference/_quotas.py), kept by the database itself so that a capture reads one row
    -- instead of summing the tenant's candidates. One row per principal (holder 'principal') and one per
    -- tenant (holder 'tenant', principal ''), so the tenant's row never meets a real principal.
    -- A candidate contributes (1, body_bytes) while pending; (0, body_bytes) while accepted and its record
    -- (same tenant, workspace and record_id) is accepted_current; else nothing. Each trigger takes back the
    -- changed row's old contribution and adds its new one, so whatever writes candidates or records (and in
    -- whichever order admission writes the two) keeps the counters equal to the sum.
    CREATE TABLE holdings (
        tenant TEXT NOT NULL,
        holder TEXT NOT NULL CHECK (holder IN ('tenant', 'principal')),
        principal TEXT NOT NULL,
        pending INTEGER NOT NULL,
        bytes INTEGER NOT NULL,
        PRIMARY KEY (tenant, holder, principal)
    );
    -- A record's change finds the accepted candidates that point at it.
    CREATE INDEX candidates_record ON candidates (tenant, workspace, record_id);
    {_candidate_trigger("INSERT", [_candidate_side(1, "NEW")])}
    {_candidate_trigger("UPDATE OF tenant, workspace, principal, state, record_id, body_bytes",
                        [_candidate_side(-1, "OLD"), _candidate_side(1, "NEW")])}
    {_candidate_trigger("DELETE", [_candidate_side(-1, "OLD")])}
    {_record_trigger("INSERT", [_record_side(1, "NEW")])}
    {_record_trigger("UPDATE OF tenant, workspace, record_id, state",
                     [_record_side(-1, "OLD"), _record_side(1, "NEW")])}
    {_record_trigger("DELETE", [_record_side(-1, "OLD")])}
    -- The counters of the rows already stored.
    INSERT INTO holdings (tenant, holder, principal, pending, bytes)
    SELECT c.tenant, h.holder, {_HOLDER_PRINCIPAL}, SUM(c.state = 'pending'), SUM(c.body_bytes)
    FROM candidates c LEFT JOIN records r
      ON r.tenant = c.tenant AND r.workspace = c.workspace AND r.record_id = c.record_id, {_HOLDERS}
    WHERE c.state = 'pending' OR (c.state = 'accepted' AND r.state = 'accepted_current')
    GROUP BY 1, 2, 3;
"""


# Each entry upgrades the schema by one version; never edit a shipped entry.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);

    -- Lifecycle journal: ids, states and digests only, never content.
    CREATE TABLE journal (
        cursor INTEGER PRIMARY KEY,
        tenant TEXT NOT NULL,
        workspace TEXT NOT NULL,
        event TEXT NOT NULL,
        event_hash TEXT NOT NULL,
        previous_hash TEXT NOT NULL
    );
    CREATE INDEX journal_scope ON journal (tenant, workspace, cursor);

    CREATE TABLE candidates (
        candidate_id TEXT NOT NULL,
        tenant TEXT NOT NULL,
        workspace TEXT NOT NULL,
        principal TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('pending', 'accepted', 'rejected', 'withdrawn')),
        record_id TEXT NOT NULL,
        payload_digest TEXT NOT NULL,
        created_cursor INTEGER NOT NULL,
        ciphertext BLOB,
        wrapped_key BLOB,
        PRIMARY KEY (tenant, workspace, candidate_id)
    );

    CREATE TABLE records (
        rowid INTEGER PRIMARY KEY,
        record_id TEXT NOT NULL,
        tenant TEXT NOT NULL,
        workspace TEXT NOT NULL,
        candidate_id TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('accepted_current', 'tombstoned')),
        body TEXT,
        payload_digest TEXT NOT NULL,
        valid_from INTEGER NOT NULL,
        valid_to INTEGER,
        expires_at TEXT,
        recorded_cursor INTEGER NOT NULL,
        UNIQUE (tenant, workspace, record_id)
    );

    -- Search indexes are FTS5 tables created per scope on first admission (reference/_search.py).

    CREATE TABLE tombstones (
        tenant TEXT NOT NULL,
        workspace TEXT NOT NULL,
        payload_digest TEXT NOT NULL,
        PRIMARY KEY (tenant, workspace, payload_digest)
    );

    -- Idempotency reservations: one per (scope, principal, key), bound to an intent hash.
    CREATE TABLE reservations (
        tenant TEXT NOT NULL,
        workspace TEXT NOT NULL,
        principal TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        intent TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (tenant, workspace, principal, idempotency_key)
    );

    -- Confirmation request states are single use.
    CREATE TABLE consumed_states (nonce TEXT PRIMARY KEY, consumed_at TEXT NOT NULL);

    -- Audit journal: who called what with which outcome, hash-chained, never content.
    CREATE TABLE audit (
        seq INTEGER PRIMARY KEY,
        entry TEXT NOT NULL,
        entry_hash TEXT NOT NULL,
        previous_hash TEXT NOT NULL
    );
    """,
    """
    -- Erasure ledger (reference/_erasure.py): each withdraw or forget whose erased
    -- bytes may still sit in a store file, until the backend's flush removes them.
    -- Ids, cursors and times only, never content.
    CREATE TABLE erasures (
        erasure_id INTEGER PRIMARY KEY,
        subject TEXT NOT NULL CHECK (subject IN ('candidate_key', 'record_content')),
        tenant TEXT NOT NULL,
        workspace TEXT NOT NULL,
        subject_id TEXT NOT NULL,
        cursor INTEGER NOT NULL,
        requested_at TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('pending', 'complete')),
        completed_at TEXT
    );
    CREATE INDEX erasures_pending ON erasures (erasure_id) WHERE state = 'pending';
    """,
    """
    -- Resource bounds (reference/_quotas.py): when each candidate was captured, for
    -- its expiry, and how many sealed bytes it holds, for the byte quotas.
    ALTER TABLE candidates ADD COLUMN created_ms INTEGER;
    ALTER TABLE candidates ADD COLUMN body_bytes INTEGER NOT NULL DEFAULT 0;
    UPDATE candidates SET created_ms = (
        SELECT CAST(ROUND((julianday(json_extract(j.event, '$.recorded_at')) - 2440587.5) * 86400000) AS INTEGER)
        FROM journal j WHERE j.cursor = candidates.created_cursor
    );
    UPDATE candidates SET body_bytes = COALESCE(length(ciphertext), (
        SELECT length(CAST(r.body AS BLOB)) FROM records r
        WHERE r.tenant = candidates.tenant AND r.workspace = candidates.workspace
          AND r.record_id = candidates.record_id AND r.state = 'accepted_current'
    ), 0);
    CREATE INDEX candidates_pending_age ON candidates (created_ms) WHERE state = 'pending';
    CREATE INDEX candidates_holder ON candidates (tenant, principal, state);

    -- Confirmation states are purged once expired, oldest first.
    CREATE INDEX consumed_states_age ON consumed_states (consumed_at);

    -- The audit journal keeps two hash chains: 'main' (calls answered, and every row
    -- written before this version) and 'refused' (calls refused), whose oldest rows are
    -- compacted into a checkpoint: the hash and seq of the last row removed.
    ALTER TABLE audit ADD COLUMN chain TEXT NOT NULL DEFAULT 'main';
    CREATE INDEX audit_chain ON audit (chain, seq);
    CREATE TABLE audit_checkpoints (
        chain TEXT PRIMARY KEY,
        through_seq INTEGER NOT NULL,
        entry_hash TEXT NOT NULL,
        rows_compacted INTEGER NOT NULL
    );
    """,
    """
    -- Search indexes use FTS5 secure-delete (SQLite 3.42+), which an older SQLite cannot
    -- read; SqliteStore turns it on in each existing index when it opens the store.
    SELECT 1;
    """,
    _HOLDINGS_MIGRATION,
)

# When an erasure's flush tries again (seconds after the previous try) before it answers pending. Each
# try gives up at once if a reader is in the way, so other calls never wait behind a flush for long.
FLUSH_RETRY_DELAYS = (0.0, 0.01, 0.03, 0.06, 0.1)
ERASURE_RETRY_INTERVAL = 1.0  # seconds between background attempts to settle pending erasures
# Units of work in one group commit: enough to share a disk sync widely, few enough that the batch holds the
# writers' lock for milliseconds, not seconds.
UNITS_AT_MOST = 64
T = TypeVar("T")


def lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def _private_file(path: Path) -> None:
    """Create ``path`` empty with mode 0600 unless it exists; SQLite then fills it (and copies its mode to
    -wal/-shm)."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


@contextmanager
def _opening_lock(path: Path) -> Iterator[None]:
    """Hold ``<store>.lock`` exclusively while opening: two processes starting at once never migrate twice."""
    if fcntl is None:
        yield
        return
    fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock; the file stays, harmlessly


class _Unit(Generic[T]):
    """One caller's unit of work in a group commit, and what it gave: a value or the exception it raised."""

    __slots__ = ("error", "value", "work")

    def __init__(self, work: Callable[[StoreTransaction], T]) -> None:
        self.work = work
        self.value: T | None = None
        self.error: Exception | None = None


class SqliteStore:
    """The ``MemoryStore`` port on one SQLite file, its connection shared by the server's threads under one lock.

    ``read_only`` opens the file for inspection (``verify``): no lock file, no
    migration, no background work, so it runs beside a serving process.
    ``read``/``write`` hand out the raw connection, for SQLite-specific
    inspection only; the engine goes through ``transaction`` and ``snapshot``.
    """

    ranking = search_index.RANKING
    erasure_surfaces: tuple[str, ...] = ("records", "search_index", "wal")
    settles_on_request = True  # a truncating checkpoint costs what the WAL holds, not what the store holds

    def __init__(
        self,
        path: Path,
        *,
        synchronous: str = DEFAULT_SYNCHRONOUS,
        read_only: bool = False,
        flush_retry_delays: tuple[float, ...] = FLUSH_RETRY_DELAYS,
        erasure_retry_interval: float = ERASURE_RETRY_INTERVAL,
    ) -> None:
        if synchronous not in SYNCHRONOUS_LEVELS:
            raise ValueError(f"synchronous must be one of {', '.join(SYNCHRONOUS_LEVELS)}")
        self.path = Path(path)
        self.read_only = read_only
        self._synchronous = synchronous  # the configured level, restored after each call count
        self._lock = threading.RLock()
        self._flush_lock = threading.Lock()
        self._flusher: sqlite3.Connection | None = None
        self._flush_retry_delays = flush_retry_delays
        self.erasures = ErasureLedger(self, retry_interval=erasure_retry_interval)
        self._units: GroupCommit[_Unit[Any]] = GroupCommit(self._run_units, batch_at_most=UNITS_AT_MOST)
        self._committing: int | None = None  # the thread running a batch of units, while it runs
        if read_only:
            uri = f"{self.path.resolve().as_uri()}?mode=ro"
            self._db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False, timeout=30)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA query_only = ON")
            return
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with _opening_lock(self.path):
            _private_file(self.path)
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
            self._db.row_factory = sqlite3.Row
            for pragma in (
                "journal_mode = WAL",
                f"synchronous = {synchronous.upper()}",
                "secure_delete = ON",  # freed pages and cells are zeroed, so deleted text leaves the file
                "foreign_keys = ON",
            ):
                self._db.execute(f"PRAGMA {pragma}")
            self._migrate()
            # A second connection, without a busy wait, only for erasure checkpoints: a try that
            # meets a reader gives up at once, and nothing here holds this store's lock.
            self._flusher = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=0)
        self.erasures.start()

    def _migrate(self) -> None:
        with self._lock:
            version = self.schema_version
            if version > len(MIGRATIONS):
                raise RuntimeError("the store was written by a newer version of this server")
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                # executescript runs the whole step, version bump included, in one transaction.
                self._db.executescript(f"BEGIN IMMEDIATE;\n{script}\nPRAGMA user_version = {number};\nCOMMIT;")
            self._secure_delete_indexes()
            self._db.execute(_call_counts.TABLE)  # once per open, not on every counted call
            self._db.execute(_ledger_bytes.TABLE)  # the same: counters without a schema version of their own

    def _secure_delete_indexes(self) -> None:
        """Turn FTS5 secure-delete on in every search index that lacks it (those an older server created)."""
        with self.write() as db:
            tables = [row[0] for row in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'fts_*' AND sql LIKE '%fts5%'"
            )]
            for table in tables:
                if not db.execute(f"SELECT 1 FROM {table}_config WHERE k = 'secure-delete' AND v = 1").fetchone():
                    db.execute(search_index.secure_delete_sql(table))

    @property
    def schema_version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    @property
    def synchronous(self) -> str:
        level = int(self._db.execute("PRAGMA synchronous").fetchone()[0])
        return {0: "off", 1: "normal", 2: "full", 3: "extra"}[level]

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; ``BEGIN IMMEDIATE`` also fences out other processes."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                if self._db.in_transaction:  # SQLite rolls some failures (a full disk, an I/O error) back itself
                    self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A consistent snapshot for reads."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                yield self._db
            finally:
                self._db.execute("COMMIT")

    def transaction(self, work: Callable[[StoreTransaction], T]) -> T:
        """One unit of work, committed before it returns; SQLite's single writer means it never has to be re-run.

        Units handed in by other threads while one commits go together into the next transaction, each in a
        savepoint of its own (reference/_group_commit.py): one sync of the disk for the batch, while a unit that
        raises rolls back alone and its caller gets the exception.
        """
        if self._committing == threading.get_ident():  # it would wait for the batch that is running it
            raise RuntimeError("a unit of work cannot start another")
        unit: _Unit[T] = _Unit(work)
        self._units.commit(unit)
        if unit.error is not None:
            raise unit.error
        return unit.value  # type: ignore[return-value]  # set: the unit ran without error

    def _run_units(self, units: Sequence[_Unit[Any]]) -> None:
        """Run each unit in one transaction; any failure of the transaction itself fails the whole batch."""
        with self.write() as db:
            tx = SqliteTransaction(db)
            self._committing = threading.get_ident()
            try:
                if len(units) == 1:  # alone: its exception rolls the transaction back, as without batching
                    units[0].value = units[0].work(tx)
                    return
                for unit in units:
                    db.execute("SAVEPOINT unit")
                    try:
                        unit.value = unit.work(tx)
                    except Exception as problem:  # the unit's own failure: undo its writes only
                        if not db.in_transaction:  # SQLite rolled everything back: no unit of the batch is written
                            raise
                        db.execute("ROLLBACK TO unit")
                        unit.error = problem
                    db.execute("RELEASE unit")
            finally:
                self._committing = None

    @contextmanager
    def snapshot(self) -> Iterator[StoreReader]:
        with self.read() as db:
            yield SqliteTransaction(db)

    def key_legacy_digests(self, keyed: Callable[[str, Scope], str]) -> None:
        """Key, once per store, the plain payload digests an older server left in erased or sealed rows."""
        with self.write() as db:
            if db.execute("SELECT 1 FROM meta WHERE key = 'stored_digests'").fetchone():
                return
            for table, erased in (("candidates", ""), ("records", " AND state = 'tombstoned'"), ("tombstones", "")):
                rows = db.execute(
                    f"SELECT rowid, tenant, workspace, payload_digest FROM {table} WHERE payload_digest NOT LIKE "
                    f"'hmac-%'{erased}"
                ).fetchall()
                db.executemany(
                    f"UPDATE OR IGNORE {table} SET payload_digest = ? WHERE rowid = ?",
                    [(keyed(r["payload_digest"], Scope(r["tenant"], r["workspace"])), r["rowid"]) for r in rows],
                )
            db.execute("INSERT INTO meta VALUES ('stored_digests', 'hmac-sha256')")

    def flush_residues(self) -> bool:
        """Truncate the WAL, so no old page image of erased data is left in any store file.

        With ``secure_delete`` the new page images hold zeros where the erased
        bytes were; a truncating checkpoint copies them over the database file
        and empties the WAL. It cannot finish while any connection, in any
        process, still reads an older snapshot. Each try gives up at once when
        it meets one (SQLite's writer lock is held only for the try itself), and
        the tries are spaced by ``flush_retry_delays``; after the last, False.
        """
        if self._flusher is None:
            return False
        with self._flush_lock:
            for delay in self._flush_retry_delays:
                time.sleep(delay)
                try:
                    busy = self._flusher.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
                except sqlite3.Error:
                    continue
                if busy == 0:
                    return True
        return False

    def close(self) -> None:
        self.erasures.stop()
        with self._lock:
            self._db.close()
            if self._flusher is not None:
                with self._flush_lock:
                    self._flusher.close()

    def count_call(self, tenant: str, principal: str, window: int, bounds: tuple[int, int]) -> bool:
        """The call quotas' counters, in the file so every process on it shares them (reference/_call_counts.py).

        Committed without waiting for the disk (WAL with synchronous NORMAL): a crash may lose the last
        counts, never the file, and the next durable commit syncs them anyway.
        """
        with self._lock:
            self._db.execute("PRAGMA synchronous = NORMAL")
            try:
                with self.write() as db:
                    return _call_counts.count_call(db, tenant, principal, window, bounds)
            finally:
                self._db.execute(f"PRAGMA synchronous = {self._synchronous.upper()}")


Store = SqliteStore  # the name older callers and tests use
