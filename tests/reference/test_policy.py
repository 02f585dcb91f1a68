"""The reference admission policies, above all the secret scan that keeps §4 material out of the store.

Every secret below is fake and assembled from parts at run time (``fake(...)``),
so the repository never holds a string that a secret scanner, or this policy
run over the sources, would flag.
"""

from __future__ import annotations

import base64
import copy
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from engram_mcp.reference import _policy
from engram_mcp.reference._policy import (
    DEFAULT_POLICY,
    PATTERNS,
    POLICIES,
    AcceptAll,
    AlwaysAdjudicate,
    RejectAll,
    SecretScan,
    policy_named,
)
from engram_mcp.reference._ports import AdmissionDecision, CandidateView, Decision

SCAN = SecretScan()


def fake(*parts: str) -> str:
    return "".join(parts)


def b64url(data: str) -> str:
    return base64.urlsafe_b64encode(data.encode()).rstrip(b"=").decode()


ALNUM36 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
AKIA = fake("AK", "IA", "ABCDEFGHIJKLMNOP")
BEGIN = fake("-----", "BEGIN ")
JWT = ".".join(
    (b64url('{"alg":"HS256","typ":"JWT"}'), b64url('{"sub":"fake-user"}'), b64url("fake-signature-not-real"))
)


def capture(text: str = "We chose SQLite for the embedded store.") -> CandidateView:
    """A schema-shaped capture whose only free text is ``text``."""
    digest = "sha256:" + "0" * 64
    payload = {
        "schema_version": 2,
        "purpose_ref": "purpose:architecture",
        "valid_time": {"t": 1_700_000_000_000},
        "components": [{"component_id": "c1", "kind": "decision", "text": text, "citation_ids": ["k1"]}],
        "primary_component_id": "c1",
        "primary_event": {"at": 1_700_000_000_000, "type_ref": "event:decided", "citation_id": "k1"},
        "citations": [
            {
                "citation_id": "k1",
                "source_ref": "doc:adr-0007",
                "locator": {"scheme": "line", "value": "12"},
                "content_digest": digest,
            }
        ],
        "reconciliation": {"family_refs": ["family:storage"]},
    }
    evidence = {
        "evidence_ref": "evidence:review-1",
        "evidence_digest": digest,
        "citation_ids": ["k1"],
        "attestation": "reviewed",
    }
    return CandidateView(payload=payload, evidence=evidence)


