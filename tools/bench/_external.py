"""memory-server (the npm reference memory server next to ours), certify (the harness's main job), startup
(the harness's own time before it starts a target) and rss."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from engram_mcp.conformance._connect import Connection
from tools.bench._context import Context
from tools.bench._inprocess import size_label
from tools.bench._queries import queries as bench_queries
from tools.bench._servers import Host, children_rss_kb, noop_connection, opened, reference_stdio
from tools.bench._stats import round_robin
from tools.bench._stores import StoreSpec, ensure_store
from tools.bench._text import TextSource

THIRDPARTY = Path("tests/thirdparty/node_modules/@modelcontextprotocol/server-memory/dist/index.js")
MEMORY_SIZES, MEMORY_SMOKE_SIZES = (1000, 10_000, 50_000), (100,)
FASTER_AT_LEAST = 40.0  # the reference's search at 50k, against server-memory's search_nodes
CERTIFY_LIMIT_S = 25.0
STARTUP_LIMIT_S = 1.5  # the harness's own time before it starts the target
USAGE_RATIO = 2.0  # a usage error within twice `python -c "import mcp"`: said before the SDK and the suite load
FAMILY_LIMIT_S = 3.0  # one family in one era against the bundled reference, on a quiet machine
RSS_LIMIT = 1.15
SMOKE_CERTIFY = ["--era", "legacy", "--select", "EMC-GET", "--examples", "1"]


def write_graph(path: Path, size: int) -> None:
    """server-memory's JSONL graph: one entity per record, its text as the one observation."""
    text = TextSource()
    with path.open("w", encoding="utf-8") as out:
        for i in range(size):
            out.write(json.dumps({"type": "entity", "name": f"note-{i}", "entityType": "note",
                                  "observations": [text.sentence()]}) + "\n")


def search_cases(
    ours: Connection, theirs: Connection, host: Host, queries: list[str]
) -> dict[str, Callable[[], float]]:
    """The same queries, in the same order, to each server."""
    mine, other = itertools.cycle(queries), itertools.cycle(queries)

    def reference() -> float:
        return ours.call("engram_memory_search", {"query": next(mine), "purpose_ref": host.purpose},
                         host.meta()).elapsed

    def server_memory() -> float:
        return theirs.call("search_nodes", {"query": next(other)}, None).elapsed

    return {"reference": reference, "server-memory": server_memory}


