"""The embedded store: one SQLite file in WAL mode.

Every mutation touches only the rows it changes (no whole-table rewrites), runs
inside ``BEGIN IMMEDIATE`` so there is one writer at a time, and is durable
once the call returns: a committed WAL frame survives the process being killed.
Pending candidates are stored sealed; forgetting scrubs the record's text from
the database file and the WAL (``secure_delete``, an FTS5 optimize, a
truncating checkpoint), because this SQLite has no FTS5 secure-delete option.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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
)


class Store:
    """A connection to the store file, shared by the server's threads under one lock."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        self._db.row_factory = sqlite3.Row
        for pragma in (
            "journal_mode = WAL",
            "synchronous = NORMAL",  # WAL + NORMAL: committed frames survive a killed process
            "secure_delete = ON",  # freed pages are zeroed, so deleted text leaves the file
            "foreign_keys = ON",
        ):
            self._db.execute(f"PRAGMA {pragma}")
        self._migrate()

    def _migrate(self) -> None:
        with self._lock:
            version = self.schema_version
            if version > len(MIGRATIONS):
                raise RuntimeError("the store was written by a newer version of this server")
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                # executescript runs the whole step, version bump included, in one transaction.
                self._db.executescript(f"BEGIN IMMEDIATE;\n{script}\nPRAGMA user_version = {number};\nCOMMIT;")

    @property
    def schema_version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; ``BEGIN IMMEDIATE`` also fences out other processes."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
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

    def scrub(self, fts_table: str | None = None) -> None:
        """Push deleted text out of an FTS index, the database file and the WAL.

        FTS5 deletes only append delete markers; 'optimize' rewrites the index
        without the deleted rows, secure_delete zeroes the freed pages, and the
        truncating checkpoint drops the old page images from the WAL.
        """
        with self._lock:
            if fts_table is not None:
                self._db.execute(f"INSERT INTO {fts_table} ({fts_table}) VALUES ('optimize')")
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        with self._lock:
            self._db.close()


def row_dict(row: sqlite3.Row | None) -> dict[str, Any] | None:
    return dict(row) if row is not None else None