# (expected family, text). At least one sample per family, several variants each.
POSITIVE: list[tuple[str, str]] = [
    ("private_key", fake(BEGIN, "RSA PRIVATE KEY-----\nMIIEfakefakefake\n-----END RSA PRIVATE KEY-----")),
    ("private_key", fake("Deploy key:\n", BEGIN, "OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1mYWtl\n")),
    ("private_key", fake(BEGIN, "PRIVATE KEY-----")),
    ("private_key", fake(BEGIN, "EC PRIVATE KEY-----")),
    ("private_key", fake(BEGIN, "ENCRYPTED PRIVATE KEY-----")),
    ("private_key", fake(BEGIN, "PGP PRIVATE KEY BLOCK-----")),
    ("aws_access_key_id", f"The CI user has key {AKIA} attached."),
    ("aws_access_key_id", fake("aws_access_key_id = AS", "IA", "ABCDEFGHIJKLMNOP")),
    ("aws_access_key_id", f'{{"AccessKeyId": "{AKIA}"}}'),
    ("github_token", fake("gh", "p_", ALNUM36)),
    ("github_token", fake("use gh", "o_", ALNUM36, " for the OAuth app")),
    ("github_token", fake("gh", "u_", ALNUM36)),
    ("github_token", fake("gh", "s_", ALNUM36)),
    ("github_token", fake("gh", "r_", ALNUM36)),
    (
        "github_token",
        fake("github", "_pat_", "11ABCDEFG0123456789_", "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVW"),
    ),
    ("slack_token", fake("xo", "xb-", "123456789012-1234567890123-", "ABCDEFGHIJKLMNOPQRSTUVWX")),
    ("slack_token", fake("xo", "xp-", "123456789012-1234567890123-1234567890123-abcdef")),
    ("slack_token", fake("xo", "xa-", "2-123456789012-abcdefabcdef")),
    ("slack_token", fake("xo", "xr-", "fake0123456789refresh")),
    ("stripe_secret_key", fake("sk", "_live_", "0123456789abcdefABCDEFGH")),
    ("stripe_secret_key", fake("restricted: rk", "_live_", "0123456789abcdefABCDEFGH")),
    ("google_api_key", fake("AI", "za", "SyFAKE0123456789-FAKE0123456789_abc")),
    (
        "google_api_key",
        fake("https://maps.example.com/geocode?key=AI", "za", "SyFAKE0123456789-FAKE0123456789_abc&q=x"),
    ),
    ("openai_style_key", fake("s", "k-", ALNUM36, "abcdefghijkl")),
    ("openai_style_key", fake("OPENAI key s", "k-proj-", "fAkE0123456789fAkE0123456789")),
    ("openai_style_key", fake("s", "k-ant-api03-", "fAkE0123456789fAkE0123456789-AA")),
    ("jwt", JWT),
    ("jwt", f'{{"id_token": "{JWT}"}}'),
    ("authorization_header", "Authorization: Bearer abcdef0123456789ABCDEF"),
    (
        "authorization_header",
        fake("curl -H 'Authorization: Basic ", b64url("user:password"), "' https://api.example.com"),
    ),
    ("authorization_header", "authorization: token 0123456789abcdef0123456789abcdef01234567"),
    ("authorization_header", '{"Authorization": "Bearer abc123def456ghi789"}'),
    ("bearer_token", "Call it with Bearer 0123456789abcdefABCDEF0123 in the header."),
    ("bearer_token", fake("-H 'X-Auth: bearer ", b64url("fake-bearer-token-001"), "'")),
    ("credentials_url", "postgres://app:s3cretPass@db.internal:5432/app"),
    ("credentials_url", "postgresql://app:hunter2xyz@10.0.0.5/app"),
    ("credentials_url", "mysql://root:toor1234@localhost:3306/mysql"),
    ("credentials_url", "mongodb+srv://admin:Fak3Passw0rd@cluster0.example.net/db"),
    ("credentials_url", "redis://:redispass99@cache:6379/0"),
    ("credentials_url", "amqp://guest:guest@rabbit:5672/"),
    ("credentials_url", "git remote add origin https://deploy:fake-token-123@git.example.com/org/repo.git"),
    ("credentials_url", "jdbc:mysql://svc:Pa55word@db:3306/x"),
    ("password_assignment", "password: hunter2xyz"),
    ("password_assignment", "password=hunter2xyz"),
    ("password_assignment", '{"password": "hunter2"}'),
    ("password_assignment", "passwd=Tr0ub4dor&3"),
    ("password_assignment", "pwd=s3cr3t!"),
    ("password_assignment", "secret=Zm9vYmFyYmF6"),
    ("password_assignment", "api_key=0123456789abcdef"),
    ("password_assignment", 'apikey: "abcdef123456"'),
    ("password_assignment", "https://example.com/callback?token=abc123def456&next=/"),
    ("password_assignment", "client_secret = 'fake-client-secret-value'"),
    ("password_assignment", "'password' => 'hunter2'"),
    ("password_assignment", "Server=db;Database=app;User Id=sa;Password=MyFakePass123;"),
    ("password_assignment", "db.password=hunter2xyz"),
    ("password_assignment", "X-Api-Key: 9f8e7d6c5b4a39281706"),
    ("password_assignment", "PASSWORD: Summer2024!"),
    ("env_secret", "DB_PASSWORD=hunter2xyz"),
    ("env_secret", "export GITHUB_TOKEN=not-a-real-value-42"),
    ("env_secret", "STRIPE_SECRET_KEY=not-a-real-key-0001"),
    ("env_secret", "SMTP_PASS=mailpass2024"),
    ("env_secret", "SECRET_KEY_BASE=0123456789abcdef0123456789abcdef"),
    ("env_secret", "AWS_SECRET_ACCESS_KEY=fAkEfAkEfAkE0123456789/fAkEfAkEfAkE+0123"),
    ("env_secret", 'GOOGLE_APPLICATION_CREDENTIALS=\'{"type": "service_account"}\''),
    ("env_secret", "# app\nNODE_ENV=production\n  JWT_SECRET=rotate-me-in-prod-7\n"),
    ("session_cookie", "Cookie: theme=dark; sessionid=0a1b2c3d4e5f6a7b8c9d"),
    ("session_cookie", "Set-Cookie: PHPSESSID=fake0123456789abcdef; path=/; HttpOnly"),
    ("session_cookie", "Set-Cookie: JSESSIONID=FAKE0123456789ABCDEF; Path=/app"),
    ("session_cookie", "cookie: connect.sid=s%3Afake.signature123"),
    ("session_cookie", "Cookie: ASP.NET_SessionId=fakesessionid0123456789"),
    ("session_cookie", "Set-Cookie: laravel_session=fakeValue123; path=/"),
    ("session_cookie", "Cookie: sid=31d4d96e407aad42"),
    ("host_binding", "sentropic.engram.memory/host-binding: hb1.fAkEbInDiNg0123456789"),
    ("host_binding", '{"_meta": {"sentropic.engram.memory/host-binding": "hb_0123456789abcdef"}}'),
]

