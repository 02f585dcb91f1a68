"""calls: per-call latency over stdio of get, search and capture, next to two anchors run in the same rounds.

The SDK's no-op tool is what any Python MCP server pays for the protocol alone; a backend's floor is that
no-op plus one durable commit of one row in the same kind of store on the same disk, the least a durable call
can cost. Each reference case is judged against its backend's floor and shows its ratio to the no-op too.
"""

from __future__ import annotations

import functools
import itertools
import tomllib
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from engram_mcp.conformance._connect import Connection
from engram_mcp.conformance._world import capture_arguments
from tools.bench._context import Context
from tools.bench._queries import queries as bench_queries
from tools.bench._servers import Host, call_value, floor_connection, noop_connection, reference_stdio
from tools.bench._stats import ratio, round_robin
from tools.bench._text import TextSource

SMALL_STORE = 20  # records in the store searched
NOOP = "no-op tool (SDK)"
FLOOR_TARGETS = {"sqlite": 1.3, "postgresql": 1.6}  # p50 at most this many times the backend's floor


def reference_cases(conn: Connection, host: Host, label: str) -> dict[str, Callable[[], float]]:
    text = TextSource(seed=1)
    record_ids = []
    for i in range(SMALL_STORE):
        captured = call_value(conn, "engram_memory_capture",
                              capture_arguments(host.purpose, text=text.sentence(), key=f"calls-seed-{i:06d}"),
                              host.meta())
        admitted = call_value(conn, "engram_memory_request_admission",
                              {"candidate_id": captured["candidate_id"], "idempotency_key": f"calls-admit-{i:06d}"},
                              host.meta())
        record_ids.append(admitted["outcome"]["record_id"])
    queries = itertools.cycle(bench_queries(2, 50))
    records = itertools.cycle(record_ids)
    keys = itertools.count()

    def get() -> float:
        return conn.call("engram_memory_get", {"record_id": next(records), "purpose_ref": host.purpose},
                         host.meta()).elapsed

    def search() -> float:
        return conn.call("engram_memory_search", {"query": next(queries), "purpose_ref": host.purpose},
                         host.meta()).elapsed

    def capture() -> float:
        arguments = capture_arguments(host.purpose, text=text.sentence(), key=f"calls-{label}-{next(keys):08d}")
        return conn.call("engram_memory_capture", arguments, host.meta()).elapsed

    return {f"{label} get": get, f"{label} search": search, f"{label} capture": capture}


def noop_elapsed(conn: Connection) -> float:
    return conn.call("noop", {}, None).elapsed


def floor_case(backend: str) -> str:
    return f"{backend} floor (no-op + 1 durable commit)"


def store_location(directory: Path, backend: str) -> str:
    """Where the floor commits: beside the reference's SQLite store, or in its PostgreSQL schema."""
    config = tomllib.loads((directory / "server.toml").read_text(encoding="utf-8"))
    if backend == "sqlite":
        return str((directory / config["server"]["store"]).parent / "floor.sqlite3")
    return str(config["store"]["url"])


def run(ctx: Context) -> None:
    with ExitStack() as stack:
        noop = noop_connection(ctx.scratch)
        stack.callback(noop.close)
        cases: dict[str, Callable[[], float]] = {NOOP: functools.partial(noop_elapsed, noop)}
        backends = ctx.backends("calls")
        for backend in backends:
            directory = stack.enter_context(ctx.fresh_configuration(backend))
            conn = reference_stdio(directory)  # first: it makes the store's folder, where the floor's file goes
            stack.callback(conn.close)
            floor = floor_connection(ctx.scratch, backend, store_location(directory, backend))
            stack.callback(floor.close)
            cases[floor_case(backend)] = functools.partial(noop_elapsed, floor)
            cases.update(reference_cases(conn, Host(directory), backend))
        samples = round_robin(cases, ctx.calls, warmup=3 if ctx.smoke else 20)
    noop_row = ctx.report.latency("calls", NOOP, samples.pop(NOOP), target="anchor")
    for backend in backends:
        ctx.report.latency("calls", floor_case(backend), samples.pop(floor_case(backend)), anchor=NOOP,
                           target="anchor (the floor)")
    for case, values in samples.items():
        of_backend = case.split(" ", 1)[0]
        limit = FLOOR_TARGETS[of_backend]
        row = ctx.report.latency("calls", case, values, anchor=floor_case(of_backend),
                                 target=f"p50 <= {limit}x floor", ratio_limit=limit)
        row["noop_ratio_p50"] = ratio(row["p50_ms"], noop_row["p50_ms"])
