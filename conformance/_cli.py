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
from typing import Any

from engram_mcp.conformance._certificate import (
    ATTESTATION_FILE,
    CertificateError,
    predicate_of,
    signed_line,
    signer_from_file,
    write_attestation,
)
from engram_mcp.conformance._certificate_sign import sign_command
from engram_mcp.conformance._checks import Status
from engram_mcp.conformance._cli_bridge import bearer_bridge
from engram_mcp.conformance._cli_certificate import keygen, verify_certificate
from engram_mcp.conformance._cli_explore import diff_command, replay_command
from engram_mcp.conformance._cli_run import judge, run_parser
from engram_mcp.conformance._findings import blamed
from engram_mcp.conformance._report import REPORT_FILES
from engram_mcp.conformance._run import EXIT_UNREACHABLE, EXIT_USAGE, Run
from engram_mcp.contract import load


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
        # Checks whose only findings break profile pins: no failure at the contract level, named all the same.
        "pinned": {r.label: list(blamed(r)) for r in sorted(run.results, key=lambda r: r.label)
                   if r.status is Status.PIN},
        "report_dir": str(run.report_dir) if run.report_dir else None,
        "attestation": str(attestation) if attestation else None,
    }


def run(argv: list[str]) -> int:
    parser = run_parser()
    args = parser.parse_args(argv)
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
                print(f"conformance: cannot remove {args.report_dir / name}: {problem.strerror}", file=sys.stderr)
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
    from engram_mcp.conformance._catalog import suite_checks

    catalog = load().requirements["requirements"]
    checks = suite_checks()
    print(f"{'requirement':<16} {'level':<10} {'source':<9} {'status':<12} coverage")
    for entry in catalog:
        covered = [c for c, reqs in checks.items() if entry["id"] in reqs]
        excluded = f"excluded: {entry['exclusion']}" if entry.get("exclusion") else "UNCOVERED"
        coverage = ", ".join(covered) if covered else excluded
        print(f"{entry['id']:<16} {entry['level']:<10} {entry['source']:<9} {entry['status']:<12} {coverage}")
    print(f"\n{len(catalog)} requirements, {len(checks)} checks")
    return 0


def explain(identifier: str) -> int:
    from engram_mcp.conformance._catalog import suite_checks
    from engram_mcp.conformance._ids import did_you_mean

    catalog = {r["id"]: r for r in load().requirements["requirements"]}
    checks = suite_checks()
    if identifier in catalog:
        entry = catalog[identifier]
        print(f"{identifier} ({entry['level']}, {entry['status']}, section {entry['section']})")
        print(f"  {entry['summary']}")
        cited = entry.get("contract_ref")
        where = f"contract {cited['section']}" if cited else ""
        print(f"  source: {where if where and entry['source'] == 'contract' else entry['source']}"
              + (f" (citing contract {cited['section']})" if cited and entry["source"] != "contract" else "")
              + (f" (split from {entry['split_from']})" if entry.get("split_from") else "")
              + ("" if entry["source"] != "profile" else "; scored only with --level profile"))
        if cited:  # the statement above is ours, in English; the words it rests on are the contract's own
            print(f"  the contract's words (Spanish original): «{cited['quote']}»")
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
    suggestion = did_you_mean(identifier, [*catalog, *checks])
    print(f"conformance: no requirement or check is called {identifier!r}{suggestion}", file=sys.stderr)
    return EXIT_USAGE


def _explain_command(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: conformance explain ID", file=sys.stderr)
        return EXIT_USAGE
    return explain(argv[0])


SUBCOMMANDS = {
    "list": lambda argv: list_command(),
    "explain": _explain_command,
    "keygen": keygen,
    "verify-certificate": verify_certificate,
    "sign": sign_command,
    "replay": replay_command,
    "diff": diff_command,
    "bearer-bridge": bearer_bridge,
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
