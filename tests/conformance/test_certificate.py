"""The signed certificate: DSSE and in-toto formats, and verification that fails on any tampering."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from engram_mcp.conformance._certificate import (
    ATTESTATION_FILE,
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    REPORT_FILE,
    STATEMENT_TYPE,
    CertificateError,
    signer_from_file,
    verifier_from_file,
    write_attestation,
)
from engram_mcp.conformance._certificate_verify import verify
from engram_mcp.conformance._checks import SOURCES_SCORED, Status
from engram_mcp.conformance._cli import main
from engram_mcp.conformance._cli_certificate import EXIT_NOT_CONFORMANT, EXIT_NOT_VERIFIED
from engram_mcp.conformance._connect import parse_target
from engram_mcp.conformance._dsse import (
    Ed25519Signer,
    Ed25519Verifier,
    EnvelopeError,
    b64decode,
    keyid_of,
    load_public_key,
    new_key_pair,
    open_envelope,
    pae,
    sign_envelope,
)
from engram_mcp.conformance._profile import Profile
from engram_mcp.conformance._report import write_reports
from engram_mcp.conformance._run import Result, Run, ServerInfo
from engram_mcp.conformance.hosts import host_from_profile
from engram_mcp.contract import load

CONFORMANCE = [sys.executable, "-m", "engram_mcp.conformance"]


# -- DSSE ---------------------------------------------------------------------------


def test_pae_matches_the_dsse_specification_vector() -> None:
    expected = b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    assert pae("http://example.com/HelloWorld", b"hello world") == expected
    # Lengths are byte counts, not character counts.
    assert pae("é", b"\xc3\xa9") == b"DSSEv1 2 \xc3\xa9 2 \xc3\xa9"


def test_verifiers_accept_standard_and_url_safe_base64_padded_or_not() -> None:
    raw = bytes(range(250, 256)) + b"\xfb\xff"
    for text in (base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode(),
                 base64.urlsafe_b64encode(raw).decode().rstrip("=")):
        assert b64decode(text) == raw
    with pytest.raises(EnvelopeError):
        b64decode("not base64!")


def _keys(directory: Path, name: str = "key.pem") -> tuple[Path, Path]:
    private, public = new_key_pair()
    (directory / name).write_bytes(private)
    (directory / (name + ".pub")).write_bytes(public)
    return directory / name, directory / (name + ".pub")


def test_the_envelope_signs_the_pae_and_an_independent_implementation_verifies_it(tmp_path: Path) -> None:
    private, public = _keys(tmp_path)
    signer = signer_from_file(private)
    envelope = sign_envelope(PAYLOAD_TYPE, b'{"a":1}', signer)
    assert set(envelope) == {"payloadType", "payload", "signatures"}
    assert envelope["signatures"][0]["keyid"] == signer.keyid
    opened = open_envelope(envelope, verifier_from_file(public), payload_type=PAYLOAD_TYPE)
    assert opened.body == b'{"a":1}'
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: the independent check of the signature did not run")
    (tmp_path / "pae.bin").write_bytes(pae(PAYLOAD_TYPE, b'{"a":1}'))
    (tmp_path / "sig.bin").write_bytes(base64.b64decode(envelope["signatures"][0]["sig"]))
    checked = subprocess.run(["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", str(public), "-rawin",
                              "-in", str(tmp_path / "pae.bin"), "-sigfile", str(tmp_path / "sig.bin")],
                             capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0 and "Success" in checked.stdout, checked.stdout + checked.stderr
    # The keyid is the SHA-256 of the DER public key, as openssl prints it.
    der = subprocess.run(["openssl", "pkey", "-pubin", "-in", str(public), "-outform", "DER"], capture_output=True,
                         timeout=30).stdout
    assert signer.keyid == hashlib.sha256(der).hexdigest()


def test_securesystemslib_verifies_the_certificate_envelope(signed: tuple[Path, Path, Path]) -> None:
    """The DSSE implementation in-toto's own tools use accepts the envelope, and rejects it once edited."""
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError
    from securesystemslib.signer import SSlibKey

    attestation, public, _ = signed
    crypto_key = load_public_key(public.read_bytes())
    key = SSlibKey.from_crypto(crypto_key, keyid=keyid_of(crypto_key))
    envelope = Envelope.from_dict(_envelope(attestation))
    assert set(envelope.verify([key], 1)) == {keyid_of(crypto_key)}
    assert envelope.payload_type == PAYLOAD_TYPE
    assert json.loads(envelope.pae().split(b" ", 4)[4])["_type"] == STATEMENT_TYPE
    assert b'"seed":7' in envelope.payload
    envelope.payload = envelope.payload.replace(b'"seed":7', b'"seed":8')
    with pytest.raises(VerificationError):
        envelope.verify([key], 1)


