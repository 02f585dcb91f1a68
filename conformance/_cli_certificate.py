"""``conformance keygen`` and ``conformance verify-certificate``: the signing key and the check of a certificate."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from engram_mcp.conformance._certificate import ATTESTATION_FILE, CertificateError, verifier_from_file
from engram_mcp.conformance._certificate_verify import Attested, UnreadableInput, describe, verify
from engram_mcp.conformance._defaults import EXIT_USAGE
from engram_mcp.conformance._dsse import keyid_of, load_public_key, new_key_pair
from engram_mcp.conformance._words import os_reason

VERIFY_EPILOG = """exit codes:
  0  authentic, and it certifies a conformant run
  1  not verified: no signature verifies with the key, the statement is not a conformance run's,
     the attested contract data are not this installation's, the report does not match the
     attested digest, or no report was checked (give --report FILE, or --no-report on purpose)
  2  usage error (a file cannot be read, a key is not an Ed25519 PEM key)
  6  authentic, but the attested run is not conformant (its verdict is printed)"""
EXIT_NOT_VERIFIED, EXIT_NOT_CONFORMANT = 1, 6


def keygen(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="conformance keygen",
                                     description="Write a new Ed25519 key pair: FILE (private, PKCS#8 PEM, mode 0600) "
                                                 "for --sign-key and FILE.pub (public PEM) for verify-certificate.")
    parser.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    private_path, public_path = args.file, args.file.with_name(args.file.name + ".pub")
    private, public = new_key_pair()
    # O_EXCL: never overwrite either half of a key pair, and the private half is never readable by
    # others, even briefly. The public file is claimed first so a refusal leaves no orphan private key.
    for path, mode, data in ((public_path, 0o644, public), (private_path, 0o600, private)):
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        except FileExistsError:
            print(f"conformance: {path} exists; keygen never overwrites a key", file=sys.stderr)
        except OSError as problem:
            print(f"conformance: cannot write {path}: {os_reason(problem)}", file=sys.stderr)
        else:
            with os.fdopen(descriptor, "wb") as out:
                out.write(data)
            continue
        if path == private_path:
            public_path.unlink(missing_ok=True)  # ours, written a moment ago
        return EXIT_USAGE
    print(f"private key: {private_path}\npublic key:  {public_path}\nkeyid:       {keyid_of(load_public_key(public))}")
    return 0


def _conclusion(attested: Attested) -> str:
    if not attested.conformant:
        return "AUTHENTIC, BUT NOT A CERTIFICATE OF CONFORMANCE: the attested run is not conformant"
    if attested.report is None:
        return "AUTHENTIC SIGNATURE OF A CONFORMANT RUN; THE REPORT WAS NOT CHECKED (--no-report)"
    return "VERIFIED: a certificate of conformance"


def verify_certificate(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="conformance verify-certificate",
                                     description="Check a signed certificate (an in-toto attestation in a DSSE "
                                                 "envelope) and print what it attests.",
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=VERIFY_EPILOG)
    parser.add_argument("file", type=Path, help=f"the attestation, e.g. REPORT_DIR/{ATTESTATION_FILE}")
    parser.add_argument("--key", type=Path, required=True, help="the signer's Ed25519 public key (PEM)")
    parser.add_argument("--report", type=Path,
                        help="the report.jsonl it attests (default: the one beside FILE, if any)")
    parser.add_argument("--no-report", action="store_true",
                        help="check the signature and statement only; the output then says the report was not checked")
    parser.add_argument("--format", choices=["text", "json"], default="text",
                        help="json: one JSON object (verified, conformant, exit_code, keyid, report, statement, error)")
    args = parser.parse_args(argv)
    try:
        verifier = verifier_from_file(args.key)
    except CertificateError as problem:
        print(f"conformance: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if not args.file.is_file():
        print(f"conformance: no file {args.file}", file=sys.stderr)
        return EXIT_USAGE
    if args.no_report and args.report is not None:
        parser.error("--no-report and --report exclude each other")
    attested: Attested | None = None
    try:
        attested = verify(args.file, verifier, args.report, look_beside=not args.no_report)
        if attested.report is None and not args.no_report:
            # The signature alone says nothing about which report it attests: never a pass by default.
            raise CertificateError(f"no report was checked: none beside {args.file}; give --report FILE "
                                   "(or --no-report to check the signature only)")
    except UnreadableInput as problem:
        print(f"conformance: {problem}", file=sys.stderr)
        return EXIT_USAGE
    except CertificateError as problem:
        attested = None
        code, lines = EXIT_NOT_VERIFIED, [f"NOT VERIFIED: {problem}"]
    else:
        code = 0 if attested.conformant else EXIT_NOT_CONFORMANT
        lines = [*describe(attested), _conclusion(attested)]
    if args.format == "json":
        print(json.dumps({
            "exit_code": code, "verified": attested is not None,
            "conformant": attested.conformant if attested else None,
            "keyid": attested.keyid if attested else None,
            "report": str(attested.report) if attested and attested.report else None,
            "statement": attested.statement if attested else None,
            "error": lines[0].removeprefix("NOT VERIFIED: ") if attested is None else None,
            "notes": attested.notes if attested else [],
        }, ensure_ascii=False, sort_keys=True))
    else:
        print("\n".join(lines))
    return code
