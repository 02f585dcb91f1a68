"""Fast in-process tests of the reference server's parts: the engine, search pieces, envelopes, configuration.

The last section injects failures into a real ``ReferenceServer`` and talks to it
through an in-memory MCP client, in both eras: whatever breaks inside a tool
call, the client sees a constant answer and never the exception's text.
"""

from __future__ import annotations

import json
import os
import sqlite3
import string
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import mcp_types as types
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.shared.exceptions import MCPError

from engram_mcp.contract import ZERO_DIGEST, canonical_bytes, receipt_digest
from engram_mcp.contract.binding import HOST_BINDING_META_KEY, Binding, Sealer, capture_candidate_id, new_audit_id
from engram_mcp.reference import _search as search
from engram_mcp.reference._config import ConfigError, load_config
from engram_mcp.reference._core import Engine
from engram_mcp.reference._crypto import AesGcmCipher
from engram_mcp.reference._envelope import Outcome, Refusal, envelope, tool_result
from engram_mcp.reference._policy import AcceptAll, AlwaysAdjudicate, RejectAll, ScopePolicy
from engram_mcp.reference._ports import AdmissionPolicy, Scope, Sealed
from engram_mcp.reference._server import ReferenceServer
from engram_mcp.reference._store import Store
from tests.reference.conftest import (
    CONTRACT,
    PURPOSE,
    UNKNOWN_TOOL,
    UNTRUSTED,
    ReferenceDir,
    admission_args,
    capture_args,
    check_envelope,
    forget_args,
    get_args,
    marker,
    search_args,
    withdraw_args,
)

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
SCOPE = Scope("tenant-a", "workspace-1")


def binding(principal: str = "agent-1", tenant: str = "tenant-a", workspace: str = "workspace-1") -> Binding:
    return Binding(tenant=tenant, workspace=workspace, principal=principal, agent_id="agent", session="session",
                   purpose_ref=PURPOSE, issuer="host", audience="aud", issued_at=0, expires_at=0, token_id="jti-1")


def policy(admission: AdmissionPolicy, **changes: Any) -> ScopePolicy:
    base = ScopePolicy(admission=admission, allow_retain=False, retention_ceiling=timedelta(days=30),
                       consented_families=frozenset({"family:alpha"}), confirm_capture=False,
                       confirm_admission=False, confirmation_ttl=timedelta(seconds=20))
    return replace(base, **changes)


class Harness:
    """An Engine on a temporary store, whose admission policy a test can swap."""

    def __init__(self, path: Path) -> None:
        self.store = Store(path)
        self.kek = os.urandom(32)
        self.cipher = AesGcmCipher(self.kek)
        self.policies: dict[Scope, ScopePolicy] = {
            SCOPE: policy(AcceptAll()),
            Scope("tenant-b", "workspace-1"): policy(AcceptAll()),
        }
        self.engine = Engine(self.store, self.cipher, lambda scope: self.policies[scope], os.urandom(32))

    def call(self, tool: str, arguments: dict[str, Any], caller: Binding | None = None, now: datetime = NOW) -> Outcome:
        return self.engine.call(tool, caller or binding(), arguments, now)

    def value(self, tool: str, arguments: dict[str, Any], caller: Binding | None = None) -> dict[str, Any]:
        outcome = self.call(tool, arguments, caller)
        assert outcome.ok, outcome.code
        assert outcome.value is not None
        errors = list(CONTRACT.validator(CONTRACT.value_schema(tool)).iter_errors(outcome.value))
        assert not errors, errors[0].message
        return outcome.value

    def admit(self, text: str | None = None) -> tuple[str, str]:
        cid = self.value("engram_memory_capture", capture_args(text))["candidate_id"]
        outcome = self.value("engram_memory_request_admission", admission_args(cid))["outcome"]
        return cid, outcome["record_id"]


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path / "engine.sqlite3")
    yield h
    h.store.close()


# -- the engine ------------------------------------------------------------------------------


