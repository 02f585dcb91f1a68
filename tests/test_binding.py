"""The host binding and the confirmation gate (spec/host-wiring.md)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import typing
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any

import jwt
import mcp_types
import pytest
import rfc8785
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from mcp_types import methods

from engram_mcp.contract import binding as b
from engram_mcp.contract import candidate_id, load, profile_digest

CONTRACT = load()
HostKey = tuple[Ed25519PrivateKey, Ed25519PublicKey]
Trusted = dict[str, b.TrustedHost]
NOW = 1_780_000_000
AUDIENCE = "engram-reference"
KID = "host-key-1"
CLAIMS: dict[str, Any] = dict(
    audience=AUDIENCE,
    issuer="host:test",
    tenant="tenant:a",
    workspace="workspace:1",
    principal="principal:alice",
    agent_id="agent:7",
    session="session:42",
    purpose_ref="purpose:notes",
)
SKEW = CONTRACT.limit("binding.clock_skew")
MAX_LIFETIME = CONTRACT.limit("binding.max_lifetime")
TTL_MAX = CONTRACT.limit("confirmation.ttl.max")


@pytest.fixture(scope="module")
def host() -> HostKey:
    return b.generate_host_key()


@pytest.fixture(scope="module")
def trusted(host: HostKey) -> Trusted:
    return {KID: b.TrustedHost(host[1], issuers=frozenset({"host:test"}), tenants=frozenset({"tenant:a"}))}


def mint(host: HostKey, now: int = NOW, kid: str = KID, **overrides: Any) -> str:
    return b.mint_binding(host[0], kid, now=now, **{**CLAIMS, **overrides})


def reason(token: Any, trusted: Mapping[str, b.TrustedHost], *, now: int = NOW,
           audience: str = AUDIENCE) -> str:
    with pytest.raises(b.BindingRejected) as caught:
        b.verify_binding(token, trusted, audience=audience, now=now)
    return caught.value.reason


def unverified_claims(token: Any) -> dict[str, Any]:
    return jwt.decode(token, options={"verify_signature": False})


def forge(header: dict, claims: dict, signature: bytes = b"") -> str:
    """A compact JWS assembled by hand, for headers PyJWT would not write."""

    def enc(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    return ".".join([enc(json.dumps(header).encode()), enc(json.dumps(claims).encode()), enc(signature)])


# -- the binding -------------------------------------------------------------


def test_limits_come_from_the_contract() -> None:
    assert b.BINDING_MAX_LIFETIME == MAX_LIFETIME == 300
    assert b.BINDING_CLOCK_SKEW == SKEW == 5
    assert b.CONFIRMATION_TTL_MAX == TTL_MAX == 300
    assert b.CONFIRMATION_EXECUTE_WITHIN == CONTRACT.limit("confirmation.execute_within") == 30


def test_round_trip(host: HostKey, trusted: Trusted) -> None:
    token = mint(host)
    bound = b.verify_binding(token, trusted, audience=AUDIENCE, now=NOW + 1)
    assert bound == b.Binding(
        tenant="tenant:a",
        workspace="workspace:1",
        principal="principal:alice",
        agent_id="agent:7",
        session="session:42",
        purpose_ref="purpose:notes",
        issuer="host:test",
        audience=AUDIENCE,
        issued_at=NOW,
        expires_at=NOW + 60,
        token_id=unverified_claims(token)["jti"],
        audit_id=unverified_claims(token)["audit_id"],
    )
    assert jwt.get_unverified_header(token) == {"alg": "EdDSA", "kid": KID, "typ": b.BINDING_TOKEN_TYPE}


def test_minted_claims_match_the_schema(host: HostKey) -> None:
    validator = CONTRACT.validator(CONTRACT.data_schema("binding-claims"))
    claims = unverified_claims(mint(host, nbf=NOW))
    assert list(validator.iter_errors(claims)) == []
    schema = CONTRACT.data_schema("binding-claims")
    assert schema["additionalProperties"] is False
    assert set(schema["properties"]) - set(schema["required"]) == {"nbf", "audit_id", "deadline"}


def test_each_mint_has_a_fresh_token_id(host: HostKey) -> None:
    assert unverified_claims(mint(host))["jti"] != unverified_claims(mint(host))["jti"]


@pytest.mark.parametrize("token", [None, ""])
def test_missing(token: Any, trusted: Trusted) -> None:
    assert reason(token, trusted) == "missing"


@pytest.mark.parametrize("token", ["garbage", "a.b.c", "...", "eyJhbGciOiJFZERTQSJ9", 12345])
def test_malformed(token: Any, trusted: Trusted) -> None:
    assert reason(token, trusted) == "malformed"


def test_signed_by_an_untrusted_key(host: HostKey, trusted: Trusted) -> None:
    stranger = b.generate_host_key()
    assert reason(mint(stranger), trusted) == "bad_signature"


def test_tampered_claims_break_the_signature(host: HostKey, trusted: Trusted) -> None:
    header, _, signature = mint(host).split(".")
    claims = {**unverified_claims(mint(host)), "principal": "principal:mallory"}
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    assert reason(f"{header}.{body}.{signature}", trusted) == "bad_signature"


def test_unknown_kid(host: HostKey, trusted: Trusted) -> None:
    assert reason(mint(host, kid="host-key-2"), trusted) == "untrusted_key"


def test_a_key_carried_by_the_token_is_never_used(host: HostKey, trusted: Trusted) -> None:
    stranger_private, stranger_public = b.generate_host_key()
    jwk = json.loads(jwt.algorithms.OKPAlgorithm.to_jwk(stranger_public))
    token = b.mint_binding(stranger_private, KID, now=NOW, header={"jwk": jwk}, **CLAIMS)
    assert reason(token, trusted) == "malformed"
    by_url = b.mint_binding(host[0], KID, now=NOW, header={"jku": "https://x.invalid/k"}, **CLAIMS)
    assert reason(by_url, trusted) == "malformed"


def test_alg_none(host: HostKey, trusted: Trusted) -> None:
    claims = unverified_claims(mint(host))
    token = forge({"alg": "none", "kid": KID, "typ": b.BINDING_TOKEN_TYPE}, claims)
    assert reason(token, trusted) == "bad_algorithm"
    unsigned = jwt.encode(claims, None, algorithm="none", headers={"kid": KID})  # type: ignore[arg-type]  # alg none takes no key
    assert reason(unsigned, trusted) == "bad_algorithm"


def test_hs256_even_keyed_with_the_public_key(host: HostKey, trusted: Trusted) -> None:
    claims = unverified_claims(mint(host))
    secret = b.public_key_pem(host[1])  # the classic key-confusion attempt
    token = forge({"alg": "HS256", "kid": KID, "typ": b.BINDING_TOKEN_TYPE}, claims)
    header, body, _ = token.split(".")
    mac = hmac.new(secret, f"{header}.{body}".encode(), hashlib.sha256).digest()
    signed = f"{header}.{body}." + base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
    assert reason(signed, trusted) == "bad_algorithm"
    shared = jwt.encode(claims, "s" * 32, algorithm="HS256", headers={"kid": KID, "typ": b.BINDING_TOKEN_TYPE})
    assert reason(shared, trusted) == "bad_algorithm"


def test_untyped_jwt_is_not_a_binding(host: HostKey, trusted: Trusted) -> None:
    assert reason(mint(host, header={"typ": "JWT"}), trusted) == "wrong_type"


def test_expiry_with_skew(host: HostKey, trusted: Trusted) -> None:
    token = mint(host, lifetime=60)
    b.verify_binding(token, trusted, audience=AUDIENCE, now=NOW + 60 + SKEW - 1)
    assert reason(token, trusted, now=NOW + 60 + SKEW) == "expired"


def test_not_yet_valid(host: HostKey, trusted: Trusted) -> None:
    later = mint(host, nbf=NOW + SKEW + 10)
    assert reason(later, trusted) == "not_yet_valid"
    b.verify_binding(later, trusted, audience=AUDIENCE, now=NOW + 10)
    b.verify_binding(mint(host, nbf=NOW + SKEW), trusted, audience=AUDIENCE, now=NOW)
    assert reason(mint(host, now=NOW + SKEW + 1), trusted) == "not_yet_valid"  # iat in the future


def test_wrong_audience(host: HostKey, trusted: Trusted) -> None:
    assert reason(mint(host), trusted, audience="another-server") == "wrong_audience"


def test_lifetime_bound(host: HostKey, trusted: Trusted) -> None:
    b.verify_binding(mint(host, lifetime=MAX_LIFETIME), trusted, audience=AUDIENCE, now=NOW)
    assert reason(mint(host, lifetime=MAX_LIFETIME + 1), trusted) == "too_long_lived"


@pytest.mark.parametrize("claim", sorted(load().data_schema("binding-claims")["required"]))
def test_missing_claim(host: HostKey, trusted: Trusted, claim: str) -> None:
    unset: dict[str, Any] = {claim: None}
    assert reason(mint(host, **unset), trusted) == "bad_claims"


@pytest.mark.parametrize(
    "overrides",
    [
        {"tenant": 5},
        {"principal": ["principal:alice"]},
        {"session": ""},
        {"agent_id": "x" * 513},
        {"purpose_ref": unicodedata.normalize("NFD", "purpose:café")},
        {"workspace": None, "scope": "workspace:1"},
        {"confirmed": True},
        {"aud": [AUDIENCE]},
        {"iat": "1780000000"},
        {"exp": True},
        {"nbf": 1.5},
        {"exp": NOW},  # not after iat
        {"audit_id": ""},
        {"audit_id": "audit id with spaces"},
        {"audit_id": "a" * 257},
        {"audit_id": "audit_é"},
        {"deadline": "soon"},
        {"deadline": -1},
    ],
    ids=repr,
)
def test_claims_of_the_wrong_shape(host: HostKey, trusted: Trusted, overrides: dict[str, Any]) -> None:
    assert reason(mint(host, **overrides), trusted) == "bad_claims"


def test_trusted_host_narrowing(host: HostKey) -> None:
    scopes = frozenset({("tenant:a", "workspace:1"), ("tenant:b", "workspace:9")})
    narrow = {KID: b.TrustedHost(host[1], issuers=frozenset({"host:test"}), tenants=frozenset({"tenant:a", "tenant:b"}),
                                 scopes=scopes)}
    assert b.verify_binding(mint(host), narrow, audience=AUDIENCE, now=NOW).tenant == "tenant:a"
    assert reason(mint(host, tenant="tenant:b"), narrow) == "scope_not_served"
    assert reason(mint(host, workspace="workspace:9"), narrow) == "scope_not_served"
    assert b.verify_binding(mint(host, tenant="tenant:b", workspace="workspace:9"), narrow, audience=AUDIENCE, now=NOW)
    assert reason(mint(host, issuer="host:other"), narrow) == "wrong_issuer"


def test_a_key_is_trusted_for_named_issuers_and_tenants(host: HostKey) -> None:
    trusted = {KID: b.TrustedHost(host[1], issuers=frozenset({"host:test", "host:gateway"}),
                                  tenants=frozenset({"tenant:a", "tenant:b"}))}
    assert b.verify_binding(mint(host, tenant="tenant:b"), trusted, audience=AUDIENCE, now=NOW).tenant == "tenant:b"
    assert (
        b.verify_binding(mint(host, iss="host:gateway"), trusted, audience=AUDIENCE, now=NOW).issuer == "host:gateway"
    )
    assert reason(mint(host, tenant="tenant:z"), trusted) == "tenant_not_trusted"
    assert reason(mint(host, iss="host:other"), trusted) == "wrong_issuer"


def test_audit_id_and_deadline_reach_the_binding(host: HostKey, trusted: Trusted) -> None:
    bound = b.verify_binding(
        mint(host, audit_id="host-audit-1", deadline=NOW + 2.5), trusted, audience=AUDIENCE, now=NOW
    )
    assert (bound.audit_id, bound.deadline) == ("host-audit-1", NOW + 2.5)
    assert b.verify_binding(mint(host, audit_id=None), trusted, audience=AUDIENCE, now=NOW).audit_id is None
    assert not b.deadline_passed(bound, now=NOW + 2.4) and b.deadline_passed(bound, now=NOW + 2.5)
    assert not b.deadline_passed(b.verify_binding(mint(host), trusted, audience=AUDIENCE, now=NOW), now=NOW + 10**9)


def test_reasons_are_short_constant_tokens() -> None:
    for name in typing.get_args(b.BindingReason):
        assert name.isidentifier() and name.islower()


def test_pem_round_trip(host: HostKey) -> None:
    private, public = host
    assert b.load_public_key(b.public_key_pem(public)).public_bytes_raw() == public.public_bytes_raw()
    restored = b.load_private_key(b.private_key_pem(private))
    assert restored.private_bytes_raw() == private.private_bytes_raw()
    other = ec.generate_private_key(ec.SECP256R1())
    pem = other.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    with pytest.raises(ValueError, match="not an Ed25519 public key"):
        b.load_public_key(pem)


# -- digests and ids ---------------------------------------------------------


def bound(**changes: Any) -> b.Binding:
    fields = dict(
        tenant="tenant:a", workspace="workspace:1", principal="principal:alice", agent_id="agent:7",
        session="session:42", purpose_ref="purpose:notes", issuer="host:test", audience=AUDIENCE,
        issued_at=NOW, expires_at=NOW + 60, token_id="jti-1",
    )
    return b.Binding(**{**fields, **changes})


CANDIDATE = "candidate_" + "a" * 64
WITHDRAW_ARGS = {"candidate_id": CANDIDATE, "idempotency_key": "withdraw-key-000001", "reason_ref": "reason:obsolete"}


def test_operation_digest_pins_the_profile_object() -> None:
    domain = b"engram-memory-mcp/operation/v1\0"
    value: dict[str, Any] = {
        "capability": "engram_memory_withdraw",
        "target": CANDIDATE,
        "arguments": WITHDRAW_ARGS,
        "principal": "principal:alice",
        "tenant": "tenant:a",
        "workspace": "workspace:1",
    }
    expected = "sha256:" + hashlib.sha256(domain + rfc8785.dumps(value)).hexdigest()
    assert b.operation_digest("engram_memory_withdraw", CANDIDATE, WITHDRAW_ARGS, bound()) == expected


def withdraw_digest(tool: str = "engram_memory_withdraw", target: str | None = CANDIDATE,
                    arguments: dict[str, Any] = WITHDRAW_ARGS, binding: b.Binding | None = None) -> str:
    return b.operation_digest(tool, target, arguments, binding or bound())


def test_operation_digest_changes_with_every_input() -> None:
    variants = [
        withdraw_digest(tool="engram_memory_forget"),
        withdraw_digest(target="candidate_" + "b" * 64),
        withdraw_digest(target=None),
        withdraw_digest(arguments={**WITHDRAW_ARGS, "reason_ref": "reason:other"}),
        withdraw_digest(arguments={**WITHDRAW_ARGS, "idempotency_key": "withdraw-key-000002"}),
        withdraw_digest(binding=bound(principal="principal:bob")),
        withdraw_digest(binding=bound(tenant="tenant:b")),
        withdraw_digest(binding=bound(workspace="workspace:2")),
    ]
    assert len({withdraw_digest(), *variants}) == len(variants) + 1


def test_operation_digest_ignores_key_order_and_unbound_fields() -> None:
    base = withdraw_digest()
    assert withdraw_digest(arguments=dict(reversed(list(WITHDRAW_ARGS.items())))) == base
    # session, agent and token are not part of what is approved
    assert withdraw_digest(binding=bound(session="s2", token_id="j2", agent_id="a2")) == base
    nested_a = {"payload": {"a": 1, "b": {"x": [1, 2], "y": "z"}}, "idempotency_key": "k" * 16}
    nested_b = {"idempotency_key": "k" * 16, "payload": {"b": {"y": "z", "x": [1, 2]}, "a": 1}}
    assert b.operation_digest("engram_memory_capture", None, nested_a, bound()) == b.operation_digest(
        "engram_memory_capture", None, nested_b, bound()
    )


def test_operation_target_follows_tools_json() -> None:
    assert b.operation_target("engram_memory_withdraw", WITHDRAW_ARGS) == CANDIDATE
    assert b.operation_target("engram_memory_forget", {"record_id": "mem_abc"}) == "mem_abc"
    assert b.operation_target("engram_memory_capture", {"idempotency_key": "k"}) is None


def test_idempotency_intent_leaves_the_key_out() -> None:
    intent = b.idempotency_intent("engram_memory_withdraw", CANDIDATE, WITHDRAW_ARGS, bound())
    rekeyed = {**WITHDRAW_ARGS, "idempotency_key": "withdraw-key-000002"}
    assert b.idempotency_intent("engram_memory_withdraw", CANDIDATE, rekeyed, bound()) == intent
    changed = {**WITHDRAW_ARGS, "reason_ref": "reason:other"}
    assert b.idempotency_intent("engram_memory_withdraw", CANDIDATE, changed, bound()) != intent
    assert b.idempotency_intent("engram_memory_forget", CANDIDATE, WITHDRAW_ARGS, bound()) != intent
    assert intent != b.operation_digest("engram_memory_withdraw", CANDIDATE, WITHDRAW_ARGS, bound())


def test_capture_candidate_id_is_scoped_per_principal() -> None:
    key = "idempotency-key-0001"
    cid = b.capture_candidate_id(bound(), key)
    owner = {"tenant": "tenant:a", "workspace": "workspace:1", "principal": "principal:alice"}
    source = profile_digest("capture-source", owner)
    assert cid == candidate_id(source, "1", key)
    assert CONTRACT.validator(CONTRACT.resolve("defs.json#/$defs/candidate_id")).is_valid(cid)
    assert b.capture_candidate_id(bound(principal="principal:bob"), key) != cid
    assert b.capture_candidate_id(bound(workspace="workspace:2"), key) != cid
    assert b.capture_candidate_id(bound(session="other", agent_id="other"), key) == cid


def test_journal_event_id_is_scoped_per_principal() -> None:
    key = "idempotency-key-0001"
    value = {"tenant": "tenant:a", "workspace": "workspace:1", "principal": "principal:alice", "idempotency_key": key}
    assert b.journal_event_id(bound(), key) == "evt_" + profile_digest("journal-event-id", value)[len("sha256:"):]
    assert b.journal_event_id(bound(principal="principal:bob"), key) != b.journal_event_id(bound(), key)
    assert key not in b.journal_event_id(bound(), key)


def test_scope_ref() -> None:
    assert b.scope_ref(bound()) == profile_digest("scope", {"tenant": "tenant:a", "workspace": "workspace:1"})
    assert b.scope_ref(bound(principal="principal:bob")) == b.scope_ref(bound())


# -- the sealer --------------------------------------------------------------


KEY = bytes(range(32))


def test_sealer_round_trip_and_fresh_nonce() -> None:
    sealer = b.ConfirmationSealer(KEY)
    claims = {"a": 1, "b": "é", "c": None}
    token = sealer.seal(claims)
    assert sealer.open(token) == claims
    assert sealer.seal(claims) != token
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert b"\"b\"" not in base64.urlsafe_b64decode(token + "==")  # the client cannot read it


def test_every_flipped_byte_is_refused() -> None:
    sealer = b.ConfirmationSealer(KEY)
    token = sealer.seal({"capability": "engram_memory_forget"})
    raw = bytearray(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    for i in range(len(raw)):  # nonce, ciphertext and tag alike
        raw[i] ^= 0x01
        forged = base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
        raw[i] ^= 0x01
        with pytest.raises(b.StateRejected):
            sealer.open(forged)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda t: t + "=",
        lambda t: t + "A",
        lambda t: t[:-1],
        lambda t: t[:10],
        lambda t: t.replace(t[5], "+" if t[5] != "+" else "/", 1),
        lambda t: "",
        lambda t: " " + t,
    ],
)
def test_malformed_tokens_are_refused(mutate: Callable[[str], str]) -> None:
    sealer = b.ConfirmationSealer(KEY)
    with pytest.raises(b.StateRejected):
        sealer.open(mutate(sealer.seal({"x": 1})))


def test_non_canonical_spelling_is_refused() -> None:
    sealer = b.ConfirmationSealer(KEY)
    token = next(  # a token whose last character carries spare bits
        t for t in (sealer.seal({"x": "y" * n}) for n in range(3)) if len(t) % 4 in (2, 3)
    )
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    spare = alphabet[alphabet.index(token[-1]) ^ 1]
    with pytest.raises(b.StateRejected):
        sealer.open(token[:-1] + spare)


def test_another_key_or_purpose_cannot_open() -> None:
    token = b.ConfirmationSealer(KEY).seal({"x": 1})
    with pytest.raises(b.StateRejected):
        b.ConfirmationSealer(bytes(32)).open(token)
    with pytest.raises(b.StateRejected):
        b.Sealer(KEY, associated_data=b"engram-memory-mcp/page-cursor/v1").open(token)


def test_key_must_be_256_bits() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        b.ConfirmationSealer(bytes(16))


# -- the confirmation state and gate -----------------------------------------


def minted_state(**kw: Any) -> b.ConfirmationState:
    return b.ConfirmationState.mint("engram_memory_withdraw", CANDIDATE, WITHDRAW_ARGS, bound(), now=NOW, **kw)


def test_state_claims_match_the_schema_and_round_trip() -> None:
    sealer = b.ConfirmationSealer(KEY)
    state = minted_state(ttl=120)
    validator = CONTRACT.validator(CONTRACT.data_schema("request-state"))
    assert list(validator.iter_errors(state.to_claims())) == []
    assert state.expires_at - state.issued_at == 120
    assert sealer.open_state(sealer.seal_state(state)) == state


def test_state_ttl_is_bounded() -> None:
    with pytest.raises(ValueError, match="confirmation TTL outside"):
        minted_state(ttl=TTL_MAX + 1)
    forged = {**minted_state().to_claims(), "expires_at": NOW + TTL_MAX + 1}
    with pytest.raises(b.StateRejected):
        b.ConfirmationState.from_claims(forged)
    with pytest.raises(b.StateRejected):
        b.ConfirmationState.from_claims({**minted_state().to_claims(), "confirmed": True})


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        ({}, None),
        ({"now": NOW + TTL_MAX}, "expired"),
        ({"tool": "engram_memory_forget"}, "capability_mismatch"),
        ({"target": "candidate_" + "b" * 64}, "target_mismatch"),
        ({"arguments": {**WITHDRAW_ARGS, "reason_ref": "reason:other"}}, "operation_mismatch"),
        ({"binding": bound(principal="principal:bob")}, "principal_mismatch"),
        ({"binding": bound(tenant="tenant:b")}, "tenant_mismatch"),
        ({"binding": bound(workspace="workspace:2")}, "workspace_mismatch"),
        ({"binding": bound(session="session:43")}, "session_mismatch"),
        ({"binding": bound(token_id="fresh", issued_at=NOW + 5)}, None),  # a fresh token for the same context
    ],
    ids=repr,
)
def test_state_binds_the_call(call: dict[str, Any], expected: str | None) -> None:
    args: dict[str, Any] = dict(tool="engram_memory_withdraw", target=CANDIDATE, arguments=WITHDRAW_ARGS,
                                binding=bound(), now=NOW + 1)
    args.update(call)
    call_args = [args.pop(name) for name in ("tool", "target", "arguments", "binding")]
    assert minted_state().mismatch(*call_args, **args) == expected


ACCEPT = {"action": "accept", "content": {"confirm": True}}


@pytest.mark.parametrize(
    ("answer", "approved"),
    [
        (ACCEPT, True),
        (mcp_types.ElicitResult(action="accept", content={"confirm": True}), True),
        ({"action": "accept", "content": {"confirm": False}}, False),
        ({"action": "accept", "content": {"confirm": 1}}, False),
        ({"action": "accept", "content": {"confirm": "true"}}, False),
        ({"action": "accept", "content": {"confirm": True, "note": "x"}}, False),
        ({"action": "accept", "content": {}}, False),
        ({"action": "accept"}, False),
        ({"action": "decline", "content": {"confirm": True}}, False),
        ({"action": "cancel"}, False),
        (mcp_types.ElicitResult(action="decline"), False),
        ({"code": -32600, "message": "Elicitation not supported"}, False),
        (None, False),
        ("accept", False),
    ],
    ids=repr,
)
def test_only_an_explicit_accept_approves(answer: Any, approved: bool) -> None:
    assert b.is_approval(answer) is approved


def retry(sealer: b.ConfirmationSealer, state_token: str | None, responses: dict[str, Any], **changes: Any) -> Any:
    args = dict(
        request_state=state_token, input_responses=responses, tool="engram_memory_withdraw", target=CANDIDATE,
        arguments=WITHDRAW_ARGS, binding=bound(), now=NOW + 1,
    )
    return b.check_retry(sealer, **{**args, **changes})


def test_retry_verdicts() -> None:
    sealer = b.ConfirmationSealer(KEY)
    state = minted_state()
    token = sealer.seal_state(state)
    ok = retry(sealer, token, {b.CONFIRMATION_INPUT_KEY: ACCEPT})
    assert (ok.approved, ok.reason, ok.consume, ok.expires_at) == (True, None, state.nonce, state.expires_at)

    declined = retry(sealer, token, {b.CONFIRMATION_INPUT_KEY: {"action": "decline"}})
    assert (declined.approved, declined.reason, declined.consume) == (False, "not_confirmed", state.nonce)
    other_key = retry(sealer, token, {"confirm": ACCEPT})
    assert (other_key.approved, other_key.consume) == (False, state.nonce)

    # the agent cannot bring its own approval: no state, a forged state, someone else's state
    assert retry(sealer, None, {b.CONFIRMATION_INPUT_KEY: ACCEPT}) == b.GateVerdict(False, "missing_state", None, None)
    assert retry(sealer, "forged", {b.CONFIRMATION_INPUT_KEY: ACCEPT}).reason == "unreadable_state"
    foreign = b.ConfirmationSealer(bytes(32)).seal_state(state)
    assert retry(sealer, foreign, {b.CONFIRMATION_INPUT_KEY: ACCEPT}).reason == "unreadable_state"
    moved = retry(sealer, token, {b.CONFIRMATION_INPUT_KEY: ACCEPT}, arguments={**WITHDRAW_ARGS, "reason_ref": "r:2"})
    assert moved == b.GateVerdict(False, "operation_mismatch", None, None)
    late = retry(sealer, token, {b.CONFIRMATION_INPUT_KEY: ACCEPT}, now=state.expires_at)
    assert late == b.GateVerdict(False, "expired", None, None)


# -- the form and its messages -----------------------------------------------


GATED = sorted(t.name for t in CONTRACT.tools.values() if t.confirmation != "never")


def test_requested_schema_is_the_data_file() -> None:
    file = CONTRACT.data_schema("confirmation-form")
    assert file["$id"] == "https://engram-mcp.invalid/schemas/1.0.0/data/confirmation-form.schema.json"
    assert {k: v for k, v in file.items() if k != "$id"} == b.CONFIRMATION_REQUESTED_SCHEMA


def test_requested_schema_is_a_flat_mcp_form() -> None:
    schema = b.CONFIRMATION_REQUESTED_SCHEMA
    assert set(schema) <= {"$schema", "type", "properties", "required"}
    assert schema["type"] == "object" and schema["required"] == ["confirm"]
    assert list(schema["properties"]) == ["confirm"]
    confirm = schema["properties"]["confirm"]
    # exactly the members of MCP's BooleanSchema: no nesting, no const
    assert confirm["type"] == "boolean" and set(confirm) <= {"type", "title", "description", "default"}
    assert confirm.get("default") is False
    validator = CONTRACT.validator(CONTRACT.data_schema("confirmation-form"))
    assert validator.is_valid({"confirm": True})
    assert not validator.is_valid({}) and not validator.is_valid({"confirm": "yes"})


@pytest.mark.parametrize("tool", GATED)
def test_confirmation_request_is_valid_mcp_in_both_eras(tool: str) -> None:
    message = b.confirmation_message(tool)
    params = mcp_types.ElicitRequestFormParams(message=message, requested_schema=b.CONFIRMATION_REQUESTED_SCHEMA)
    wire = params.model_dump(by_alias=True, mode="json", exclude_none=True)
    assert wire["requestedSchema"] == b.CONFIRMATION_REQUESTED_SCHEMA
    for version in ("2025-06-18", "2025-11-25"):  # legacy: a server-to-client request
        parsed = methods.parse_server_request("elicitation/create", version, wire)
        assert parsed.params.requested_schema == b.CONFIRMATION_REQUESTED_SCHEMA
    result = mcp_types.InputRequiredResult(  # modern: embedded in the tools/call result
        input_requests={b.CONFIRMATION_INPUT_KEY: mcp_types.ElicitRequest(params=params)},
        request_state=b.ConfirmationSealer(KEY).seal_state(minted_state()),
    )
    dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    on_wire = methods.serialize_server_result("tools/call", "2026-07-28", dumped)
    assert list(on_wire["inputRequests"]) == [b.CONFIRMATION_INPUT_KEY]
    embedded = on_wire["inputRequests"][b.CONFIRMATION_INPUT_KEY]
    assert embedded["method"] == "elicitation/create"
    assert embedded["params"]["requestedSchema"] == b.CONFIRMATION_REQUESTED_SCHEMA


def test_messages_are_constant_per_gated_tool() -> None:
    assert sorted(b.CONFIRMATION_MESSAGES) == GATED
    assert len(set(b.CONFIRMATION_MESSAGES.values())) == len(GATED)
    for text in b.CONFIRMATION_MESSAGES.values():
        assert not any(mark in text for mark in ("{", "}", "%", "candidate_", "mem_", "engram_memory_"))


def test_which_calls_are_gated() -> None:
    assert b.confirmation_required("engram_memory_withdraw", set())
    assert b.confirmation_required("engram_memory_forget", set())
    assert not b.confirmation_required("engram_memory_search", {"engram_memory_search"})
    assert not b.confirmation_required("engram_memory_get", set())
    assert not b.confirmation_required("engram_memory_capture", set())
    assert b.confirmation_required("engram_memory_capture", {"engram_memory_capture"})
    assert b.confirmation_required("engram_memory_request_admission", {"engram_memory_request_admission"})


@pytest.mark.parametrize(
    ("capabilities", "version", "supported"),
    [
        ({"elicitation": {}}, "2025-06-18", True),
        ({"elicitation": {"form": {}}}, "2025-11-25", True),
        ({"elicitation": {"form": {}, "url": {}}}, "2026-07-28", True),
        ({"elicitation": {"url": {}}}, "2025-11-25", False),
        ({"elicitation": {}}, "2025-03-26", False),  # no elicitation in that revision
        ({"elicitation": True}, "2025-11-25", False),
        ({"sampling": {}}, "2026-07-28", False),
        ({}, "2026-07-28", False),
        (None, "2026-07-28", False),
        ({"elicitation": {}}, "2099-01-01", False),
    ],
    ids=repr,
)
def test_form_elicitation_support(capabilities: dict[str, Any] | None, version: str, supported: bool) -> None:
    assert b.supports_form_elicitation(capabilities, version) is supported


def test_a_bare_key_is_never_trusted(host: HostKey) -> None:
    """A key without the issuers and tenants it answers for is trusted for nothing (EMC-HP-008)."""
    assert reason(mint(host), {KID: host[1]}) == "untrusted_key"  # type: ignore[dict-item]  # a bare key: the case under test


@pytest.mark.parametrize("claim", ["deadline", "iat", "exp", "nbf"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_number_is_refused(host: HostKey, trusted: Trusted, claim: str, value: float) -> None:
    """NaN never compares as passed, so a NaN deadline would never pass: any non-finite claim is refused."""
    overrides: dict[str, Any] = {claim: value}
    assert reason(mint(host, **overrides), trusted) == "bad_claims"