def run_memory_server(ctx: Context) -> None:
    script = Path.cwd() / THIRDPARTY
    node = shutil.which("node")
    if node is None or not script.exists():
        ctx.report.skip("memory-server", "node or tests/thirdparty is missing (npm ci --prefix tests/thirdparty)")
        return
    queries = bench_queries(6, 200)
    for size in MEMORY_SMOKE_SIZES if ctx.smoke else MEMORY_SIZES:
        built = ensure_store(StoreSpec("sqlite", size), ctx.cache, ctx.postgres)
        graph = ctx.scratch / f"memory-{size}.jsonl"
        write_graph(graph, size)
        with ExitStack() as stack:
            theirs = opened(f"stdio:env MEMORY_FILE_PATH={graph} {node} {script}")
            stack.callback(theirs.close)
            ours = reference_stdio(built.directory)
            stack.callback(ours.close)
            samples = round_robin(search_cases(ours, theirs, Host(built.directory), queries),
                                  max(10, ctx.calls // 5), warmup=2)
        label = size_label(size)
        anchor = ctx.report.latency("memory-server", f"reference engram_memory_search {label}", samples["reference"],
                                    target="anchor")
        row = ctx.report.latency("memory-server", f"server-memory search_nodes {label}", samples["server-memory"],
                                 anchor=anchor["case"],
                                 target=f"ratio >= {FASTER_AT_LEAST:g} @50k" if size == 50_000 else "")
        if size == 50_000 and row["ratio_p50"] is not None:
            row["meets"] = row["ratio_p50"] >= FASTER_AT_LEAST


def run_certify(ctx: Context) -> None:
    command = [sys.executable, "-m", "engram_mcp.conformance._cli", "--target", "reference", "--format", "json"]
    if ctx.smoke:  # a timed subset (exit 5, incomplete, is what any --select run answers at best)
        command += SMOKE_CERTIFY
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ctx.scratch, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    checks = checks_run(done.stdout)
    ctx.report.facts["certify"] = {"command": command[1:], "exit_code": done.returncode, "checks": checks}
    ctx.report.value("certify", "conformance --target reference" + (" " + " ".join(SMOKE_CERTIFY) if ctx.smoke else ""),
                     {"value": f"{seconds:.1f} s, {checks} checks", "seconds": seconds, "checks": checks,
                      "exit_code": done.returncode},
                     target=f"<= {CERTIFY_LIMIT_S:g} s", meets=seconds <= CERTIFY_LIMIT_S and done.returncode == 0)


def checks_run(summary: str) -> int | None:
    """How many checks the run reported (its --format json summary counts them by status)."""
    try:
        counts = json.loads(summary)["counts"]
    except (ValueError, KeyError, TypeError):
        return None
    return sum(counts.values()) if isinstance(counts, dict) else None


def _harness_start(scratch: Path) -> tuple[float, float]:
    """Seconds from launching ``conformance`` to the moment it starts the target, and to its verdict.

    The target only writes the wall clock and exits, so the run ends unreachable (exit 3) at once: what is
    timed is the harness's own start (imports, profile, plugin, collection) and its diagnosis.
    """
    stamp = scratch / "target-started"
    stamp.unlink(missing_ok=True)
    target = f"stdio:sh -c 'date +%s.%N > {stamp}'"
    launched = time.time()
    subprocess.run([sys.executable, "-m", "engram_mcp.conformance._cli", "--target", target, "--era", "legacy",
                    "--report-dir", str(scratch / "startup-report")], cwd=scratch, capture_output=True, check=False)
    ended = time.time()
    return float(stamp.read_text().strip()) - launched, ended - launched


def _import_mcp() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import mcp"], check=True)
    return time.perf_counter() - started


def _usage_error() -> float:
    """Seconds to a usage error (a mistyped --select): said before the harness loads the SDK or the suite."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "engram_mcp.conformance._cli", "--target", "reference",
                           "--select", "discovry"], capture_output=True, check=False)
    assert done.returncode == 2, done.stderr[-500:]
    return time.perf_counter() - started


def _one_family(scratch: Path) -> float:
    """Seconds for one family in one era against the bundled reference (the implementer's inner loop)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "engram_mcp.conformance._cli", "--target", "reference", "--select",
                    "envelope", "--era", "legacy"], cwd=scratch, capture_output=True, check=False)
    return time.perf_counter() - started


def run_startup(ctx: Context) -> None:
    """The harness's start before its first call, a usage error, and one family in one era, interleaved with their
    anchor, ``python -c "import mcp"``."""
    verdicts: list[float] = []

    def to_target() -> float:
        start, verdict = _harness_start(ctx.scratch)
        verdicts.append(verdict)
        return start

    samples = round_robin({"python -c 'import mcp' (anchor)": _import_mcp, "conformance: launch to target start":
                           to_target, "conformance: a usage error (--select discovry)": _usage_error,
                           "conformance: one family, one era (--select envelope --era legacy)":
                           lambda: _one_family(ctx.scratch)},
                          rounds=1 if ctx.smoke else 7, warmup=0 if ctx.smoke else 1)
    anchor, *_ = samples
    ctx.report.latency("startup", anchor, samples[anchor], target="anchor")
    ctx.report.latency("startup", "conformance: launch to target start", samples["conformance: launch to target start"],
                       anchor=anchor, target=f"p50 <= {STARTUP_LIMIT_S:g} s")
    row = ctx.report.rows[-1]
    row["meets"] = row["p50_ms"] <= STARTUP_LIMIT_S * 1000
    ctx.report.latency("startup", "conformance: launch to unreachable verdict", verdicts[-len(samples[anchor]):],
                       anchor=anchor, target="reported")
    usage = "conformance: a usage error (--select discovry)"
    # Ratios to the anchor, measured in the same rounds: what a shared machine's noise cannot move.
    ctx.report.latency("startup", usage, samples[usage], anchor=anchor, target=f"p50 <= {USAGE_RATIO:g}x the anchor",
                       ratio_limit=USAGE_RATIO)
    family = "conformance: one family, one era (--select envelope --era legacy)"
    row = ctx.report.latency("startup", family, samples[family], anchor=anchor, target=f"p50 <= {FAMILY_LIMIT_S:g} s")
    row["meets"] = row["p50_ms"] <= FAMILY_LIMIT_S * 1000


def run_rss(ctx: Context) -> None:
    """Idle resident memory after initialize and tools/list: the reference's server against the no-op's."""
    figures: dict[str, int] = {}
    with ctx.fresh_configuration("sqlite") as directory:
        for name, connect, meta in (("no-op tool (SDK)", lambda: noop_connection(ctx.scratch), None),
                                    ("reference sqlite", lambda: reference_stdio(directory), Host(directory).meta())):
            before = set(children_rss_kb())
            conn = connect()
            try:
                conn.list_tools(meta)
                time.sleep(0.5)  # idle
                new = {pid: kb for pid, kb in children_rss_kb().items() if pid not in before}
                figures[name] = max(new.values(), default=0)
            finally:
                conn.close()
    noop, reference = figures["no-op tool (SDK)"], figures["reference sqlite"]
    ratio = reference / noop if noop else None
    ctx.report.value("rss", "no-op tool (SDK)", {"value": f"{noop / 1024:.1f} MiB", "rss_kb": noop}, target="anchor")
    shown = f"{reference / 1024:.1f} MiB" + (f" ({ratio:.2f}x)" if ratio else "")
    ctx.report.value("rss", "reference sqlite", {"value": shown, "rss_kb": reference, "ratio": ratio},
                     target=f"<= {RSS_LIMIT:g}x no-op", meets=ratio is not None and ratio <= RSS_LIMIT)
