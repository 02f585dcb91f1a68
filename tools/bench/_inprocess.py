"""search, broad and forget: the engine in process on cached stores of each size, SQLite and PostgreSQL
interleaved call by call (the SQLite store is each case's anchor)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime

from engram_mcp.reference._core import Engine
from tools.bench._context import Context
from tools.bench._engine import PURPOSE, caller, capture_and_admit, open_engine
from tools.bench._queries import queries as bench_queries
from tools.bench._stats import round_robin, timed
from tools.bench._stores import Backend, BuiltStore, Layout, StoreSpec, ensure_store
from tools.bench._text import MARKER, TextSource

SEARCH_LIMITS_MS = {100_000: 10.0, 1_000_000: 30.0}  # p99 targets by size (p50 <= 5 ms @1M is printed beside)
BROAD_LIMIT_MS = 100.0
FORGET_LIMIT_MS = 50.0
# The store spread over 1,000 tenants is built at most this large: it shows a tenant's search beside other
# tenants' data, and at 1M its build (1,000 scopes, 1,000 indexes) takes over an hour on 2 cores.
TENANTS_AT_MOST = 100_000


def size_label(size: int) -> str:
    return f"{size // 1_000_000}m" if size % 1_000_000 == 0 else f"{size // 1000}k" if size % 1000 == 0 else str(size)


def open_store(ctx: Context, stack: ExitStack, backend: Backend, size: int,
               layout: Layout = "scope") -> tuple[Engine, BuiltStore]:
    built = ensure_store(StoreSpec(backend, size, layout), ctx.cache, ctx.postgres)
    ctx.report.facts.setdefault("stores", {})[built.spec.name] = built.facts
    engine, _config, store = open_engine(built.directory, policy_scope=built.policy_scope)
    stack.callback(store.close)
    return engine, built


def searcher(engine: Engine, built: BuiltStore, queries: list[str]) -> Callable[[], float]:
    scope = built.spec.search_scope()
    who = caller(scope.tenant, scope.workspace)
    upcoming = itertools.cycle(queries)

    def search() -> float:
        arguments = {"query": next(upcoming), "purpose_ref": PURPOSE}
        now = datetime.now(UTC)
        return timed(lambda: engine.call("engram_memory_search", who, arguments, now))

    return search


def run_search(ctx: Context) -> None:
    queries = bench_queries(3, 500)
    spread = max([size for size in ctx.sizes if size <= TENANTS_AT_MOST] or [min(ctx.sizes)])
    layouts: list[tuple[int, Layout]] = [(size, "scope") for size in ctx.sizes] + [(spread, "tenants")]
    cap = ctx.postgres_max_size
    fitting = [size for size in ctx.sizes if cap is None or size <= cap]
    if ctx.postgres is not None and fitting and max(fitting) < spread:  # PostgreSQL's tenants case at its own top
        layouts.append((max(fitting), "tenants"))
    for size, layout in layouts:
        with ExitStack() as stack:
            cases = {}
            for backend in ctx.backends(f"search {layout}", size):
                engine, built = open_store(ctx, stack, backend, size, layout)
                cases[f"{backend} {size_label(size)} {layout}"] = searcher(engine, built, queries)
            samples = round_robin(cases, ctx.calls)
        limit = SEARCH_LIMITS_MS.get(size)
        target = "" if limit is None else f"p99 <= {limit:g} ms" + (", p50 <= 5 ms" if size >= 1_000_000 else "")
        anchor = None
        for case, values in samples.items():
            row = ctx.report.latency("search", case, values, anchor=anchor, target=target, limit_ms=limit)
            if size >= 1_000_000 and "meets" in row:
                row["meets"] = row["meets"] and row["p50_ms"] <= 5.0
            anchor = anchor or case


def run_broad(ctx: Context) -> None:
    size = max(ctx.sizes)
    with ExitStack() as stack:
        cases = {}
        for backend in ctx.backends("broad", size):
            engine, built = open_store(ctx, stack, backend, size)
            cases[f"{backend} {size_label(size)} '{MARKER}' (~20%)"] = searcher(engine, built, [MARKER])
        samples = round_robin(cases, max(5, ctx.calls // 4), warmup=2)
    anchor = None
    for case, values in samples.items():
        ctx.report.latency("broad", case, values, anchor=anchor, target=f"p99 <= {BROAD_LIMIT_MS:g} ms",
                           limit_ms=BROAD_LIMIT_MS)
        anchor = anchor or case


def forgetter(engine: Engine, label: str) -> Callable[[], float]:
    """Capture and admit a fresh record (not timed), then time its forget."""
    text = TextSource(seed=int(datetime.now(UTC).timestamp()))
    who = caller()
    counter = itertools.count()
    stamp = datetime.now(UTC).strftime("%Y%m%d%H%M%S")

    def forget() -> float:
        key = f"forget-{label}-{stamp}-{next(counter):06d}"
        record_id = capture_and_admit(engine, who, text.sentence() + f" {key}", key)
        arguments = {"record_id": record_id, "idempotency_key": f"f-{key}", "reason_ref": "reason:bench"}
        now = datetime.now(UTC)
        return timed(lambda: engine.call("engram_memory_forget", who, arguments, now))

    return forget


def run_forget(ctx: Context) -> None:
    rounds = max(5, ctx.calls // 10)
    with ExitStack() as stack:
        cases = {}
        for size in ctx.sizes:
            for backend in ctx.backends("forget", size):
                engine, _built = open_store(ctx, stack, backend, size)
                cases[f"{backend} {size_label(size)}"] = forgetter(engine, f"{backend}{size}")
        samples = round_robin(cases, rounds, warmup=1)
    anchors: dict[str, str] = {}
    for case, values in samples.items():  # each backend's smallest store is its anchor: flat means ratios near 1
        store_kind = case.split()[0]
        ctx.report.latency("forget", case, values, anchor=anchors.get(store_kind),
                           target=f"p99 <= {FORGET_LIMIT_MS:g} ms, flat in size", limit_ms=FORGET_LIMIT_MS)
        anchors.setdefault(store_kind, case)
