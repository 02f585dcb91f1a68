"""PostgreSQL erasure against every way SQL can read the database, and what it costs other tenants.

`complete` must hold for the tables, the search index and the planner's statistics: ANALYZE (the store's own
refresh, or autovacuum's) samples column values into ``pg_statistic``, where ``pg_stats`` shows them to any
role that may read the table and a CHECKPOINT writes them to its data files. These tests capture, admit,
forget, withdraw and reject marked content, analyze as autovacuum would, settle the erasures, and then look
for the markers, the payload digest, the wrapped keys and the ciphertext in ``pg_stats``, in every table of the
store and in the data files of ``pg_statistic`` and the search index. Skipped with the reason when PostgreSQL
does not answer.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from engram_mcp.reference._core import Engine
from engram_mcp.reference._crypto import AesGcmCipher
from engram_mcp.reference._policy import AcceptAll, RejectAll
from engram_mcp.reference._ports import AdmissionPolicy, Scope
from engram_mcp.reference._postgres import PostgresStore
from engram_mcp.reference._postgres_schema import MIGRATIONS, UNSAMPLED, migrate
from tests.postgres_support import fresh_postgres_url
from tests.reference.conftest import admission_args, capture_args, forget_args, get_args, marker, withdraw_args
from tests.reference.test_core_units import NOW, binding, policy

__all__ = ["fresh_postgres_url"]  # the fixture, imported for pytest to find

SCOPE = Scope("tenant-a", "workspace-1")
SETTLE_WITHIN = 30.0


class Admissions:
    """The admission policy of the scope, which a test can swap between calls."""

    def __init__(self) -> None:
        self.current: AdmissionPolicy = AcceptAll()


@pytest.fixture
def engine(fresh_postgres_url: str) -> Iterator[tuple[Engine, Admissions]]:
    store = PostgresStore(fresh_postgres_url, background=False)  # settled by hand here
    admissions = Admissions()
    yield Engine(store, AesGcmCipher(os.urandom(32)), lambda scope: policy(admissions.current), os.urandom(32)), \
        admissions
    store.close()


def call(engine: Engine, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    outcome = engine.call(tool, binding(), arguments, NOW)
    assert outcome.code is None and outcome.value is not None, outcome.code
    return outcome.value


def settled(store: PostgresStore) -> bool:
    """Settle what the calls left pending, as the background retry would, for up to SETTLE_WITHIN seconds
    (a transaction of another session on the server may hold an older snapshot meanwhile)."""
    deadline = time.monotonic() + SETTLE_WITHIN
    while store.erasures.outstanding():
        store.erasures.settle()
        if time.monotonic() > deadline:
            return False
    return True


def analyze_all(url: str) -> None:
    """What autovacuum's auto-analyze does once enough rows changed: every table of the store's schema."""
    with psycopg.connect(url, autocommit=True) as conn:
        for (table,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"):
            conn.execute(f'ANALYZE "{table}"')


def sealed_of(url: str, cid: str) -> dict[str, bytes]:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT wrapped_key, ciphertext FROM candidates WHERE candidate_id = %s", (cid,)).fetchone()
    assert row is not None and row[0] and row[1]
    return {f"wrapped key of {cid}": bytes(row[0]), f"ciphertext of {cid}": bytes(row[1])[13:45]}


def as_text(needles: dict[str, bytes]) -> dict[str, str]:
    """Each needle as SQL shows it: the text itself where it is text, and bytea's hex form either way."""
    shown = {f"{name} (hex)": value.hex() for name, value in needles.items()}
    shown.update({name: value.decode() for name, value in needles.items() if value.isascii() and value.isalnum()})
    return shown


def statistics_holding(url: str, needles: dict[str, str]) -> dict[str, list[str]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT tablename || '.' || attname, s::text FROM pg_stats s WHERE schemaname = current_schema()"
        ).fetchall()
    return _where(needles, [(str(where), str(text).lower()) for where, text in rows])


