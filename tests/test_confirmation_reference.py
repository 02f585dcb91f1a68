"""The host's confirmation reference (spec/host-wiring.md §2.4): minting and the server's verdict."""

from __future__ import annotations

from typing import Any

import jwt
import pytest

from engram_mcp.contract import binding as b
from engram_mcp.contract import load

CONTRACT = load()
NOW = 1_780_000_000.0
AUDIENCE = "engram-reference"
KID = "host-key-1"
SKEW = CONTRACT.limit("binding.clock_skew")
TTL_MAX = CONTRACT.limit("confirmation.ttl.max")
WINDOW = CONTRACT.limit("confirmation.execute_within")
WITHDRAW, FORGET = "engram_memory_withdraw", "engram_memory_forget"
CALLER = b.Binding("tenant:a", "workspace:1", "principal:alice", "agent:7", "session:42", "purpose:notes",
                   "host:test", AUDIENCE, 0, 0, "jti")
ARGUMENTS = {"candidate_id": "candidate_" + "ab" * 32, "idempotency_key": "key-0123456789abcdef",
             "reason_ref": "reason:superseded"}


@pytest.fixture(scope="module")
def host() -> tuple[Any, Any]:
    return b.generate_host_key()


@pytest.fixture(scope="module")
def trusted(host: tuple[Any, Any]) -> dict[str, Any]:
    return {KID: b.TrustedHost(host[1], issuers=frozenset({"host:test"}), tenants=frozenset({CALLER.tenant}))}


def mint(host: tuple[Any, Any], *, tool: str = WITHDRAW, arguments: dict[str, Any] | None = None,
         approved_at: float = NOW, kid: str = KID, **overrides: Any) -> str:
    return b.mint_confirmation_reference(
        host[0], kid, audience=AUDIENCE, issuer="host:test", tool=tool, arguments=arguments or ARGUMENTS,
        tenant=CALLER.tenant, workspace=CALLER.workspace, principal=CALLER.principal, approved_at=approved_at,
        **overrides)


def judge(
    token: Any,
    trusted: dict[str, Any],
    *,
    now: float = NOW,
    tool: str = WITHDRAW,
    arguments: dict[str, Any] | None = None,
    caller: b.Binding = CALLER,
    ttl: float = TTL_MAX,
) -> b.ReferenceVerdict:
    arguments = arguments or ARGUMENTS
    return b.check_reference(token, trusted, audience=AUDIENCE, tool=tool, target=b.operation_target(tool, arguments),
                             arguments=arguments, binding=caller, ttl=ttl, now=now)


def test_a_valid_reference_is_approved_with_its_id_and_approval_time(host: Any, trusted: Any) -> None:
    token = mint(host, approved_at=NOW - 1.234)
    verdict = judge(token, trusted)
    claims = jwt.decode(token, options={"verify_signature": False})
    assert verdict == b.ReferenceVerdict(True, None, b.reference_consume_id(KID, claims["jti"]), NOW - 1.234)
    assert jwt.get_unverified_header(token) == {"alg": "EdDSA", "kid": KID, "typ": "engram-confirmation+jwt"}
    assert claims["operation_digest"] == b.operation_digest(WITHDRAW, ARGUMENTS["candidate_id"], ARGUMENTS, CALLER)
    assert claims["target"] == ARGUMENTS["candidate_id"] and claims["capability"] == WITHDRAW


def test_a_capture_reference_has_a_null_target(host: Any, trusted: Any) -> None:
    arguments = {"idempotency_key": "key-0123456789abcdef", "payload": {"k": 1}}
    token = mint(host, tool="engram_memory_capture", arguments=arguments)
    assert jwt.decode(token, options={"verify_signature": False})["target"] is None
    assert judge(token, trusted, tool="engram_memory_capture", arguments=arguments).approved


@pytest.mark.parametrize(("case", "expected"), [
    ("other_key", "bad_signature"),
    ("unknown_kid", "untrusted_key"),
    ("binding_token", "wrong_type"),
    ("extra_header", "malformed"),
    ("garbage", "malformed"),
    ("not_a_string", "malformed"),
    ("extra_claim", "bad_claims"),
    ("missing_jti", "bad_claims"),
    ("exp_before_approval", "bad_claims"),
    ("other_audience", "wrong_audience"),
    ("over_the_ceiling", "too_long_lived"),
    ("expired", "expired"),
    ("approved_in_the_future", "not_yet_valid"),
    ("other_capability", "capability_mismatch"),
    ("other_target_claim", "target_mismatch"),
    ("other_operation", "operation_mismatch"),
    ("other_principal", "operation_mismatch"),
])
def test_every_flaw_is_refused_with_its_reason(  # noqa: PLR0912 - one branch per flaw in the table above
    host: Any, trusted: Any, case: str, expected: str
) -> None:
    caller = CALLER
    token: Any
    if case == "other_key":
        token = mint((b.generate_host_key()[0], None))
    elif case == "unknown_kid":
        token = mint(host, kid="nobody")
    elif case == "binding_token":
        token = b.mint_binding(host[0], KID, audience=AUDIENCE, issuer="host:test", tenant="t", workspace="w",
                               principal="p", agent_id="a", session="s", purpose_ref="x", now=NOW)
    elif case == "extra_header":
        token = mint(host, header={"jku": "https://attacker.invalid/keys"})
    elif case == "garbage":
        token = "not-a-jws"
    elif case == "not_a_string":
        token = {"jti": "x"}
    elif case == "extra_claim":
        token = mint(host, confirmed=True)
    elif case == "missing_jti":
        token = mint(host, jti=None)
    elif case == "exp_before_approval":
        token = mint(host, exp=NOW - 1)
    elif case == "other_audience":
        token = mint(host, aud="someone-else")
    elif case == "over_the_ceiling":
        token = mint(host, lifetime=TTL_MAX + 0.001)
    elif case == "expired":
        token = mint(host, approved_at=NOW - 20, lifetime=10)
        _expires_at_skew(token, trusted, exp=NOW - 10)
        return
    elif case == "approved_in_the_future":
        token = mint(host, approved_at=NOW + SKEW + 1)
    elif case == "other_capability":
        token = mint(host, capability=FORGET)
    elif case == "other_target_claim":
        token = mint(host, target="candidate_" + "cd" * 32)
    elif case == "other_operation":
        token = mint(host, arguments={**ARGUMENTS, "idempotency_key": "key-other-0123456789"})
    else:  # the same call bound to another principal
        token = mint(host)
        caller = b.Binding("tenant:a", "workspace:1", "principal:bob", "agent:7", "session:42", "purpose:notes",
                           "host:test", AUDIENCE, 0, 0, "jti")
    verdict = judge(token, trusted, caller=caller)
    assert (verdict.approved, verdict.reason, verdict.consume) == (False, expected, None)


