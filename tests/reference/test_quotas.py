"""Bounded resources: quotas, expiry of pending candidates, purge of confirmation states, bounded audit.

Quotas per tenant and per principal (pending candidates, bytes, calls per
window) refuse a call with RATE_LIMITED, retriable, and nothing of it is
stored. A pending candidate past its lifetime is shredded like a withdraw.
Consumed confirmation states are deleted once they can no longer be replayed,
and the audit rows of refused calls are compacted behind a checkpoint that
``engram-reference verify`` still verifies.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from engram_mcp.contract.binding import BINDING_CLOCK_SKEW, CONFIRMATION_TTL_MAX, Binding
from engram_mcp.reference._audit import AuditJournal
from engram_mcp.reference._config import ConfigError, load_config
from engram_mcp.reference._core import Engine
from engram_mcp.reference._crypto import AesGcmCipher
from engram_mcp.reference._envelope import Outcome
from engram_mcp.reference._policy import AcceptAll, ScopePolicy
from engram_mcp.reference._quotas import CallWindow, Expiry, Quota, Quotas, ResourceLimits
from engram_mcp.reference._sqlite_tx import SqliteTransaction
from engram_mcp.reference._store import Store
from tests.reference.conftest import (
    CONTRACT,
    ENGRAM,
    PURPOSE,
    ReferenceDir,
    admission_args,
    capture_args,
    forget_args,
    init_reference_dir,
    stdio_client_for,
    withdraw_args,
)

NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
OFF = Quota(pending_candidates=0, bytes=0, calls_per_window=0)
TABLES = ("candidates", "journal", "reservations", "records", "erasures")


def caller(principal: str = "agent-1", tenant: str = "tenant-a", workspace: str = "workspace-1") -> Binding:
    return Binding(tenant=tenant, workspace=workspace, principal=principal, agent_id="agent", session="session",
                   purpose_ref=PURPOSE, issuer="host", audience="aud", issued_at=0, expires_at=0, token_id="jti-1")


def limits(tenant: Quota = OFF, principal: Quota = OFF, **expiry: int) -> ResourceLimits:
    return ResourceLimits(quotas=Quotas(window_seconds=60, tenant=tenant, principal=principal),
                          expiry=replace(Expiry(), **expiry))


class Engines:
    """An Engine on a real SQLite file, with the resource limits a test gives it."""

    def __init__(self, path: Path, resource_limits: ResourceLimits) -> None:
        self.store = Store(path)
        policy = ScopePolicy(admission=AcceptAll(), allow_retain=False, retention_ceiling=timedelta(days=30),
                             consented_families=frozenset(), confirm_capture=False, confirm_admission=False,
                             confirmation_ttl=timedelta(seconds=20))
        self.engine = Engine(self.store, AesGcmCipher(os.urandom(32)), lambda scope: policy, os.urandom(32),
                             limits=resource_limits)

    def call(self, tool: str, arguments: dict[str, Any], who: Binding | None = None, now: datetime = NOW) -> Outcome:
        return self.engine.call(tool, who or caller(), arguments, now)

    def capture(self, who: Binding | None = None, now: datetime = NOW, **kw: Any) -> Outcome:
        return self.call("engram_memory_capture", capture_args(**kw), who, now)

    def counts(self) -> dict[str, int]:
        with self.store.read() as db:
            return {table: db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] for table in TABLES}


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Any]:
    opened: list[Engines] = []

    def build(resource_limits: ResourceLimits) -> Engines:
        engines = Engines(tmp_path / f"store-{len(opened)}.sqlite3", resource_limits)
        opened.append(engines)
        return engines

    yield build
    for engines in opened:
        engines.store.close()


def test_rate_limited_is_retriable_and_every_tool_may_send_it() -> None:
    error = CONTRACT.errors["RATE_LIMITED"]
    assert error.retriable is True
    assert set(error.tools) == set(CONTRACT.tools)


# -- pending candidates -----------------------------------------------------------------


def test_the_pending_quota_per_principal_refuses_and_stores_nothing(make: Any) -> None:
    engines = make(limits(principal=Quota(pending_candidates=3, bytes=0, calls_per_window=0)))
    first = capture_args()
    assert engines.call("engram_memory_capture", first).ok
    assert all(engines.capture().ok for _ in range(2))
    before = engines.counts()
    refused = engines.capture()
    assert refused.code == "RATE_LIMITED"
    assert engines.counts() == before, "a refused capture stores nothing: no candidate, event or reservation"
    # A retry of a completed capture is a replay, not a new candidate: never refused by the quota.
    assert engines.call("engram_memory_capture", first).value["status"] == "duplicate_exact"
    # Another principal of the same tenant has its own count.
    assert engines.capture(caller("agent-2")).ok
    # Ending one pending candidate makes room again.
    cid = engines.call("engram_memory_capture", first).value["candidate_id"]
    assert engines.call("engram_memory_withdraw", withdraw_args(cid)).ok
    assert engines.capture().ok
    assert engines.capture().code == "RATE_LIMITED"


def test_the_pending_quota_per_tenant_spans_its_workspaces_and_principals(make: Any) -> None:
    engines = make(limits(tenant=Quota(pending_candidates=4, bytes=0, calls_per_window=0)))
    holders = [caller("agent-1"), caller("agent-2"), caller("agent-1", workspace="workspace-2"), caller("agent-3")]
    assert all(engines.capture(who).ok for who in holders)
    before = engines.counts()
    assert engines.capture(caller("agent-4", workspace="workspace-2")).code == "RATE_LIMITED"
    assert engines.counts() == before
    assert engines.capture(caller("agent-1", tenant="tenant-b")).ok  # another tenant is not counted
    # An admitted candidate is no longer pending: room for one more.
    cid = engines.capture(caller("agent-9", tenant="tenant-b")).value["candidate_id"]
    assert engines.call("engram_memory_request_admission", admission_args(cid), caller("agent-9", tenant="tenant-b")).ok
    pending = engines.store._db.execute(
        "SELECT candidate_id FROM candidates WHERE tenant = 'tenant-a' AND state = 'pending' LIMIT 1").fetchone()[0]
    assert engines.call("engram_memory_request_admission", admission_args(pending), holders[0]).ok
    assert engines.capture(caller("agent-4", workspace="workspace-2")).ok


def test_the_byte_quota_counts_pending_and_admitted_candidates(make: Any) -> None:
    text = "x" * 20_000
    engines = make(limits(principal=Quota(pending_candidates=0, bytes=100_000, calls_per_window=0)))
    first = engines.capture(text=f"First {text}")
    assert first.ok
    admitted = engines.call("engram_memory_request_admission", admission_args(first.value["candidate_id"]))
    assert admitted.value["outcome"]["status"] == "accepted"
    assert engines.capture(text=f"Second {text}").ok  # the admitted one still counts: about 2 x 42 KB sealed
    before = engines.counts()
    assert engines.capture(text=f"Third {text}").code == "RATE_LIMITED"
    assert engines.counts() == before
    assert engines.capture(text="A short one.").ok  # a smaller capture still fits
    assert engines.capture(caller("agent-2"), text=f"Other {text}").ok  # per principal
    # A forgotten record no longer holds bytes.
    assert engines.call("engram_memory_forget", forget_args(admitted.value["outcome"]["record_id"])).ok
    assert engines.capture(text=f"Third {text}").ok


def test_the_call_window_counts_per_principal_and_per_tenant(make: Any) -> None:
    store = make(limits()).store
    window = CallWindow(Quotas(window_seconds=10, tenant=Quota(0, 0, 5), principal=Quota(0, 0, 3)), store)
    start = 1_000_000.0
    assert [window.admit("t", "a", start + i) for i in range(4)] == [True, True, True, False]
    assert window.admit("t", "b", start + 1) and window.admit("t", "b", start + 2)
    assert not window.admit("t", "c", start + 3), "the tenant's five calls are spent"
    assert window.admit("u", "a", start + 3), "another tenant has its own window"
    assert window.admit("t", "a", start + 10), "the next window starts afresh"
    assert store.synchronous == "full", "the counters' commit leaves the store's durability as configured"
    # Shared budget across handles and processes: tests/reference/test_shared_counters.py.


# -- expiry ----------------------------------------------------------------------------------


def test_an_expired_pending_candidate_is_shredded_like_a_withdraw(make: Any) -> None:
    engines = make(
        limits(principal=Quota(pending_candidates=1, bytes=0, calls_per_window=0), pending_candidate_seconds=60)
    )
    old = engines.capture(now=NOW).value["candidate_id"]
    assert engines.capture(now=NOW + timedelta(seconds=30)).code == "RATE_LIMITED"
    later = NOW + timedelta(seconds=61)
    fresh = engines.capture(now=later)  # the sweep before it shreds the old one, which frees the quota
    assert fresh.ok, fresh.code
    row = engines.store._db.execute("SELECT * FROM candidates WHERE candidate_id = ?", (old,)).fetchone()
    assert (row["state"], row["ciphertext"], row["wrapped_key"]) == ("withdrawn", None, None)
    assert row["payload_digest"].startswith("hmac-"), "its digest is keyed, as a withdraw keys it"
    erasure = engines.store._db.execute("SELECT subject FROM erasures WHERE subject_id = ?", (old,)).fetchone()
    assert erasure is not None and erasure["subject"] == "candidate_key"
    events = [json.loads(r["event"]) for r in engines.store._db.execute("SELECT event FROM journal ORDER BY cursor")]
    expiry = [e for e in events if e.get("candidate_id") == old and e.get("to_state") == "withdrawn"]
    assert len(expiry) == 1 and expiry[0]["reason_ref"] == "reason:pending-expired"
    for tool, arguments in (
        ("engram_memory_request_admission", admission_args(old)),
        ("engram_memory_withdraw", withdraw_args(old)),
    ):
        assert engines.call(tool, arguments, now=later).code == "NOT_FOUND"
    # The fresh candidate is within its lifetime and is admitted normally.
    assert engines.call("engram_memory_request_admission", admission_args(fresh.value["candidate_id"]), now=later).ok


def test_a_candidate_past_its_lifetime_is_never_admitted_even_before_the_sweep(make: Any) -> None:
    engines = make(limits(pending_candidate_seconds=60))
    cid = engines.capture(now=NOW).value["candidate_id"]
    engines.engine.expire_pending = lambda now, **_: 0  # no sweep at all
    late = engines.call("engram_memory_request_admission", admission_args(cid), now=NOW + timedelta(seconds=61))
    assert late.code == "NOT_FOUND"


def _count_looks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every look for due pending candidates the store is asked for, by its cutoff."""
    looks: list[int] = []
    original = SqliteTransaction.pending_due

    def counted(self: SqliteTransaction, created_before_ms: int, limit: int) -> Any:
        looks.append(created_before_ms)
        return original(self, created_before_ms, limit)

    monkeypatch.setattr(SqliteTransaction, "pending_due", counted)
    return looks