# Prose, identifiers and placeholders that mention secrets without carrying one.
BENIGN: list[str] = [
    "We rotate the password monthly, per the password policy.",
    "Token bucket rate limiting caps each client at 100 requests per minute.",
    "The API key rotation runbook lives in docs/runbooks/api-keys.md.",
    "See https://example.com/docs/auth?lang=en#tokens for the details.",
    "Clone https://github.com/example/engram.git and run make.",
    "Artifact digest sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08.",
    "Request id 3f2504e0-4f89-11d3-9a0c-0305e82c3301 failed once.",
    "The value aGVsbG8gd29ybGQ= is base64 for hello world, VGhlIHF1aWNrIGJyb3duIGZveA== for a fox.",
    # A name that ends in a qualifier (_COUNT, _SECONDS, _LENGTH) is about a secret, not one.
    "MAX_TOKEN_COUNT=5",
    "TOKEN_TTL_SECONDS=3600",
    "PASSWORD_MIN_LENGTH=12",
    "DB_PASSWORD=${DB_PASSWORD}",
    "API_KEY=<your-api-key>",
    "password = os.environ['DB_PASSWORD']",
    "conn = connect(user=user, password=password)",
    "postgres://db.internal:5432/app",
    "Email alice@example.com about the git@github.com:example/repo.git remote.",
    "Password: required for all admin accounts.",
    "The session cookie is HttpOnly and Secure; its name is sessionid.",
    "Set-Cookie: theme=dark; Path=/; SameSite=Lax",
    "Bearer tokens expire after one hour.",
    "Send Authorization: Bearer <token> with each call.",
    "Ticket SK-1234 tracks the sk-learn-style-naming-for-branches cleanup.",
    'JWTs start with eyJ because that is base64 for {".',
    "GOOGLE_APPLICATION_CREDENTIALS=/etc/gcp/service-account.json",
    fake(BEGIN, "PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----"),
    fake(BEGIN, "CERTIFICATE-----"),
    "The host sets the sentropic.engram.memory/host-binding meta key on every call.",
    "aws_region=eu-west-3",
    "max_tokens=512 keeps responses short.",
    "token: refreshed hourly by the scheduler",
    "The secret sauce is aggressive caching.",
    "Commit 9fceb02d0ae598e95dc970b74767f19372d61af8 introduced the bug.",
    "AKIA is the prefix of long-term AWS access key ids.",
    "PHPSESSID is PHP's default session cookie name.",
    'password=""',
    "password: ********",
    "redis://localhost:6379/0",
    "http://user@example.com/ has a user but no password.",
    "export PATH=$HOME/bin:$PATH",
    fake("STRIPE_PUBLISHABLE_KEY=pk", "_live_", "0123456789abcdef"),
    "if password == confirm: proceed()",
    "The user_password_hash column stores bcrypt hashes.",
    "CSRF token rotates on each login; the X-CSRF-Token header is required.",
    "The OAuth token endpoint is /oauth/token.",
    "def fetch(api_key=None, token=get_token()):",
    "SSH_KEY_PATH=~/.ssh/id_ed25519",
    "pagination sends next_page_token=None on the last page",
    "secret: true",
    "Version 2.4.1-rc3 ships the password reset flow.",
    "PRIMARY_KEY=id",
    "SECRET_KEY=os.environ.get('SECRET_KEY')",
    "github_token: ${{ secrets.GITHUB_TOKEN }}",
    "def login(username: str, password: str) -> Token:",
    "Passwords: minimum 12 characters, rotated every 90 days.",
]


