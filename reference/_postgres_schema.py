"""The PostgreSQL store's schema: versioned migrations, every table keyed by tenant first.

Each entry of ``MIGRATIONS`` upgrades the schema by one version and is never
edited once shipped; ``migrate`` applies the missing ones with their version
rows in one transaction, under a transaction-level advisory lock, so that
replicas starting together never migrate twice.

Distributing on the tenant. Every table holding a scope's data (candidates,
records, tombstones, reservations, erasures, journal, call_windows) has ``tenant`` first in
its primary key and in its indexes, and every query on them filters on
``tenant =``: with Citus, ``SELECT create_distributed_table(t, 'tenant')`` for
each of them (co-located by default) routes each such query to one worker, and
``schema_versions``, ``audit_checkpoints`` and ``audit_counts`` become reference tables.
Two things are store-wide in this version, as the store port defines them: the
lifecycle journal is one hash chain with one cursor sequence (``journal_order``)
and the audit chains share one ``seq``. A distributed deployment needs them per
tenant first: the port's ``journal_head`` and ``audit_head`` taking the tenant,
and ``verify`` walking one chain per tenant. Consumed confirmation ids name no
tenant and would be distributed on the nonce itself.
"""

from __future__ import annotations

from typing import Any

MIGRATIONS: tuple[str, ...] = (
    """
    -- Lifecycle journal: ids, states and digests only, never content.
    CREATE TABLE journal (
        tenant text NOT NULL,
        cursor bigint NOT NULL,
        workspace text NOT NULL,
        event text NOT NULL,
        event_hash text NOT NULL,
        previous_hash text NOT NULL,
        PRIMARY KEY (tenant, cursor)
    );
    CREATE INDEX journal_scope ON journal (tenant, workspace, cursor);
    -- The chain is store-wide today (see the module's docstring): its cursors are unique across tenants.
    CREATE UNIQUE INDEX journal_order ON journal (cursor);

    CREATE TABLE candidates (
        tenant text NOT NULL,
        workspace text NOT NULL,
        candidate_id text NOT NULL,
        principal text NOT NULL,
        state text NOT NULL CHECK (state IN ('pending', 'accepted', 'rejected', 'withdrawn')),
        record_id text NOT NULL,
        payload_digest text NOT NULL,
        created_cursor bigint NOT NULL,
        ciphertext bytea,
        wrapped_key bytea,
        created_ms bigint NOT NULL,
        body_bytes bigint NOT NULL DEFAULT 0,
        PRIMARY KEY (tenant, workspace, candidate_id)
    );
    -- The expiry sweep reads every tenant's oldest pending candidates.
    CREATE INDEX candidates_pending_age ON candidates (created_ms) WHERE state = 'pending';
    CREATE INDEX candidates_holder ON candidates (tenant, principal, state);

    CREATE TABLE records (
        tenant text NOT NULL,
        workspace text NOT NULL,
        record_id text NOT NULL,
        candidate_id text NOT NULL,
        state text NOT NULL CHECK (state IN ('accepted_current', 'tombstoned')),
        body bytea,  -- the record as admitted, UTF-8 JSON (bytea: a text column refuses U+0000)
        payload_digest text NOT NULL,
        valid_from bigint NOT NULL,
        valid_to bigint,
        expires_at text,
        recorded_cursor bigint NOT NULL,
        -- The lexical index: NULL once tombstoned, so a forgotten record leaves the index.
        search tsvector,
        PRIMARY KEY (tenant, workspace, record_id)
    );
    -- GIN without a pending list, so an index entry goes straight into the tree VACUUM cleans.
    CREATE INDEX records_search ON records USING gin (search) WITH (fastupdate = off)
        WHERE state = 'accepted_current';

    CREATE TABLE tombstones (
        tenant text NOT NULL,
        workspace text NOT NULL,
        payload_digest text NOT NULL,
        PRIMARY KEY (tenant, workspace, payload_digest)
    );

    -- Idempotency reservations: one per (scope, principal, key), bound to an intent hash.
    CREATE TABLE reservations (
        tenant text NOT NULL,
        workspace text NOT NULL,
        principal text NOT NULL,
        idempotency_key text NOT NULL,
        intent text NOT NULL,
        value text NOT NULL,
        PRIMARY KEY (tenant, workspace, principal, idempotency_key)
    );

    -- Confirmation states and host references are single use. A nonce names no tenant, so this
    -- one table is keyed (and would be distributed) by the nonce itself.
    CREATE TABLE consumed_states (
        nonce text PRIMARY KEY,
        consumed_at text NOT NULL
    );
    CREATE INDEX consumed_states_age ON consumed_states (consumed_at);

    -- Audit journal: two hash chains ('main' and 'refused') sharing one seq, never content.
    -- Store-wide like the journal; compaction entries belong to no tenant.
    CREATE TABLE audit (
        seq bigint PRIMARY KEY,
        chain text NOT NULL CHECK (chain IN ('main', 'refused')),
        entry text NOT NULL,
        entry_hash text NOT NULL,
        previous_hash text NOT NULL
    );
    CREATE INDEX audit_chain ON audit (chain, seq);
    CREATE TABLE audit_checkpoints (
        chain text PRIMARY KEY,
        through_seq bigint NOT NULL,
        entry_hash text NOT NULL,
        rows_compacted bigint NOT NULL
    );

    -- Erasure ledger: ids, cursors and times only, never content.
    CREATE TABLE erasures (
        tenant text NOT NULL,
        erasure_id bigint GENERATED ALWAYS AS IDENTITY,
        subject text NOT NULL CHECK (subject IN ('candidate_key', 'record_content')),
        workspace text NOT NULL,
        subject_id text NOT NULL,
        cursor bigint NOT NULL,
        requested_at text NOT NULL,
        state text NOT NULL CHECK (state IN ('pending', 'complete')),
        completed_at text,
        PRIMARY KEY (tenant, erasure_id)
    );
    CREATE UNIQUE INDEX erasures_order ON erasures (erasure_id);
    CREATE INDEX erasures_pending ON erasures (erasure_id) WHERE state = 'pending';
    """,
    """
    -- Call quotas (reference/_quotas.py): one counter row per holder, shared by every replica, reset when a
    -- later window begins. A tenant's own row has principal ''.
    CREATE TABLE call_windows (
        tenant text NOT NULL,
        holder text NOT NULL CHECK (holder IN ('tenant', 'principal')),
        principal text NOT NULL,
        win bigint NOT NULL,
        calls bigint NOT NULL,
        PRIMARY KEY (tenant, holder, principal)
    );
    -- Counts one call for the tenant and the principal, or for neither (false: a bound is reached), in one
    -- round trip. The tenant's row is always locked first, so two callers never deadlock; the row locks
    -- make the check and the increment one step however many replicas call at once.
    CREATE FUNCTION count_call(p_tenant text, p_principal text, p_window bigint, tenant_bound bigint,
                               principal_bound bigint) RETURNS boolean LANGUAGE plpgsql AS $$
    BEGIN
        IF tenant_bound > 0 THEN
            INSERT INTO call_windows AS c VALUES (p_tenant, 'tenant', '', p_window, 1)
            ON CONFLICT (tenant, holder, principal) DO UPDATE
                SET calls = CASE WHEN excluded.win > c.win THEN 1 ELSE c.calls + 1 END,
                    win = GREATEST(c.win, excluded.win)
                WHERE excluded.win > c.win OR c.calls < tenant_bound;
            IF NOT FOUND THEN
                RETURN false;
            END IF;
        END IF;
        IF principal_bound > 0 THEN
            INSERT INTO call_windows AS c VALUES (p_tenant, 'principal', p_principal, p_window, 1)
            ON CONFLICT (tenant, holder, principal) DO UPDATE
                SET calls = CASE WHEN excluded.win > c.win THEN 1 ELSE c.calls + 1 END,
                    win = GREATEST(c.win, excluded.win)
                WHERE excluded.win > c.win OR c.calls < principal_bound;
            IF NOT FOUND THEN
                UPDATE call_windows SET calls = calls - 1  -- the tenant's count is given back
                WHERE tenant_bound > 0 AND tenant = p_tenant AND holder = 'tenant' AND principal = '';
                RETURN false;
            END IF;
        END IF;
        RETURN true;
    END $$;

    -- Rows held per audit chain, kept in step by every append and compaction, so that whichever replica
    -- appends a refused row reads the chain's true length in its own unit of work, without a scan.
    CREATE TABLE audit_counts (
        chain text PRIMARY KEY CHECK (chain IN ('main', 'refused')),
        held bigint NOT NULL
    );
    INSERT INTO audit_counts SELECT chain, COUNT(*) FROM audit GROUP BY chain;

    -- A scope's current records newest first: a search for a frequent word walks it until the cap of
    -- candidates match, rather than reading every match from the GIN index.
    CREATE INDEX records_recent ON records (tenant, workspace, recorded_cursor DESC, record_id)
        WHERE state = 'accepted_current';
    """,
    """
    -- Quota holdings (reference/_quotas.py), kept by the database itself so that a capture reads one row
    -- instead of summing the tenant's candidates. One row per principal (holder 'principal') and one per
    -- tenant (holder 'tenant', principal ''), so the tenant's row never meets a real principal.
    -- A candidate contributes (1, body_bytes) while pending; (0, body_bytes) while accepted and its record
    -- (same tenant, workspace and record_id) is accepted_current; else nothing. Each trigger takes back the
    -- changed row's old contribution and adds its new one in one UPSERT, so whatever writes candidates or
    -- records (and in whichever order admission writes the two) keeps the counters equal to the sum.
    CREATE TABLE holdings (
        tenant text NOT NULL,
        holder text NOT NULL CHECK (holder IN ('tenant', 'principal')),
        principal text NOT NULL,
        pending bigint NOT NULL,
        bytes bigint NOT NULL,
        PRIMARY KEY (tenant, holder, principal)
    );
    -- A record's change finds the accepted candidates that point at it.
    CREATE INDEX candidates_record ON candidates (tenant, workspace, record_id);

    CREATE FUNCTION holdings_candidate() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO holdings AS h (tenant, holder, principal, pending, bytes)
        SELECT d.tenant, d.holder, d.principal, SUM(d.pending), SUM(d.bytes) FROM (
            SELECT c.tenant, k.holder, CASE k.holder WHEN 'tenant' THEN '' ELSE c.principal END AS principal,
                   c.sign * (c.state = 'pending')::int AS pending,
                   c.sign * CASE WHEN c.state = 'pending' OR (c.state = 'accepted' AND EXISTS (
                       SELECT 1 FROM records r WHERE r.tenant = c.tenant AND r.workspace = c.workspace
                       AND r.record_id = c.record_id AND r.state = 'accepted_current'))
                   THEN c.body_bytes ELSE 0 END AS bytes
            FROM (SELECT -1 AS sign, OLD.tenant AS tenant, OLD.workspace AS workspace, OLD.principal AS principal,
                         OLD.state AS state, OLD.record_id AS record_id, OLD.body_bytes AS body_bytes
                  WHERE TG_OP <> 'INSERT'
                  UNION ALL
                  SELECT 1, NEW.tenant, NEW.workspace, NEW.principal, NEW.state, NEW.record_id, NEW.body_bytes
                  WHERE TG_OP <> 'DELETE') AS c
            CROSS JOIN (VALUES ('tenant'), ('principal')) AS k (holder)
        ) AS d
        GROUP BY d.tenant, d.holder, d.principal HAVING SUM(d.pending) <> 0 OR SUM(d.bytes) <> 0
        ON CONFLICT (tenant, holder, principal) DO UPDATE
            SET pending = h.pending + excluded.pending, bytes = h.bytes + excluded.bytes;
        RETURN NULL;
    END $$;
    CREATE TRIGGER holdings_candidate
        AFTER INSERT OR DELETE OR UPDATE OF tenant, workspace, principal, state, record_id, body_bytes
        ON candidates FOR EACH ROW EXECUTE FUNCTION holdings_candidate();

    -- A record entering or leaving accepted_current adds or takes back the bytes of its accepted candidates.
    CREATE FUNCTION holdings_record() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO holdings AS h (tenant, holder, principal, pending, bytes)
        SELECT c.tenant, k.holder, CASE k.holder WHEN 'tenant' THEN '' ELSE c.principal END, 0,
               SUM(r.sign * c.body_bytes)
        FROM (SELECT -1 AS sign, OLD.tenant AS tenant, OLD.workspace AS workspace, OLD.record_id AS record_id
              WHERE TG_OP <> 'INSERT' AND OLD.state = 'accepted_current'
              UNION ALL
              SELECT 1, NEW.tenant, NEW.workspace, NEW.record_id
              WHERE TG_OP <> 'DELETE' AND NEW.state = 'accepted_current') AS r
        JOIN candidates c ON c.tenant = r.tenant AND c.workspace = r.workspace AND c.record_id = r.record_id
             AND c.state = 'accepted'
        CROSS JOIN (VALUES ('tenant'), ('principal')) AS k (holder)
        GROUP BY 1, 2, 3 HAVING SUM(r.sign * c.body_bytes) <> 0
        ON CONFLICT (tenant, holder, principal) DO UPDATE SET bytes = h.bytes + excluded.bytes;
        RETURN NULL;
    END $$;
    CREATE TRIGGER holdings_record
        AFTER INSERT OR DELETE OR UPDATE OF tenant, workspace, record_id, state
        ON records FOR EACH ROW EXECUTE FUNCTION holdings_record();

    -- The counters of the rows already stored.
    INSERT INTO holdings (tenant, holder, principal, pending, bytes)
    SELECT c.tenant, k.holder, CASE k.holder WHEN 'tenant' THEN '' ELSE c.principal END,
           SUM((c.state = 'pending')::int), SUM(c.body_bytes)
    FROM candidates c
    LEFT JOIN records r ON r.tenant = c.tenant AND r.workspace = c.workspace AND r.record_id = c.record_id
    CROSS JOIN (VALUES ('tenant'), ('principal')) AS k (holder)
    WHERE c.state = 'pending' OR (c.state = 'accepted' AND r.state = 'accepted_current')
    GROUP BY 1, 2, 3;
    """,
    """
    -- Planner statistics never sample content (UNSAMPLED below): a statistics target of 0 keeps ANALYZE, the
    -- store's and autovacuum's, off these columns, and re-stating each column's own type drops the statistics
    -- an earlier ANALYZE kept of it (ALTER COLUMN ... TYPE removes a column's pg_statistic rows; the type is
    -- unchanged, so no row is rewritten, only the indexes on the column are rebuilt).
    ALTER TABLE records ALTER COLUMN body SET STATISTICS 0, ALTER COLUMN body TYPE bytea,
        ALTER COLUMN payload_digest SET STATISTICS 0, ALTER COLUMN payload_digest TYPE text,
        ALTER COLUMN search SET STATISTICS 0, ALTER COLUMN search TYPE tsvector;
    ALTER TABLE candidates ALTER COLUMN payload_digest SET STATISTICS 0, ALTER COLUMN payload_digest TYPE text,
        ALTER COLUMN ciphertext SET STATISTICS 0, ALTER COLUMN ciphertext TYPE bytea,
        ALTER COLUMN wrapped_key SET STATISTICS 0, ALTER COLUMN wrapped_key TYPE bytea;
    ALTER TABLE tombstones ALTER COLUMN payload_digest SET STATISTICS 0, ALTER COLUMN payload_digest TYPE text;
    ALTER TABLE reservations ALTER COLUMN intent SET STATISTICS 0, ALTER COLUMN intent TYPE text,
        ALTER COLUMN value SET STATISTICS 0, ALTER COLUMN value TYPE text;
    ALTER TABLE journal ALTER COLUMN event SET STATISTICS 0, ALTER COLUMN event TYPE text;
    ALTER TABLE audit ALTER COLUMN entry SET STATISTICS 0, ALTER COLUMN entry TYPE text;
    """,
    """
    -- Ledger bytes (reference/_ledger_bytes.py): what each holder's mutations wrote of reservations, journal
    -- events and audit rows, counted from this version on; one row per tenant and per principal within it.
    CREATE TABLE ledger_bytes (
        tenant text NOT NULL,
        holder text NOT NULL CHECK (holder IN ('tenant', 'principal')),
        principal text NOT NULL,
        bytes bigint NOT NULL,
        PRIMARY KEY (tenant, holder, principal)
    );
    """,
)

