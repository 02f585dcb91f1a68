"""conformance: certify an MCP endpoint against Engram memory over MCP 1.0.0.

    conformance --target stdio:CMD --profile FILE [options]   run the suite
    conformance --target stdio:CMD                            only what needs no host identity
    conformance --target reference                            the bundled reference server
    conformance list                                          requirements, checks and coverage
    conformance explain ID                                    one requirement or check
    conformance keygen FILE                                   an Ed25519 key pair for --sign-key
    conformance verify-certificate FILE --key PUBLIC          check a signed certificate
    conformance sign REPORT_DIR --key KEY                     sign a finished run's report
    conformance bearer-bridge --upstream URL --listen HOST:PORT --token-file FILE
                                                              an HTTP target for clients that cannot send its token
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engram_mcp.conformance._cli_run import run_parser, usage_problems
from engram_mcp.conformance._defaults import ATTESTATION_FILE, EXIT_UNREACHABLE, EXIT_USAGE, REPORT_FILES, checks
from engram_mcp.conformance._words import os_reason, spoken
from engram_mcp.contract import load

if TYPE_CHECKING:
    from engram_mcp.conformance._run import Run

# Everything the harness needs to run (the MCP SDK, pytest, the suite) is imported once the command line has been
# judged: a usage error is said before any of it loads.


@contextlib.contextmanager
def _stdout_to_stderr(active: bool) -> Iterator[None]:
    """Send everything written to stdout (pytest, the console, any library) to stderr, at the descriptor."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def summary_json(run: Run | None, code: int, attestation: Path | None) -> dict[str, Any]:
    """The run's summary for scripts: the verdict, the level, the exit code and the counts."""
    from engram_mcp.conformance import _readiness as readiness
    from engram_mcp.conformance._certificate import predicate_of
    from engram_mcp.conformance._checks import Status
    from engram_mcp.conformance._findings import blamed
    from engram_mcp.conformance._verdicts import musts, requirement_verdicts

    if run is None:
        return {"exit_code": code, "verdict": None, "conformant": False,
                "error": "the run was not judged (a usage or harness error; stderr says which)"}
    predicate = predicate_of(run)
    verdict = predicate["verdict"]
    return {
        "exit_code": code, "verdict": verdict["summary"],
        # A conformant verdict whose signing failed (code != 0) must not read as a pass to a script.
        "conformant": verdict["conformant"] is True and code == 0,
        "level": run.level, "contract": load().version, "harness_version": run.harness_version,
        "target": run.target_identity, "server": run.server_identity, "eras": predicate["eras"]["spoken"],
        "transports": predicate["transports"], "seed": run.seed, "selection": list(run.select),
        "unreachable": run.unreachable, "counts": verdict["checks"], "scored_musts": verdict["scoredMusts"],
        # Checks whose only findings break pins: no failure at the contract level, named all the same.
        "pinned": {r.label: list(blamed(r)) for r in sorted(run.results, key=lambda r: r.label)
                   if r.status is Status.PIN},
        "report_dir": str(run.report_dir) if run.report_dir else None,
        "attestation": str(attestation) if attestation else None,
        "tools": [row.as_data() for row in readiness.rows(run, musts(requirement_verdicts(run)))],
        "tools_summary": readiness.sentence(run, musts(requirement_verdicts(run))),
    }


def run(argv: list[str]) -> int:
    parser = run_parser()
    args = parser.parse_args(argv)
    problems = usage_problems(args)
    if problems:
        print("\n".join(f"conformance: {problem}" for problem in problems), file=sys.stderr)
        print("conformance: nothing was run (conformance --help lists every option)", file=sys.stderr)
        return EXIT_USAGE
    from engram_mcp.conformance._certificate import CertificateError, signed_line, signer_from_file, write_attestation
    from engram_mcp.conformance._cli_run import judge

    signer = None
    if args.sign_key is not None:
        if args.report_dir is None:
            parser.error("--sign-key signs report.jsonl: give --report-dir too")
        try:
            signer = signer_from_file(args.sign_key)  # a bad key is a usage error before a long run, not after
        except CertificateError as problem:
            print(f"conformance: {problem}", file=sys.stderr)
            return EXIT_USAGE
    if args.report_dir is not None:
        # An earlier run's reports must not outlive a run that ends before writing its own.
        for name in (*REPORT_FILES, ATTESTATION_FILE):
            try:
                (args.report_dir / name).unlink(missing_ok=True)
            except OSError as problem:
                print(f"conformance: cannot remove {args.report_dir / name}: {os_reason(problem)}", file=sys.stderr)
                return EXIT_USAGE
    attestation = None
    with _stdout_to_stderr(args.format == "json"):
        code, finished = judge(args)
        if signer is not None and finished is not None:
            try:
                attestation = write_attestation(finished, args.report_dir, signer)
            except (CertificateError, OSError) as problem:
                # Asked for a signed result and got none: the job must not pass on the verdict alone.
                print(f"conformance: no attestation: {problem}", file=sys.stderr)
                code = EXIT_UNREACHABLE
            else:
                print(signed_line(attestation, signer.keyid, args.sign_key))
        elif signer is not None:
            print("conformance: no attestation: the run was not judged", file=sys.stderr)
    if args.format == "json":
        print(json.dumps(summary_json(finished, code, attestation), ensure_ascii=False, sort_keys=True))
    return code