def test_capture_seals_the_candidate_and_replays(harness: Harness) -> None:
    arguments = capture_args()
    first = harness.value("engram_memory_capture", arguments)
    assert first["status"] == "committed_pending"
    assert first["candidate_id"] == capture_candidate_id(binding(), arguments["idempotency_key"])
    row = harness.store._db.execute(
        "SELECT * FROM candidates WHERE candidate_id = ?", (first["candidate_id"],)
    ).fetchone()
    assert row["state"] == "pending"
    text = arguments["payload"]["components"][0]["text"].encode()
    assert text not in row["ciphertext"]
    opened = json.loads(
        harness.cipher.open(
            Sealed(row["ciphertext"], row["wrapped_key"]), scope=SCOPE, candidate_id=row["candidate_id"]
        )
    )
    assert opened["payload"]["components"] == arguments["payload"]["components"]
    assert opened["evidence"] == arguments["evidence"]
    assert harness.engine.replay("engram_memory_capture", binding(), arguments) == Outcome(
        value={**first, "status": "duplicate_exact"}
    )
    assert harness.value("engram_memory_capture", arguments) == {**first, "status": "duplicate_exact"}


def test_replay_is_none_for_a_fresh_key_and_conflicts_on_other_content(harness: Harness) -> None:
    arguments = capture_args()
    assert harness.engine.replay("engram_memory_capture", binding(), arguments) is None
    harness.value("engram_memory_capture", arguments)
    other = capture_args("Another text.", key=arguments["idempotency_key"])
    assert harness.engine.replay("engram_memory_capture", binding(), other) == Outcome(code="DIGEST_CONFLICT")
    assert harness.call("engram_memory_capture", other).code == "DIGEST_CONFLICT"
    # Another principal owns its own key space.
    assert harness.engine.replay("engram_memory_capture", binding("agent-2"), other) is None


@pytest.mark.parametrize(
    ("admission", "status"),
    [(AcceptAll(), "accepted"), (RejectAll(), "rejected"), (AlwaysAdjudicate(), "pending_adjudication")],
)
def test_admission_follows_the_scope_policy(harness: Harness, admission: AdmissionPolicy, status: str) -> None:
    harness.policies[SCOPE] = policy(admission)
    cid = harness.value("engram_memory_capture", capture_args())["candidate_id"]
    outcome = harness.value("engram_memory_request_admission", admission_args(cid))["outcome"]
    assert outcome["status"] == status
    assert ("record_id" in outcome) is (status == "accepted")
    row = harness.store._db.execute(
        "SELECT state, ciphertext, wrapped_key FROM candidates WHERE candidate_id = ?", (cid,)
    ).fetchone()
    if status == "pending_adjudication":
        assert row["state"] == "pending" and row["wrapped_key"] is not None
    else:
        assert row["state"] == status and row["ciphertext"] is None and row["wrapped_key"] is None


def test_withdraw_destroys_the_key_and_body(harness: Harness) -> None:
    cid = harness.value("engram_memory_capture", capture_args())["candidate_id"]
    value = harness.value("engram_memory_withdraw", withdraw_args(cid))
    assert value["key_destruction"] == "complete"
    row = harness.store._db.execute(
        "SELECT state, ciphertext, wrapped_key FROM candidates WHERE candidate_id = ?", (cid,)
    ).fetchone()
    assert (row["state"], row["ciphertext"], row["wrapped_key"]) == ("withdrawn", None, None)


def test_lifecycle_codes(harness: Harness) -> None:
    cid, rid = harness.admit()
    assert harness.call("engram_memory_request_admission", admission_args(cid)).code == "ALREADY_TERMINAL"
    assert harness.call("engram_memory_withdraw", withdraw_args(cid)).code == "ILLEGAL_TRANSITION"
    harness.value("engram_memory_forget", forget_args(rid))
    for tool, arguments in (
        ("engram_memory_get", get_args(rid)),
        ("engram_memory_forget", forget_args(rid)),
        ("engram_memory_request_admission", admission_args(cid)),
        ("engram_memory_withdraw", withdraw_args(cid)),
    ):
        assert harness.call(tool, arguments).code == "NOT_FOUND"
    other_tenant = binding(tenant="tenant-b")
    _, rid_b = harness.admit()
    assert harness.call("engram_memory_get", get_args(rid_b), other_tenant).code == "NOT_FOUND"