def test_the_payload_type_is_authenticated() -> None:
    signer = Ed25519Signer(Ed25519PrivateKey.generate())
    envelope = sign_envelope(PAYLOAD_TYPE, b"{}", signer)
    verifier = Ed25519Verifier(signer.key.public_key())
    swapped = dict(envelope, payloadType="application/json")
    with pytest.raises(EnvelopeError, match="no signature verifies"):
        open_envelope(swapped, verifier, payload_type=PAYLOAD_TYPE)
    other = sign_envelope("application/json", b"{}", signer)
    with pytest.raises(EnvelopeError, match="payload type"):
        open_envelope(other, verifier, payload_type=PAYLOAD_TYPE)


def test_the_keyid_shown_is_the_verifiers_and_an_entry_naming_another_key_is_refused() -> None:
    signer = Ed25519Signer(Ed25519PrivateKey.generate())
    envelope = sign_envelope(PAYLOAD_TYPE, b"{}", signer)
    verifier = Ed25519Verifier(signer.key.public_key())
    envelope["signatures"][0]["keyid"] = ""
    assert open_envelope(envelope, verifier, payload_type=PAYLOAD_TYPE).keyid == verifier.keyid
    envelope["signatures"][0]["keyid"] = "someone-else"
    with pytest.raises(EnvelopeError, match="no signature verifies"):
        open_envelope(envelope, verifier, payload_type=PAYLOAD_TYPE)
    assert verifier.keyid == signer.keyid == keyid_of(signer.key.public_key())


# -- a judged run, signed ------------------------------------------------------------


