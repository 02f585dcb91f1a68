"""PostgreSQL for the tests: a fresh schema per test session on the server ENGRAM_TEST_POSTGRES_URL names.

Without a reachable server the PostgreSQL tests skip, with the reason; CI
(.ci/run) probes the server first and fails when it does not answer, so there
they always run. Each session works in its own schema (random name, dropped at
the end), reached through the URL's ``search_path`` option, so sessions and
developers sharing one database never see each other's rows.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote

import pytest

URL_VARIABLE = "ENGRAM_TEST_POSTGRES_URL"
DEFAULT_URL = "postgresql://root@127.0.0.1:5432/test"


def server_url() -> str:
    return os.environ.get(URL_VARIABLE, DEFAULT_URL)


def unavailable(url: str) -> str | None:
    """Why PostgreSQL cannot be used for the tests, or None when it answers."""
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed"
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as problem:
        return f"PostgreSQL at {URL_VARIABLE} does not answer ({type(problem).__name__})"
    return None


def in_schema(url: str, schema: str) -> str:
    """The URL with its connections' search_path set to ``schema`` (a libpq ``options`` parameter)."""
    return f"{url}{'&' if '?' in url else '?'}options={quote(f'-csearch_path={schema}', safe='')}"


@contextmanager
def fresh_schema(url: str) -> Iterator[str]:
    """A new, empty schema on the server at ``url`` (skipped with the reason when it does not answer): the URL
    reaching it; the schema is dropped when the block ends."""
    import psycopg

    reason = unavailable(url)
    if reason is not None:
        pytest.skip(reason)
    schema = f"engram_test_{secrets.token_hex(6)}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield in_schema(url, schema)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A URL whose connections work in a fresh schema for the whole test session."""
    with fresh_schema(server_url()) as url:
        yield url


@pytest.fixture
def fresh_postgres_url() -> Iterator[str]:
    """A schema of its own for one test, for tests that need an empty store."""
    with fresh_schema(server_url()) as url:
        yield url
