"""Probe the reference server's erasure beside a reader holding a snapshot, and the modes of its files.

    python tools/probe_erasure.py

A probe, not a test: it prints figures and asserts nothing. It starts
``engram-reference serve`` over stdio on a fresh ``init`` directory, then, while
another process holds a read snapshot of the store open, sends a withdraw (and
then a forget) together with a get from a second thread. For each it prints
the answer, how long the erasure and the concurrent get took, which store files
still hold the wrapped key, ciphertext or text, what ``verify`` lists, and how
soon after the reader lets go the files are clean. Last, the mode of every
store, key and configuration file.
"""

from __future__ import annotations

import secrets
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from engram_mcp.conformance._connect import Connection, Reply, parse_target
from engram_mcp.conformance._host import ElicitationConfirmer, SignedMetaBinding
from engram_mcp.conformance._profile import load_profile
from engram_mcp.conformance._world import capture_arguments
from engram_mcp.reference._init import write_configuration

READER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN")
db.execute("SELECT COUNT(*) FROM journal").fetchone()
print("holding", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
"""
ALL_TOOLS = {"engram_memory_search", "engram_memory_get", "engram_memory_capture",
             "engram_memory_request_admission", "engram_memory_withdraw", "engram_memory_forget"}


def holders(directory: Path, needles: dict[str, bytes]) -> dict[str, list[str]]:
    """Which store files hold each needle, byte for byte."""
    files = {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}
    found = {name: [f for f, data in files.items() if needle in data] for name, needle in needles.items()}
    return {name: where for name, where in found.items() if where}


def erase_beside_reader(conn: Connection, meta: dict[str, Any], config: Path, store: Path, label: str, tool: str,
                        arguments: dict[str, Any], field: str, needles: dict[str, bytes], get: dict[str, Any]) -> None:
    reader = subprocess.Popen([sys.executable, "-c", READER, str(store)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert reader.stdout is not None and reader.stdin is not None
    reader.stdout.readline()
    done: dict[str, tuple[float, Reply]] = {}
    start = time.perf_counter()

    def run(name: str, called: str, args: dict[str, Any]) -> None:
        reply = conn.call(called, args, meta, timeout=90)
        done[name] = (time.perf_counter() - start, reply)

    threads = [threading.Thread(target=run, args=("erase", tool, arguments)),
               threading.Thread(target=run, args=("get", "engram_memory_get", get))]
    for thread in threads:
        thread.start()
        time.sleep(0.01)  # the erasure first
    for thread in threads:
        thread.join()
    value = done["erase"][1].value
    answer = value[field] if value else done["erase"][1].code
    left = holders(store.parent, needles)
    listed = subprocess.run([sys.executable, "-m", "engram_mcp.reference._cli", "verify", "--config", str(config)],
                            capture_output=True, text=True, check=False)  # the listing is read even on failure
    pending = sum(line.startswith("PENDING") for line in listed.stdout.splitlines())
    reader.stdin.write("\n")
    reader.stdin.flush()
    reader.wait(30)
    released = time.perf_counter()
    while holders(store.parent, needles) and time.perf_counter() - released < 30:
        time.sleep(0.05)
    clean = not holders(store.parent, needles)
    print(f"{label}: answer {answer!r}; erasure call {done['erase'][0] * 1000:.0f} ms, concurrent get "
          f"{done['get'][0] * 1000:.0f} ms ({'ok' if done['get'][1].value else done['get'][1].code}); "
          f"files holding it while the reader holds: {left or 'none'}; verify exit {listed.returncode}, "
          f"{pending} pending listed; clean {(time.perf_counter() - released) * 1000:.0f} ms after release: {clean}")


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "ref"
        write_configuration(root, seed="probe")
        config, store = root / "server.toml", root / "store" / "engram.sqlite3"
        profile = load_profile(root / "conformance-profile.toml")
        scope = profile.scope_for()
        principal = scope.principal_with(ALL_TOOLS) if scope else None
        assert scope is not None and principal is not None, "the reference's profile has a primary scope"
        meta = SignedMetaBinding.from_profile(profile).meta(scope, principal)
        purpose = profile.purpose_ref
        command = f"stdio:{sys.executable} -m engram_mcp.reference._cli serve --config {config}"
        conn = Connection(parse_target(command), "legacy", ElicitationConfirmer())
        conn.open()
        try:
            def admit(text: str) -> str:
                cid = conn.call("engram_memory_capture", capture_arguments(purpose, text=text), meta).value[
                    "candidate_id"
                ]
                outcome = conn.call(
                    "engram_memory_request_admission",
                    {"candidate_id": cid, "idempotency_key": f"probe-admit-{secrets.token_hex(8)}"},
                    meta,
                ).value
                return outcome["outcome"]["record_id"]

            other = admit("A record to read meanwhile.")
            word = "zq" + secrets.token_hex(8)
            forgettable = admit(f"Forgettable plan {word}.")
            cid = conn.call("engram_memory_capture", capture_arguments(purpose), meta).value["candidate_id"]
            with closing(sqlite3.connect(f"file:{store}?mode=ro", uri=True)) as db:  # the bytes the withdraw erases
                key, body = db.execute(
                    "SELECT wrapped_key, ciphertext FROM candidates WHERE candidate_id = ?", (cid,)
                ).fetchone()
            get = {"record_id": other, "purpose_ref": purpose}
            erase_beside_reader(
                conn,
                meta,
                config,
                store,
                "withdraw",
                "engram_memory_withdraw",
                {"candidate_id": cid, "idempotency_key": "probe-withdraw-0001", "reason_ref": "reason:probe"},
                "key_destruction",
                {"wrapped key": bytes(key), "ciphertext": bytes(body[13:45])},
                get,
            )
            erase_beside_reader(
                conn,
                meta,
                config,
                store,
                "forget",
                "engram_memory_forget",
                {"record_id": forgettable, "idempotency_key": "probe-forget-0001", "reason_ref": "reason:probe"},
                "projection_invalidation",
                {"text": word[-12:].encode()},
                get,
            )
            paths = [
                store.parent,
                *sorted(store.parent.iterdir()),
                root / "keys",
                *sorted((root / "keys").iterdir()),
                config,
            ]
            print("modes: " + ", ".join(f"{p.relative_to(root)} {stat.S_IMODE(p.stat().st_mode):04o}" for p in paths))
        finally:
            conn.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