def test_the_sample_tables_are_large_enough_and_cover_every_family() -> None:
    assert len(POSITIVE) >= 40 and len(BENIGN) >= 25
    assert {family for family, _ in POSITIVE} == set(PATTERNS)


def test_the_base_capture_is_accepted() -> None:
    assert SCAN.findings(capture()) == []


@pytest.mark.parametrize(("family", "text"), POSITIVE, ids=[f"{f}-{i}" for i, (f, _) in enumerate(POSITIVE)])
def test_secret_is_rejected_with_its_family(family: str, text: str) -> None:
    candidate = capture(text)
    findings = SCAN.findings(candidate)
    assert family in findings
    assert SCAN.decide(candidate) == AdmissionDecision("reject", "reference/secret-scan", "1")


@pytest.mark.parametrize("text", BENIGN)
def test_benign_text_is_accepted(text: str) -> None:
    candidate = capture(text)
    assert SCAN.findings(candidate) == []
    assert SCAN.decide(candidate) == AdmissionDecision("accept", "reference/secret-scan", "1")


def _unfiltered(candidate: CandidateView) -> list[str]:
    texts = [*_policy._strings(candidate.payload), *_policy._strings(candidate.evidence)]
    return [name for name, pattern in PATTERNS.items() if any(_policy._matches(pattern, t) for t in texts)]


@pytest.mark.parametrize("case", [str.lower, str.upper, str.title, str.swapcase], ids=lambda f: f.__name__)
def test_skipping_families_by_their_fragments_never_changes_the_findings(case: Callable[[str], str]) -> None:
    assert set(_policy._NEEDS) == set(PATTERNS)
    for text in [t for _, t in POSITIVE] + BENIGN:
        for variant in (text, case(text)):
            candidate = capture(variant)
            assert SCAN.findings(candidate) == _unfiltered(candidate), variant


def test_findings_name_families_never_content() -> None:
    text = "\n".join(t for _, t in POSITIVE)
    findings = SCAN.findings(capture(text))
    assert findings == [name for name in PATTERNS if name in findings]  # table order, no repeats
    assert set(findings) == set(PATTERNS)
    for _, secret in POSITIVE:
        assert all(secret not in f for f in findings)


def _set(path: tuple[str | int, ...]) -> Callable[[CandidateView, str], CandidateView]:
    root, *rest = path

    def put(candidate: CandidateView, value: str) -> CandidateView:
        tree = {"payload": copy.deepcopy(candidate.payload), "evidence": copy.deepcopy(candidate.evidence)}
        node: Any = tree[str(root)]
        for step in rest[:-1]:
            node = node[step]
        node[rest[-1]] = value
        return CandidateView(payload=tree["payload"], evidence=tree["evidence"])

    return put


FIELDS = [
    ("payload", "purpose_ref"),
    ("payload", "primary_component_id"),
    ("payload", "components", 0, "component_id"),
    ("payload", "components", 0, "citation_ids", 0),
    ("payload", "primary_event", "type_ref"),
    ("payload", "citations", 0, "source_ref"),
    ("payload", "citations", 0, "locator", "scheme"),
    ("payload", "citations", 0, "locator", "value"),
    ("payload", "reconciliation", "family_refs", 0),
    ("evidence", "evidence_ref"),
    ("evidence", "attestation"),
    ("evidence", "citation_ids", 0),
]


