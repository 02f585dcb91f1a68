"""ingest (capture + admission per second) and race (racing replicas, one effect per idempotency key)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from engram_mcp.conformance._connect import Connection
from engram_mcp.conformance._world import capture_arguments
from engram_mcp.contract.binding import Binding
from engram_mcp.reference._core import Engine
from tools.bench._context import Context
from tools.bench._engine import caller, capture_and_admit, open_engine
from tools.bench._servers import Host, call_value, http_replicas, opened, reference_stdio
from tools.bench._text import TextSource

IN_PROCESS_FLOOR, MCP_FLOOR = 1000.0, 300.0  # records (a capture and its admission) per second
IN_PROCESS_WRITERS = 8  # threads capturing at once on one engine: what group commit shares a disk sync among
HTTP_CLIENTS = 6
RACE_CLIENTS, RACE_REPLICAS, RACE_KEYS = 6, 3, 50


def run_ingest(ctx: Context) -> None:
    count = 40 if ctx.smoke else 2000
    with ExitStack() as stack:  # in process, the backends alternating record by record
        steps: dict[str, Callable[[int], None]] = {}
        for backend in ctx.backends("ingest"):
            directory = stack.enter_context(ctx.fresh_configuration(backend))
            engine, _config, store = open_engine(directory)
            stack.callback(store.close)
            steps[backend] = partial(ingest_one, engine, caller(), TextSource(seed=4))
        spent = dict.fromkeys(steps, 0.0)
        for i in range(count):
            for name, step in steps.items():
                start = time.perf_counter()
                step(i)
                spent[name] += time.perf_counter() - start
    for name, seconds in spent.items():
        ctx.report.rate("ingest", f"in process {name}, 1 writer", count, seconds,
                        target=f">= {IN_PROCESS_FLOOR:,.0f}/s", floor=IN_PROCESS_FLOOR)
    for backend in ctx.backends("ingest writers"):
        with ctx.fresh_configuration(backend) as directory:
            engine, _config, store = open_engine(directory)
            try:
                seconds = ingest_in_threads(engine, count)
            finally:
                store.close()
        ctx.report.rate("ingest", f"in process {backend}, {IN_PROCESS_WRITERS} writers", count, seconds,
                        target=f">= {IN_PROCESS_FLOOR:,.0f}/s", floor=IN_PROCESS_FLOOR)

    mcp_count = 30 if ctx.smoke else 500
    with ctx.fresh_configuration("sqlite") as directory:
        conn = reference_stdio(directory)
        try:
            seconds = ingest_over(conn, Host(directory), "stdio", range(mcp_count))
        finally:
            conn.close()
    ctx.report.rate("ingest", "MCP stdio sqlite, 1 client", mcp_count, seconds, target=f">= {MCP_FLOOR:,.0f}/s",
                    floor=MCP_FLOOR)

    if ctx.postgres is None:
        ctx.report.skip("ingest/http-postgresql", ctx.postgres_reason)
        return
    for replicas in (1, 3):
        with ctx.fresh_configuration("postgresql") as directory, http_replicas(directory, replicas) as urls:
            seconds = ingest_concurrently(directory, urls, mcp_count)
        ctx.report.rate("ingest", f"MCP http postgresql, {replicas} replica(s), {HTTP_CLIENTS} clients",
                        mcp_count, seconds, target=f">= {MCP_FLOOR:,.0f}/s", floor=MCP_FLOOR)


def ingest_one(engine: Engine, who: Binding, text: TextSource, index: int) -> None:
    capture_and_admit(engine, who, text.sentence(), f"ingest-{index:010d}")


def ingest_in_threads(engine: Engine, count: int) -> float:
    """``count`` records captured and admitted by IN_PROCESS_WRITERS threads at once; the wall time."""
    share = count // IN_PROCESS_WRITERS
    who = caller()

    def writer(w: int) -> None:
        text = TextSource(seed=40 + w)
        for i in range(share):
            ingest_one(engine, who, text, w * share + i)

    return in_threads([partial(writer, w) for w in range(IN_PROCESS_WRITERS)]) * count / (share * IN_PROCESS_WRITERS)


def ingest_over(conn: Connection, host: Host, label: str, indices: range) -> float:
    text = TextSource(seed=5 + indices.start)
    start = time.perf_counter()
    for i in indices:
        captured = call_value(conn, "engram_memory_capture",
                              capture_arguments(host.purpose, text=text.sentence(), key=f"ingest-{label}-c{i:08d}"),
                              host.meta())
        call_value(conn, "engram_memory_request_admission",
                   {"candidate_id": captured["candidate_id"], "idempotency_key": f"ingest-{label}-a{i:08d}"},
                   host.meta())
    return time.perf_counter() - start


def in_threads(work: list[Callable[[], object]]) -> float:
    """Run each callable in a thread of its own, all released at once; the wall time until the last ends."""
    gate = threading.Barrier(len(work) + 1)
    failures: list[BaseException] = []

    def body(job: Callable[[], object]) -> None:
        gate.wait()
        try:
            job()
        except BaseException as problem:  # reported after the join
            failures.append(problem)

    threads = [threading.Thread(target=body, args=(job,)) for job in work]
    for thread in threads:
        thread.start()
    gate.wait()
    start = time.perf_counter()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return time.perf_counter() - start


def connect_all(directory: Path, urls: list[str], clients: int, stack: ExitStack) -> tuple[list[Connection], Host]:
    host = Host(directory)
    conns = []
    for i in range(clients):
        conn = opened(urls[i % len(urls)], host.headers)
        stack.callback(conn.close)
        conns.append(conn)
    return conns, host


def ingest_concurrently(directory: Path, urls: list[str], count: int) -> float:
    with ExitStack() as stack:
        conns, _host = connect_all(directory, urls, HTTP_CLIENTS, stack)
        share = count // HTTP_CLIENTS
        jobs: list[Callable[[], object]] = [
            partial(ingest_over, conn, Host(directory), "http", range(i * share, (i + 1) * share))
            for i, conn in enumerate(conns)
        ]
        return in_threads(jobs) * count / (share * HTTP_CLIENTS)  # scaled to ``count`` when it does not divide


def run_race(ctx: Context) -> None:
    if ctx.postgres is None:
        ctx.report.skip("race", ctx.postgres_reason)
        return
    keys = [f"race-key-{k:04d}-{datetime.now(UTC):%H%M%S}" for k in range(RACE_KEYS)]
    answers: list[tuple[str, str]] = []  # (key, candidate_id) per successful reply
    refusals: list[str] = []
    with ctx.fresh_configuration("postgresql") as directory:
        with http_replicas(directory, RACE_REPLICAS) as urls, ExitStack() as stack:
            conns, host = connect_all(directory, urls, RACE_CLIENTS, stack)
            lock = threading.Lock()

            def client(conn: Connection) -> None:
                for k, key in enumerate(keys):
                    reply = conn.call("engram_memory_capture",
                                      capture_arguments(host.purpose, text=f"Race record {k}.", key=key), host.meta())
                    with lock:
                        if reply.value is not None:
                            answers.append((key, reply.value["candidate_id"]))
                        else:
                            refusals.append(str(reply.code))

            in_threads([partial(client, conn) for conn in conns])
        effects = journal_captures(directory)
    candidate_of = dict(answers)
    per_key = {key: effects.get(candidate_of.get(key, ""), 0) for key in keys}
    exactly_once = all(n == 1 for n in per_key.values()) and len(set(answers)) == RACE_KEYS
    figures = {"clients": RACE_CLIENTS, "replicas": RACE_REPLICAS, "keys": RACE_KEYS, "replies_ok": len(answers),
               "refusals": len(refusals), "effects_min": min(per_key.values()), "effects_max": max(per_key.values()),
               "value": "1 effect per key" if exactly_once else "NOT exactly once"}
    ctx.report.facts["race"] = {"effects_per_key": per_key, "exactly_one_effect_per_key": exactly_once,
                                "refusal_codes": sorted(set(refusals))}
    ctx.report.value("race", f"{RACE_CLIENTS} clients x {RACE_REPLICAS} replicas x {RACE_KEYS} keys", figures,
                     target="exactly 1 effect per key", meets=exactly_once)


def journal_captures(directory: Path) -> Counter[str]:
    """Capture events in the store's journal, by candidate id."""
    _engine, _config, store = open_engine(directory)
    try:
        with store.snapshot() as reader:
            return Counter(str(entry.event.get("candidate_id")) for entry in reader.journal()
                           if entry.event.get("operation") == "capture")
    finally:
        store.close()