def test_retention_policy(harness: Harness) -> None:
    retain = capture_args(retention={"derivative_rule": "retain"})
    assert harness.call("engram_memory_capture", retain).code == "UNAUTHORIZED"
    harness.policies[SCOPE] = policy(AcceptAll(), allow_retain=True)
    assert harness.call("engram_memory_capture", retain).ok
    late = {"derivative_rule": "make-ineligible", "expires_at": "2026-02-15T12:00:00.001Z"}  # NOW + 31 days
    assert harness.call("engram_memory_capture", capture_args(retention=late)).code == "UNAUTHORIZED"
    within = {"derivative_rule": "make-ineligible", "expires_at": "2026-02-14T12:00:00.000Z"}  # NOW + 30 days
    assert harness.call("engram_memory_capture", capture_args(retention=within)).ok
    assert harness.call("engram_memory_capture", capture_args(families=["family:beta"])).code == "UNAUTHORIZED"
    assert harness.call("engram_memory_capture", capture_args(families=["family:alpha"])).ok


def test_a_retried_capture_keeps_its_first_retention(harness: Harness) -> None:
    """EMC-IDEM-009: the host's retention policy changed after the capture; the retry still replays."""
    harness.policies[SCOPE] = policy(AcceptAll(), allow_retain=True)
    arguments = capture_args(retention={"derivative_rule": "retain"})
    first = harness.value("engram_memory_capture", arguments)
    harness.policies[SCOPE] = policy(AcceptAll(), allow_retain=False)
    assert harness.value("engram_memory_capture", arguments) == {**first, "status": "duplicate_exact"}
    assert (
        harness.call("engram_memory_capture", {**arguments, "idempotency_key": "key-fresh-0000000001"}).code
        == "UNAUTHORIZED"
    )


def test_an_expired_record_is_invisible_but_forgettable(harness: Harness) -> None:
    """EMC-LIFE-001 and EMC-FGT-001, on the engine's clock."""
    word = marker()
    expires = {"derivative_rule": "make-ineligible", "expires_at": "2026-01-15T13:00:00.000Z"}  # NOW + 1 hour
    cid = harness.value("engram_memory_capture", capture_args(f"Short-lived {word}.", retention=expires))[
        "candidate_id"
    ]
    rid = harness.value("engram_memory_request_admission", admission_args(cid))["outcome"]["record_id"]
    assert harness.call("engram_memory_get", get_args(rid)).ok
    later = NOW + timedelta(hours=2)
    assert harness.engine.call("engram_memory_get", binding(), get_args(rid), later).code == "NOT_FOUND"
    found = harness.engine.call("engram_memory_search", binding(), search_args(word), later)
    assert found.value is not None and found.value["records"] == []
    forgotten = harness.engine.call("engram_memory_forget", binding(), forget_args(rid), later)
    assert forgotten.value is not None and forgotten.value["receipt"]["from_state"] == "expired"


def test_the_journal_is_a_hash_chain_without_content(harness: Harness) -> None:
    word = marker()
    _, rid = harness.admit(f"Chained {word}.")
    harness.value("engram_memory_forget", forget_args(rid))
    previous = ZERO_DIGEST
    rows = harness.store._db.execute("SELECT * FROM journal ORDER BY cursor").fetchall()
    assert [json.loads(r["event"])["operation"] for r in rows] == ["capture", "accept", "tombstone"]
    for row in rows:
        event = json.loads(row["event"])
        assert row["previous_hash"] == event["previous_event_hash"] == previous
        assert row["event_hash"] == receipt_digest("memory-journal-event", event, "event_hash")
        assert word not in row["event"]
        previous = row["event_hash"]


def test_consumed_states_are_single_use(harness: Harness) -> None:
    assert harness.engine.consume_state("nonce-1") is True
    assert harness.engine.consume_state("nonce-1") is False
    assert harness.engine.consume_state("nonce-2") is True


def test_get_and_search_values(harness: Harness) -> None:
    word = marker()
    _, rid = harness.admit(f"Searchable {word}.")
    got = harness.value("engram_memory_get", get_args(rid))
    assert got["record"]["record_id"] == rid and got["redacted_fields"] == ["/scope_ref"]
    found = harness.value("engram_memory_search", search_args(word))
    assert [e["record"]["record_id"] for e in found["records"]] == [rid]
    assert harness.value("engram_memory_search", search_args("ab cd"))["records"] == []  # no token survives
    assert harness.call("engram_memory_search", search_args(word, page_cursor="garbage")).code == "STALE_PAGE"


