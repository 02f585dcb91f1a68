"""The embedded store: durability across restarts and kills, migrations, what reaches the disk, verify, audit.

The on-disk checks read the raw bytes of the SQLite file and of its ``-wal``
and ``-shm`` companions while the server runs, as an attacker with a copy of
the disk would: pending content is sealed (EMC-LIFE-004), admitted content is
plaintext by design, and forgotten content leaves every file.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from engram_mcp.reference._sqlite import sqlite3
from engram_mcp.reference._store import MIGRATIONS, Store
from tests.reference.conftest import (
    ENGRAM,
    PURPOSE,
    McpClient,
    RawStdio,
    ReferenceDir,
    admission_args,
    admitted,
    capture_args,
    captured,
    forget_args,
    get_args,
    init_reference_dir,
    marker,
    search_args,
    stdio_client_for,
    stop,
    store_files,
    withdraw_args,
)
from tests.reference.test_store_contract import OLDER_ROWS, assert_migrated_holdings

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
async def legacy(reference_dir: ReferenceDir) -> AsyncIterator[McpClient]:
    async with stdio_client_for(reference_dir, "legacy") as client:
        yield client


def tail(word: str) -> bytes:
    """The part of a marker that survives FTS5 prefix compression of index terms."""
    return word[-12:].encode()


def where(ref: ReferenceDir, needle: bytes) -> list[str]:
    return [name for name, data in store_files(ref).items() if needle in data]


# -- durability ------------------------------------------------------------------------


async def test_a_restart_keeps_everything(tmp_path_factory: pytest.TempPathFactory) -> None:
    ref = init_reference_dir(tmp_path_factory.mktemp("restart"))
    arguments = capture_args()
    async with stdio_client_for(ref, "legacy") as client:
        capture = (await client.call("engram_memory_capture", arguments)).value
        admission = admission_args(capture["candidate_id"])
        outcome = (await client.call("engram_memory_request_admission", admission)).value
        rid = outcome["outcome"]["record_id"]
    async with stdio_client_for(ref, "modern") as client:
        assert (await client.call("engram_memory_get", get_args(rid))).value["record"]["record_id"] == rid
        assert (await client.call("engram_memory_capture", arguments)).value == {**capture, "status": "duplicate_exact"}
        assert (await client.call("engram_memory_request_admission", admission)).value == {**outcome, "replayed": True}


async def test_a_capture_survives_kill_9(tmp_path_factory: pytest.TempPathFactory) -> None:
    ref = init_reference_dir(tmp_path_factory.mktemp("kill"))
    arguments = capture_args()
    raw = RawStdio(ref)
    try:
        raw.start_legacy()
        reply = raw.request(2, "tools/call", {"name": "engram_memory_capture", "arguments": arguments,
                                              "_meta": ref.host.meta()})
        capture = reply["result"]["structuredContent"]["output"]["value"]
        assert capture["status"] == "committed_pending"
        raw.process.send_signal(signal.SIGKILL)  # no shutdown, no checkpoint, no close
        assert raw.process.wait(10) == -signal.SIGKILL
    finally:
        stop(raw.process)
    async with stdio_client_for(ref, "legacy") as client:
        assert (await client.call("engram_memory_capture", arguments)).value["status"] == "duplicate_exact"
        outcome = (await client.call("engram_memory_request_admission", admission_args(capture["candidate_id"]))).value
        assert outcome["outcome"]["status"] == "accepted"
    assert (
        subprocess.run([*ENGRAM, "verify", "--config", str(ref.config)], capture_output=True, timeout=60).returncode
        == 0
    )


# -- migrations --------------------------------------------------------------------------


def test_a_fresh_store_is_at_the_latest_schema(tmp_path: Path) -> None:
    store = Store(tmp_path / "fresh.sqlite3")
    try:
        assert store.schema_version == len(MIGRATIONS)
        tables = {row[0] for row in store._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"journal", "candidates", "records", "tombstones", "reservations", "consumed_states", "audit"} <= tables
        assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        store.close()


def test_reopening_does_not_migrate_again(tmp_path: Path) -> None:
    path = tmp_path / "again.sqlite3"
    store = Store(path)
    with store.write() as db:
        db.execute("INSERT INTO meta VALUES ('sentinel', 'kept')")
    store.close()
    # Migration 1 creates its tables without IF NOT EXISTS: running it twice would raise.
    store = Store(path)
    try:
        assert store.schema_version == len(MIGRATIONS)
        with store.read() as db:
            assert db.execute("SELECT value FROM meta WHERE key = 'sentinel'").fetchone()[0] == "kept"
    finally:
        store.close()


def test_an_older_store_gains_holdings_counters_equal_to_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "older.sqlite3"
    with sqlite3.connect(path) as db:
        for number, script in enumerate(MIGRATIONS[:-1], start=1):
            db.executescript(f"{script}\nPRAGMA user_version = {number};")
        for sql in OLDER_ROWS:
            db.execute(sql)
    store = Store(path)
    try:
        assert store.schema_version == len(MIGRATIONS)
        assert_migrated_holdings(store)
    finally:
        store.close()


def test_a_store_from_a_newer_server_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "newer.sqlite3"
    Store(path).close()
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    with pytest.raises(RuntimeError):
        Store(path)


# -- what reaches the disk -------------------------------------------------------------------


async def test_pending_content_never_reaches_the_disk(legacy: McpClient, reference_dir: ReferenceDir) -> None:
    word = marker()
    candidate = await captured(legacy, f"Pending secret plan {word}.")
    assert where(reference_dir, tail(word)) == []
    await legacy.call("engram_memory_withdraw", withdraw_args(candidate["candidate_id"]))
    assert where(reference_dir, tail(word)) == []


async def test_rejected_content_never_reaches_the_disk(legacy: McpClient, reference_dir: ReferenceDir) -> None:
    word = marker()
    candidate = await captured(legacy, f"Ops note {word}: " + "pass" + "word: hunter2" + "xyz")
    outcome = (await legacy.call("engram_memory_request_admission", admission_args(candidate["candidate_id"]))).value
    assert outcome["outcome"]["status"] == "rejected"
    assert where(reference_dir, tail(word)) == []


async def test_admitted_content_is_stored_in_plaintext(legacy: McpClient, reference_dir: ReferenceDir) -> None:
    word = marker()
    await admitted(legacy, f"Admitted plan {word}.")
    assert where(reference_dir, tail(word)) != []


async def test_forgotten_content_leaves_every_file(legacy: McpClient, reference_dir: ReferenceDir) -> None:
    word = marker()
    _, rid = await admitted(legacy, f"Forgettable plan {word}.")
    assert where(reference_dir, tail(word)) != []
    assert (await legacy.call("engram_memory_forget", forget_args(rid))).ok
    files = where(reference_dir, tail(word))
    assert files == [], f"forgotten text is still in {files}, in tables {tables_holding(reference_dir, tail(word))}"


def tables_holding(ref: ReferenceDir, needle: bytes) -> list[str]:
    """Which tables still hold ``needle``: a diagnostic for the assertion above."""
    found = []
    with sqlite3.connect(f"file:{ref.store}?mode=ro", uri=True) as db:
        for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            for row in db.execute(f'SELECT * FROM "{name}"'):
                if any(needle in (v if isinstance(v, bytes) else str(v).encode()) for v in row):
                    found.append(name)
                    break
    return found


# -- verify ----------------------------------------------------------------------------------


def verify(ref: ReferenceDir) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ENGRAM, "verify", "--config", str(ref.config)], capture_output=True, text=True, timeout=60)


async def test_verify_passes_a_healthy_store_and_fails_a_tampered_journal(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    ref = init_reference_dir(tmp_path_factory.mktemp("verify"))
    async with stdio_client_for(ref, "legacy") as client:
        await admitted(client)
        await client.call("engram_memory_search", search_args("anything"))
    healthy = verify(ref)
    assert healthy.returncode == 0, healthy.stdout
    assert "store verified" in healthy.stdout
    with sqlite3.connect(ref.store) as db:
        event = json.loads(db.execute("SELECT event FROM journal WHERE cursor = 1").fetchone()[0])
        event["to_state"] = "accepted_current"
        db.execute("UPDATE journal SET event = ? WHERE cursor = 1", (json.dumps(event, sort_keys=True),))
        db.execute("UPDATE holdings SET pending = pending + 1 WHERE holder = 'principal'")
    tampered = verify(ref)
    assert tampered.returncode == 1
    assert "FAIL journal event 1 does not match its hash" in tampered.stdout
    assert "FAIL the quota holdings counters differ from the stored candidates" in tampered.stdout


async def test_verify_fails_a_tampered_audit_entry(tmp_path_factory: pytest.TempPathFactory) -> None:
    ref = init_reference_dir(tmp_path_factory.mktemp("verify-audit"))
    async with stdio_client_for(ref, "legacy") as client:
        await client.call("engram_memory_search", search_args("anything"))
        await client.call("engram_memory_search", search_args("anything else"))
    with sqlite3.connect(ref.store) as db:
        entry = json.loads(db.execute("SELECT entry FROM audit WHERE seq = 1").fetchone()[0])
        entry["outcome"] = "NOT_FOUND"
        db.execute("UPDATE audit SET entry = ? WHERE seq = 1", (json.dumps(entry, sort_keys=True),))
    tampered = verify(ref)
    assert tampered.returncode == 1 and "audit chain broken at entry 1" in tampered.stdout


# -- the audit journal -----------------------------------------------------------------------


def audit_rows(ref: ReferenceDir) -> list[dict[str, Any]]:
    with sqlite3.connect(ref.store) as db:
        return [json.loads(row[0]) for row in db.execute("SELECT entry FROM audit ORDER BY seq")]


async def test_the_audit_journal_has_one_entry_per_call_and_no_content(
    legacy: McpClient, reference_dir: ReferenceDir
) -> None:
    host = legacy.host
    word = marker()
    before = len(audit_rows(reference_dir))
    envelopes = []
    capture = await legacy.call("engram_memory_capture", capture_args(f"Audited plan {word}."))
    envelopes.append(capture)
    cid = capture.value["candidate_id"]
    admission = await legacy.call("engram_memory_request_admission", admission_args(cid))
    envelopes.append(admission)
    rid = admission.value["outcome"]["record_id"]
    envelopes.append(await legacy.call("engram_memory_search", search_args(word)))
    envelopes.append(await legacy.call("engram_memory_get", get_args(rid)))
    envelopes.append(await legacy.call("engram_memory_get", get_args("mem_aaaa")))
    envelopes.append(await legacy.call("engram_memory_forget", forget_args(rid)))
    for tool, arguments, meta in (
        ("engram_memory_nonexistent", {}, host.meta()),
        ("engram_memory_search", {"query": word, "purpose_ref": "purpose:other"}, host.meta()),
    ):
        with pytest.raises(MCPError):
            await legacy.call(tool, arguments, meta, bind=False)
    rows = audit_rows(reference_dir)[before:]
    assert len(rows) == len(envelopes) + 2
    assert [r["audit_id"] for r in rows[: len(envelopes)]] == [e.env["auditId"] for e in envelopes]
    assert [r["outcome"] for r in rows] == ["ok", "ok", "ok", "ok", "NOT_FOUND", "ok", "-32602", "-32603"]
    assert [r["tool"] for r in rows][:6] == [e.tool for e in envelopes]
    everything = json.dumps(audit_rows(reference_dir))
    for secret in (word, cid, rid, PURPOSE):
        assert secret not in everything, "the audit journal holds no content, ids or arguments"
