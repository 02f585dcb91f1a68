"""The signed certificate: an in-toto attestation of one conformance run.

``conformance … --sign-key KEY --report-dir DIR`` writes DIR/report.jsonl.intoto.jsonl,
an in-toto attestation bundle (JSON Lines, one DSSE envelope per line; the file is
named after the artefact it attests, as the bundle convention asks). Its Statement v1
names report.jsonl by SHA-256 as the subject, and its predicate restates what the run
was and what it concluded: contract digest, harness version, level, target and server
identity, profile digest, eras, transports, seed, selection, dates and the verdict.
``conformance verify-certificate FILE --key PUBLIC [--report report.jsonl]`` checks
it (``_certificate_verify``).
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_mcp.conformance._checks import Status
from engram_mcp.conformance._defaults import ATTESTATION_FILE, REPORT_FILE
from engram_mcp.conformance._dsse import (
    Ed25519Signer,
    Ed25519Verifier,
    EnvelopeError,
    Signer,
    Verifier,
    load_private_key,
    load_public_key,
    sign_envelope,
)
from engram_mcp.conformance._errors import ConformanceError
from engram_mcp.conformance._run import Run
from engram_mcp.conformance._verdicts import (
    counts,
    exit_code,
    musts,
    requirement_verdicts,
    spoken_eras,
    tally,
    verdict_line,
)
from engram_mcp.conformance._words import os_reason
from engram_mcp.contract import load

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
PREDICATE_TYPE = "https://engram-mcp.invalid/attestation/conformance-run/v1"
CONTRACT_NAME = "Engram memory over MCP"


class CertificateError(ConformanceError):
    """The attestation cannot be made, or does not verify; the message says which check failed."""


def _sha256(data: bytes) -> dict[str, str]:
    return {"sha256": hashlib.sha256(data).hexdigest()}


def digest_set(prefixed: str | None) -> dict[str, str] | None:
    """``sha256:<hex>`` as an in-toto DigestSet."""
    if not prefixed:
        return None
    algorithm, _, value = prefixed.partition(":")
    return {algorithm: value} if value else None


def utc_stamp(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if moment is not None else None


def predicate_of(run: Run) -> dict[str, Any]:
    """What the run was and what it concluded, as the predicate binds it."""
    code = exit_code(run) if run.exit_code is None else run.exit_code
    baselined = any(r.status is Status.XFAIL for r in run.results)
    return {
        "contract": {"name": CONTRACT_NAME, "version": load().version, "digest": digest_set(load().digest)},
        "harness": {"name": "conformance", "version": run.harness_version},
        "target": {"label": run.target_identity, "transport": run.target.kind,
                   "server": {era: {"name": info.name, "version": info.version}
                              for era, info in sorted(run.server_info.items())}},
        "profile": {"given": bool(run.profile and run.profile.given), "digest": digest_set(run.profile_digest)},
        "level": run.level,
        "strict": run.strict,
        "deep": run.deep,
        "eras": {"asked": list(run.eras), "spoken": spoken_eras(run), "refused": dict(run.unsupported_eras)},
        "transports": list(run.transports),
        "seed": run.seed,
        "examples": run.examples,
        "selection": list(run.select),
        "startedAt": utc_stamp(run.started_at),
        "finishedAt": utc_stamp(run.finished_at or datetime.now(UTC)),
        "verdict": {
            "conformant": code == 0 and not baselined,
            "exitCode": code,
            "summary": verdict_line(run, code),
            "scoredMusts": tally(musts(requirement_verdicts(run))),
            "checks": counts(run),
        },
    }


def statement_of(report: bytes, predicate: dict[str, Any]) -> dict[str, Any]:
    return {"_type": STATEMENT_TYPE, "subject": [{"name": REPORT_FILE, "digest": _sha256(report)}],
            "predicateType": PREDICATE_TYPE, "predicate": predicate}


def _pem(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as problem:
        raise CertificateError(f"cannot read the {what} {path}: {os_reason(problem)}") from None


def signer_from_file(path: Path) -> Signer:
    try:
        return Ed25519Signer(load_private_key(_pem(path, "signing key")))
    except EnvelopeError as problem:
        raise CertificateError(f"{path}: {problem}") from None


def verifier_from_file(path: Path) -> Verifier:
    try:
        return Ed25519Verifier(load_public_key(_pem(path, "public key")))
    except EnvelopeError as problem:
        raise CertificateError(f"{path}: {problem}") from None


def public_key_of(private_key: Path) -> Path:
    """Where `conformance keygen FILE` wrote the public half of FILE: FILE.pub beside it."""
    return private_key.with_name(private_key.name + ".pub")


def signed_line(attestation: Path, keyid: str, private_key: Path) -> str:
    """What a signing command prints: the attestation and the command that checks it, with the public key
    keygen wrote beside the private one (named as a placeholder when it is not there)."""
    public = public_key_of(private_key)
    key = str(public) if public.is_file() else "PUBLIC_KEY"
    hint = "" if public.is_file() else f" (the public key; `conformance keygen` writes it as {public.name})"
    return (f"signed: {attestation} (Ed25519, keyid {keyid}); check it with "
            f"`conformance verify-certificate {attestation} --key {key}`{hint}")


def write_attestation(run: Run, directory: Path, signer: Signer) -> Path:
    """Sign the run's report.jsonl (already written in ``directory``) and write the bundle beside it."""
    report = directory / REPORT_FILE
    try:
        body = report.read_bytes()
    except OSError:
        raise CertificateError(f"no {REPORT_FILE} in {directory} to sign") from None
    return sign_statement(statement_of(body, predicate_of(run)), directory, signer)


def sign_statement(statement: dict[str, Any], directory: Path, signer: Signer) -> Path:
    """Write ``statement``, signed, as the bundle in ``directory``."""
    payload = json.dumps(statement, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8")
    envelope = sign_envelope(PAYLOAD_TYPE, payload, signer)
    target = directory / ATTESTATION_FILE
    target.write_text(json.dumps(envelope, sort_keys=True) + "\n", encoding="utf-8")
    return target
