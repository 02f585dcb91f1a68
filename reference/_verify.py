"""engram-reference verify: the store's integrity, both hash chains, outstanding erasures and file modes.

It opens the store read-only and takes no lock, so it runs beside a serving
process. Its read snapshot does pin the write-ahead log while it runs: an
erasure made meanwhile answers `pending` and finishes once verify is done.
"""

from __future__ import annotations

import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from engram_mcp.reference._audit import AuditJournal
from engram_mcp.reference._config import ServerConfig
from engram_mcp.reference._erasure import pending_lines
from engram_mcp.reference._journal import journal_problems
from engram_mcp.reference._ports import MemoryStore
from engram_mcp.reference._store import MIGRATIONS, SqliteStore, lock_path
from engram_mcp.reference._wiring import open_store

PRIVATE_DIRECTORY = 0o700
PRIVATE_FILE = 0o600


@dataclass
class Findings:
    problems: list[str] = field(default_factory=list)  # verification fails
    warnings: list[str] = field(default_factory=list)  # loosened file modes
    pending_erasures: list[str] = field(default_factory=list)  # erased bytes that may still sit in a store file


def verify_store(config: ServerConfig) -> list[str]:
    """Problems found, as constant descriptions; empty when everything verifies."""
    return inspect_store(config).problems


def inspect_store(config: ServerConfig) -> Findings:
    findings = Findings(warnings=loose_modes(config))
    if config.store_url is not None:  # a shared store: its chains and erasures; the database checks its own pages
        shared = open_store(config, inspect=True)
        try:
            if not getattr(shared, "current", True):  # as for SQLite: an older schema's chains wait for its migration
                findings.problems.append("the store schema is not at the current version")
                return findings
            findings.problems += chain_problems(shared, findings)
        finally:
            shared.close()
        return findings
    if not config.store.exists():
        findings.problems.append("the store file does not exist")
        return findings
    store = SqliteStore(config.store, read_only=True)
    try:
        with store.read() as db:
            if db.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
                findings.problems.append("sqlite integrity check failed")
            current = store.schema_version == len(MIGRATIONS)
            if not current:
                findings.problems.append("the store schema is not at the current version")
        if current:  # an older schema is reported as such; its chains are checked once it is migrated
            findings.problems += chain_problems(store, findings)
    finally:
        store.close()
    return findings


def chain_problems(store: MemoryStore, findings: Findings) -> list[str]:
    """Any store's journal and audit chains, its quota holdings counters, and its outstanding erasures (into
    ``findings``)."""
    with store.snapshot() as reader:
        problems = journal_problems(reader)
        if reader.holdings_drift():
            problems.append("the quota holdings counters differ from the stored candidates")
        findings.pending_erasures = list(pending_lines(reader.outstanding_erasures()))
    return problems + [f"audit chain broken at entry {seq}" for seq in AuditJournal(store).verify()]


def private_paths(config: ServerConfig) -> list[tuple[Path, int]]:
    """Every path that must stay private to the server's user, with the mode it is created with."""
    store = config.store
    paths = [(store.parent, PRIVATE_DIRECTORY)]
    paths += [(Path(f"{store}{suffix}"), PRIVATE_FILE) for suffix in ("", "-wal", "-shm")]
    paths += [(lock_path(store), PRIVATE_FILE), (config.path, PRIVATE_FILE)]
    try:
        data = tomllib.loads(config.path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return paths
    base = config.path.parent
    server = data.get("server", {})
    keys = [entry.get("public_key_file") for entry in data.get("host_keys", {}).values() if isinstance(entry, dict)]
    named = [server.get("kek_file"), server.get("http_bearer_token_file"), *keys]
    for key_file in named:
        if isinstance(key_file, str):
            paths.append((base / key_file, PRIVATE_FILE))
    return paths


def loose_modes(config: ServerConfig) -> list[str]:
    """A warning for each existing private path that group or others may access."""
    warnings = []
    for path, wanted in private_paths(config):
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except OSError:
            continue  # absent (no WAL yet, say): nothing to expose
        if mode & 0o077:
            warnings.append(f"{path} is mode {mode:04o}: group or others can reach it; it should be {wanted:04o}")
    return warnings
