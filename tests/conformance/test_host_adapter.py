"""The harness's host adapter: the audit id and deadline it binds, and the bindings it forges for key trust."""

from __future__ import annotations

import jwt
import pytest

from engram_mcp.conformance._host import Forgery, SignedMetaBinding
from engram_mcp.conformance._profile import ScopeProfile
from engram_mcp.contract.binding import (
    HOST_BINDING_META_KEY,
    BindingRejected,
    TrustedHost,
    generate_host_key,
    verify_binding,
)

AUDIENCE = "engram-test"
SCOPE = ScopeProfile(tenant="acme", workspace="research", memory=True, principals={"agent": frozenset()},
                     admission_policy="accept", allow_retain=False, consented_families=(), confirm_capture=False,
                     confirm_admission=False, confirmation_ttl_seconds=4, retention_ceiling_seconds=0)


@pytest.fixture
def host() -> tuple[SignedMetaBinding, dict[str, TrustedHost]]:
    private, public = generate_host_key()
    adapter = SignedMetaBinding(key=private, kid="k1", issuer="test-host", audience=AUDIENCE, purpose_ref="purpose:t")
    return adapter, {"k1": TrustedHost(public, issuers=frozenset({"test-host"}), tenants=frozenset({"acme"}))}


def claims(meta: dict) -> dict:
    return jwt.decode(meta[HOST_BINDING_META_KEY], options={"verify_signature": False})


def test_every_meta_carries_a_fresh_audit_id_the_adapter_can_read_back(
    host: tuple[SignedMetaBinding, dict[str, TrustedHost]],
) -> None:
    adapter, trusted = host
    metas = [adapter.meta(SCOPE, "agent") for _ in range(20)]
    ids = [adapter.audit_id_of(m) for m in metas]
    assert len(set(ids)) == 20 and all(isinstance(i, str) for i in ids)
    bound = verify_binding(metas[0][HOST_BINDING_META_KEY], trusted, audience=AUDIENCE)
    assert bound.audit_id == ids[0] and bound.deadline is None


def test_a_given_audit_id_and_deadline_are_bound(host: tuple[SignedMetaBinding, dict[str, TrustedHost]]) -> None:
    adapter, _ = host
    meta = adapter.meta(SCOPE, "agent", audit_id="mine-1", deadline=1.5e9 + 0.25)
    assert (claims(meta)["audit_id"], claims(meta)["deadline"]) == ("mine-1", 1.5e9 + 0.25)
    assert adapter.audit_id_of({}) is None and adapter.audit_id_of({HOST_BINDING_META_KEY: "junk"}) is None


@pytest.mark.parametrize(("forgery", "reason"), [("foreign_tenant", "tenant_not_trusted"),
                                                 ("foreign_issuer", "wrong_issuer")])
def test_foreign_tenant_and_issuer_are_signed_by_the_trusted_key(
    host: tuple[SignedMetaBinding, dict[str, TrustedHost]], forgery: Forgery, reason: str
) -> None:
    adapter, trusted = host
    token = adapter.forged(forgery, SCOPE, "agent")[HOST_BINDING_META_KEY]
    with pytest.raises(BindingRejected) as caught:
        verify_binding(token, trusted, audience=AUDIENCE)
    assert caught.value.reason == reason


def test_a_missing_audit_id_is_still_a_valid_binding(host: tuple[SignedMetaBinding, dict[str, TrustedHost]]) -> None:
    adapter, trusted = host
    token = adapter.forged("missing_audit_id", SCOPE, "agent")[HOST_BINDING_META_KEY]
    assert verify_binding(token, trusted, audience=AUDIENCE).audit_id is None