@pytest.mark.parametrize("path", FIELDS, ids=["/".join(map(str, p)) for p in FIELDS])
def test_every_string_in_the_capture_is_scanned(path: tuple[str | int, ...]) -> None:
    candidate = _set(path)(capture(), f"ref:{AKIA}")
    assert SCAN.findings(candidate) == ["aws_access_key_id"]
    assert SCAN.decide(candidate).decision == "reject"


def test_a_secret_named_only_by_its_key_is_found() -> None:
    base = capture()
    evidence = {**base.evidence, "sentropic.engram.memory/host-binding": "hb_0123456789abcdef", "password": "hunter2"}
    assert SCAN.findings(CandidateView(payload=base.payload, evidence=evidence)) == [
        "password_assignment",
        "host_binding",
    ]


def test_a_real_value_after_a_placeholder_is_still_found() -> None:
    assert SCAN.findings(capture("password=<your-password>, later: password=hunter2xyz")) == ["password_assignment"]


def test_full_width_look_alikes_are_normalised() -> None:
    assert "password_assignment" in SCAN.findings(capture("ｐａｓｓｗｏｒｄ＝ｈｕｎｔｅｒ２ｘｙｚ"))


def test_json_round_trip_does_not_change_the_verdict() -> None:
    candidate = capture("DB_PASSWORD=hunter2xyz")
    again = json.loads(json.dumps({"p": candidate.payload, "e": candidate.evidence}))
    assert SCAN.findings(CandidateView(again["p"], again["e"])) == SCAN.findings(candidate)


@pytest.mark.parametrize(
    "text",
    [
        "a_" * 32_768,
        "a." * 32_768,
        "cookie:" * 9_000,
        "password " * 7_000,
        "sk-" * 20_000,
        "eyJ" * 20_000 + "." * 1_000,
        "x://" * 16_000,
        "A_" * 32_768 + "=",
        "-" * 65_536,
        "cookie: a;" * 6_500,
        "Cookie: " + "xsess" * 13_000,
    ],
    ids=["snake", "dotted", "cookies", "passwords", "sk", "eyJ", "schemes", "env", "dashes", "pairs", "names"],
)
def test_scan_stays_fast_on_adversarial_text(text: str) -> None:
    start = time.perf_counter()
    SCAN.findings(capture(text))
    assert time.perf_counter() - start < 2.0


@pytest.mark.parametrize(
    ("policy", "policy_id", "decision"),
    [
        (AcceptAll(), "reference/accept", "accept"),
        (RejectAll(), "reference/reject", "reject"),
        (AlwaysAdjudicate(), "reference/adjudicate", "adjudicate"),
    ],
)
def test_fixed_policies_ignore_content(policy: Any, policy_id: str, decision: Decision) -> None:
    for candidate in (capture(), capture(f"key {AKIA}")):
        assert policy.decide(candidate) == AdmissionDecision(decision, policy_id, "1")
    assert (policy.policy_id, policy.policy_version) == (policy_id, "1")


def test_registry_names_and_factories() -> None:
    assert set(POLICIES) == {"accept", "reject", "adjudicate", "secret-scan"}
    expected = {
        "accept": "reference/accept",
        "reject": "reference/reject",
        "adjudicate": "reference/adjudicate",
        "secret-scan": "reference/secret-scan",
    }
    for name, policy_id in expected.items():
        policy = policy_named(name)
        assert (policy.policy_id, policy.policy_version) == (policy_id, "1")
        assert policy_named(name) is not policy  # a fresh instance each time
    assert isinstance(policy_named("secret-scan"), SecretScan)
    assert DEFAULT_POLICY == "secret-scan"


@pytest.mark.parametrize("name", ["", "Accept", "secret_scan", "reference/accept", "allow"])
def test_unknown_policy_names_raise_key_error(name: str) -> None:
    with pytest.raises(KeyError):
        policy_named(name)


def test_registry_is_read_only() -> None:
    with pytest.raises(TypeError):
        POLICIES["open"] = AcceptAll
