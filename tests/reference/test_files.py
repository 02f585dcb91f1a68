"""Private files and durability: what the reference server writes to disk, with which modes, synced how.

Modes are checked with the process umask at 000, the worst case: every file
must be created private (0600, directories 0700), not narrowed afterwards.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from engram_mcp.reference._config import ConfigError, load_config
from engram_mcp.reference._server import ReferenceServer
from engram_mcp.reference._store import Store
from tests.reference.conftest import ENGRAM, RawStdio, ReferenceDir, init_reference_dir, search_args, stop


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@contextmanager
def umask(value: int) -> Iterator[None]:
    previous = os.umask(value)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.fixture(scope="module")
def open_ref(tmp_path_factory: pytest.TempPathFactory) -> ReferenceDir:
    """A configuration written, then a store served and written to, all with umask 000."""
    with umask(0):
        ref = init_reference_dir(tmp_path_factory.mktemp("modes"))
        raw = RawStdio(ref)
    try:
        raw.start_legacy()
        reply = raw.request(2, "tools/call", {"name": "engram_memory_search", "arguments": search_args("anything"),
                                              "_meta": ref.host.meta()})
        assert reply["result"]["structuredContent"]["ok"]  # and its audit row is written
        assert Path(f"{ref.store}-wal").exists()  # checked while the server runs, so the WAL and SHM exist
        ref.modes = {  # type: ignore[attr-defined]  # the modes seen while the server ran, handed to the tests
            p: mode(p) for p in [ref.store.parent, *ref.store.parent.iterdir()]}
    finally:
        stop(raw.process)
    return ref


def test_configuration_and_keys_are_created_private(open_ref: ReferenceDir) -> None:
    keys = open_ref.path / "keys"
    assert mode(keys) == 0o700
    files = sorted(keys.iterdir())
    assert {p.name for p in files} >= {"kek.bin", "host.key.pem", "host.pub.pem", "http-bearer.txt"}
    for path in [*files, open_ref.config, open_ref.path / "conformance-profile.toml"]:
        assert mode(path) == 0o600, f"{path.name} is {mode(path):04o}"


def test_the_store_directory_and_every_store_file_are_created_private(open_ref: ReferenceDir) -> None:
    modes = {p.name: m for p, m in open_ref.modes.items()}  # type: ignore[attr-defined]  # set by open_ref
    store = open_ref.store.name
    assert modes[open_ref.store.parent.name] == 0o700
    for name in (store, f"{store}-wal", f"{store}-shm", f"{store}.lock"):
        assert modes[name] == 0o600, f"{name} is {modes[name]:04o}"
    assert all(m == 0o600 for name, m in modes.items() if name != open_ref.store.parent.name), modes


def test_verify_warns_when_a_mode_is_loosened(open_ref: ReferenceDir) -> None:
    clean = subprocess.run(
        [*ENGRAM, "verify", "--config", str(open_ref.config)], capture_output=True, text=True, timeout=60
    )
    assert clean.returncode == 0 and "WARN" not in clean.stdout, clean.stdout
    open_ref.store.chmod(0o644)
    open_ref.store.parent.chmod(0o755)
    (open_ref.path / "keys" / "kek.bin").chmod(0o640)
    try:
        loose = subprocess.run(
            [*ENGRAM, "verify", "--config", str(open_ref.config)], capture_output=True, text=True, timeout=60
        )
    finally:
        open_ref.store.chmod(0o600)
        open_ref.store.parent.chmod(0o700)
        (open_ref.path / "keys" / "kek.bin").chmod(0o600)
    warned = [line for line in loose.stdout.splitlines() if line.startswith("WARN")]
    assert loose.returncode == 0, loose.stdout  # a warning, not a failed verification
    assert len(warned) == 3, loose.stdout
    assert any("engram.sqlite3 is mode 0644" in w for w in warned)
    assert any("kek.bin is mode 0640" in w for w in warned)


# -- durability ----------------------------------------------------------------------------


def test_commits_are_synced_in_full_by_default(tmp_path: Path) -> None:
    store = Store(tmp_path / "engram.sqlite3")
    try:
        assert store.synchronous == "full"
    finally:
        store.close()


def test_the_sync_level_is_configurable_and_checked(make_reference_dir: Any) -> None:
    ref = make_reference_dir()
    assert load_config(ref.config).synchronous == "full"  # as init writes it
    ref.edit(lambda data: data["server"].update(synchronous="normal"))
    config = load_config(ref.config)
    server = ReferenceServer(config)
    try:
        assert isinstance(server.store, Store) and server.store.synchronous == "normal"
    finally:
        server.close()
    ref.edit(lambda data: data["server"].update(synchronous="off"))
    with pytest.raises(ConfigError, match="synchronous"):
        load_config(ref.config)
