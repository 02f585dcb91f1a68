"""engram-reference init: a working configuration and the matching conformance profile.

The configuration exercises every policy switch the contract depends on: two
tenants, two workspaces, a tenant not opted in, a principal granted only some
tools, gated and ungated scopes, each built-in admission policy, and a short
confirmation TTL so that expiry can be tested in seconds.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Collection
from pathlib import Path
from typing import Any

from engram_mcp.contract import load
from engram_mcp.contract.binding import (
    CONFIRMATION_MODES,
    CONFIRMATION_TTL_MAX,
    generate_host_key,
    private_key_pem,
    public_key_pem,
)
from engram_mcp.reference._config import STORE_SCHEMES, confirmation_toml_lines, transport_toml_lines
from engram_mcp.reference._crypto import write_kek
from engram_mcp.reference._quotas import toml_lines as quota_toml_lines
from engram_mcp.reference._store_config import postgres_toml_lines

ALL_TOOLS = list(load().tools)
PREFIX = "engram_memory_"
READ_AND_CAPTURE = ["engram_memory_search", "engram_memory_get", "engram_memory_capture"]
TTL_SECONDS = 4  # short, so that the harness can watch a confirmation expire
CEILING_SECONDS = 30 * 24 * 3600
PURPOSE = "purpose:conformance"
ISSUER = "conformance-host"

SCOPES: list[dict[str, Any]] = [
    # The main scope: ungated, secret-scanning admission, retain allowed, two consented families.
    # agent-observer is granted capture but has no capture authority here: its captures are UNAUTHORIZED.
    {"tenant": "acme", "workspace": "research", "memory": True, "admission_policy": "secret-scan",
     "allow_retain": True, "consented_families": ["family:alpha", "family:beta"],
     "confirm_capture": False, "confirm_admission": False, "capture_denied_principals": ["agent-observer"]},
    # Same tenant, second workspace: capture and admission need a human confirmation here.
    {"tenant": "acme", "workspace": "ops", "memory": True, "admission_policy": "secret-scan",
     "allow_retain": False, "consented_families": [], "confirm_capture": True, "confirm_admission": True},
    # Second tenant, for isolation: it admits content too, so its records are real targets.
    {"tenant": "globex", "workspace": "research", "memory": True, "admission_policy": "secret-scan",
     "allow_retain": False, "consented_families": [], "confirm_capture": False, "confirm_admission": False},
    # Every decision left to adjudication.
    {"tenant": "globex", "workspace": "triage", "memory": True, "admission_policy": "adjudicate",
     "allow_retain": False, "consented_families": [], "confirm_capture": False, "confirm_admission": False},
    # A tenant that has not opted in: it discovers no tool at all.
    {"tenant": "initech", "workspace": "research", "memory": False, "admission_policy": "secret-scan",
     "allow_retain": False, "consented_families": [], "confirm_capture": False, "confirm_admission": False},
]
# agent-peer is granted every tool too: keys are the principal's own (EMC-IDEM-004), which two such principals show.
PRINCIPALS = {"agent-full": ALL_TOOLS, "agent-peer": ALL_TOOLS, "agent-limited": READ_AND_CAPTURE,
              "agent-observer": READ_AND_CAPTURE}


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def _scope_tables(header: str, served: Collection[str]) -> list[str]:
    lines = []
    for scope in SCOPES:
        lines += ["", f"[[{header}]]"]
        lines += [f"{key} = {_toml(value)}" for key, value in scope.items()]
        lines += [f"confirmation_ttl_seconds = {TTL_SECONDS}", f"retention_ceiling_seconds = {CEILING_SECONDS}"]
        lines += ["", f"[{header}.principals]"]
        for name, tools in PRINCIPALS.items():
            lines.append(f'"{name}" = {_toml([tool for tool in tools if tool in served])}')
    return lines


def _write(path: Path, data: bytes | str) -> Path:
    """Write a file only its owner can read: created 0600 (a re-init also narrows an older, looser file)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(raw)
    return path


