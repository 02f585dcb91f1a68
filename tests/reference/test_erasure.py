"""Erasure you can trust: withdraw and forget answer `complete` only when no store file still holds what they erased.

A reader holding an old snapshot of the SQLite store (another process, a
backup, ``verify``, an ``sqlite3`` shell) keeps the write-ahead log from being
reset, so the erased bytes stay in the ``-wal`` file. These tests open such a
reader beside a real server, then scan every file in the store directory, byte
for byte, for the wrapped key, the ciphertext and the forgotten text: the
answer is `pending` or the files are clean, the erasure finishes by itself
once the reader lets go (also across a restart), ``verify`` lists it
meanwhile, and other calls are answered all along.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest

from engram_mcp.reference._core import Engine
from engram_mcp.reference._crypto import KEYED_DIGEST_PREFIX, AesGcmCipher
from engram_mcp.reference._policy import AcceptAll, RejectAll
from engram_mcp.reference._ports import Scope
from engram_mcp.reference._sqlite import sqlite3
from engram_mcp.reference._store import MIGRATIONS, Store
from tests.reference.conftest import (
    ENGRAM,
    McpClient,
    ReferenceDir,
    admission_args,
    admitted,
    capture_args,
    captured,
    forget_args,
    get_args,
    init_reference_dir,
    marker,
    stdio_client_for,
    withdraw_args,
)
from tests.reference.test_core_units import binding, policy

pytestmark = pytest.mark.anyio

SETTLE_WITHIN = 20.0  # seconds for the background retry to finish an erasure once the reader is gone


# -- the store directory, byte for byte ---------------------------------------------------


def directory_files(directory: Path) -> dict[str, bytes]:
    """Every regular file under the store directory: database, -wal, -shm, lock, anything else."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def holders(directory: Path, needles: dict[str, bytes]) -> dict[str, list[str]]:
    """For each needle still present somewhere, the files holding it."""
    files = directory_files(directory)
    found = {name: [f for f, data in files.items() if needle in data] for name, needle in needles.items()}
    return {name: where for name, where in found.items() if where}


def tail(word: str) -> bytes:
    """The part of a marker that survives FTS5 prefix compression of index terms."""
    return word[-12:].encode()


