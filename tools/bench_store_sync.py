"""Print what each SQLite ``synchronous`` level costs the reference store: commit latency and throughput.

    python tools/bench_store_sync.py [--captures N] [--dir DIR]

A benchmark, not a test: it prints figures and asserts nothing. For each level
it opens a fresh store (WAL mode, as the server does) in DIR, or in a temporary
folder on the default temp filesystem, and times, in one thread:

- ``commit``: a one-row write transaction, the floor of any mutation;
- ``capture``: a whole engine capture (seal, journal, reservation);
- ``withdraw``: a withdraw with its erasure flush (truncating checkpoint).

Run it on the disk the store will live on: the cost of ``full`` is one fsync
of the WAL per commit, so it depends on the device far more than on the code.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from engram_mcp.contract.binding import Binding
from engram_mcp.reference._core import Engine
from engram_mcp.reference._crypto import AesGcmCipher
from engram_mcp.reference._policy import AcceptAll, ScopePolicy
from engram_mcp.reference._store import Store
from engram_mcp.reference._store_config import SYNCHRONOUS_LEVELS

CALLER = Binding(tenant="bench", workspace="sync", principal="bench", agent_id="bench", session="bench",
                 purpose_ref="purpose:bench", issuer="bench", audience="bench", issued_at=0, expires_at=0,
                 token_id="bench")
POLICY = ScopePolicy(admission=AcceptAll(), allow_retain=False, retention_ceiling=timedelta(days=30),
                     consented_families=frozenset(), confirm_capture=False, confirm_admission=False,
                     confirmation_ttl=timedelta(seconds=60))


def capture(n: int) -> dict[str, object]:
    return {
        "idempotency_key": f"bench-capture-{n:08d}",
        "payload": {
            "schema_version": 2,
            "purpose_ref": "purpose:bench",
            "valid_time": {"t": 1_700_000_000_000},
            "components": [
                {"component_id": "c", "kind": "decision", "text": f"Benchmark decision {n}.", "citation_ids": ["s"]}
            ],
            "primary_component_id": "c",
            "primary_event": {"at": 1_700_000_000_000, "type_ref": "event:decided", "citation_id": "s"},
            "citations": [
                {
                    "citation_id": "s",
                    "source_ref": "source:bench",
                    "locator": {"scheme": "document", "value": "bench"},
                    "content_digest": "sha256:" + "a" * 64,
                }
            ],
        },
        "evidence": {"evidence_ref": "evidence:bench", "evidence_digest": "sha256:" + "b" * 64, "citation_ids": ["s"]},
    }


def timed(count: int, step: Callable[[int], None]) -> list[float]:
    """Milliseconds per step."""
    out = []
    for i in range(count):
        start = time.perf_counter()
        step(i)
        out.append((time.perf_counter() - start) * 1000)
    return out


def summary(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    per_second = 1000 / statistics.fmean(samples)
    return f"p50 {statistics.median(samples):7.2f} ms  p99 {p99:7.2f} ms  {per_second:8.0f}/s"


def bench(level: str, directory: Path, count: int) -> dict[str, list[float]]:
    store = Store(directory / level / "engram.sqlite3", synchronous=level, erasure_retry_interval=3600)
    try:
        engine = Engine(store, AesGcmCipher(os.urandom(32)), lambda scope: POLICY, os.urandom(32))
        now = datetime.now(UTC)

        def commit(i: int) -> None:
            with store.write() as db:
                db.execute("INSERT INTO meta VALUES (?, 'x')", (f"bench-{i}",))

        candidates: list[str] = []

        def captured(i: int) -> None:
            outcome = engine.call("engram_memory_capture", CALLER, capture(i), now)
            candidates.append(outcome.value["candidate_id"])

        def withdraw(i: int) -> None:
            arguments = {"candidate_id": candidates[i], "idempotency_key": f"bench-withdraw-{i:08d}",
                         "reason_ref": "reason:bench"}
            assert engine.call("engram_memory_withdraw", CALLER, arguments, now).value["key_destruction"] == "complete"

        return {"commit": timed(count, commit), "capture": timed(count, captured),
                "withdraw": timed(min(count, 200), withdraw)}
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--captures", type=int, default=500, help="operations per level (withdraws: at most 200)")
    parser.add_argument("--dir", type=Path, help="where to put the stores (default: a temporary folder)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        print(f"stores in {folder}, {args.captures} operations per level")
        for level in SYNCHRONOUS_LEVELS:
            for operation, samples in bench(level, Path(folder), args.captures).items():
                print(f"synchronous={level:<6} {operation:<8} {summary(samples)}")


if __name__ == "__main__":
    main()