# Columns that hold content, or values derived from it (words, digests, sealed bodies, wrapped keys, stored
# answers and journal entries): ANALYZE never samples them (statistics target 0, migration 4), so the planner's
# statistics (pg_statistic, shown by pg_stats) never hold a value an erasure removes. The planner never filters
# on them; the erasure proof (reference/_postgres.py) checks that none of them has statistics.
UNSAMPLED: dict[str, tuple[str, ...]] = {
    "records": ("body", "payload_digest", "search"),
    "candidates": ("payload_digest", "ciphertext", "wrapped_key"),
    "tombstones": ("payload_digest",),
    "reservations": ("intent", "value"),
    "journal": ("event",),
    "audit": ("entry",),
}

SEARCH_CONFIG = "simple"  # lowercases, no stemming and no stop words: the same words SQLite's unicode61 keeps
# The advisory lock key replicas take while migrating (any constant shared by every replica will do).
MIGRATION_LOCK = 0x656E6772616D  # "engram"


def migrate(conn: Any) -> int:
    """Bring the schema in the connection's search_path to the latest version; the version reached.

    ``conn`` is a psycopg connection in autocommit mode, returning tuples. A database written by a
    newer server is refused rather than touched.
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_versions (version integer PRIMARY KEY, applied_at timestamptz "
            "NOT NULL DEFAULT now())"
        )
        version = scalar(conn, "SELECT COALESCE(MAX(version), 0) FROM schema_versions")
        if version > len(MIGRATIONS):
            raise RuntimeError("the store was written by a newer version of this server")
        for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
            conn.execute(script)
            conn.execute("INSERT INTO schema_versions (version) VALUES (%s)", (number,))
    return len(MIGRATIONS)


def scalar(conn: Any, sql: str) -> int:
    row = conn.execute(sql).fetchone()
    return int(row[0])


def schema_version(conn: Any) -> int:
    """The version a schema is at, without changing it (0 when this server never migrated it)."""
    if conn.execute("SELECT to_regclass('schema_versions') IS NULL").fetchone()[0]:
        return 0
    return scalar(conn, "SELECT COALESCE(MAX(version), 0) FROM schema_versions")
