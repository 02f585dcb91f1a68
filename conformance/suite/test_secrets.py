"""What must never be stored: a capture carrying a credential never becomes a readable memory.

The contract puts the duty not to capture secrets on the agent; a server's
admission policy is the backstop. Each case plants one fake credential of a
common family in a capture, asks for admission, and then looks for it with
search and get. Admission may answer rejected or pending_adjudication;
accepted, or any way of reading the capture back, is the failure.

The fake credentials are assembled at run time from fragments and random
bytes, so no string in this file looks like a credential to a scanner, and
none is valid anywhere. Evidence names the family only, never the value.
"""

from __future__ import annotations

import base64
import secrets
import string
from collections.abc import Callable

import pytest

from engram_mcp.conformance._checks import check
from engram_mcp.conformance._connect import Reply
from engram_mcp.conformance._needs import ADMIT, CAPTURE, GET, SEARCH
from engram_mcp.conformance._tracker import plant
from engram_mcp.conformance._world import World, capture_arguments, fresh_key, unique
from engram_mcp.contract import record_id


def _random(alphabet: str, length: int) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(length))


def _token(length: int = 24) -> str:
    """Random, with a digit and an inner capital, as real generated credentials have."""
    return _random(string.ascii_letters + string.digits, length - 3) + "7Qx"


def password_assignment() -> str:
    return "smtp_" + "pass" + "word = " + '"' + _token(18) + '"'


def aws_access_key_id() -> str:
    return "the deploy user's key id is " + "AK" + "IA" + _random(string.ascii_uppercase + "234567", 16)


def private_key_block() -> str:
    label = "RSA " + "PRIVATE" + " KEY"
    body = base64.b64encode(secrets.token_bytes(96)).decode("ascii")
    return f"-----BEGIN {label}-----\n{body[:64]}\n{body[64:]}\n-----END {label}-----"


def connection_string() -> str:
    return "postgres" + "ql://" + "svc_ledger:" + _token(16) + "@" + "db.internal.invalid:5432/ledger"


def bearer_token() -> str:
    return "curl -H 'Authorization: " + "Bear" + "er " + _token(40) + "' https://api.invalid/v1/ledger"


def env_line() -> str:
    return "\n" + "LEDGER_DB_" + "PASS" + "WORD=" + _token(20) + "\n"


def session_cookie() -> str:
    return "Cookie: theme=dark; " + "session" + "id=" + secrets.token_hex(16)


FAMILIES: dict[str, Callable[[], str]] = {
    "password-assignment": password_assignment,
    "aws-access-key-id": aws_access_key_id,
    "private-key-block": private_key_block,
    "connection-string": connection_string,
    "bearer-token": bearer_token,
    "env-line": env_line,
    "session-cookie": session_cookie,
}


def outcome(reply: Reply) -> str:
    if reply.kind == "result":
        envelope = reply.envelope
        return "ok" if isinstance(envelope, dict) and envelope.get("ok") is True else str(reply.code)
    return f"jsonrpc:{reply.code}" if reply.kind == "error" else reply.kind


# EMC-SEC-001 is the agent's duty; the host's backstop is a SHOULD, so a miss is a WARN.
@check("secrets.never-admitted", "EMC-SEC-002", uses=(CAPTURE, ADMIT, SEARCH, GET))
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_capture_carrying_a_secret_never_becomes_readable(world: World, family: str) -> None:
    """A capture with a fake credential is not admitted, and neither search nor get ever returns it."""
    scope = world.profile.rejecting_secrets() or world.scope
    principal = world.principal(scope, {CAPTURE, ADMIT, SEARCH, GET})
    marker = unique("sec")
    text = f"Decision {marker}: the deployment runbook keeps this line verbatim. {plant(FAMILIES[family]())}"
    arguments = capture_arguments(world.profile.purpose_ref, text=text)
    captured = world.call(CAPTURE, arguments, scope=scope, principal=principal)
    seen: dict[str, object] = {"scope": scope.label, "capture": outcome(captured)}
    hidden: str | None = None
    if outcome(captured) == "ok":
        value = captured.envelope["output"]["value"]
        if isinstance(value.get("record_digest"), str):
            hidden = record_id(value["record_digest"])
        admitted = world.call(ADMIT, {"candidate_id": value.get("candidate_id"), "idempotency_key": fresh_key()},
                              scope=scope, principal=principal)
        seen["admission"] = outcome(admitted)
        if outcome(admitted) == "ok":
            result = admitted.envelope["output"]["value"].get("outcome", {})
            seen["status"] = result.get("status")
            hidden = result.get("record_id") or hidden
    found = world.value(world.call(SEARCH, {"query": marker, "purpose_ref": world.profile.purpose_ref, "limit": 50},
                                   scope=scope, principal=principal), "search")["records"]
    seen["search"] = len(found)
    if hidden is not None:
        seen["get"] = outcome(world.call(GET, {"record_id": hidden, "purpose_ref": world.profile.purpose_ref},
                                         scope=scope, principal=principal))
    world.evidence.add("family", family)
    world.evidence.add("seen", seen)
    assert seen.get("status") != "accepted", f"a capture carrying a {family} was admitted"
    assert not found, f"a capture carrying a {family} is returned by search"
    assert seen.get("get") != "ok", f"a capture carrying a {family} is returned by get"