def store_toml_lines(url: str | None) -> list[str]:
    """The [store] table: none for the embedded SQLite store (the default), else the URL given."""
    if url is None:
        return []
    if not url.startswith(STORE_SCHEMES):
        raise ValueError(f"--store takes a URL starting with {', '.join(STORE_SCHEMES)}")
    return [
        "# Where memory is kept: postgresql://… is a store every server process given this URL shares (see",
        "# the README, PostgreSQL); sqlite: or no [store] table, the SQLite file named by server.store.",
        "[store]",
        f"url = {_toml(url)}",
        *(postgres_toml_lines() if not url.startswith("sqlite:") else []),
        "",
    ]


def served_tools(names: str) -> list[str]:
    """The tools of a comma-separated list (``search,get`` or full names), in the contract's order."""
    wanted = {name.strip().removeprefix(PREFIX) for name in names.split(",") if name.strip()}
    short = [tool.removeprefix(PREFIX) for tool in ALL_TOOLS]
    unknown = sorted(wanted - set(short))
    if unknown or not wanted:
        said = f"; not a tool: {unknown[0]}" if unknown else ""
        raise ValueError(f"--tools takes some of {', '.join(short)}, comma-separated{said}")
    return [tool for tool in ALL_TOOLS if tool.removeprefix(PREFIX) in wanted]


def write_configuration(directory: Path, *, seed: str, store_url: str | None = None,
                        tools: Collection[str] = ALL_TOOLS) -> list[Path]:
    """Write a configuration and its conformance profile; ``tools`` narrows every grant to those tools (a stand-in
    for a server that serves only them so far: the others are unknown to every caller)."""
    store = store_toml_lines(store_url)  # checked before anything is written
    directory = Path(directory).resolve()
    keys = directory / "keys"
    keys.mkdir(mode=0o700, parents=True, exist_ok=True)  # keys, config and store are private to the server's user
    kek = keys / "kek.bin"
    if not kek.exists():  # a re-init keeps the key, so an existing store stays readable
        write_kek(kek)
    private, public = generate_host_key()
    kid = f"test-host-{seed}"
    audience = f"engram-reference-{seed}"
    bearer = secrets.token_urlsafe(32)
    written = [
        kek,
        _write(keys / "host.key.pem", private_key_pem(private)),
        _write(keys / "host.pub.pem", public_key_pem(public)),
        _write(keys / "http-bearer.txt", bearer + "\n"),
    ]
    server = [
        "# engram-reference configuration. Memory is off for any scope not listed with memory = true.",
        "[server]",
        f"audience = {_toml(audience)}",
        'store = "store/engram.sqlite3"',
        'kek_file = "keys/kek.bin"',
        'http_bearer_token_file = "keys/http-bearer.txt"',
        "# full: every commit is on disk before its call returns, through power loss too (normal: a crash",
        "# keeps commits, power loss may drop the last ones; extra: SQLite's most cautious level).",
        'synchronous = "full"',
        "",
        *store,
        *quota_toml_lines(),
        "",
        *transport_toml_lines(),
        "",
        *confirmation_toml_lines(),
        "",
        "# Host keys this server trusts, by JWS key id, each with the issuers (iss) and tenants it is",
        "# trusted for: a binding for any other issuer or tenant is refused (-32603).",
        f"[host_keys.{_toml(kid)}]",
        'public_key_file = "keys/host.pub.pem"',
        f"issuers = {_toml([ISSUER])}",
        f"tenants = {_toml(sorted({scope['tenant'] for scope in SCOPES}))}",
        *_scope_tables("scopes", tools),
    ]
    written.append(_write(directory / "server.toml", "\n".join(server) + "\n"))
    profile = [
        "# Conformance profile for the configuration beside it: how the harness acts as host.",
        "[target]",
        f"audience = {_toml(audience)}",
        "",
        "[binding]",
        'kind = "signed-meta"',
        f"issuer = {_toml(ISSUER)}",
        f"kid = {_toml(kid)}",
        'private_key_file = "keys/host.key.pem"',
        f"purpose_ref = {_toml(PURPOSE)}",
        "",
        "[http]",
        'bearer_token_file = "keys/http-bearer.txt"',
        "",
        "# The confirmation modes the server beside it serves; the harness tests each.",
        "[confirmation]",
        f"modes = {_toml(list(CONFIRMATION_MODES))}",
        f"reference_ttl_seconds = {CONFIRMATION_TTL_MAX}",
        *_scope_tables("scopes", tools),
    ]
    written.append(_write(directory / "conformance-profile.toml", "\n".join(profile) + "\n"))
    return written
