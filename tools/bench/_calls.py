"""calls: per-call latency over stdio of get, search and capture, next to the SDK's no-op tool (the anchor)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from contextlib import ExitStack

from engram_mcp.conformance._connect import Connection
from engram_mcp.conformance._world import capture_arguments
from tools.bench._context import Context
from tools.bench._servers import Host, call_value, noop_connection, reference_stdio
from tools.bench._stats import round_robin
from tools.bench._text import TextSource

SMALL_STORE = 20  # records in the store searched
TARGETS = {"get": 1.3, "search": 1.6, "capture": 1.6}  # at most this many times the no-op's p50


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
    queries = itertools.cycle([TextSource(seed=2).query() for _ in range(50)])
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


def run(ctx: Context) -> None:
    with ExitStack() as stack:
        noop = noop_connection(ctx.scratch)
        stack.callback(noop.close)
        cases: dict[str, Callable[[], float]] = {"no-op tool (SDK)": lambda: noop.call("noop", {}, None).elapsed}
        for backend in ctx.backends("calls"):
            directory = stack.enter_context(ctx.fresh_configuration(backend))
            conn = reference_stdio(directory)
            stack.callback(conn.close)
            cases.update(reference_cases(conn, Host(directory), backend))
        samples = round_robin(cases, ctx.calls, warmup=3 if ctx.smoke else 20)
    anchor = "no-op tool (SDK)"
    ctx.report.latency("calls", anchor, samples.pop(anchor), target="anchor")
    for case, values in samples.items():
        limit = TARGETS[case.rsplit(" ", 1)[1]]
        ctx.report.latency("calls", case, values, anchor=anchor, target=f"p50 <= {limit}x no-op", ratio_limit=limit)
