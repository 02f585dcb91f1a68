"""Benign targets: servers that differ from the reference only where contract 1.0.0 leaves them free.

    python tests/benign/targets.py VARIANT --config SERVER_TOML   serve VARIANT over stdio
    python tests/benign/targets.py --list                          the catalog, one JSON object a line

The variants live in this folder, one module a family (tests/benign/catalog.py says how a variant is
written); this script serves one of them. ``run_variant`` judges one with a full run of the real
``conformance`` command line (every check, both eras, the default contract level, over stdio), and
``certified`` reads what it concluded; tests/test_benign_variants.py runs the catalog.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import re
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repository's root makes `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engram_mcp.reference.server import load_config, run_stdio

# Each family registers its variants when imported: this order is the catalog's.
# isort: off
from tests.benign import (  # noqa: F401 - imported for the variants each module registers
    texts_and_schemas,
    identity,
    clocks,
    opaque_ids,
    cancellation,
    arguments,
    values,
    lifecycle,
    host,
    transport,
)

# isort: on
from tests.benign.catalog import VARIANTS, Variant
from tests.catalog_runs import Judgement, fresh_copy, run, script_target
from tests.variant_server import Seams

SCRIPT = Path(__file__).resolve()
Verdicts = dict[str, str]  # requirement id -> footer verdict


def variant_target(name: str, config: Path) -> str:
    return script_target(SCRIPT, name, config)


@dataclass
class FullRun(Judgement):
    """A full run's judgement, with its footer's requirement verdicts split into the level's scored requirements
    and the rest (the pins a contract-level run reports without scoring)."""

    footer: tuple[Verdicts, Verdicts] = field(default_factory=lambda: ({}, {}))


VERDICT_LINE = re.compile(r"^VERDICT: (.*)$", re.MULTILINE)
FLAGGED = {"FAIL", "ERROR", "XPASS"}


def footer_verdicts(report: Path) -> tuple[Verdicts, Verdicts]:
    """(scored, unscored) requirement verdicts from a report's footer: the level's requirements, and the rest
    (the pins a contract-level run reports without scoring)."""
    scored: Verdicts = {}
    unscored: Verdicts = {}
    if report.exists():
        for line in report.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            if entry.get("type") == "footer":
                for rid, verdict in entry["requirements"].items():
                    (scored if verdict.get("scored") else unscored)[rid] = verdict["verdict"]
    return scored, unscored


def certified(result: FullRun) -> tuple[bool, str]:
    """Whether a full run certified the variant: exit 0, a conformant verdict, no scored requirement judged
    FAIL, ERROR or XPASS, and no check ending ERROR (the harness failing is never a certificate)."""
    if result.problem:
        return False, result.problem
    wrong = []
    if result.exit_code != 0:
        wrong.append(f"exit code {result.exit_code}")
    verdicts = VERDICT_LINE.findall(result.output)
    if not verdicts or not verdicts[-1].startswith("conformant"):
        wrong.append(f"verdict {verdicts[-1] if verdicts else 'missing'!r}")
    scored, _ = result.footer
    flagged = sorted(f"{rid}={v}" for rid, v in scored.items() if v in FLAGGED)
    if flagged:
        wrong.append("scored requirements " + ", ".join(flagged))
    if result.errors:
        wrong.append("ERROR in " + ", ".join(result.errors))
    return not wrong, "; ".join(wrong)


def profile_differences(result: FullRun) -> list[str]:
    """The pins the variant does not keep: reported by the run, never scored at the contract level."""
    _, unscored = result.footer
    return sorted(rid for rid, v in unscored.items() if v in FLAGGED)


def run_variant(item: Variant, template: Path, workdir: Path, *, timeout: float = 300.0) -> FullRun:
    """A full conformance run (every check, both eras, default level) against the variant over stdio."""
    config = fresh_copy(template, workdir)
    judged = run(item.name, variant_target(item.name, config / "server.toml"), config / "conformance-profile.toml",
                 [], workdir, era="both", timeout=timeout)
    return FullRun(**{f.name: getattr(judged, f.name) for f in fields(Judgement)},
                   footer=footer_verdicts(workdir / "report" / "report.jsonl"))


# -- command line ------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve a benign variant of the reference server over stdio.")
    parser.add_argument("variant", nargs="?", help="a variant name (see --list)")
    parser.add_argument("--config", type=Path, help="the server.toml of an engram-reference init")
    parser.add_argument("--list", action="store_true", help="print the catalog as JSON lines")
    args = parser.parse_args(argv)
    if args.list:
        for item in VARIANTS.values():
            print(json.dumps({"name": item.name, "freedom": item.freedom, "summary": item.summary}))
        return 0
    if args.variant not in VARIANTS or args.config is None:
        parser.error("give a variant from --list and --config")
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format=f"benign[{args.variant}]: %(message)s")
    seams = Seams(load_config(args.config))
    VARIANTS[args.variant].apply(seams)
    server = seams.build()
    with contextlib.suppress(KeyboardInterrupt):
        run_stdio(server)  # as engram-reference serves: the bounded stdio transport
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