def tables_holding(url: str, needles: dict[str, str]) -> dict[str, list[str]]:
    with psycopg.connect(url) as conn:
        tables = [t for (t,) in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")]
        rows = [(table, str(text).lower()) for table in tables
                for (text,) in conn.execute(f'SELECT t::text FROM "{table}" t')]
    return _where(needles, rows)


def _where(needles: dict[str, str], rows: list[tuple[str, str]]) -> dict[str, list[str]]:
    found = {name: sorted({where for where, text in rows if needle.lower() in text})
             for name, needle in needles.items()}
    return {name: where for name, where in found.items() if where}


def data_files(url: str, relations: tuple[str, ...]) -> dict[str, bytes] | None:
    """After a CHECKPOINT, the data files (every fork and segment) of these relations and their TOAST tables and
    indexes; None when the server's data directory is not readable from here (a server on another machine)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        root = Path(str(conn.execute("SELECT current_setting('data_directory')").fetchone()[0]))
        paths = [str(p) for (p,) in conn.execute(
            "SELECT pg_relation_filepath(c.oid) FROM pg_class c WHERE c.oid = ANY(ARRAY(SELECT r::regclass::oid FROM "
            "unnest(%s::text[]) r)) OR c.oid IN (SELECT reltoastrelid FROM pg_class WHERE oid = ANY(ARRAY(SELECT "
            "r::regclass::oid FROM unnest(%s::text[]) r))) OR c.oid IN (SELECT indexrelid FROM pg_index WHERE "
            "indrelid IN (SELECT reltoastrelid FROM pg_class WHERE oid = ANY(ARRAY(SELECT r::regclass::oid FROM "
            "unnest(%s::text[]) r))))",
            (list(relations), list(relations), list(relations)),
        ) if p]
    if not os.access(root, os.R_OK):
        return None
    files = {}
    for base in paths:
        for path in (root / base).parent.glob((root / base).name + "*"):  # forks (_fsm, _vm) and segments (.1)
            files[path.name] = path.read_bytes()
    return files


def schema_relations(url: str) -> tuple[str, ...]:
    """Every table and index of the store's schema."""
    with psycopg.connect(url) as conn:
        return tuple(str(name) for (name,) in conn.execute(
            "SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relkind IN ('r', 'i')"
        ))


def files_holding(files: dict[str, bytes], needles: dict[str, bytes]) -> dict[str, list[str]]:
    found = {name: sorted(f for f, data in files.items() if needle in data) for name, needle in needles.items()}
    return {name: where for name, where in found.items() if where}


def test_a_complete_erasure_leaves_nothing_in_statistics_tables_or_their_files(
    engine: tuple[Engine, Admissions], fresh_postgres_url: str
) -> None:
    core, admissions = engine
    store = core.store
    assert isinstance(store, PostgresStore)
    for _ in range(3):  # kept records, so the statistics have rows to sample beside the erased ones
        kept = call(core, "engram_memory_capture", capture_args(f"Kept decision {marker()}."))["candidate_id"]
        call(core, "engram_memory_request_admission", admission_args(kept))
    forgotten_word, withdrawn_word, rejected_word = marker(), marker(), marker()
    cid = call(core, "engram_memory_capture", capture_args(f"Forgettable plan {forgotten_word}."))["candidate_id"]
    rid = call(core, "engram_memory_request_admission", admission_args(cid))["outcome"]["record_id"]
    digest = call(core, "engram_memory_get", get_args(rid))["record"]["payload_digest"]
    withdrawn = call(core, "engram_memory_capture", capture_args(f"Withdrawn plan {withdrawn_word}."))["candidate_id"]
    admissions.current = RejectAll()
    rejected = call(core, "engram_memory_capture", capture_args(f"Rejected plan {rejected_word}."))["candidate_id"]
    keys = {**sealed_of(fresh_postgres_url, withdrawn), **sealed_of(fresh_postgres_url, rejected)}
    analyze_all(fresh_postgres_url)  # autovacuum samples the store while the content is live

    call(core, "engram_memory_forget", forget_args(rid))
    call(core, "engram_memory_withdraw", withdraw_args(withdrawn))
    assert call(core, "engram_memory_request_admission", admission_args(rejected))["outcome"]["status"] == "rejected"
    assert settled(store), "the erasures are not complete"

    needles = {"forgotten word": forgotten_word.encode(), "withdrawn word": withdrawn_word.encode(),
               "rejected word": rejected_word.encode(), "payload digest": digest.split(":")[1].encode(), **keys}
    shown = as_text(needles)
    assert statistics_holding(fresh_postgres_url, shown) == {}, "pg_stats still shows erased values"
    assert tables_holding(fresh_postgres_url, shown) == {}, "a table still holds erased values"
    files = data_files(fresh_postgres_url, ("pg_statistic", "records_search"))
    if files is not None:
        plain = {**needles, **{f"{name} (hex)": value.hex().encode() for name, value in needles.items()}}
        assert files_holding(files, plain) == {}, "a data file still holds erased values"
        # What the README tells an operator to run to drop the freed space VACUUM leaves in the tables' pages.
        with psycopg.connect(fresh_postgres_url, autocommit=True) as conn:
            conn.execute("VACUUM FULL candidates, records")
        every = data_files(fresh_postgres_url, schema_relations(fresh_postgres_url))
        assert every is not None and files_holding(every, plain) == {}, "a table's file holds erased values"


def test_the_migration_drops_the_statistics_an_older_schema_sampled(fresh_postgres_url: str) -> None:
    word = marker()
    with psycopg.connect(fresh_postgres_url, autocommit=True) as conn:
        with conn.transaction():  # a version-3 store, as the previous server left it
            conn.execute("CREATE TABLE schema_versions (version integer PRIMARY KEY, applied_at timestamptz "
                         "NOT NULL DEFAULT now())")
            for number, script in enumerate(MIGRATIONS[:3], start=1):
                conn.execute(script)
                conn.execute("INSERT INTO schema_versions (version) VALUES (%s)", (number,))
        for i in range(20):
            conn.execute(
                "INSERT INTO records (tenant, workspace, record_id, candidate_id, state, body, payload_digest, "
                "valid_from, recorded_cursor, search) VALUES ('t', 'w', %s, %s, 'accepted_current', %s, %s, 0, %s, "
                "to_tsvector('simple', %s))",
                (f"r{i}", f"c{i}", f"body {word}".encode(), f"sha256:{word}{i}", i, f"{word} common"),
            )
        conn.execute("ANALYZE records")
        assert statistics_holding(fresh_postgres_url, {"word": word}), "the old schema's statistics sampled nothing"
        migrate(conn)
        targets = conn.execute(
            "SELECT c.relname, a.attname, a.attstattarget FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "WHERE c.relnamespace = current_schema()::regnamespace AND a.attnum > 0 AND NOT a.attisdropped"
        ).fetchall()
        conn.execute("ANALYZE records")
    unsampled = {(table, column) for table, columns in UNSAMPLED.items() for column in columns}
    assert {(t, c) for t, c, target in targets if target == 0} == unsampled
    assert statistics_holding(fresh_postgres_url, {"word": word}) == {}


def flushes(store: PostgresStore) -> bool:
    """Whether a flush succeeds within SETTLE_WITHIN (another session's transaction may be in the way meanwhile)."""
    deadline = time.monotonic() + SETTLE_WITHIN
    while not store.flush_residues():
        if time.monotonic() > deadline:
            return False
    return True


def test_an_erasure_is_pending_while_statistics_may_sample_an_erased_column(fresh_postgres_url: str) -> None:
    store = PostgresStore(fresh_postgres_url, background=False)
    try:
        with psycopg.connect(fresh_postgres_url, autocommit=True) as conn:
            assert store.sampled_columns(conn) == []
            conn.execute("ALTER TABLE records ALTER COLUMN body SET STATISTICS 100")  # as an operator might
            assert store.sampled_columns(conn) == ["records.body"]
            assert store.flush_residues() is False
            conn.execute("ALTER TABLE records ALTER COLUMN body SET STATISTICS 0, ALTER COLUMN body TYPE bytea")
            assert store.sampled_columns(conn) == []
        assert flushes(store)
    finally:
        store.close()


# -- what an erasure costs everyone else -----------------------------------------------------------------


class CountingStore(PostgresStore):
    """The store, counting its residue flushes (each one VACUUMs and rebuilds what the whole store holds)."""

    flushes = 0

    def flush_residues(self) -> bool:
        self.flushes += 1
        return super().flush_residues()


def test_an_erasure_call_answers_pending_and_leaves_the_flush_to_the_background(fresh_postgres_url: str) -> None:
    store = CountingStore(fresh_postgres_url, background=False)
    admissions = Admissions()
    core = Engine(store, AesGcmCipher(os.urandom(32)), lambda scope: policy(admissions.current), os.urandom(32))
    try:
        cid = call(core, "engram_memory_capture", capture_args())["candidate_id"]
        rid = call(core, "engram_memory_request_admission", admission_args(cid))["outcome"]["record_id"]
        forget = forget_args(rid)
        assert call(core, "engram_memory_forget", forget)["projection_invalidation"] == "pending"
        withdrawn = call(core, "engram_memory_capture", capture_args())["candidate_id"]
        assert call(core, "engram_memory_withdraw", withdraw_args(withdrawn))["key_destruction"] == "pending"
        admissions.current = RejectAll()
        rejected = call(core, "engram_memory_capture", capture_args())["candidate_id"]
        outcome = call(core, "engram_memory_request_admission", admission_args(rejected))["outcome"]
        assert outcome["status"] == "rejected"
        assert store.flushes == 0, "a call ran a flush that costs the whole store"
        assert settled(store)  # one background flush covers all three
        assert store.erasures.outstanding() == []
        # A replay answers what the call answered.
        assert call(core, "engram_memory_forget", dict(forget))["projection_invalidation"] == "pending"
    finally:
        store.close()


def waiting_locks(url: str, *, besides: set[int]) -> list[tuple[str, str]]:
    with psycopg.connect(url) as conn:
        return [(str(kind), str(mode)) for kind, mode in conn.execute(
            "SELECT locktype, mode FROM pg_locks WHERE NOT granted AND pid <> ALL(%s)", (list(besides),)
        ).fetchall()]


def test_the_background_flush_blocks_no_other_tenants_reads_or_writes(fresh_postgres_url: str) -> None:
    """While the flush waits for a transaction that used the search index, other calls read and write."""
    store = PostgresStore(fresh_postgres_url, background=False)
    try:
        with psycopg.connect(fresh_postgres_url, autocommit=True) as probe:
            probe.execute(
                "INSERT INTO records (tenant, workspace, record_id, candidate_id, state, body, payload_digest, "
                "valid_from, recorded_cursor, search) VALUES ('other', 'w', 'r1', 'c1', 'accepted_current', "
                "'\\x7b7d', 'd', 0, 1, to_tsvector('simple', 'words'))"
            )
        assert flushes(store)
        with psycopg.connect(fresh_postgres_url) as holder, \
                psycopg.connect(fresh_postgres_url, autocommit=True) as probe:
            # A call that searched and has not committed yet: it holds the index, so the rebuild must wait for it.
            holder.execute("SELECT count(*) FROM records WHERE search @@ 'words'::tsquery").fetchone()
            pids = {int(holder.info.backend_pid), int(probe.info.backend_pid)}
            flushed: list[bool] = []
            flusher = threading.Thread(target=lambda: flushed.append(store.flush_residues()))
            flusher.start()
            deadline = time.monotonic() + SETTLE_WITHIN
            while not waiting_locks(fresh_postgres_url, besides=pids) and flusher.is_alive():
                assert time.monotonic() < deadline, "the flush never waited for the open transaction"
                time.sleep(0.01)
            probe.execute("SET lock_timeout = '300ms'")  # a call blocked behind the flush fails here
            assert probe.execute(
                "SELECT count(*) FROM records WHERE tenant = 'other' AND search @@ 'words'::tsquery"
            ).fetchone() == (1,)
            probe.execute("UPDATE records SET valid_to = NULL WHERE tenant = 'other' AND record_id = 'r1'")
            assert flusher.is_alive(), "the flush ended before the calls beside it ran"
            holder.rollback()
            flusher.join(SETTLE_WITHIN)
        assert flushed == [True] or flushes(store)
    finally:
        store.close()