# -- search pieces -----------------------------------------------------------------------------


def test_query_tokens() -> None:
    assert search.query_tokens('He said "DROP" OR x* NEAR(a b) said') == ["said", "drop", "near"]
    assert search.query_tokens("Ünïcode ÉTÉ 日本") == ["ünïcode", "été", "日本"]
    assert search.query_tokens("a b c -- ** ()") == []


QUERY_TEXT = st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from('"*():^-+{}NEARORAND '), max_size=80)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(QUERY_TEXT)
def test_match_expression_never_carries_input_quotes_or_syntax(query: str) -> None:
    tokens = search.query_tokens(query)
    expression = search.match_expression(tokens)
    assert all('"' not in t and t for t in tokens)
    assert expression == " OR ".join(f'"{t}"' for t in tokens)
    if tokens:  # and FTS5 accepts it as a plain disjunction of phrases
        with sqlite3.connect(":memory:") as db:
            db.execute("CREATE VIRTUAL TABLE t USING fts5 (body, tokenize = 'unicode61 remove_diacritics 2')")
            db.execute("INSERT INTO t VALUES ('said drop near')")
            db.execute("SELECT rowid FROM t WHERE t MATCH ?", (expression,)).fetchall()


def test_fts_tables_are_per_scope_and_safe_to_splice() -> None:
    a, b = search.fts_table(Scope("acme", "research")), search.fts_table(Scope("acme", "ops"))
    assert a != b
    for name in (a, b):
        assert name.startswith("fts_") and set(name[4:]) <= set(string.hexdigits.lower())


