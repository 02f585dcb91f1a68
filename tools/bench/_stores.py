"""Cached benchmark stores: N records admitted through the engine, in one scope or spread over 1,000 tenants.

A store lives under the cache directory, named by backend, layout, size and a fingerprint of the store
schema (both backends' migrations) and of the text generator, so a schema change builds afresh and a second
run reuses what the first built. A PostgreSQL store lives in a schema of its own of the same name, plus a
hash of the cache folder's path, so two caches never share one. The ``built.json`` marker is written last:
a store without it is a build that did not finish, and is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from engram_mcp.contract import _canonical
from engram_mcp.reference import _postgres_schema, _store
from engram_mcp.reference._init import write_configuration
from engram_mcp.reference._ports import Scope
from tools.bench import _text
from tools.bench._engine import MAIN_SCOPE, BatchedStore, caller, capture_and_admit, open_engine

Backend = Literal["sqlite", "postgresql"]
Layout = Literal["scope", "tenants"]
TENANTS = 1000
BATCH = 500  # engine operations (capture + admission pairs) per store transaction while building
BUILD_VERSION = "2"  # bump when the builder's output changes
MCP_EDGE = frozenset({"__main__.py", "_cli.py", "_serve.py", "_server.py", "_stdio.py", "_jsonrpc.py",
                      "_http_deadlines.py", "_http_messages.py", "_http_admission.py", "_http_sessions.py",
                      "_precheck.py", "_envelope.py", "_verify.py",
                      "server.py", "testing.py"})  # the public assembly (it imports the edge) and the store tests


def fingerprint() -> str:
    digest = hashlib.sha256(BUILD_VERSION.encode())
    for script in (*_store.MIGRATIONS, *_postgres_schema.MIGRATIONS):
        digest.update(script.encode())
    digest.update(" ".join(_text.vocabulary()).encode())
    # The code that shapes a built store: the text generator, the builder, the contract's digests and the
    # reference's modules but those of its MCP edge, which never reach the engine (editing the server's wire
    # handling does not rebuild a million-record store). A new module counts until it is listed here.
    here, reference = Path(__file__).parent, Path(_store.__file__).parent
    engine_side = [path for path in reference.glob("*.py") if path.name not in MCP_EDGE]
    contract = Path(_canonical.__file__).parent
    for source in sorted([here / "_text.py", here / "_engine.py", here / "_stores.py", *engine_side,
                          *contract.glob("*.py")]):
        digest.update(source.read_bytes())
    return f"s{len(_store.MIGRATIONS)}p{len(_postgres_schema.MIGRATIONS)}_{digest.hexdigest()[:10]}"


def in_schema(url: str, schema: str) -> str:
    """The URL with its connections' search_path set to ``schema``."""
    return f"{url}{'&' if '?' in url else '?'}options={quote(f'-csearch_path={schema}', safe='')}"


@dataclass(frozen=True)
class StoreSpec:
    backend: Backend
    size: int
    layout: Layout = "scope"

    @property
    def name(self) -> str:
        return f"bench_{self.backend[:2]}_{self.layout}_{self.size}_{fingerprint()}"

    def search_scope(self) -> Scope:
        """Where searches run: the one scope, or the first tenant's."""
        return MAIN_SCOPE if self.layout == "scope" else Scope(tenant_name(0), MAIN_SCOPE.workspace)


def tenant_name(index: int) -> str:
    return f"tenant{index:04d}"


@dataclass(frozen=True)
class BuiltStore:
    spec: StoreSpec
    directory: Path  # holds server.toml and conformance-profile.toml (and the SQLite file)
    facts: dict[str, Any]

    @property
    def policy_scope(self) -> Scope | None:
        return MAIN_SCOPE if self.spec.layout == "tenants" else None


def create_schema(url: str, schema: str, *, fresh: bool) -> str:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        if fresh:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    return in_schema(url, schema)


def schema_exists(url: str, schema: str) -> bool:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is not None


def drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def ensure_store(spec: StoreSpec, cache: Path, postgres: str | None) -> BuiltStore:
    """The cached store for ``spec``, built first when missing or unfinished."""
    directory = cache / spec.name
    marker = directory / "built.json"
    if marker.exists():
        facts = json.loads(marker.read_text(encoding="utf-8"))
        if facts.get("schema") is None or (postgres is not None and schema_exists(postgres, facts["schema"])):
            return BuiltStore(spec, directory, {**facts, "reused": True})
    if directory.exists():
        shutil.rmtree(directory)
    url = None
    # The schema is named for the cache too: two cache folders never rebuild each other's PostgreSQL store.
    schema = f"{spec.name}_{hashlib.sha256(str(cache.resolve()).encode()).hexdigest()[:6]}"
    if spec.backend == "postgresql":
        if postgres is None:
            raise ValueError("a PostgreSQL store needs --postgres")
        url = create_schema(postgres, schema, fresh=True)
    write_configuration(directory, seed="bench", store_url=url)
    unbound_storage(directory / "server.toml")
    print(f"building {spec.name} ({spec.size:,} records)...", flush=True)
    seconds = build(spec, directory)
    facts = {"records": spec.size, "layout": spec.layout, "backend": spec.backend, "build_seconds": seconds,
             "schema": schema if url else None, "fingerprint": fingerprint(),
             "built_at": datetime.now(UTC).isoformat(timespec="seconds")}
    marker.write_text(json.dumps(facts, indent=1) + "\n", encoding="utf-8")
    print(f"built {spec.name} in {seconds:.1f} s ({spec.size / seconds:,.0f} records/s)", flush=True)
    return BuiltStore(spec, directory, {**facts, "reused": False})


def unbound_storage(config: Path) -> None:
    """Turn the tenant's and the principal's byte and ledger-byte quotas off (0): the defaults (1 GiB of captures
    per tenant, 1 GiB of lifecycle records per principal) would refuse a million-record store part-way through."""
    text, count = re.subn(r"(?m)^(bytes|ledger_bytes) = \d+$", r"\1 = 0", config.read_text(encoding="utf-8"))
    if count != 4:
        raise RuntimeError(f"expected the tenant's and the principal's two byte quotas in {config}, found {count}")
    config.write_text(text, encoding="utf-8")


def build(spec: StoreSpec, directory: Path) -> float:
    start = time.perf_counter()
    engine, _config, store = open_engine(directory, batched=True,
                                         policy_scope=MAIN_SCOPE if spec.layout == "tenants" else None)
    assert isinstance(store, BatchedStore)
    text = _text.TextSource()
    callers = [caller(tenant_name(t)) for t in range(TENANTS)] if spec.layout == "tenants" else [caller()]
    now = datetime.now(UTC)
    report_every = max(BATCH, spec.size // 10)
    try:
        for first in range(0, spec.size, BATCH):
            def steps(first: int = first) -> None:
                for i in range(first, min(spec.size, first + BATCH)):
                    capture_and_admit(engine, callers[i % len(callers)], text.sentence(), f"build-{i:010d}", now)

            store.batch(steps)
            done = min(spec.size, first + BATCH)
            if done % report_every == 0 and done < spec.size:
                elapsed = time.perf_counter() - start
                print(f"  {done:,}/{spec.size:,} records, {elapsed:.0f} s", flush=True)
    finally:
        store.close()
    return time.perf_counter() - start