# The reader runs in its own process, as a backup or an sqlite3 shell would. In this
# process it would not hold: reading the store files here (to scan them) closes
# descriptors on them, and closing any descriptor drops every POSIX lock the
# process holds on that file, the reader's shared-memory read mark included.
_READER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN")
db.execute("SELECT COUNT(*) FROM journal").fetchone()  # the snapshot starts at the first read
print("holding", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
db.close()
"""


class SnapshotReader:
    """Another process holding a read snapshot of the store open until released."""

    def __init__(self, store: Path) -> None:
        self.store = store
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", _READER, str(self.store)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None and self.process.stdout.readline() == "holding\n"

    def release(self) -> None:
        if self.process is not None:
            assert self.process.stdin is not None
            self.process.stdin.write("\n")
            self.process.stdin.flush()
            assert self.process.wait(30) == 0
            self.process = None

    def __enter__(self) -> SnapshotReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


@contextmanager
def snapshot_reader(store: Path) -> Iterator[SnapshotReader]:
    reader = SnapshotReader(store)
    reader.start()
    try:
        yield reader
    finally:
        reader.release()


def sealed(store: Path, cid: str) -> dict[str, bytes]:
    with closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True)) as db:
        key, body = db.execute(
            "SELECT wrapped_key, ciphertext FROM candidates WHERE candidate_id = ?", (cid,)
        ).fetchone()
    assert key and body
    return {"wrapped key": bytes(key), "ciphertext": bytes(body[13:45])}  # a stretch of the GCM output itself


def ledger(store: Path) -> list[tuple[str, str, str]]:
    with closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True)) as db:
        return db.execute("SELECT subject, subject_id, state FROM erasures ORDER BY erasure_id").fetchall()


def verify(ref: ReferenceDir) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ENGRAM, "verify", "--config", str(ref.config)], capture_output=True, text=True, timeout=60)


async def until_clean(directory: Path, needles: dict[str, bytes]) -> dict[str, list[str]]:
    """Poll until no file holds any needle, or SETTLE_WITHIN passes; what is still held."""
    deadline = time.monotonic() + SETTLE_WITHIN
    while (left := holders(directory, needles)) and time.monotonic() < deadline:
        await anyio.sleep(0.1)
    return left


async def until_settled(store: Path) -> tuple[str, str, str]:
    """Poll until the latest erasure in the ledger is complete, or SETTLE_WITHIN passes; that erasure."""
    deadline = time.monotonic() + SETTLE_WITHIN
    while (last := ledger(store)[-1])[2] != "complete" and time.monotonic() < deadline:
        await anyio.sleep(0.1)
    return last


async def concurrently(client: McpClient, *calls: tuple[str, dict[str, Any]]) -> list[Any]:
    results: list[Any] = [None] * len(calls)

    async def run(i: int, tool: str, arguments: dict[str, Any]) -> None:
        results[i] = await client.call(tool, arguments)

    async with anyio.create_task_group() as group:
        for i, (tool, arguments) in enumerate(calls):
            group.start_soon(run, i, tool, arguments)
    return results


# -- end to end, over stdio -----------------------------------------------------------------


async def test_withdraw_beside_a_reader_is_pending_until_no_file_holds_the_key(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    ref = init_reference_dir(tmp_path_factory.mktemp("erase-withdraw"))
    directory = ref.store.parent
    async with stdio_client_for(ref, "legacy") as client:
        _, rid = await admitted(client)
        cid = (await captured(client))["candidate_id"]
        needles = sealed(ref.store, cid)
        assert holders(directory, needles), "the sealed candidate is on disk before the withdraw"
        arguments = withdraw_args(cid)
        with snapshot_reader(ref.store):
            withdraw, get = await concurrently(
                client, ("engram_memory_withdraw", arguments), ("engram_memory_get", get_args(rid))
            )
            # Both answered while the reader still holds its snapshot: no call waits on it.
            assert get.value["record"]["record_id"] == rid
            value = withdraw.value
            left = holders(directory, needles)
            assert value["key_destruction"] == "pending" or not left, f"'complete' while {left} still hold the key"
            assert value["key_destruction"] == "pending", "the WAL cannot be emptied under an open snapshot"
            assert left, "the reader pins the old page images, so something must still hold the key"
            assert ledger(ref.store)[-1] == ("candidate_key", cid, "pending")
            listed = verify(ref)  # read-only, beside the serving process and the reader
            assert listed.returncode == 0, listed.stdout + listed.stderr
            assert f"candidate key of {cid}" in listed.stdout
        assert await until_clean(directory, needles) == {}, "the erasure did not finish by itself"
        assert await until_settled(ref.store) == ("candidate_key", cid, "complete")
        assert f"candidate key of {cid}" not in verify(ref).stdout
        # A replay answers what the first call answered.
        assert (await client.call("engram_memory_withdraw", dict(arguments))).value == {**value, "replayed": True}


async def test_forget_beside_a_reader_is_pending_until_no_file_holds_the_text(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    ref = init_reference_dir(tmp_path_factory.mktemp("erase-forget"))
    directory = ref.store.parent
    word = marker()
    async with stdio_client_for(ref, "modern") as client:
        _, rid = await admitted(client, f"Forgettable plan {word}.")
        _, other = await admitted(client)
        needles = {"text": tail(word)}
        assert holders(directory, needles)
        with snapshot_reader(ref.store):
            forget, get = await concurrently(
                client, ("engram_memory_forget", forget_args(rid)), ("engram_memory_get", get_args(other))
            )
            assert get.ok
            value = forget.value
            left = holders(directory, needles)
            assert value["projection_invalidation"] == "pending" or not left, (
                f"'complete' while {left} still hold the text"
            )
            assert value["projection_invalidation"] == "pending"
            assert (
                await client.call("engram_memory_get", get_args(rid))
            ).code == "NOT_FOUND"  # gone at once (EMC-FGT-002)
            assert f"record content of {rid}" in verify(ref).stdout
        assert await until_clean(directory, needles) == {}
        assert await until_settled(ref.store) == ("record_content", rid, "complete")


async def test_without_a_reader_the_erasure_is_complete_and_the_files_are_clean(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    ref = init_reference_dir(tmp_path_factory.mktemp("erase-clean"))
    directory = ref.store.parent
    word = marker()
    async with stdio_client_for(ref, "legacy") as client:
        cid = (await captured(client))["candidate_id"]
        needles = sealed(ref.store, cid)
        withdraw = (await client.call("engram_memory_withdraw", withdraw_args(cid))).value
        assert withdraw["key_destruction"] == "complete"
        assert holders(directory, needles) == {}
        _, rid = await admitted(client, f"Forgettable plan {word}.")
        forget = (await client.call("engram_memory_forget", forget_args(rid))).value
        assert forget["projection_invalidation"] == "complete"
        assert holders(directory, {"text": tail(word)}) == {}
    assert [state for _, _, state in ledger(ref.store)] == ["complete", "complete"]


async def test_a_restart_resumes_a_pending_erasure(tmp_path_factory: pytest.TempPathFactory) -> None:
    ref = init_reference_dir(tmp_path_factory.mktemp("erase-restart"))
    directory = ref.store.parent
    with SnapshotReader(ref.store) as reader:  # started once the store exists
        async with stdio_client_for(ref, "legacy") as client:
            cid = (await captured(client))["candidate_id"]
            needles = sealed(ref.store, cid)
            reader.start()
            assert (await client.call("engram_memory_withdraw", withdraw_args(cid))).value[
                "key_destruction"
            ] == "pending"
        # The first server is gone with the erasure still pending; a new one starts while the reader holds on.
        assert ledger(ref.store)[-1] == ("candidate_key", cid, "pending")
        async with stdio_client_for(ref, "legacy") as client:
            assert ledger(ref.store)[-1][2] == "pending"
            reader.release()
            assert await until_clean(directory, needles) == {}
            assert await until_settled(ref.store) == ("candidate_key", cid, "complete")


async def test_two_servers_on_one_store_erase_truthfully(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Several server processes may share a store (the harness opens one per session); erasure stays truthful."""
    ref = init_reference_dir(tmp_path_factory.mktemp("erase-two"))
    directory = ref.store.parent
    word = marker()
    async with stdio_client_for(ref, "legacy") as first, stdio_client_for(ref, "modern") as second:
        cid = (await captured(first))["candidate_id"]
        needles = sealed(ref.store, cid)
        value = (await second.call("engram_memory_withdraw", withdraw_args(cid))).value
        assert value["key_destruction"] == "pending" or not holders(directory, needles)
        _, rid = await admitted(second, f"Shared plan {word}.")
        forget = (await first.call("engram_memory_forget", forget_args(rid))).value
        assert forget["projection_invalidation"] == "pending" or not holders(directory, {"text": tail(word)})
        assert (await second.call("engram_memory_get", get_args(rid))).code == "NOT_FOUND"
        assert await until_clean(directory, {**needles, "text": tail(word)}) == {}
        assert await until_settled(ref.store) == ("record_content", rid, "complete")
        assert verify(ref).returncode == 0  # verify reads beside both serving processes


def test_processes_opening_a_fresh_store_at_once_migrate_it_once(tmp_path: Path) -> None:
    path = tmp_path / "store" / "engram.sqlite3"
    barrier = threading.Barrier(4)
    opened: list[Store] = []
    failures: list[BaseException] = []

    def open_store() -> None:
        barrier.wait()
        try:
            opened.append(Store(path))
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    try:
        assert failures == []
        assert [store.schema_version for store in opened] == [len(MIGRATIONS)] * 4
    finally:
        for store in opened:
            store.close()


# -- the engine, in process --------------------------------------------------------------------

SCOPE = Scope("tenant-a", "workspace-1")
NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    store = Store(tmp_path / "store" / "engram.sqlite3", erasure_retry_interval=3600)  # settled by hand here
    yield Engine(store, AesGcmCipher(os.urandom(32)), lambda scope: policy(AcceptAll()), os.urandom(32))
    store.close()


def sqlite_store(engine: Engine) -> Store:
    assert isinstance(engine.store, Store)
    return engine.store


def call(engine: Engine, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    outcome = engine.call(tool, binding(), arguments, NOW)
    assert outcome.code is None and outcome.value is not None, outcome.code
    return outcome.value


def test_a_pending_withdraw_settles_once_the_reader_goes(engine: Engine) -> None:
    cid = call(engine, "engram_memory_capture", capture_args())["candidate_id"]
    store = sqlite_store(engine)
    needles = sealed(store.path, cid)
    arguments = withdraw_args(cid)
    with snapshot_reader(store.path):
        value = call(engine, "engram_memory_withdraw", arguments)
        assert value["key_destruction"] == "pending"
        assert [o.subject_id for o in store.erasures.outstanding()] == [cid]
        assert store.erasures.settle() == frozenset()  # still pinned
    assert len(store.erasures.settle()) == 1
    assert store.erasures.outstanding() == []
    # The replay still answers what the call answered, though the erasure has finished since.
    assert call(engine, "engram_memory_withdraw", dict(arguments)) == {**value, "replayed": True}
    assert holders(store.path.parent, needles) == {}  # scanned last: see _READER on reading files in this process


def test_erased_content_keeps_no_plain_payload_digest(engine: Engine) -> None:
    store = sqlite_store(engine)
    cid = call(engine, "engram_memory_capture", capture_args())["candidate_id"]
    call(engine, "engram_memory_withdraw", withdraw_args(cid))
    text = f"Forgettable plan {marker()}."
    admitted_cid = call(engine, "engram_memory_capture", capture_args(text))["candidate_id"]
    rid = call(engine, "engram_memory_request_admission", admission_args(admitted_cid))["outcome"]["record_id"]
    plain = call(engine, "engram_memory_get", get_args(rid))["record"]["payload_digest"]
    call(engine, "engram_memory_forget", forget_args(rid))
    with store.read() as db:
        stored = [row[0] for table in ("candidates", "records", "tombstones")
                  for row in db.execute(f"SELECT payload_digest FROM {table}")]
    assert stored and all(d.startswith(KEYED_DIGEST_PREFIX) for d in stored), stored
    assert store.erasures.outstanding() == []
    # The keyed tombstone still catches the same content captured again.
    again = call(engine, "engram_memory_capture", capture_args(text))["candidate_id"]
    assert (
        call(engine, "engram_memory_request_admission", admission_args(again))["outcome"]["status"]
        == "pending_adjudication"
    )
    call(engine, "engram_memory_withdraw", withdraw_args(again))
    assert store.erasures.outstanding() == []
    leaks = holders(store.path.parent, {"plain digest": plain.encode(), "hex": plain.split(":")[1].encode()})
    assert leaks == {}, f"a guess of the forgotten text is confirmable from {leaks}"


def test_a_store_with_plain_digests_is_rekeyed_on_open(tmp_path: Path) -> None:
    path = tmp_path / "store" / "engram.sqlite3"
    store = Store(path)
    cursor_key = os.urandom(32)
    engine = Engine(store, AesGcmCipher(os.urandom(32)), lambda scope: policy(AcceptAll()), cursor_key)
    cid = call(engine, "engram_memory_capture", capture_args())["candidate_id"]
    with store.write() as db:  # as an older server left it
        db.execute("UPDATE candidates SET payload_digest = ? WHERE candidate_id = ?", ("sha256:" + "c" * 64, cid))
        db.execute("DELETE FROM meta WHERE key = 'stored_digests'")
        db.execute("INSERT INTO tombstones VALUES ('tenant-a', 'workspace-1', ?)", ("sha256:" + "d" * 64,))
    Engine(store, AesGcmCipher(os.urandom(32)), lambda scope: policy(AcceptAll()), cursor_key)
    with store.read() as db:
        stored = [
            row[0]
            for table in ("candidates", "tombstones")
            for row in db.execute(f"SELECT payload_digest FROM {table}")
        ]
    store.close()
    assert len(stored) == 2 and all(d.startswith(KEYED_DIGEST_PREFIX) for d in stored), stored


def test_a_flush_never_holds_the_store_lock(tmp_path: Path) -> None:
    """While a flush keeps trying under a reader, other threads read and write through the store."""
    store = Store(tmp_path / "engram.sqlite3", flush_retry_delays=(0.0, 3.0, 3.0), erasure_retry_interval=3600)
    try:
        with store.write() as db:
            db.execute("INSERT INTO meta VALUES ('first', 'write')")
        with snapshot_reader(store.path):
            with store.write() as db:
                db.execute("INSERT INTO meta VALUES ('pinned', 'by the reader')")
            flushed: list[bool] = []
            flusher = threading.Thread(target=lambda: flushed.append(store.flush_residues()))
            flusher.start()
            time.sleep(0.3)  # past its first try
            with store.write() as db:
                db.execute("INSERT INTO meta VALUES ('during', 'the flush')")
            with store.read() as db:
                assert db.execute("SELECT COUNT(*) FROM meta WHERE key IN ('pinned', 'during')").fetchone()[0] == 2
            assert flusher.is_alive(), "the read or the write waited for the flush to give up"
            flusher.join(30)
            assert flushed == [False]
        assert store.flush_residues()
    finally:
        store.close()


def test_a_rejected_candidate_is_erased_like_a_withdrawn_one(tmp_path: Path) -> None:
    store = Store(tmp_path / "store" / "engram.sqlite3", erasure_retry_interval=3600)
    try:
        engine = Engine(store, AesGcmCipher(os.urandom(32)), lambda scope: policy(RejectAll()), os.urandom(32))
        cid = call(engine, "engram_memory_capture", capture_args())["candidate_id"]
        needles = sealed(store.path, cid)
        assert call(engine, "engram_memory_request_admission", admission_args(cid))["outcome"]["status"] == "rejected"
        assert [(o.subject, o.subject_id) for o in store.erasures.outstanding()] == [("candidate_key", cid)]
        assert len(store.erasures.settle()) == 1
        assert (
            holders(store.path.parent, needles) == {}
        )  # while open: closing the last connection would clean up anyway
    finally:
        store.close()