def list_command() -> int:
    catalog = load().requirements["requirements"]
    suite = {entry["id"]: entry for entry in checks()}
    print(f"{'requirement':<16} {'level':<10} {'source':<9} {'status':<12} coverage")
    for entry in catalog:
        covered = [c for c, check in suite.items() if entry["id"] in check["requirements"]]
        excluded = f"excluded: {entry['exclusion']}" if entry.get("exclusion") else "UNCOVERED"
        coverage = ", ".join(covered) if covered else excluded
        print(f"{entry['id']:<16} {entry['level']:<10} {entry['source']:<9} {entry['status']:<12} {coverage}")
    print(f"\n{len(catalog)} requirements, {len(suite)} checks")
    return 0


def explain(identifier: str) -> int:
    from engram_mcp.conformance._ids import did_you_mean
    from engram_mcp.conformance._needs import short

    catalog = {r["id"]: r for r in load().requirements["requirements"]}
    suite = {entry["id"]: entry for entry in checks()}
    if identifier in catalog:
        entry = catalog[identifier]
        print(f"{identifier} ({entry['level']}, {entry['status']}, section {entry['section']})")
        print(f"  {entry['summary']}")
        cited = entry.get("contract_ref")
        where = f"contract {cited['section']}" if cited else ""
        print(f"  source: {where if where and entry['source'] == 'contract' else entry['source']}"
              + (f" (citing contract {cited['section']})" if cited and entry["source"] != "contract" else "")
              + (f" (split from {entry['split_from']})" if entry.get("split_from") else "")
              + ("" if entry["source"] != "pin" else "; scored only with --level pins"))
        if cited:  # the statement above is ours, in English; the words it rests on are the contract's own
            print(f"  the contract's words (Spanish original): «{cited['quote']}»")
        covering = sorted(c for c, check in suite.items() if identifier in check["requirements"])
        print("  checks: " + (", ".join(covering) if covering else "none"))
        if entry.get("exclusion"):
            print(f"  excluded: {entry['exclusion']}")
        return 0
    if identifier in suite:
        check = suite[identifier]
        print(f"check {identifier}")
        if check["asks"]:
            print(f"  {check['asks']}")
        tools = "whichever of the six the target serves" if "served" in check["uses"] else short(check["tools"])
        print(f"  calls: {tools}" + (f"; needs {', '.join(check['roles'])} (spec/profile.md, roles)"
                                      if check["roles"] else "")
              + ("" if len(check["eras"]) == 2 else f"; only in the {check['eras'][0]} era"))
        for rid in check["requirements"]:
            print(f"  covers {rid} ({catalog[rid]['level']}): {catalog[rid]['summary']}")
        return 0
    suggestion = did_you_mean(identifier, [*catalog, *suite])
    print(f"conformance: no requirement or check is called {spoken(identifier)}{suggestion}", file=sys.stderr)
    return EXIT_USAGE


def _explain_command(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: conformance explain ID", file=sys.stderr)
        return EXIT_USAGE
    return explain(argv[0])


def _lazy(module: str, name: str) -> Any:
    """A subcommand imported when it is asked for, not before."""
    def command(argv: list[str]) -> int:
        import importlib

        found: int = getattr(importlib.import_module(f"engram_mcp.conformance.{module}"), name)(argv)
        return found

    return command


SUBCOMMANDS = {
    "list": lambda argv: list_command(),
    "explain": _explain_command,
    "keygen": _lazy("_cli_certificate", "keygen"),
    "verify-certificate": _lazy("_cli_certificate", "verify_certificate"),
    "sign": _lazy("_certificate_sign", "sign_command"),
    "replay": _lazy("_cli_explore", "replay_command"),
    "diff": _lazy("_cli_explore", "diff_command"),
    "bearer-bridge": _lazy("_cli_bridge", "bearer_bridge"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv[:1] and argv[0] in SUBCOMMANDS:
            return SUBCOMMANDS[argv[0]](argv[1:])
        return run(argv)
    except SystemExit as leaving:  # argparse's usage errors, and --help and --version
        return EXIT_USAGE if leaving.code not in (0, None) else 0
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader left (`conformance list | head`): end as a Unix tool does, no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's own flush cannot fail again
        return EXIT_BROKEN_PIPE


EXIT_BROKEN_PIPE = 128 + 13  # what a shell reports for a process that SIGPIPE ended


if __name__ == "__main__":
    raise SystemExit(main())
