"""The SQLite build the store runs on: every module that opens a store file imports ``sqlite3`` from here.

The store's FTS5 indexes use ``secure-delete`` (SQLite 3.42 and later), so a
forget removes the text from the index in place instead of rewriting the whole
index. Python's bundled SQLite may be older, so the store uses sqlean.py's build,
which has the same DB-API interface; its extensions stay disabled. An FTS5 table
with ``secure-delete`` on cannot be read by an SQLite older than 3.42, so tests
and tools that open a store file use this module too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # sqlean ships no type information; its interface is the standard library's
    import sqlite3
else:
    import sqlean as sqlite3

FTS5_SECURE_DELETE = (3, 42, 0)

if sqlite3.sqlite_version_info < FTS5_SECURE_DELETE:  # pragma: no cover - a wrong wheel, never a normal install
    raise ImportError("the store needs SQLite 3.42 or later (FTS5 secure-delete)")

__all__ = ["sqlite3"]
