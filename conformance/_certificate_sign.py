"""``conformance sign REPORT_DIR --key KEY``: sign a finished run's report after the run.

A CI job can then run the target without the signing key anywhere it could read,
and sign in a later step. The predicate is rebuilt from report.jsonl's header,
check lines and footer, which carry every fact predicate_of() takes from the run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from engram_mcp.conformance._certificate import (
    ATTESTATION_FILE,
    CONTRACT_NAME,
    REPORT_FILE,
    CertificateError,
    digest_set,
    sign_statement,
    signed_line,
    signer_from_file,
    statement_of,
)
from engram_mcp.conformance._checks import Status
from engram_mcp.conformance._defaults import EXIT_USAGE


def predicate_from_report(report: bytes) -> dict[str, Any]:
    """The predicate predicate_of() gave the run that wrote ``report``."""
    try:
        lines = [json.loads(line) for line in report.decode("utf-8").splitlines() if line.strip()]
        header = next(line for line in lines if line.get("type") == "header")
        footer = next(line for line in lines if line.get("type") == "footer")
        baselined = any(line.get("status") == Status.XFAIL.value for line in lines if line.get("type") == "check")
        code = footer["exit_code"]
        unsupported = header["unsupported_eras"]
        return {
            "contract": {"name": CONTRACT_NAME, "version": header["contract"],
                         "digest": digest_set(header["contract_digest"])},
            "harness": {"name": "conformance", "version": header["harness_version"]},
            "target": {"label": header["target"], "transport": header["transport"],
                       "server": {era: {"name": info["name"], "version": info["version"]}
                                  for era, info in sorted(header["server_info"].items())}},
            "profile": {"given": header["profile_given"], "digest": digest_set(header["profile_digest"])},
            "level": header["level"],
            "strict": header["strict"],
            "deep": header["deep"],
            "eras": {"asked": list(header["eras"]), "spoken": [e for e in header["eras"] if e not in unsupported],
                     "refused": dict(unsupported)},
            "transports": list(header["transports"]),
            "seed": header["seed"],
            "examples": header["examples"],
            "selection": list(header["select"]),
            "startedAt": header["started_at"],
            "finishedAt": header["finished_at"],
            "verdict": {
                "conformant": code == 0 and not baselined,
                "exitCode": code,
                "summary": footer["verdict"],
                "scoredMusts": footer["scored_musts"],
                "checks": footer["counts"],
            },
        }
    except (UnicodeDecodeError, json.JSONDecodeError, StopIteration, KeyError, TypeError, AttributeError):
        raise CertificateError(f"the {REPORT_FILE} is not a finished run's report (header and footer)") from None


def sign_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="conformance sign",
                                     description=f"Sign REPORT_DIR/{REPORT_FILE} of a finished run and write "
                                                 f"REPORT_DIR/{ATTESTATION_FILE}; the run itself never needs "
                                                 "the key.")
    parser.add_argument("report_dir", type=Path)
    parser.add_argument("--key", type=Path, required=True, help="the Ed25519 private key (PEM)")
    args = parser.parse_args(argv)
    try:
        signer = signer_from_file(args.key)
        report = (args.report_dir / REPORT_FILE).read_bytes()
    except CertificateError as problem:
        print(f"conformance: {problem}", file=sys.stderr)
        return EXIT_USAGE
    except OSError:
        print(f"conformance: no readable {REPORT_FILE} in {args.report_dir}", file=sys.stderr)
        return EXIT_USAGE
    try:
        statement = statement_of(report, predicate_from_report(report))
        attestation = sign_statement(statement, args.report_dir, signer)
    except (CertificateError, OSError) as problem:
        print(f"conformance: no attestation: {problem}", file=sys.stderr)
        return 1
    print(signed_line(attestation, signer.keyid, args.key))
    return 0
