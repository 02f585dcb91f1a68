"""conformance: certify an MCP endpoint against Engram memory over MCP 1.0.0.

    conformance --target stdio:CMD --profile FILE [options]   run the suite
    conformance --target stdio:CMD                            only what needs no host identity
    conformance --target reference                            the bundled reference server
    conformance list                                          requirements, checks and coverage
    conformance explain ID                                    one requirement or check
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
from pathlib import Path

from engram_mcp.contract import load

EXIT_USAGE = 2
EPILOG = """exit codes:
  0  conformant: every scored MUST of the level was exercised and passed in every era the target speaks
     (with --expected-failures: no failure beyond the baseline)
  1  a scored MUST failed
  2  usage error
  3  target unreachable, profile refused, or environment error
  4  stale baseline: an expected failure now passes
  5  incomplete: a scored MUST was left SKIP, BLOCKED or not run (every --select run is at best incomplete)

subcommands: 'conformance list', 'conformance explain ID'."""
SUITE = Path(__file__).resolve().parent / "suite"


def _run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="conformance", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    parser.add_argument("--target", required=True, help="stdio:CMD, an http(s):// URL, or reference")
    parser.add_argument("--profile", type=Path, help="the target's host profile (spec/profile.md); without one only the "
                        "checks that need no host identity run (the reference's is generated)")
    parser.add_argument("--era", choices=["legacy", "modern", "both"], default="both")
    parser.add_argument("--select", action="append", default=[], help="check or requirement id prefix (repeatable)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--examples", type=int, default=25, help="generated cases per tool and mode")
    parser.add_argument("--strict", action="store_true", help="score unverified requirements too")
    parser.add_argument("--expected-failures", type=Path, help="baseline of check ids expected to fail")
    parser.add_argument("--report-dir", type=Path, help="where to write the reports")
    parser.add_argument("--call-timeout", type=float, default=30.0)
    parser.add_argument("--level", choices=["contract", "profile"], default="contract",
                        help="contract (default): the contract's requirements plus the wiring the harness needs to act "
                             "as host; profile: this project's host-profile pins too")
    parser.add_argument("--deep", action="store_true",
                        help="also run the checks that wait long (a confirmation TTL over 10 s, expiry windows)")
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per check")
    return parser


def _reference_target(workdir: Path) -> tuple[str, Path]:
    """A fresh configuration of the bundled reference server, served over stdio."""
    from engram_mcp.reference._init import write_configuration

    write_configuration(workdir, seed="demo")
    command = [sys.executable, "-m", "engram_mcp.reference._cli", "serve", "--config", str(workdir / "server.toml")]
    return "stdio:" + shlex.join(command), workdir / "conformance-profile.toml"


def run(argv: list[str]) -> int:
    import pytest

    args = _run_parser().parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="engram-conformance-") as scratch:
        target, profile = args.target, args.profile
        if target == "reference":
            target, generated = _reference_target(Path(scratch) / "reference")
            profile = profile or generated
        options = [
            str(SUITE), "-p", "engram_mcp.conformance._plugin", "-c", os.devnull, "--rootdir", str(SUITE),
            "--import-mode=importlib", "-p", "no:cacheprovider", "-p", "no:randomly", "-q" if not args.verbose else "-v",
            "-rN", "--no-header", "--tb=short", "-W", "ignore::pytest.PytestAssertRewriteWarning", "--target", target, "--era", args.era,
            "--seed", str(args.seed), "--examples", str(args.examples), "--call-timeout", str(args.call_timeout),
        ]
        if profile is not None:
            options += ["--profile", str(profile)]
        for selected in args.select:
            options += ["--select", selected]
        if args.strict:
            options.append("--score-unverified")
        options += ["--level", args.level] + (["--deep"] if args.deep else [])
        if args.expected_failures:
            options += ["--expected-failures", str(args.expected_failures)]
        if args.report_dir:
            options += ["--report-dir", str(args.report_dir), f"--junitxml={args.report_dir / 'junit.xml'}",
                        "-o", "junit_family=xunit1", "-o", "junit_suite_name=engram-mcp-conformance"]
        from engram_mcp.conformance import _plugin

        _plugin.FINAL_EXIT = None
        code = int(pytest.main(options))
    if _plugin.FINAL_EXIT is not None:
        return _plugin.FINAL_EXIT
    # pytest stopped before the run was judged: its usage error, or an internal one.
    return EXIT_USAGE if code == int(pytest.ExitCode.USAGE_ERROR) else 3


def list_command() -> int:
    from engram_mcp.conformance._catalog import suite_checks

    catalog = load().requirements["requirements"]
    checks = suite_checks()
    print(f"{'requirement':<16} {'level':<10} {'source':<9} {'status':<12} coverage")
    for entry in catalog:
        covered = [c for c, reqs in checks.items() if entry["id"] in reqs]
        coverage = ", ".join(covered) if covered else (f"excluded: {entry['exclusion']}" if entry.get("exclusion") else "UNCOVERED")
        print(f"{entry['id']:<16} {entry['level']:<10} {entry['source']:<9} {entry['status']:<12} {coverage}")
    print(f"\n{len(catalog)} requirements, {len(checks)} checks")
    return 0


def explain(identifier: str) -> int:
    from engram_mcp.conformance._catalog import suite_checks

    catalog = {r["id"]: r for r in load().requirements["requirements"]}
    checks = suite_checks()
    if identifier in catalog:
        entry = catalog[identifier]
        print(f"{identifier} ({entry['level']}, {entry['status']}, section {entry['section']})")
        print(f"  {entry['summary']}")
        cited = entry.get("contract_ref")
        print(f"  source: {entry['source']}" + (f" — contract {cited['section']}: «{cited['quote']}»" if cited else "")
              + (f" (split from {entry['split_from']})" if entry.get("split_from") else "")
              + ("" if entry["source"] != "profile" else "; scored only with --level profile"))
        covering = sorted(c for c, reqs in checks.items() if identifier in reqs)
        print("  checks: " + (", ".join(covering) if covering else "none"))
        if entry.get("exclusion"):
            print(f"  excluded: {entry['exclusion']}")
        return 0
    if identifier in checks:
        print(f"check {identifier}")
        doc = checks.doc(identifier)
        if doc:
            print(f"  {doc}")
        for rid in checks[identifier]:
            print(f"  covers {rid} ({catalog[rid]['level']}): {catalog[rid]['summary']}")
        return 0
    print(f"conformance: no requirement or check is called {identifier!r}", file=sys.stderr)
    return EXIT_USAGE


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] == ["list"]:
            return list_command()
        if argv[:1] == ["explain"]:
            if len(argv) != 2:
                print("usage: conformance explain ID", file=sys.stderr)
                return EXIT_USAGE
            return explain(argv[1])
        return run(argv)
    except SystemExit as leaving:  # argparse's usage errors
        return EXIT_USAGE if leaving.code not in (0, None) else 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