def test_cursor_sealer_round_trip_and_tampering() -> None:
    sealer = search.CursorSealer(os.urandom(32))
    cursor = search.PageCursor("sha256:" + "1" * 64, search.PROFILE, 1_700_000_000_000, 7, 10, "sha256:" + "2" * 64)
    token = sealer.seal(cursor)
    assert sealer.open(token) == cursor
    assert len(token) <= CONTRACT.limit("page_cursor.max_bytes")
    for i in range(0, len(token), max(1, len(token) // 16)):
        flipped = token[:i] + ("A" if token[i] != "A" else "B") + token[i + 1:]
        assert sealer.open(flipped) is None
    assert sealer.open(token[:-2]) is None
    assert sealer.open(token + "A") is None
    assert sealer.open("") is None
    assert sealer.open("not base64 !") is None
    assert search.CursorSealer(os.urandom(32)).open(token) is None  # another key
    other_purpose = Sealer(os.urandom(32), associated_data=b"engram-memory-mcp/request-state/v1")
    assert sealer.open(other_purpose.seal({"x": 1})) is None
    # A well-sealed token with the wrong claims is no cursor either.
    key = os.urandom(32)
    raw = Sealer(key, associated_data=search.CURSOR_AAD)
    assert search.CursorSealer(key).open(raw.seal({"request": "x"})) is None


# -- envelopes ------------------------------------------------------------------------------------


def test_tool_result_carries_the_envelope_twice() -> None:
    for outcome in (Outcome(value={"records": [], "note": "é ü 日本"}), Outcome(code="STALE_PAGE")):
        env = envelope(outcome, new_audit_id())
        result = tool_result(env)
        assert result.structured_content == env
        assert json.loads(result.content[0].text) == env
        assert result.is_error is (not outcome.ok)
    failure = envelope(Outcome(code="STALE_PAGE"), "aud_x")
    spec = CONTRACT.errors["STALE_PAGE"]
    assert failure == {"ok": False, "auditId": "aud_x", "redactionClass": "high",
                       "error": {"code": "STALE_PAGE", "message": spec.message, "retriable": spec.retriable}}
    success = envelope(Outcome(value={"a": 1}), "aud_y")
    assert success == {
        "ok": True,
        "output": {"schema_version": 1, "value": {"a": 1}},
        "auditId": "aud_y",
        "redactionClass": "high",
    }


def test_audit_ids_are_fresh_and_opaque() -> None:
    """What a host mints by default (the server only echoes the host's)."""
    ids = {new_audit_id() for _ in range(200)}
    assert len(ids) == 200
    assert all(CONTRACT.limit("audit_id.min_chars") <= len(i) <= CONTRACT.limit("audit_id.max_chars") for i in ids)


def test_refusal_takes_only_contract_codes() -> None:
    assert Refusal("NOT_FOUND").code == "NOT_FOUND"
    with pytest.raises(ValueError, match="not a contract error code"):
        Refusal("SOMETHING_ELSE")


# -- configuration -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def config_dir(make_reference_dir: Callable[[], ReferenceDir]) -> ReferenceDir:
    return make_reference_dir()


def broken(ref: ReferenceDir, tmp_path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of the configuration with one change, next to the same keys."""
    copy = ReferenceDir(ref.path, ref.host)
    original = ref.config.read_text(encoding="utf-8")
    try:
        copy.edit(change)
        target = ref.path / f"broken-{tmp_path.name}.toml"
        target.write_text(ref.config.read_text(encoding="utf-8"), encoding="utf-8")
    finally:
        ref.config.write_text(original, encoding="utf-8")
    return target


def test_the_generated_configuration_loads(config_dir: ReferenceDir) -> None:
    config = load_config(config_dir.config)
    assert config.audience == config_dir.host.audience
    assert config.tools_for(Scope("acme", "research"), "agent-limited") == frozenset(
        {"engram_memory_search", "engram_memory_get", "engram_memory_capture"})
    assert config.tools_for(Scope("initech", "research"), "agent-full") == frozenset()
    assert config.policy_for(Scope("acme", "ops")).confirm_capture is True
    assert config.derived_key("page-cursor") != config.derived_key("request-state")


def drop(section: str, key: str | None = None) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        if key is None:
            del data[section]
        else:
            del data[section][key]
    return change


def scope_setting(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        data["scopes"][0][key] = value
    return change


CONFIG_ERRORS = {
    "no server table": drop("server"),
    "no audience": drop("server", "audience"),
    "no store": drop("server", "store"),
    "no kek file": drop("server", "kek_file"),
    "no host keys": drop("host_keys"),
    "audience not a string": lambda d: d["server"].update(audience=7),
    "kek file missing": lambda d: d["server"].update(kek_file="keys/absent.bin"),
    "kek file of the wrong size": lambda d: d["server"].update(kek_file="keys/host.pub.pem"),
    "host key missing": lambda d: d["host_keys"].update(
        {"other": {"public_key_file": "keys/absent.pem", "issuers": ["h"], "tenants": ["t"]}}),
    "host key not a key": lambda d: d["host_keys"].update(
        {"other": {"public_key_file": "keys/http-bearer.txt", "issuers": ["h"], "tenants": ["t"]}}),
    "host key as a bare path": lambda d: d["host_keys"].update({"other": "keys/host.pub.pem"}),
    "host key without tenants": lambda d: next(iter(d["host_keys"].values())).pop("tenants"),
    "host key without issuers": lambda d: next(iter(d["host_keys"].values())).pop("issuers"),
    "host key trusted for no tenant": lambda d: next(iter(d["host_keys"].values())).update(tenants=[]),
    "capture-denied principals as text": scope_setting("capture_denied_principals", "agent-x"),
    "scope without tenant": lambda d: d["scopes"][0].pop("tenant"),
    "scope without principals": lambda d: d["scopes"][0].pop("principals"),
    "unknown tool granted": lambda d: d["scopes"][0]["principals"].update({"agent-x": ["engram_memory_admin"]}),
    "unknown admission policy": scope_setting("admission_policy", "accept-if-nice"),
    "same scope twice": lambda d: d["scopes"].append(dict(d["scopes"][0])),
    "ttl zero": scope_setting("confirmation_ttl_seconds", 0),
    "ttl above the contract's maximum": scope_setting(
        "confirmation_ttl_seconds", CONTRACT.limit("confirmation.ttl.max") + 1
    ),
    "ttl negative": scope_setting("confirmation_ttl_seconds", -5),
    "ttl as text": scope_setting("confirmation_ttl_seconds", "20"),
    "ttl as a boolean": scope_setting("confirmation_ttl_seconds", True),
    "memory switch as text": scope_setting("memory", "false"),
    "retain switch as text": scope_setting("allow_retain", "false"),
    "confirmation switch as text": scope_setting("confirm_capture", "no"),
}


@pytest.mark.parametrize("case", list(CONFIG_ERRORS))
def test_a_broken_configuration_is_a_config_error(config_dir: ReferenceDir, tmp_path: Path, case: str) -> None:
    path = broken(config_dir, tmp_path, CONFIG_ERRORS[case])
    try:
        with pytest.raises(ConfigError) as caught:
            load_config(path)
        kek = (config_dir.path / "keys" / "kek.bin").read_bytes()
        assert kek.hex() not in str(caught.value) and config_dir.bearer not in str(caught.value)
    finally:
        path.unlink()


def test_an_unreadable_configuration_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        load_config(tmp_path / "absent.toml")
    (tmp_path / "bad.toml").write_text("[server\n", encoding="utf-8")
    with pytest.raises(ConfigError):
        load_config(tmp_path / "bad.toml")


# -- failures inside a call never leak -----------------------------------------------------------------

SECRET = "secret-path /etc/x"
MODES = {"legacy": "legacy", "modern": "2026-07-28"}


def explode(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(SECRET)


@pytest.fixture(scope="module")
def server_dir(make_reference_dir: Callable[[], ReferenceDir]) -> ReferenceDir:
    return make_reference_dir()


@pytest.fixture
def reference(server_dir: ReferenceDir) -> Iterator[ReferenceServer]:
    server = ReferenceServer(load_config(server_dir.config))
    yield server
    server.close()


CALLS: dict[str, Callable[[], dict[str, Any]]] = {
    "engram_memory_search": lambda: search_args("anything"),
    "engram_memory_get": lambda: get_args("mem_aaaa"),
    "engram_memory_capture": capture_args,
    "engram_memory_request_admission": lambda: admission_args("candidate_" + "0" * 64),
}


async def call_in_process(
    server: ReferenceServer, era: str, tool: str, arguments: dict[str, Any], meta: dict[str, Any]
) -> Any:
    """The result or the MCPError a client gets; anything else fails the test."""
    async def accept(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"confirm": True})

    async with Client(server.server, mode=MODES[era], elicitation_callback=accept, cache=None) as client:
        request = types.CallToolRequest(params=types.CallToolRequestParams(
            name=tool, arguments=arguments, _meta=cast(types.RequestParamsMeta, meta)))
        try:
            return await client.session.send_request(request, types.CallToolResult, request_read_timeout_seconds=20)
        except MCPError as error:
            return error


def assert_constant(outcome: Any, tool: str) -> None:
    expected = "MUTATION_OUTCOME_UNKNOWN" if CONTRACT.tools[tool].mutability != "read-only" else "STORE_UNAVAILABLE"
    if isinstance(outcome, MCPError):
        raise AssertionError(
            f"a JSON-RPC error ({outcome.error.code}, {outcome.error.message!r}) instead of an envelope"
        )
    assert SECRET not in outcome.model_dump_json()
    env = check_envelope(tool, outcome)
    assert env["error"]["code"] == expected


FAILURE_POINTS = [
    *(("engine.call", tool) for tool in CALLS),
    *(("engine.replay", tool) for tool in CALLS if CONTRACT.tools[tool].idempotent),  # reads have no replay
    ("audit.append", "engram_memory_search"),
    ("audit.append_in", "engram_memory_capture"),  # a mutation's audit row is written in its own unit of work
]


@pytest.mark.anyio
@pytest.mark.parametrize("era", list(MODES))
@pytest.mark.parametrize(("where", "tool"), FAILURE_POINTS)
async def test_an_unexpected_failure_is_a_constant_envelope(
    reference: ReferenceServer,
    server_dir: ReferenceDir,
    monkeypatch: pytest.MonkeyPatch,
    era: str,
    tool: str,
    where: str,
) -> None:
    owner, attribute = where.split(".")
    monkeypatch.setattr(getattr(reference, owner), attribute, explode)
    outcome = await call_in_process(reference, era, tool, CALLS[tool](), server_dir.host.meta())
    assert_constant(outcome, tool)


@pytest.mark.anyio
@pytest.mark.parametrize("era", list(MODES))
async def test_a_failing_audit_journal_never_leaks_through_a_protocol_refusal(
    reference: ReferenceServer, server_dir: ReferenceDir, monkeypatch: pytest.MonkeyPatch, era: str
) -> None:
    monkeypatch.setattr(reference.audit, "append", explode)
    meta = server_dir.host.meta()
    for tool, arguments, expected in (
        ("engram_memory_nonexistent", {}, UNKNOWN_TOOL),
        ("engram_memory_search", {"query": "x", "purpose_ref": "purpose:other"}, UNTRUSTED),
    ):
        outcome = await call_in_process(reference, era, tool, arguments, meta)
        assert isinstance(outcome, MCPError)
        assert SECRET not in outcome.error.message
        assert outcome.error.message in (expected.message, "Internal server error"), outcome.error


@pytest.mark.anyio
async def test_a_failing_confirmation_store_is_a_constant_envelope(
    reference: ReferenceServer, server_dir: ReferenceDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Modern era: burning the state's nonce fails after an approved retry."""
    monkeypatch.setattr(reference.engine, "consume_state", explode)
    arguments = withdraw_args("candidate_" + "0" * 64)
    meta = server_dir.host.meta()
    async with Client(reference.server, mode="2026-07-28", cache=None,
                      elicitation_callback=lambda c, p: None) as client:  # type: ignore[arg-type]  # declares elicitation, never called
        session = client.session
        first = await session.call_tool("engram_memory_withdraw", arguments, meta=cast(types.RequestParamsMeta, meta),
                                        allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        retry = types.CallToolRequest(params=types.CallToolRequestParams(
            name="engram_memory_withdraw", arguments=arguments, _meta=cast(types.RequestParamsMeta, meta),
            request_state=first.request_state,
            input_responses={"sentropic.engram.memory/confirmation": types.ElicitResult(action="accept",
                                                                                      content={"confirm": True})}))
        outcome = await session.send_request(retry, types.CallToolResult, request_read_timeout_seconds=20)
    assert_constant(outcome, "engram_memory_withdraw")


def test_a_null_binding_is_refused_not_ignored(reference: ReferenceServer) -> None:
    """EMC-HP-014: the key counts as present whatever its value; the SDK client cannot send null, so ask the server
    directly."""
    for value in (None, "", 0, {"token": "x"}):
        with pytest.raises(MCPError) as caught:
            reference.trusted_binding(SimpleNamespace(meta={HOST_BINDING_META_KEY: value}))  # type: ignore[arg-type]  # only meta is read
        assert (caught.value.error.code, caught.value.error.message) == (UNTRUSTED.jsonrpc_code, UNTRUSTED.message)
    assert reference.trusted_binding(SimpleNamespace(meta={})) is None  # type: ignore[arg-type]  # only meta is read
    assert reference.trusted_binding(SimpleNamespace(meta=None)) is None  # type: ignore[arg-type]  # only meta is read


def test_packet_sizes_count_canonical_bytes() -> None:
    value = {"b": "é", "a": [1, 2.5]}
    assert canonical_bytes(value, normalize=False) == '{"a":[1,2.5],"b":"é"}'.encode()


@pytest.mark.parametrize("code", ["CANCELLED", "gate_failed", "DEADLINE_EXCEEDED"])
def test_a_mutation_its_guard_refuses_under_the_lock_commits_nothing(harness: Harness, code: str) -> None:
    """The edge's last word (cancellation, execution window, deadline) is asked inside the unit of work."""
    arguments = capture_args()
    asked: list[bool] = []

    def guard() -> None:
        asked.append(harness.store._db.in_transaction)  # asked while the unit of work holds the store
        raise Refusal(code)

    hooks = SimpleNamespace(last_word=guard, write_audit=lambda tx: None)
    assert harness.engine.call("engram_memory_capture", binding(), arguments, NOW, hooks).code == code
    assert asked == [True]
    with sqlite3.connect(harness.store.path) as db:
        assert db.execute("SELECT count(*) FROM reservations").fetchone()[0] == 0
        assert db.execute("SELECT count(*) FROM candidates").fetchone()[0] == 0
    assert harness.call("engram_memory_capture", arguments).ok
