"""The signed-bindings port remembers the signatures it verified, and nothing else.

A host sends one binding on many calls; the port checks its signature once, but every claim check (the clock's
included) runs on every call, and a token that failed is checked afresh each time.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from engram_mcp.contract import binding as b
from engram_mcp.contract.binding import _token
from engram_mcp.reference import _host_binding
from engram_mcp.reference.server import SignedBindings

AUDIENCE = "engram-reference-test"
KID = "host-key-1"
CLAIMS: dict[str, Any] = dict(audience=AUDIENCE, issuer="host:test", tenant="tenant:a", workspace="workspace:1",
                              principal="principal:alice", agent_id="agent:7", session="session:42",
                              purpose_ref="purpose:notes")


@pytest.fixture
def signatures_checked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tokens whose signature the port checked, in order."""
    checked: list[str] = []
    real = _host_binding.signed_claims

    def counting(token: str, keys: Any, token_type: str) -> Any:
        checked.append(token)
        return real(token, keys, token_type)

    monkeypatch.setattr(_host_binding, "signed_claims", counting)
    return checked


@pytest.fixture
def host() -> tuple[Any, SignedBindings]:
    private, public = b.generate_host_key()
    trusted = {KID: b.TrustedHost(public, issuers=frozenset({"host:test"}), tenants=frozenset({"tenant:a"}))}
    return private, SignedBindings(trusted, AUDIENCE)


def test_a_binding_sent_again_is_not_verified_again(host: tuple[Any, SignedBindings],
                                                     signatures_checked: list[str]) -> None:
    private, port = host
    token = b.mint_binding(private, KID, now=int(time.time()), **CLAIMS)
    first, second = port.verify(token), port.verify(token)
    assert first == second and first.tenant == "tenant:a"
    assert signatures_checked == [token]
    other = b.mint_binding(private, KID, now=int(time.time()), **CLAIMS)
    port.verify(other)
    assert signatures_checked == [token, other]


def test_a_remembered_binding_still_expires(host: tuple[Any, SignedBindings], monkeypatch: pytest.MonkeyPatch,
                                            signatures_checked: list[str]) -> None:
    private, port = host
    issued = int(time.time())
    token = b.mint_binding(private, KID, now=issued, lifetime=30, **CLAIMS)
    port.verify(token)
    skew = b.BINDING_CLOCK_SKEW
    monkeypatch.setattr(_token, "time", SimpleNamespace(time=lambda: issued + 30 + skew))
    with pytest.raises(b.BindingRejected) as caught:
        port.verify(token)
    assert caught.value.reason == "expired"
    assert signatures_checked == [token]  # remembered, and refused on its claims all the same


def test_a_refused_signature_is_checked_every_time(host: tuple[Any, SignedBindings],
                                                   signatures_checked: list[str]) -> None:
    private, port = host
    header, claims, signature = b.mint_binding(private, KID, now=int(time.time()), **CLAIMS).split(".")
    tampered = ".".join([header, claims, ("A" if signature[0] != "A" else "B") + signature[1:]])
    for _ in range(2):
        with pytest.raises(b.BindingRejected) as caught:
            port.verify(tampered)
        assert caught.value.reason == "bad_signature"
    assert signatures_checked == [tampered, tampered]


def test_each_audience_and_key_set_has_its_own_memory(host: tuple[Any, SignedBindings]) -> None:
    private, port = host
    token = b.mint_binding(private, KID, now=int(time.time()), **CLAIMS)
    port.verify(token)
    elsewhere = SignedBindings(port.trusted_keys, "another-server")
    with pytest.raises(b.BindingRejected) as caught:
        elsewhere.verify(token)
    assert caught.value.reason == "wrong_audience"
    untrusting = SignedBindings({}, AUDIENCE)
    with pytest.raises(b.BindingRejected) as caught:
        untrusting.verify(token)
    assert caught.value.reason == "untrusted_key"