def _run(*, conformant: bool) -> Run:
    """A hand-made run: conformant (one passing check per observable scored MUST) or with one MUST failed."""
    profile = Profile.absent()
    host, confirmer = host_from_profile(profile)
    run = Run(target=parse_target("stdio:my-server --flag"), profile=profile, host=host, confirmer=confirmer,
              eras=("legacy", "modern"), seed=7, examples=3, strict=False, baseline=frozenset(), report_dir=None,
              timeout=1.0)
    run.server_info = {"legacy": ServerInfo("my-server", "2.1.0"), "modern": ServerInfo("my-server", "2.1.0")}
    scored = [r for r in load().requirements["requirements"] if r["level"] in ("MUST", "MUST NOT")
              and r["status"] == "established" and r["source"] in SOURCES_SCORED["contract"] and r["observable"]]
    run.results.extend(Result(f"synthetic.{r['id'].lower()}", (r["id"],), None, Status.PASS, "n", 0.0) for r in scored)
    if not conformant:
        run.results[0] = Result(run.results[0].check_id, run.results[0].requirements, "legacy", Status.FAIL, "n", 0.0,
                                "the reply was not the table's envelope")
    return run


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(attestation, public key, report) of a conformant run."""
    private, public = _keys(tmp_path)
    reports = tmp_path / "reports"
    run = _run(conformant=True)
    write_reports(run, reports)
    attestation = write_attestation(run, reports, signer_from_file(private))
    return attestation, public, reports / REPORT_FILE


def _envelope(attestation: Path) -> dict[str, Any]:
    return json.loads(attestation.read_text(encoding="utf-8").splitlines()[0])


def _statement(attestation: Path) -> dict[str, Any]:
    return json.loads(base64.b64decode(_envelope(attestation)["payload"]))


def test_the_attestation_is_an_in_toto_statement_about_report_jsonl(signed: tuple[Path, Path, Path]) -> None:
    attestation, public, report = signed
    assert attestation.name == ATTESTATION_FILE == "report.jsonl.intoto.jsonl"  # the bundle naming convention
    assert len(attestation.read_text().splitlines()) == 1  # JSON Lines: one envelope per line
    envelope = _envelope(attestation)
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    statement = _statement(attestation)
    assert statement["_type"] == STATEMENT_TYPE == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == PREDICATE_TYPE
    digest = hashlib.sha256(report.read_bytes()).hexdigest()
    assert statement["subject"] == [{"name": "report.jsonl", "digest": {"sha256": digest}}]
    predicate = statement["predicate"]
    assert predicate["contract"]["digest"] == {"sha256": load().digest.removeprefix("sha256:")}
    assert predicate["target"]["label"] == "stdio:my-server --flag"
    assert predicate["target"]["server"]["modern"] == {"name": "my-server", "version": "2.1.0"}
    assert predicate["level"] == "contract" and predicate["seed"] == 7 and predicate["transports"] == ["stdio"]
    assert predicate["eras"]["spoken"] == ["legacy", "modern"]
    assert predicate["verdict"]["conformant"] is True and predicate["verdict"]["exitCode"] == 0
    assert predicate["startedAt"].endswith("Z") and predicate["harness"]["version"]
    attested = verify(attestation, verifier_from_file(public))
    assert attested.conformant and attested.report == report


def _resign(attestation: Path, private: Path, change: Callable[[dict[str, Any]], None]) -> None:
    statement = _statement(attestation)
    change(statement)
    body = json.dumps(statement).encode()
    attestation.write_text(json.dumps(sign_envelope(PAYLOAD_TYPE, body, signer_from_file(private))) + "\n")


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(statement: dict[str, Any]) -> None:
        node = statement
        *parents, last = path.split(".")
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(last) if isinstance(node, list) else last] = value
    return change


BOUND_FIELDS = {
    "_type": "https://in-toto.io/Statement/v0.1",
    "predicateType": "https://example.invalid/other/v1",
    "subject.0.digest.sha256": "0" * 64,
    "subject.0.name": "other.jsonl",
    "predicate.contract.digest.sha256": "1" * 64,
    "predicate.harness.version": "9.9.9",
    "predicate.level": "profile",
    "predicate.target.label": "stdio:another-server",
    "predicate.target.server": {"legacy": {"name": "forged", "version": "1"}},
    "predicate.profile.digest": {"sha256": "2" * 64},
    "predicate.eras.spoken": ["legacy"],
    "predicate.transports": ["streamable-http"],
    "predicate.seed": 8,
    "predicate.selection": ["discovery"],
    "predicate.startedAt": "2020-01-01T00:00:00Z",
    "predicate.verdict.conformant": False,
    "predicate.verdict.exitCode": 1,
    "predicate.verdict.summary": "VERDICT: not conformant (a MUST failed)",
}


@pytest.mark.parametrize("path", sorted(BOUND_FIELDS))
def test_changing_any_bound_field_breaks_the_signature(signed: tuple[Path, Path, Path], path: str) -> None:
    attestation, public, _ = signed
    envelope = _envelope(attestation)
    statement = _statement(attestation)
    _set(path, BOUND_FIELDS[path])(statement)
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    attestation.write_text(json.dumps(envelope) + "\n")
    with pytest.raises(CertificateError, match="no signature verifies"):
        verify(attestation, verifier_from_file(public))
    assert main(["verify-certificate", str(attestation), "--key", str(public)]) == EXIT_NOT_VERIFIED


def test_a_changed_signature_or_payload_type_fails(signed: tuple[Path, Path, Path]) -> None:
    attestation, public, _ = signed
    original = attestation.read_text()
    envelope = json.loads(original)
    sig = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
    sig[10] ^= 1
    envelope["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    attestation.write_text(json.dumps(envelope) + "\n")
    with pytest.raises(CertificateError, match="no signature verifies"):
        verify(attestation, verifier_from_file(public))
    attestation.write_text(json.dumps(dict(json.loads(original), payloadType="application/vnd.in-toto.x+json")) + "\n")
    with pytest.raises(CertificateError, match="no signature verifies"):
        verify(attestation, verifier_from_file(public))
    attestation.write_text(json.dumps(dict(json.loads(original), signatures=[])) + "\n")
    with pytest.raises(CertificateError, match="no signature verifies"):
        verify(attestation, verifier_from_file(public))


def test_a_changed_report_fails(signed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    attestation, public, report = signed
    lines = report.read_text().splitlines()
    footer = json.loads(lines[-1])
    footer["exit_code"] = 1
    for changed in (report.read_text() + "\n", report.read_text().replace("PASS", "FAIL", 1),
                    "\n".join([*lines[:-1], json.dumps(footer, sort_keys=True)]) + "\n"):
        report.write_text(changed)
        with pytest.raises(CertificateError, match="does not match the attested subject"):
            verify(attestation, verifier_from_file(public))
    # Given explicitly, elsewhere: the same check.
    elsewhere = tmp_path / "copy.jsonl"
    elsewhere.write_text("{}\n")
    with pytest.raises(CertificateError, match="does not match"):
        verify(attestation, verifier_from_file(public), elsewhere)
    assert main(["verify-certificate", str(attestation), "--key", str(public), "--report", str(elsewhere)]) \
        == EXIT_NOT_VERIFIED


def test_another_key_does_not_verify(signed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    attestation, _, _ = signed
    _, stranger = _keys(tmp_path, "stranger.pem")
    with pytest.raises(CertificateError, match="no signature verifies"):
        verify(attestation, verifier_from_file(stranger))


def test_a_statement_re_signed_by_the_key_still_has_to_agree_with_the_report(signed: tuple[Path, Path, Path]) -> None:
    """The key holder cannot attest a verdict the report it names does not state."""
    attestation, public, _ = signed
    private = public.with_name("key.pem")
    _resign(attestation, private, _set("predicate.verdict.exitCode", 5))
    with pytest.raises(CertificateError, match="disagree on: exit_code"):
        verify(attestation, verifier_from_file(public))
    _resign(attestation, private, _set("predicate.verdict.exitCode", 0))
    _resign(attestation, private, _set("predicate.target.label", "stdio:elsewhere"))
    with pytest.raises(CertificateError, match="disagree on: target"):
        verify(attestation, verifier_from_file(public))


@pytest.mark.parametrize("path", ["_type", "predicateType", "subject.0.name", "subject.0.digest.sha256"])
def test_a_statement_of_another_kind_is_refused_even_when_signed(signed: tuple[Path, Path, Path], path: str) -> None:
    attestation, public, _ = signed
    value = BOUND_FIELDS[path] if path != "subject.0.digest.sha256" else "not-hex"
    _resign(attestation, public.with_name("key.pem"), _set(path, value))
    with pytest.raises(CertificateError):
        verify(attestation, verifier_from_file(public))


def test_verify_certificate_prints_what_it_attests(signed: tuple[Path, Path, Path],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    attestation, public, report = signed
    assert main(["verify-certificate", str(attestation), "--key", str(public)]) == 0
    out = capsys.readouterr().out
    assert f"matches {report}" in out
    assert "target: stdio:my-server --flag" in out and "server: my-server 2.1.0" in out
    assert "level: contract; eras: legacy, modern" in out and "seed: 7" in out
    assert "VERDICT: conformant to contract 1.0.0 at the contract level (exit code 0)" in out
    assert out.rstrip().endswith("VERIFIED: a certificate of conformance")
    # --no-report means no report, even one lying beside the attestation: never VERIFIED
    assert main(["verify-certificate", str(attestation), "--key", str(public), "--no-report"]) == 0
    beside = capsys.readouterr().out
    assert "NOT CHECKED" in beside and f"matches {report}" not in beside
    assert not beside.rstrip().endswith("VERIFIED: a certificate of conformance"), beside
    report.unlink()  # without the report, the subject is not checked, and the output says so
    assert main(["verify-certificate", str(attestation), "--key", str(public), "--no-report"]) == 0
    assert "NOT CHECKED" in capsys.readouterr().out


def test_verify_certificate_speaks_json_for_scripts(signed: tuple[Path, Path, Path],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    attestation, public, report = signed
    assert main(["verify-certificate", str(attestation), "--key", str(public), "--format", "json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["verified"] is True and said["conformant"] is True and said["exit_code"] == 0
    assert said["report"] == str(report) and said["statement"]["predicate"]["seed"] == 7 and said["error"] is None
    report.write_text(report.read_text() + "\n")
    assert main(["verify-certificate", str(attestation), "--key", str(public), "--format", "json"]) == EXIT_NOT_VERIFIED
    said = json.loads(capsys.readouterr().out)
    assert said["verified"] is False and said["statement"] is None and "does not match" in said["error"]


def test_an_authentic_attestation_of_a_failing_run_is_no_certificate(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    private, public = _keys(tmp_path)
    run = _run(conformant=False)
    write_reports(run, tmp_path / "r")
    attestation = write_attestation(run, tmp_path / "r", signer_from_file(private))
    assert main(["verify-certificate", str(attestation), "--key", str(public)]) == EXIT_NOT_CONFORMANT
    out = capsys.readouterr().out
    assert "VERDICT: not conformant (a MUST failed) (exit code 1)" in out
    assert "NOT A CERTIFICATE" in out


def test_unreadable_keys_and_files_are_usage_errors(signed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    attestation, public, _ = signed
    (tmp_path / "rsa.pem").write_bytes(subprocess.run(
        ["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024"],
        capture_output=True, timeout=60).stdout if shutil.which("openssl") else b"garbage")
    assert main(["verify-certificate", str(attestation), "--key", str(tmp_path / "rsa.pem")]) == 2
    assert main(["verify-certificate", str(attestation), "--key", str(tmp_path / "missing.pem")]) == 2
    assert main(["verify-certificate", str(tmp_path / "missing.json"), "--key", str(public)]) == 2
    assert main(["verify-certificate", str(attestation)]) == 2  # --key is required
    (tmp_path / "empty.jsonl").write_text("not json\n")
    assert main(["verify-certificate", str(tmp_path / "empty.jsonl"), "--key", str(public)]) == EXIT_NOT_VERIFIED


def test_a_pretty_printed_single_envelope_verifies_too(signed: tuple[Path, Path, Path]) -> None:
    attestation, public, _ = signed
    single = attestation.with_name("certificate.json")
    single.write_text(json.dumps(_envelope(attestation), indent=2))
    assert verify(single, verifier_from_file(public)).conformant


def test_keygen_writes_a_private_key_only_its_owner_reads_and_never_overwrites(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "signing.pem"
    assert main(["keygen", str(key)]) == 0
    assert key.stat().st_mode & 0o777 == 0o600
    assert verifier_from_file(key.with_name("signing.pem.pub")).keyid in capsys.readouterr().out
    before = key.read_bytes()
    assert main(["keygen", str(key)]) == 2
    assert key.read_bytes() == before


# -- the command, end to end ---------------------------------------------------------


def test_sign_key_needs_a_report_dir_and_a_readable_ed25519_key(tmp_path: Path) -> None:
    private, _ = _keys(tmp_path)
    assert main(["--target", "stdio:x", "--sign-key", str(private)]) == 2
    (tmp_path / "bad.pem").write_text("nope")
    # Refused before the run starts: the target here could not even be started.
    assert main(["--target", "stdio:/nonexistent", "--sign-key", str(tmp_path / "bad.pem"),
                 "--report-dir", str(tmp_path / "r")]) == 2


def test_a_real_run_signed_from_the_command_line_verifies(tmp_path: Path) -> None:
    """`python -m engram_mcp.conformance` on the reference, partial (one check family) to stay quick."""
    private, public = _keys(tmp_path)
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / ATTESTATION_FILE).write_text("a stale attestation\n")
    ran = subprocess.run([*CONFORMANCE, "--target", "reference", "--select", "discovery", "--era", "modern",
                          "--report-dir", str(reports), "--sign-key", str(private)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert ran.returncode == 5, ran.stdout[-2000:] + ran.stderr[-2000:]  # a partial run: incomplete
    assert f"signed: {reports / ATTESTATION_FILE}" in ran.stdout
    # The hint names the public key keygen wrote beside the private one.
    assert f"verify-certificate {reports / ATTESTATION_FILE} --key {public}`" in ran.stdout
    checked = subprocess.run([*CONFORMANCE, "verify-certificate", str(reports / ATTESTATION_FILE),
                              "--key", str(public)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert checked.returncode == EXIT_NOT_CONFORMANT, checked.stdout + checked.stderr
    assert "signature: valid" in checked.stdout and "selection: discovery" in checked.stdout
    assert "server: engram-reference" in checked.stdout and "transports: stdio" in checked.stdout
    predicate = _statement(reports / ATTESTATION_FILE)["predicate"]
    assert predicate["profile"]["given"] and len(predicate["profile"]["digest"]["sha256"]) == 64
    assert predicate["eras"]["asked"] == ["modern"]
    # The bundled reference is attested by a stable name, never by the scratch directory it was served from.
    assert predicate["target"]["label"] == f"reference ({predicate['target']['server']['modern']['name']} "\
                                           f"{predicate['target']['server']['modern']['version']})"
    assert f"target: {predicate['target']['label']} (transport stdio)" in checked.stdout


@pytest.mark.slow
def test_a_full_signed_run_of_the_reference_is_a_verified_certificate(tmp_path: Path) -> None:
    private, public = _keys(tmp_path)
    ran = subprocess.run([*CONFORMANCE, "--target", "reference", "--report-dir", str(tmp_path / "r"),
                          "--sign-key", str(private)], capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    checked = subprocess.run([*CONFORMANCE, "verify-certificate", str(tmp_path / "r" / ATTESTATION_FILE),
                              "--key", str(public)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "VERIFIED: a certificate of conformance" in checked.stdout


# -- review fixes: what the key, the report and the contract must bind ----------------


def test_a_raw_stdio_target_does_not_inherit_the_harness_environment(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from engram_mcp.conformance._connect import Target
    from engram_mcp.conformance._raw import RawSession

    monkeypatch.setenv("SIGN_KEY", "-----BEGIN PRIVATE KEY-----")
    seen = tmp_path / "seen"
    probe = ("import os, sys; open(sys.argv[1], 'w').write(os.environ.get('SIGN_KEY', 'absent') + ' ' "
             "+ os.environ.get('NAMED', 'absent'))")
    for named, expected in (({}, "absent absent"), ({"NAMED": "yes"}, "absent yes")):
        session = RawSession(Target("stdio", command=(sys.executable, "-c", probe, str(seen)), env=named),
                             "modern", 5.0)
        session.open()
        assert session._process is not None
        session._process.wait(timeout=20)
        session.close()
        assert seen.read_text() == expected  # the variables the target names, and none of the harness's


def test_verify_certificate_without_a_report_is_not_verified(signed: tuple[Path, Path, Path],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    attestation, public, report = signed
    report.unlink()
    assert main(["verify-certificate", str(attestation), "--key", str(public)]) == EXIT_NOT_VERIFIED
    out = capsys.readouterr().out
    assert "NOT VERIFIED" in out and "no report was checked" in out
    assert main(["verify-certificate", str(attestation), "--key", str(public), "--no-report"]) == 0
    out = capsys.readouterr().out
    assert "NOT CHECKED" in out and "VERIFIED: a certificate of conformance" not in out


def test_in_a_bundle_the_envelope_of_the_report_is_chosen(signed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    attestation, public, report = signed
    private = tmp_path / "key.pem"
    mine = attestation.read_text()
    other = _statement(attestation)
    other["subject"][0]["digest"]["sha256"] = "0" * 64
    other["predicate"]["seed"] = 99
    first = json.dumps(sign_envelope(PAYLOAD_TYPE, json.dumps(other).encode(), signer_from_file(private)))
    attestation.write_text(first + "\n" + mine)
    attested = verify(attestation, verifier_from_file(public))
    assert attested.report == report and attested.predicate["seed"] == 7


def test_a_rewritten_keyid_is_not_shown_as_valid(signed: tuple[Path, Path, Path],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    attestation, public, _ = signed
    envelope = _envelope(attestation)
    envelope["signatures"][0]["keyid"] = "someone-trusted"
    attestation.write_text(json.dumps(envelope) + "\n")
    assert main(["verify-certificate", str(attestation), "--key", str(public)]) == EXIT_NOT_VERIFIED
    assert "someone-trusted" not in capsys.readouterr().out
    envelope["signatures"][0]["keyid"] = ""  # no hint at all: the verifier's own keyid is shown
    attestation.write_text(json.dumps(envelope) + "\n")
    assert main(["verify-certificate", str(attestation), "--key", str(public)]) == 0
    assert f"keyid {verifier_from_file(public).keyid})" in capsys.readouterr().out


def test_another_contract_digest_is_not_verified(signed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    attestation, public, report = signed
    _resign(attestation, tmp_path / "key.pem", _set("predicate.contract.digest.sha256", "1" * 64))
    report.unlink()  # a run judged elsewhere against other contract data: the signature and statement hold
    with pytest.raises(CertificateError, match="contract data differ"):
        verify(attestation, verifier_from_file(public))


def test_the_json_summary_is_not_conformant_when_signing_failed() -> None:
    from engram_mcp.conformance._cli import summary_json

    run = _run(conformant=True)
    assert summary_json(run, 0, None)["conformant"] is True
    failed_signing = summary_json(run, 3, None)  # the run passed but the asked-for attestation was not written
    assert failed_signing["conformant"] is False and failed_signing["exit_code"] == 3


@pytest.mark.parametrize("conformant", [True, False])
def test_the_predicate_rebuilt_from_the_report_is_the_runs(tmp_path: Path, conformant: bool) -> None:
    from datetime import UTC, datetime

    from engram_mcp.conformance._certificate import predicate_of
    from engram_mcp.conformance._certificate_sign import predicate_from_report

    run = _run(conformant=conformant)
    run.started_at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    run.finished_at = datetime(2026, 1, 2, 3, 5, 6, tzinfo=UTC)
    run.unsupported_eras = {"legacy": "refused"}
    write_reports(run, tmp_path)
    assert predicate_from_report((tmp_path / REPORT_FILE).read_bytes()) == predicate_of(run)


def test_sign_after_the_run_writes_a_certificate_that_verifies(signed: tuple[Path, Path, Path], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    attestation, public, report = signed
    attestation.unlink()
    capsys.readouterr()
    assert main(["sign", str(report.parent), "--key", str(tmp_path / "key.pem")]) == 0
    assert f"`conformance verify-certificate {attestation} --key {public}`" in capsys.readouterr().out
    assert verify(attestation, verifier_from_file(public)).conformant
    assert main(["sign", str(report.parent), "--key", str(public)]) == 2  # not a private key
    report.write_text('{"type": "header"}\n')
    assert main(["sign", str(report.parent), "--key", str(tmp_path / "key.pem")]) == 1
    assert main(["sign", str(tmp_path / "nowhere"), "--key", str(tmp_path / "key.pem")]) == 2


def test_an_unreadable_attestation_or_report_is_a_usage_error(signed: tuple[Path, Path, Path],
                                                              tmp_path: Path) -> None:
    attestation, public, _ = signed
    assert main(["verify-certificate", str(attestation), "--key", str(public), "--report", str(tmp_path)]) == 2
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00not text")
    assert main(["verify-certificate", str(binary), "--key", str(public)]) == 2


def test_keygen_never_overwrites_an_existing_public_key(tmp_path: Path) -> None:
    key = tmp_path / "signing.pem"
    public = key.with_name("signing.pem.pub")
    public.write_text("someone's published key\n")
    assert main(["keygen", str(key)]) == 2
    assert public.read_text() == "someone's published key\n" and not key.exists()


def test_without_its_public_key_beside_it_the_hint_says_what_keygen_names_it(tmp_path: Path) -> None:
    from engram_mcp.conformance._certificate import signed_line

    line = signed_line(tmp_path / ATTESTATION_FILE, "abc", tmp_path / "ci-signing.pem")
    assert "--key PUBLIC_KEY`" in line and "ci-signing.pem.pub" in line


def test_the_bundled_reference_is_attested_by_a_stable_name_not_its_scratch_directory(tmp_path: Path) -> None:
    from engram_mcp.conformance._certificate import predicate_of
    from engram_mcp.conformance._certificate_sign import predicate_from_report
    from engram_mcp.conformance._cli_run import reference_target as _reference_target
    from engram_mcp.conformance._verdicts import identity

    def reference_run(scratch: str) -> Run:
        label, _ = _reference_target(tmp_path / scratch / "reference")
        run = _run(conformant=True)
        run.target = parse_target(label)
        return run

    first, second = reference_run("engram-conformance-a1"), reference_run("engram-conformance-b2")
    first.finished_at = first.started_at
    assert first.target.label != second.target.label  # two scratch directories
    assert predicate_of(first)["target"] == predicate_of(second)["target"]
    assert predicate_of(first)["target"]["label"] == identity(first)["target"] == "reference (my-server 2.1.0)"
    write_reports(first, tmp_path / "r")
    assert predicate_from_report((tmp_path / "r" / REPORT_FILE).read_bytes()) == predicate_of(first)
    first.server_info = {}
    assert first.target_identity == "reference"  # a server that gave no name
    assert _run(conformant=True).target_identity == "stdio:my-server --flag"  # any other target: its command