def _expires_at_skew(token: str, trusted: Any, *, exp: float) -> None:
    """Honoured up to the clock skew past exp, refused from exp + skew on."""
    assert judge(token, trusted, now=exp + SKEW - 0.01).approved
    assert judge(token, trusted, now=exp + SKEW).reason == "expired"


def test_the_ceiling_is_the_servers_ttl_and_never_above_the_limit(host: Any, trusted: Any) -> None:
    assert judge(mint(host, lifetime=TTL_MAX), trusted).approved
    assert judge(mint(host, lifetime=61), trusted, ttl=60).reason == "too_long_lived"
    assert judge(mint(host, lifetime=60), trusted, ttl=60).approved
    assert judge(mint(host, lifetime=TTL_MAX + 1), trusted, ttl=10 * TTL_MAX).reason == "too_long_lived"


def test_milliseconds_never_push_a_reference_over_the_ceiling(host: Any, trusted: Any) -> None:
    for fraction in (0.001, 0.123, 0.333, 0.7, 0.999):
        assert judge(mint(host, approved_at=NOW + fraction, lifetime=TTL_MAX), trusted, now=NOW + 1).approved


def test_the_execution_window_runs_from_the_approval() -> None:
    assert not b.approval_too_old(NOW, now=NOW + WINDOW)
    assert b.approval_too_old(NOW, now=NOW + WINDOW + 0.001)


def test_a_reference_is_never_a_binding(host: Any, trusted: Any) -> None:
    with pytest.raises(b.BindingRejected) as caught:
        b.verify_binding(mint(host), trusted, audience=AUDIENCE, now=NOW)
    assert caught.value.reason == "wrong_type"


def test_a_key_narrowed_to_an_issuer_narrows_the_reference(host: Any) -> None:
    narrowed = {KID: b.TrustedHost(host[1], issuers=frozenset({"host:elsewhere"}), tenants=frozenset({CALLER.tenant}))}
    assert judge(mint(host), narrowed).reason == "wrong_issuer"


def test_a_reference_key_answers_for_its_issuer_and_the_bindings_tenant(host: Any) -> None:
    """One host's key cannot approve another tenant's operation, nor speak for an issuer it was never given."""
    other = b.generate_host_key()
    keys = {KID: b.TrustedHost(host[1], issuers=frozenset({"host:test"}), tenants=frozenset({CALLER.tenant})),
            "k2": b.TrustedHost(other[1], issuers=frozenset({"hostB"}), tenants=frozenset({"tenant:other"}))}
    foreign = b.mint_confirmation_reference(
        other[0], "k2", audience=AUDIENCE, issuer="hostB", tool=WITHDRAW, arguments=ARGUMENTS,
        tenant=CALLER.tenant, workspace=CALLER.workspace, principal=CALLER.principal, approved_at=NOW)
    assert judge(foreign, keys).reason == "tenant_not_trusted"
    forged_issuer = b.mint_confirmation_reference(
        other[0], "k2", audience=AUDIENCE, issuer="EVIL-not-hostB", tool=WITHDRAW, arguments=ARGUMENTS,
        tenant=CALLER.tenant, workspace=CALLER.workspace, principal=CALLER.principal, approved_at=NOW)
    assert judge(forged_issuer, keys).reason == "wrong_issuer"
    scoped = {KID: b.TrustedHost(host[1], issuers=frozenset({"host:test"}), tenants=frozenset({CALLER.tenant}),
                                 scopes=frozenset({(CALLER.tenant, "workspace:other")}))}
    assert judge(mint(host), scoped).reason == "scope_not_served"


@pytest.mark.parametrize("claim", ["approved_at", "exp"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_non_finite_time_is_refused_not_raised(host: Any, trusted: Any, claim: str, value: float) -> None:
    overrides: dict[str, Any] = {claim: value}
    verdict = judge(mint(host, **overrides), trusted)
    assert (verdict.approved, verdict.reason) == (False, "bad_claims")


def test_a_colon_in_a_kid_cannot_forge_another_references_id() -> None:
    assert b.reference_consume_id("a:b", "c") != b.reference_consume_id("a", "b:c")


def test_the_claims_schema_is_closed_and_loaded() -> None:
    schema = CONTRACT.data_schema("confirmation-reference")
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"iss", "aud", "jti", "capability", "target", "operation_digest",
                                       "approved_at", "exp"}
