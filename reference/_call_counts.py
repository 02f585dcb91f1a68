"""The call-window counters in an SQLite store file (``MemoryStore.count_call`` for SqliteStore).

The table is created when a store opens (``CREATE TABLE IF NOT EXISTS``) rather
than by a schema migration, so the counters need no schema version of their own. Its rows hold tenants' and
principals' names and counts only, never content.
"""

from __future__ import annotations

from engram_mcp.reference._sqlite import sqlite3

TABLE = """
CREATE TABLE IF NOT EXISTS call_windows (
    tenant TEXT NOT NULL,
    holder TEXT NOT NULL CHECK (holder IN ('tenant', 'principal')),
    principal TEXT NOT NULL,  -- '' on the tenant's own row
    win INTEGER NOT NULL,
    calls INTEGER NOT NULL,
    PRIMARY KEY (tenant, holder, principal)
)
"""

# One holder's count: a later window starts again at 1; a call at the bound changes nothing and returns no row.
_COUNT = (
    "INSERT INTO call_windows AS c (tenant, holder, principal, win, calls) VALUES (?, ?, ?, ?, 1) "
    "ON CONFLICT (tenant, holder, principal) DO UPDATE SET "
    "calls = CASE WHEN excluded.win > c.win THEN 1 ELSE c.calls + 1 END, win = MAX(c.win, excluded.win) "
    "WHERE excluded.win > c.win OR c.calls < ? RETURNING calls"
)


def count_call(db: sqlite3.Connection, tenant: str, principal: str, window: int, bounds: tuple[int, int]) -> bool:
    """Inside the caller's write transaction: count the call for both holders, or (False) for neither."""
    counted: list[tuple[str, str]] = []
    for (holder, name), bound in zip((("tenant", ""), ("principal", principal)), bounds, strict=True):
        if bound <= 0:
            continue
        if db.execute(_COUNT, (tenant, holder, name, window, bound)).fetchone() is None:
            for done_holder, done_name in counted:  # the other holder's count is given back
                db.execute("UPDATE call_windows SET calls = calls - 1 WHERE tenant = ? AND holder = ? AND "
                           "principal = ?", (tenant, done_holder, done_name))
            return False
        counted.append((holder, name))
    return True
