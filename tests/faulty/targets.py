"""Faulty targets: the reference server with one requirement broken, to prove that the harness notices.

    python tests/faulty/targets.py VARIANT --config SERVER_TOML   serve VARIANT over stdio
    python tests/faulty/targets.py --list                          the catalog, one JSON object a line

The variants live in this folder, one module a family (tests/faulty/catalog.py says how a variant is
written); this script serves one of them. ``run_variant`` and ``run_control`` run the real
``conformance`` command line and ``Judgement.verdict`` reads the report; tests/test_faulty_targets.py
and tools/kill_rate.py use them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository's root makes `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import uvicorn

from engram_mcp.reference._http_deadlines import deadline_protocol
from engram_mcp.reference.server import http_app, load_config, run_stdio
from tests.catalog_runs import Judgement, fresh_copy, reference_target, run, script_target, served_over_http
from tests.faulty import (  # noqa: F401 - each family registers its variants when imported
    arguments,
    binding,
    envelope,
    gates,
    host,
    idempotency,
    lifecycle,
    sequences,
    transport,
)
from tests.faulty.catalog import VARIANTS, Variant
from tests.variant_server import Seams, VariantServer

SCRIPT = Path(__file__).resolve()


def variant_target(name: str, config: Path) -> str:
    return script_target(SCRIPT, name, config)


def run_variant(item: Variant, template: Path, workdir: Path, *, timeout: float = 240.0) -> Judgement:
    config = fresh_copy(template, workdir)
    if item.configure is not None:
        item.configure(config)
    # Some variants break only this project's pins: the catalog is judged at the pins level.
    if item.transport == "http":
        with served_over_http(SCRIPT, item.name, config / "server.toml", workdir) as url:
            return run(item.name, url, config / "conformance-profile.toml", item.select, workdir, era=item.era,
                       timeout=timeout, level="profile")
    return run(item.name, variant_target(item.name, config / "server.toml"), config / "conformance-profile.toml",
               item.select, workdir, era=item.era, timeout=timeout, level="profile")


def serve_http(server: VariantServer, address: str) -> None:
    """As engram-reference serve --http does, for a server the variant has already broken."""
    interface, _, port = address.rpartition(":")
    limits = server.config.transport
    try:
        uvicorn.Server(uvicorn.Config(
            http_app(server, interface, int(port), guard=server.seams.bearer_guard), host=interface, port=int(port),
            log_level="warning",
            lifespan="on", http=deadline_protocol(limits.http_header_timeout_seconds, limits.http_body_timeout_seconds),
            limit_concurrency=limits.http_max_connections,
        )).run()
    finally:
        server.close()


def run_without_exploration(item: Variant, template: Path, workdir: Path, *, timeout: float = 240.0) -> Judgement:
    """The variant under every fixed check (no --select) with exploration turned off: what it slips past."""
    config = fresh_copy(template, workdir)
    if item.configure is not None:
        item.configure(config)
    return run(item.name, variant_target(item.name, config / "server.toml"), config / "conformance-profile.toml",
               (), workdir, era=item.era, timeout=timeout, level="profile", options=("--explore", "0"))


def run_control(selections: list[str], template: Path, workdir: Path, *, timeout: float = 240.0) -> Judgement:
    """The unmodified reference, over the union of every variant's selections."""
    config = fresh_copy(template, workdir)
    return run("reference (control)", reference_target(config / "server.toml"), config / "conformance-profile.toml",
               selections, workdir, timeout=timeout, level="profile")


def all_selections() -> list[str]:
    return sorted({prefix for item in VARIANTS.values() for prefix in item.select})


def table(items: list[Variant], judged: dict[str, Judgement]) -> Iterator[str]:
    """The kill-rate table, one line per variant, and the rate."""
    rows = [("variant", "breaks", "caught by", "status")]
    for item in items:
        result = judged.get(item.name)
        caught = ", ".join(result.caught(item)) if result else ""
        status = result.verdict(item) if result else "NOT RUN"
        if item.gap:
            status += " (known gap)"
        if status == "KILLED" and item.expect != "FAIL":
            status += f" ({item.expect})"
        rows.append((item.name, ", ".join(item.breaks), caught or "-", status.split(": ")[0]))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        yield " | ".join(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)) + " | " + row[3]
    killed = sum(item.name in judged and judged[item.name].verdict(item) == "KILLED" for item in items)
    yield f"kill rate: {killed}/{len(items)} ({100 * killed / max(1, len(items)):.0f}%)"


# -- command line ---------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve a faulty variant of the reference server over stdio.")
    parser.add_argument(
        "variant", nargs="?", help="a variant name (see --list); 'none' serves the wrapper without a fault"
    )
    parser.add_argument("--config", type=Path, help="the server.toml of an engram-reference init")
    parser.add_argument("--list", action="store_true", help="print the catalog as JSON lines")
    parser.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP on this address, not stdio")
    args = parser.parse_args(argv)
    if args.list:
        for item in VARIANTS.values():
            print(json.dumps({"name": item.name, "breaks": item.breaks, "caught_by": item.caught_by,
                              "select": item.select, "era": item.era, "expect": item.expect,
                              "summary": item.summary, "gap": item.gap}))
        return 0
    if args.variant is None or args.config is None or (args.variant != "none" and args.variant not in VARIANTS):
        parser.error("give a variant from --list (or 'none') and --config")
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format=f"faulty[{args.variant}]: %(message)s")
    seams = Seams(load_config(args.config))
    if args.variant != "none":
        VARIANTS[args.variant].apply(seams)
    server = seams.build()
    if args.http:
        serve_http(server, args.http)
        return 0
    with contextlib.suppress(KeyboardInterrupt):
        run_stdio(server)  # as engram-reference serves: the bounded stdio transport
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
