"""Checking a signed certificate: the signature, the statement, the report it names.

The checks follow the in-toto validation model: authenticate the DSSE envelope
with the given key first, then parse the Statement it carries, then match the
subject's digest against the report; only authenticated bytes are ever read as
facts. A bundle line that is not one of our attestations is skipped, as the
bundle format asks, so a file holding other attestations still verifies ours.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram_mcp.conformance._certificate import (
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    REPORT_FILE,
    STATEMENT_TYPE,
    CertificateError,
    digest_set,
)
from engram_mcp.conformance._dsse import EnvelopeError, Verifier, open_envelope
from engram_mcp.conformance._words import os_reason, spoken
from engram_mcp.contract import load

_HEX64 = re.compile(r"[0-9a-f]{64}")


class UnreadableInput(CertificateError):
    """A file given to verify cannot be read as text at all: a usage error, not a failed check."""


@dataclass
class Attested:
    """A verified attestation: the key that signed it and what its statement says."""

    keyid: str
    statement: dict[str, Any]
    report: Path | None  # the report.jsonl whose digest was checked, or None when none was given or found
    notes: list[str] = field(default_factory=list)

    @property
    def predicate(self) -> dict[str, Any]:
        return dict(self.statement["predicate"])

    @property
    def conformant(self) -> bool:
        return self.predicate["verdict"]["conformant"] is True


def _envelopes(text: str) -> Iterator[Any]:
    """The envelopes of a bundle (JSON Lines), or of a file holding one pretty-printed envelope."""
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict):
        yield whole
        return
    for line in text.splitlines():
        if line.strip():
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue  # a bundle's consumer ignores lines it does not recognise


def _subject_digest(statement: dict[str, Any]) -> str:
    subjects = statement.get("subject")
    if not isinstance(subjects, list):
        raise CertificateError("the statement has no subject list")
    for subject in subjects:
        if isinstance(subject, dict) and subject.get("name") == REPORT_FILE:
            value = (subject.get("digest") or {}).get("sha256") if isinstance(subject.get("digest"), dict) else None
            if isinstance(value, str) and _HEX64.fullmatch(value):
                return value
            raise CertificateError(f"the subject {REPORT_FILE} has no SHA-256 digest")
    raise CertificateError(f"the statement does not name {REPORT_FILE} as its subject")


# What describe() and the report agreement read, with the JSON type each must have.
_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "contract": dict, "harness": dict, "target": dict, "profile": dict, "level": str, "eras": dict,
    "transports": list, "seed": int, "verdict": dict,
}


def _statement(body: bytes) -> dict[str, Any]:
    try:
        statement = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CertificateError("the signed payload is not JSON") from None
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        raise CertificateError(f"the signed payload is not an in-toto Statement ({STATEMENT_TYPE})")
    if statement.get("predicateType") != PREDICATE_TYPE:
        raise CertificateError(f"the statement's predicate type is {spoken(statement.get('predicateType'))}, "
                               f"not a conformance run ({PREDICATE_TYPE})")
    predicate = statement.get("predicate")
    if not isinstance(predicate, dict):
        raise CertificateError("the statement has no predicate object")
    wrong = [key for key, kind in _REQUIRED.items() if not isinstance(predicate.get(key), kind)]
    if wrong:
        raise CertificateError("the predicate lacks, or mistypes, " + ", ".join(wrong))
    verdict = predicate["verdict"]
    if not isinstance(verdict.get("conformant"), bool) or not isinstance(verdict.get("exitCode"), int):
        raise CertificateError("the predicate's verdict is malformed")
    return statement


# The report's own header and footer must say what the predicate says; each pair is
# (report line type, report key, how to read the same fact from the predicate).
_AGREEMENT: tuple[tuple[str, str, Callable[[dict[str, Any]], Any]], ...] = (
    ("header", "contract_digest", lambda p: "sha256:" + p["contract"]["digest"]["sha256"]),
    ("header", "target", lambda p: p["target"]["label"]),
    ("header", "level", lambda p: p["level"]),
    ("header", "seed", lambda p: p["seed"]),
    ("header", "eras", lambda p: p["eras"]["asked"]),
    ("footer", "exit_code", lambda p: p["verdict"]["exitCode"]),
    ("footer", "verdict", lambda p: p["verdict"]["summary"]),
)


def _disagreements(report: bytes, predicate: dict[str, Any]) -> list[str]:
    lines = [json.loads(line) for line in report.decode("utf-8").splitlines() if line.strip()]
    parts = {line.get("type"): line for line in lines if isinstance(line, dict)}
    wrong = []
    for part, key, read in _AGREEMENT:
        if key in parts.get(part, {}):
            try:
                attested = read(predicate)
            except (KeyError, TypeError):
                attested = None
            if parts[part][key] != attested:
                wrong.append(key)
    return wrong


def _read_report(report: Path) -> bytes:
    try:
        return report.read_bytes()
    except OSError as problem:
        raise UnreadableInput(f"cannot read the report {report}: {os_reason(problem)}") from None


def _report_digest(report: Path) -> str:
    return hashlib.sha256(_read_report(report)).hexdigest()


def _check_report(attested: Attested, digest: str, report: Path) -> None:
    data = _read_report(report)
    actual = hashlib.sha256(data).hexdigest()
    if actual != digest:
        raise CertificateError(f"{report} does not match the attested subject: its SHA-256 is {actual}, "
                               f"the certificate attests {digest}")
    try:
        wrong = _disagreements(data, attested.predicate)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise CertificateError(f"{report} is not a conformance report (JSON Lines)") from None
    if wrong:
        raise CertificateError(f"{report} and the attestation disagree on: {', '.join(wrong)}")
    attested.report = report


def verify(attestation: Path, verifier: Verifier, report: Path | None = None, *, look_beside: bool = True) -> Attested:
    """Check the signature, the statement and (given, or found beside the file unless ``look_beside`` is off)
    the report's digest.

    In a bundle of several envelopes signed by the key, the one whose subject is the
    report is chosen; without a report the first is returned with ``report`` None, and
    the caller must not present that as a checked certificate.
    """
    try:
        text = attestation.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        raise UnreadableInput(f"cannot read {attestation} (a UTF-8 text file is expected)") from None
    if report is None and look_beside and (attestation.parent / REPORT_FILE).is_file():
        report = attestation.parent / REPORT_FILE
    actual = _report_digest(report) if report is not None else None
    failures: list[str] = []
    chosen: tuple[Attested, str] | None = None
    for envelope in _envelopes(text):
        try:
            opened = open_envelope(envelope, verifier, payload_type=PAYLOAD_TYPE)
            statement = _statement(opened.body)
            digest = _subject_digest(statement)
        except (EnvelopeError, CertificateError) as problem:
            failures.append(str(problem))
            continue
        if chosen is None or digest == actual:
            chosen = (Attested(opened.keyid, statement, None), digest)
        if actual is None or digest == actual:
            break
    if chosen is None:
        if not failures:
            raise CertificateError(f"{attestation} holds no DSSE envelope")
        raise CertificateError("; ".join(dict.fromkeys(failures)))
    attested, digest = chosen
    if report is not None:
        _check_report(attested, digest, report)
    installed = load().digest
    if attested.predicate["contract"].get("digest") != digest_set(installed):
        # A run judged against other contract data certifies nothing about this installation's contract.
        raise CertificateError(f"the attested contract data differ from this installation's ({installed})")
    return attested


def _server_line(per_era: Any) -> str:
    """The identity the target gave, once when every era agrees, else per era."""
    if not isinstance(per_era, dict):
        return ""
    named = {era: f"{info.get('name', '?')} {info.get('version', '')}".strip()
             for era, info in per_era.items() if isinstance(info, dict)}
    if len(set(named.values())) == 1:
        return next(iter(named.values()))
    return "; ".join(f"{era}: {text}" for era, text in named.items())


def describe(attested: Attested) -> list[str]:
    """What the certificate attests, one fact a line."""
    p = attested.predicate
    digest = _subject_digest(attested.statement)
    server = p["target"].get("server") or {}
    eras = p["eras"]
    profile = p["profile"]
    profile_digest = profile.get("digest") or {}
    lines = [
        f"signature: valid (Ed25519, keyid {attested.keyid or 'not given'})",
        f"statement: {STATEMENT_TYPE}, predicate {PREDICATE_TYPE}",
        (f"subject: {REPORT_FILE} sha256:{digest} — matches {attested.report}" if attested.report is not None
         else f"subject: {REPORT_FILE} sha256:{digest} — NOT CHECKED (--no-report)"),
        f"contract: {p['contract'].get('name', '')} {p['contract'].get('version', '')} "
        f"(sha256:{(p['contract'].get('digest') or {}).get('sha256', '?')})",
        f"harness: {p['harness'].get('name', '')} {p['harness'].get('version', '?')}",
        f"target: {p['target'].get('label')} (transport {p['target'].get('transport')})",
        "server: " + (_server_line(server) or "not stated"),
        "profile: " + (f"sha256:{profile_digest['sha256']}" if profile_digest.get("sha256")
                       else ("given, digest not stated" if profile.get("given") else "none")),
        f"level: {p['level']}; eras: {', '.join(eras.get('spoken') or []) or 'none'} "
        f"(asked: {', '.join(eras.get('asked') or [])}); transports: {', '.join(p['transports'])}",
        f"seed: {p['seed']}; selection: {', '.join(p.get('selection') or []) or 'none (full run)'}"
        + ("; deep" if p.get("deep") else "") + ("; strict" if p.get("strict") else ""),
        f"date: {p.get('startedAt') or '?'} to {p.get('finishedAt') or '?'}",
        f"{p['verdict'].get('summary', '')} (exit code {p['verdict']['exitCode']})",
    ]
    lines.extend(f"note: {note}" for note in attested.notes)
    return lines