def _state(engines: Engines, candidate_id: str) -> str:
    row = engines.store._db.execute("SELECT state FROM candidates WHERE candidate_id = ?", (candidate_id,)).fetchone()
    return str(row["state"])


def test_the_sweep_before_a_mutation_asks_the_store_only_once_a_candidate_can_be_due(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    engines = make(limits(pending_candidate_seconds=60))
    looks = _count_looks(monkeypatch)
    at = lambda seconds: NOW + timedelta(seconds=seconds)  # noqa: E731 - a shorthand for the instants of this test
    first = engines.capture(now=at(0)).value["candidate_id"]
    assert len(looks) == 1, "the first mutation looks"
    engines.capture(now=at(30))
    assert len(looks) == 1, "nothing can be due for a lifetime less the clock skew: no look"
    engines.capture(now=at(60 - BINDING_CLOCK_SKEW + 1))
    assert len(looks) == 2, "past the window it looks again, and finds the first candidate due at 60 s"
    engines.capture(now=at(59))
    assert len(looks) == 2 and _state(engines, first) == "pending"
    engines.capture(now=at(61))
    assert _state(engines, first) == "withdrawn", "not shredded as soon as it was due"


def test_a_candidate_another_process_made_is_swept_once_due(make: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    engines = make(limits(pending_candidate_seconds=60))
    other = Engines(engines.store.path, limits(pending_candidate_seconds=60))  # a second server on the same file
    try:
        looks = _count_looks(monkeypatch)
        engines.capture(now=NOW)  # looks: nothing pending, so quiet for the lifetime less the skew
        # Made after that look, on a clock 2 s behind (within the skew): due at 58 s on this one's clock.
        theirs = other.capture(now=NOW - timedelta(seconds=2)).value["candidate_id"]
        engines.capture(now=NOW + timedelta(seconds=50))
        assert len(looks) == 2, "each engine looked once"
        engines.capture(now=NOW + timedelta(seconds=59))
        assert _state(engines, theirs) == "withdrawn", "the other process's candidate was left past its lifetime"
    finally:
        other.store.close()


# -- confirmation states ---------------------------------------------------------------------


def test_consumed_states_are_purged_once_they_cannot_be_replayed(make: Any) -> None:
    engines = make(limits())
    engine = engines.engine
    # A host reference may be approved a skew ahead and honoured a skew past its expiry (host wiring EMC-HP-065),
    # and on a shared store the purging replica's clock may run one more skew ahead of the honouring one.
    lifetime = timedelta(seconds=CONFIRMATION_TTL_MAX + 3 * BINDING_CLOCK_SKEW)
    assert engine.consume_state("nonce-old", NOW)
    assert not engine.consume_state("nonce-old", NOW + lifetime - timedelta(seconds=1)), (
        "single use within its lifetime"
    )
    assert engine.consume_state("nonce-new", NOW + lifetime + timedelta(seconds=1))
    kept = {row[0] for row in engines.store._db.execute("SELECT nonce FROM consumed_states")}
    assert kept == {"nonce-new"}
    assert not engine.consume_state("nonce-new", NOW + lifetime + timedelta(seconds=2))
    # An idle server purges them too, on its periodic housekeeping.
    engine.housekeeping(NOW + 2 * lifetime + timedelta(seconds=2))
    assert engines.store._db.execute("SELECT COUNT(*) FROM consumed_states").fetchone()[0] == 0


# -- audit rows of refused calls ---------------------------------------------------------------


def test_refused_audit_rows_are_compacted_and_the_chains_still_verify(tmp_path: Path) -> None:
    store = Store(tmp_path / "audit.sqlite3")
    try:
        journal = AuditJournal(store, refused_rows=10)
        for i in range(200):
            journal.append(f"audit_{i:032x}", caller(), "engram_memory_get", "ok" if i % 20 == 0 else "NOT_FOUND")
        with store.read() as db:
            chains = dict(db.execute("SELECT chain, COUNT(*) FROM audit GROUP BY chain").fetchall())
            checkpoint = db.execute("SELECT * FROM audit_checkpoints WHERE chain = 'refused'").fetchone()
        assert chains["refused"] <= 10 + 1, chains  # the bound, plus the slack of one batch
        assert chains["main"] >= 10  # every answered call is kept, and each compaction is recorded there
        assert checkpoint["rows_compacted"] == 190 - chains["refused"]
        assert journal.verify() == []
        # Removing one more refused row, or moving the checkpoint, breaks verification.
        with store.write() as db:
            db.execute("DELETE FROM audit WHERE seq = (SELECT MIN(seq) FROM audit WHERE chain = 'refused')")
        assert journal.verify() != []
    finally:
        store.close()


def test_a_moved_checkpoint_is_caught_by_the_main_chain(tmp_path: Path) -> None:
    store = Store(tmp_path / "audit.sqlite3")
    try:
        journal = AuditJournal(store, refused_rows=3)
        for i in range(20):
            journal.append(f"audit_{i:032x}", caller(), "engram_memory_get", "NOT_FOUND")
        assert journal.verify() == []
        with store.write() as db:
            first = db.execute(
                "SELECT seq, entry_hash FROM audit WHERE chain = 'refused' ORDER BY seq LIMIT 1"
            ).fetchone()
            db.execute("DELETE FROM audit WHERE seq = ?", (first["seq"],))
            db.execute(
                "UPDATE audit_checkpoints SET through_seq = ?, entry_hash = ?", (first["seq"], first["entry_hash"])
            )
        assert journal.verify() != [], "a checkpoint the main chain does not vouch for"
    finally:
        store.close()


# -- over MCP: server.toml, RATE_LIMITED on the wire, engram-reference verify ----------------------


def configure(ref: ReferenceDir, **replacements: str) -> None:
    """Change quota and expiry lines that ``engram-reference init`` wrote (section.key = value)."""
    text = ref.config.read_text(encoding="utf-8")
    for dotted, value in replacements.items():
        section, key = dotted.rsplit("__", 1)
        header = f"[{section.replace('__', '.')}]\n"
        start = text.index(header) + len(header)
        line_start = text.index(f"{key} = ", start)
        line_end = text.index("\n", line_start)
        text = text[:line_start] + f"{key} = {value}" + text[line_end:]
    ref.config.write_text(text, encoding="utf-8")


def test_init_writes_the_quota_and_expiry_keys_with_their_defaults(tmp_path: Path) -> None:
    ref = init_reference_dir(tmp_path / "engram")
    assert load_config(ref.config).limits == ResourceLimits()
    settings = ref.settings()
    assert set(settings["quotas"]) == {"window_seconds", "tenant", "principal"}
    assert set(settings["quotas"]["principal"]) == {"pending_candidates", "bytes", "calls_per_window", "ledger_bytes"}
    assert set(settings["expiry"]) == {"pending_candidate_seconds", "refused_audit_rows"}


@pytest.mark.parametrize("line", ["quotas__principal__bytes = -1", "quotas__window_seconds = 0",
                                  "quotas__principal__ledger_bytes = -5",
                                  'expiry__pending_candidate_seconds = "soon"', "quotas__tenant__bytes = true"])
def test_a_bad_quota_setting_is_a_config_error(tmp_path: Path, line: str) -> None:
    ref = init_reference_dir(tmp_path / "engram")
    key, value = line.split(" = ")
    configure(ref, **{key: value})
    with pytest.raises(ConfigError):
        load_config(ref.config)


def db_bytes(ref: ReferenceDir) -> int:
    return sum(p.stat().st_size for p in ref.store.parent.iterdir() if p.name.startswith(ref.store.name))


@pytest.mark.anyio
async def test_captures_over_the_pending_quota_are_rate_limited_over_stdio(tmp_path: Path) -> None:
    """The probe: 48 large captures by one principal with a pending quota of 8."""
    ref = init_reference_dir(tmp_path / "engram")
    configure(ref, quotas__principal__pending_candidates="8")
    big = "y" * 60_000
    answers: list[str] = []
    sizes: list[int] = []
    async with stdio_client_for(ref, "legacy") as client:
        sizes.append(db_bytes(ref))
        for i in range(48):
            result = await client.call("engram_memory_capture", capture_args(f"Bulk {i} {big}", context=big))
            answers.append("ok" if result.ok else str(result.code))
            if not result.ok:
                assert result.env["error"]["retriable"] is True
            sizes.append(db_bytes(ref))
    admitted_growth, refused_growth = sizes[8] - sizes[0], sizes[48] - sizes[8]
    print(f"\n48 captures of ~120 KB text, pending quota 8: {answers.count('ok')} committed, "
          f"{answers.count('RATE_LIMITED')} RATE_LIMITED; store files +{admitted_growth / 1e6:.2f} MB over the 8 "
          f"committed, +{refused_growth / 1e6:.3f} MB over the 40 refused")
    assert answers == ["ok"] * 8 + ["RATE_LIMITED"] * 40
    with sqlite3.connect(ref.store) as db:
        assert db.execute("SELECT COUNT(*) FROM candidates").fetchone()[0] == 8
        assert db.execute("SELECT COUNT(*) FROM reservations").fetchone()[0] == 8
    # A refused capture stores no body, only its audit row (and the WAL frames of that row): 40 of them
    # grow the files less than two committed captures do, where unbounded they would add 40 bodies.
    assert refused_growth < admitted_growth / 4


@pytest.mark.anyio
async def test_calls_over_the_window_are_rate_limited_and_verify_passes(tmp_path: Path) -> None:
    ref = init_reference_dir(tmp_path / "engram")
    configure(
        ref, quotas__principal__calls_per_window="5", quotas__window_seconds="3600", expiry__refused_audit_rows="4"
    )
    async with stdio_client_for(ref, "legacy") as client:
        codes = []
        for i in range(30):
            result = await client.call("engram_memory_capture", capture_args(f"Call {i}."))
            codes.append("ok" if result.ok else result.code)
        other = await client.call(
            "engram_memory_capture", capture_args("Another principal."), principal="agent-limited"
        )
    assert codes == ["ok"] * 5 + ["RATE_LIMITED"] * 25
    assert other.ok
    with sqlite3.connect(ref.store) as db:
        assert db.execute("SELECT COUNT(*) FROM candidates").fetchone()[0] == 6
        refused = db.execute("SELECT COUNT(*) FROM audit WHERE chain = 'refused'").fetchone()[0]
    assert refused <= 4 + 1, "the 25 refused calls' audit rows are compacted"
    done = subprocess.run([*ENGRAM, "verify", "--config", str(ref.config)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.anyio
async def test_an_idle_server_shreds_expired_candidates_by_itself(tmp_path: Path) -> None:
    ref = init_reference_dir(tmp_path / "engram")
    configure(ref, expiry__pending_candidate_seconds="1")
    async with stdio_client_for(ref, "legacy") as client:
        cid = (await client.call("engram_memory_capture", capture_args("Left undecided."))).value["candidate_id"]
        deadline = time.monotonic() + 20  # a generous bound on a one-second sweep, not a speed claim
        while True:
            with sqlite3.connect(ref.store) as db:
                state, key = db.execute(
                    "SELECT state, wrapped_key FROM candidates WHERE candidate_id = ?", (cid,)
                ).fetchone()
            if state == "withdrawn":
                break
            assert time.monotonic() < deadline, "no sweep shredded the expired candidate"
            await anyio.sleep(0.2)
        assert key is None
        assert (await client.call("engram_memory_withdraw", withdraw_args(cid))).code == "NOT_FOUND"


def test_an_older_store_gains_capture_times_sizes_and_chains(tmp_path: Path) -> None:
    """The migration backfills what the bounds need from the journal, and old audit rows stay verifiable."""
    from engram_mcp.contract import ZERO_DIGEST, profile_digest
    from engram_mcp.reference._store import MIGRATIONS

    ours = next(i for i, script in enumerate(MIGRATIONS) if "created_ms" in script)
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as db:
        for number, script in enumerate(MIGRATIONS[:ours], start=1):
            db.executescript(f"{script}\nPRAGMA user_version = {number};")
        event = {"operation": "capture", "recorded_at": "2026-01-15T12:00:00.250Z"}
        db.execute("INSERT INTO journal VALUES (1, 't', 'w', ?, 'h', 'p')", (json.dumps(event),))
        db.execute(
            "INSERT INTO candidates (candidate_id, tenant, workspace, principal, state, record_id, payload_digest, "
            "created_cursor, ciphertext, wrapped_key) VALUES ('c1', 't', 'w', 'p', 'pending', 'mem_a', 'd', 1, ?, ?)",
            (b"\x01" * 300, b"k" * 40),
        )
        entry = {"audit_id": "audit_1", "outcome": "NOT_FOUND"}
        db.execute(
            "INSERT INTO audit (entry, entry_hash, previous_hash) VALUES (?, ?, ?)",
            (json.dumps(entry), profile_digest("audit-entry", {**entry, "previous_hash": ZERO_DIGEST}), ZERO_DIGEST),
        )
    store = Store(path)
    try:
        row = store._db.execute("SELECT created_ms, body_bytes FROM candidates WHERE candidate_id = 'c1'").fetchone()
        assert (row["created_ms"], row["body_bytes"]) == (
            int(datetime(2026, 1, 15, 12, 0, 0, 250_000, tzinfo=UTC).timestamp() * 1000),
            300,
        )
        journal = AuditJournal(store, refused_rows=1)
        assert journal.verify() == []  # the old mixed chain is the main chain
        for i in range(5):
            journal.append(f"audit_{i:032x}", caller(), "engram_memory_get", "NOT_FOUND")
        assert journal.verify() == []
    finally:
        store.close()
