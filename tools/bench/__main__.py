"""Benchmarks of the reference server, each interleaved with its anchor; prints a table, writes JSON.

    python -m tools.bench [--smoke] [--only NAME,...] [--sizes 10k,100k,1m] [--json PATH]
                          [--cache-dir DIR] [--postgres URL] [--postgres-max-size 100k]

A benchmark prints figures and asserts nothing about time. Run it from the repository root.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from tools.bench import _calls, _external, _ingest, _inprocess, _isolation
from tools.bench._context import Context
from tools.bench._report import Report, print_rows, print_table

MEASURES: dict[str, Callable[[Context], None]] = {
    "calls": _calls.run,
    "search": _inprocess.run_search,
    "broad": _inprocess.run_broad,
    "forget": _inprocess.run_forget,
    "isolation": _isolation.run_isolation,
    "ingest": _ingest.run_ingest,
    "race": _ingest.run_race,
    "memory-server": _external.run_memory_server,
    "certify": _external.run_certify,
    "startup": _external.run_startup,
    "rss": _external.run_rss,
}
DEFAULT_SIZES = "10k,100k,1m"
SMOKE_SIZE = 100
DEFAULT_POSTGRES = "postgresql://root@127.0.0.1:5432/test"
POSTGRES_VARIABLE = "ENGRAM_TEST_POSTGRES_URL"


def parse_size(text: str) -> int:
    text = text.strip().lower()
    scale = {"k": 1000, "m": 1_000_000}.get(text[-1:], 1)
    number = text[:-1] if scale > 1 else text
    if not number.isdigit() or int(number) <= 0:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 10k, 100k, 1m)")
    return int(number) * scale


def parse_only(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in MEASURES]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown measure(s) {', '.join(unknown)}; known: {', '.join(MEASURES)}")
    return names


def postgres_state(url: str | None) -> tuple[str | None, str]:
    """The URL when a server answers there, else None and why."""
    if not url:
        return None, "no PostgreSQL URL given"
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except Exception as problem:  # any failure to reach it means: skip the PostgreSQL parts
        return None, f"PostgreSQL does not answer ({type(problem).__name__})"
    return url, ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help=f"tiny stores ({SMOKE_SIZE} records), few calls")
    parser.add_argument("--only", type=parse_only, help=f"comma-separated measures: {', '.join(MEASURES)}")
    parser.add_argument("--sizes", default=None, help=f"store sizes (default {DEFAULT_SIZES})")
    parser.add_argument("--json", type=Path, help="write every raw figure, the config and machine facts here")
    parser.add_argument("--cache-dir", type=Path, default=Path(".bench-cache"), help="where built stores are kept")
    parser.add_argument("--postgres", default=os.environ.get(POSTGRES_VARIABLE, DEFAULT_POSTGRES),
                        help=f"PostgreSQL server URL (default ${POSTGRES_VARIABLE} or {DEFAULT_POSTGRES}; '' for none)")
    parser.add_argument("--postgres-max-size", default="100k",
                        help="build PostgreSQL stores up to this size only (default 100k; 'none' for every size)")
    parser.add_argument("--calls", type=int, default=None, help="samples per latency case (default 300; smoke 20)")
    args = parser.parse_args(argv)
    try:
        sizes = [parse_size(s) for s in (args.sizes or (str(SMOKE_SIZE) if args.smoke else DEFAULT_SIZES)).split(",")]
        postgres_max = None if args.postgres_max_size.strip().lower() == "none" else parse_size(args.postgres_max_size)
    except argparse.ArgumentTypeError as problem:
        parser.error(str(problem))
    names = args.only or list(MEASURES)
    postgres, reason = postgres_state(args.postgres)
    config = {"smoke": args.smoke, "measures": names, "sizes": sizes, "cache_dir": str(args.cache_dir),
              "postgres": bool(postgres), "postgres_max_size": postgres_max,
              "calls": args.calls or (20 if args.smoke else 300)}
    report = Report(config=config)
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    failed = []
    with tempfile.TemporaryDirectory(prefix="engram-bench-") as scratch:
        ctx = Context(report=report, smoke=args.smoke, sizes=sorted(sizes), cache=args.cache_dir.resolve(),
                      scratch=Path(scratch), postgres=postgres, postgres_reason=reason, calls=config["calls"],
                      postgres_max_size=postgres_max)
        for name in names:
            start = time.perf_counter()
            print(f"== {name}", flush=True)
            first_row = len(report.rows)
            try:
                MEASURES[name](ctx)
            except Exception:  # one broken measure is reported; the others still run
                traceback.print_exc()
                failed.append(name)
                report.skipped[name] = "failed (traceback above)"
            report.facts.setdefault("measure_seconds", {})[name] = time.perf_counter() - start
            print_rows(report.rows[first_row:])
    print_table(report)
    if args.json:
        report.write(args.json)
        print(f"wrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
