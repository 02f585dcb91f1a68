"""server.toml: who may use memory, with which tools, under which host policy.

Memory is off unless a scope entry turns it on. Paths are relative to the
configuration file's folder.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from engram_mcp.contract import load
from engram_mcp.contract.binding import (
    CONFIRMATION_MODES,
    CONFIRMATION_TTL_MAX,
    ConfirmationMode,
    TrustedHost,
    load_public_key,
)
from engram_mcp.reference._crypto import derive_key, load_kek
from engram_mcp.reference._errors import ReferenceServerError
from engram_mcp.reference._policy import ScopePolicy, policy_named
from engram_mcp.reference._ports import Scope
from engram_mcp.reference._quotas import ResourceLimits, SettingError, parse_limits
from engram_mcp.reference._store_config import (
    DEFAULT_SYNCHRONOUS,
    POSTGRES_KEYS,
    SYNCHRONOUS_LEVELS,
    PostgresSettings,
    parse_postgres_settings,
)


class ConfigError(ReferenceServerError):
    """The configuration cannot be used; the message names the setting, never a secret."""


class StoreUnavailable(ConfigError):
    """The configured database cannot be reached; the message holds no URL and no password."""


@dataclass(frozen=True)
class ScopeConfig:
    scope: Scope
    memory: bool
    grants: Mapping[str, frozenset[str]]  # principal -> tools
    policy: ScopePolicy
    # Principals granted capture who lack the authority to capture here: UNAUTHORIZED, not -32602 (EMC-HP-057).
    capture_denied: frozenset[str] = frozenset()


_ARGUMENTS_MAX_BYTES = load().limit("arguments.max_bytes")


@dataclass(frozen=True)
class TransportConfig:
    """[transport]: how much one message, and one HTTP client, may hold of the server."""

    # A stdio line or HTTP body; a few times the argument cap leaves room for JSON escapes and _meta.
    max_message_bytes: int = 4 * _ARGUMENTS_MAX_BYTES
    http_header_timeout_seconds: float = 10.0  # from a request's first byte to the end of its headers
    http_body_timeout_seconds: float = 30.0  # from the end of the headers to the end of the body
    http_max_connections: int = 100  # more open connections than this (and the unauthenticated budget): 503
    http_first_byte_timeout_seconds: float = 2.0  # from a new connection's opening to its first byte
    http_unauthenticated_connections: int = 32  # connections yet to send the bearer token; past it the oldest closes
    http_unauthenticated_per_source: int = 8  # the same, from one source address
    http_max_sessions: int = 1000  # legacy-era sessions open at once; past it the least recently used idle closes
    http_sessions_per_principal: int = 64  # the same, per principal (and for sessions no bound call named yet)
    http_session_idle_minutes: float = 5.0  # a legacy-era session idle this long is closed


def transport_toml_lines() -> list[str]:
    """The [transport] table with its defaults, as ``engram-reference init`` writes it."""
    defaults = TransportConfig()
    return [
        "# One stdio line or HTTP body at most (bytes); HTTP deadlines on a client's first byte, headers and",
        "# body; the authenticated connections past which requests are answered 503, and the separate budget",
        "# (in all, and per source address) of connections yet to send the bearer token, whose oldest is",
        "# closed to make room; legacy-era sessions in all and per principal (the least recently used idle",
        "# one is closed to make room), and the minutes after which an idle one is closed.",
        "[transport]",
        *(f"{name} = {getattr(defaults, name)}" for name in TransportConfig.__dataclass_fields__),
    ]


@dataclass(frozen=True)
class ConfirmationConfig:
    """[confirmation]: how a gated call may be confirmed (spec/host-wiring.md §2)."""

    modes: frozenset[ConfirmationMode] = frozenset(CONFIRMATION_MODES)
    reference_ttl_seconds: int = CONFIRMATION_TTL_MAX  # the longest exp - approved_at a host reference may span


def confirmation_toml_lines() -> list[str]:
    """The [confirmation] table with its defaults, as ``engram-reference init`` writes it."""
    defaults = ConfirmationConfig()
    modes = ", ".join(f'"{mode}"' for mode in CONFIRMATION_MODES)
    return [
        "# How gated calls are confirmed: host-reference (the host approves and signs a reference sent in the",
        "# call's _meta), server-initiated (the server asks the client with an elicitation). The longest span",
        "# from a reference's approval to its expiry that this server accepts (seconds).",
        "[confirmation]",
        f"modes = [{modes}]",
        f"reference_ttl_seconds = {defaults.reference_ttl_seconds}",
    ]


def _confirmation(table: Mapping[str, Any]) -> ConfirmationConfig:
    unknown = sorted(set(table) - set(ConfirmationConfig.__dataclass_fields__))
    if unknown:
        raise ConfigError(f"confirmation: unknown setting '{unknown[0]}'")
    modes = _optional(table, "modes", list, list(CONFIRMATION_MODES), "confirmation")
    if not modes or len(set(modes)) != len(modes) or not set(modes) <= set(CONFIRMATION_MODES):
        raise ConfigError(f"confirmation: 'modes' must list one or both of {', '.join(CONFIRMATION_MODES)}, once each")
    ttl = _optional(table, "reference_ttl_seconds", int, CONFIRMATION_TTL_MAX, "confirmation")
    if not 1 <= ttl <= CONFIRMATION_TTL_MAX:
        raise ConfigError(f"confirmation: 'reference_ttl_seconds' must be 1 to {CONFIRMATION_TTL_MAX}")
    return ConfirmationConfig(modes=frozenset(modes), reference_ttl_seconds=ttl)


@dataclass(frozen=True)
class ServerConfig:
    path: Path
    audience: str
    store: Path
    kek: bytes
    trusted_keys: Mapping[str, TrustedHost]
    http_bearer_token: str | None
    scopes: Mapping[Scope, ScopeConfig] = field(default_factory=dict)
    synchronous: str = DEFAULT_SYNCHRONOUS  # [server] synchronous: the store's SQLite sync level (durability)
    transport: TransportConfig = field(default_factory=TransportConfig)
    limits: ResourceLimits = field(default_factory=ResourceLimits)  # [quotas] and [expiry]
    confirmation: ConfirmationConfig = field(default_factory=ConfirmationConfig)
    store_url: str | None = None  # [store] url: None (or sqlite:) keeps the SQLite file above; postgresql://… shares
    postgres: PostgresSettings = field(default_factory=PostgresSettings)  # [store]'s timing of a PostgreSQL store

    def derived_key(self, purpose: str) -> bytes:
        """A subkey of the key-encryption key for one purpose (cursors, request states)."""
        return derive_key(self.kek, purpose)

    def policy_for(self, scope: Scope) -> ScopePolicy:
        return self.scopes[scope].policy

    def tools_for(self, scope: Scope, principal: str) -> frozenset[str]:
        """The tools a principal discovers in a scope: none unless memory is on there."""
        entry = self.scopes.get(scope)
        if entry is None or not entry.memory:
            return frozenset()
        return entry.grants.get(principal, frozenset())

    def may_capture(self, scope: Scope, principal: str) -> bool:
        """Whether a principal granted capture in a scope also holds the authority to capture there."""
        entry = self.scopes.get(scope)
        return entry is not None and principal not in entry.capture_denied


def _require(table: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in table:
        raise ConfigError(f"{where}: '{key}' is missing")
    value = table[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"{where}: '{key}' must be a {kind.__name__}")
    return value


def _optional(table: Mapping[str, Any], key: str, kind: type, default: Any, where: str) -> Any:
    return _require(table, key, kind, where) if key in table else default


SCOPE_KEYS = frozenset({
    "tenant", "workspace", "memory", "principals", "admission_policy", "consented_families",
    "retention_ceiling_seconds", "allow_retain", "confirm_capture", "confirm_admission", "confirmation_ttl_seconds",
    "capture_denied_principals",
})


def _scope(entry: Mapping[str, Any], index: int) -> ScopeConfig:
    where = f"scopes[{index}]"
    misspelt = sorted(set(entry) - SCOPE_KEYS)  # a misspelt key (say, an authority) must not fail open
    if misspelt:
        raise ConfigError(f"{where}: unknown setting '{misspelt[0]}'")
    contract = load()
    ttl_max = contract.limit("confirmation.ttl.max")
    ttl = _optional(entry, "confirmation_ttl_seconds", int, ttl_max, where)
    if not 1 <= ttl <= ttl_max:
        raise ConfigError(f"{where}: 'confirmation_ttl_seconds' must be 1 to {ttl_max}")
    grants: dict[str, frozenset[str]] = {}
    for principal, tools in _require(entry, "principals", dict, where).items():
        unknown = set(tools) - set(contract.tools)
        if unknown:
            raise ConfigError(f"{where}: principal '{principal}' is granted a tool the contract does not define")
        grants[principal] = frozenset(tools)
    try:
        admission = policy_named(_optional(entry, "admission_policy", str, "secret-scan", where))
    except KeyError:
        raise ConfigError(f"{where}: unknown 'admission_policy'") from None
    families = _optional(entry, "consented_families", list, [], where)
    if not all(isinstance(f, str) for f in families):
        raise ConfigError(f"{where}: 'consented_families' must be a list of strings")
    ceiling = _optional(entry, "retention_ceiling_seconds", int, 365 * 24 * 3600, where)
    if ceiling < 1:
        raise ConfigError(f"{where}: 'retention_ceiling_seconds' must be positive")
    policy = ScopePolicy(
        admission=admission,
        allow_retain=_optional(entry, "allow_retain", bool, False, where),
        retention_ceiling=timedelta(seconds=ceiling),
        consented_families=frozenset(families),
        confirm_capture=_optional(entry, "confirm_capture", bool, False, where),
        confirm_admission=_optional(entry, "confirm_admission", bool, False, where),
        confirmation_ttl=timedelta(seconds=ttl),
    )
    scope = Scope(_require(entry, "tenant", str, where), _require(entry, "workspace", str, where))
    memory = _optional(entry, "memory", bool, False, where)
    denied = _strings(entry, "capture_denied_principals", where, required=False)
    return ScopeConfig(scope=scope, memory=memory, grants=grants, policy=policy, capture_denied=denied)


def _strings(table: Mapping[str, Any], key: str, where: str, *, required: bool) -> frozenset[str]:
    """A list of non-empty strings; a required one must name at least one."""
    values = _require(table, key, list, where) if required else _optional(table, key, list, [], where)
    if not all(isinstance(v, str) and v for v in values) or (required and not values):
        raise ConfigError(f"{where}: '{key}' must be a {'non-empty ' if required else ''}list of non-empty strings")
    return frozenset(values)


def _host_key(kid: str, entry: Any, base: Path) -> TrustedHost:
    """[host_keys."kid"]: the key, and the issuers and tenants it is trusted for (EMC-HP-008)."""
    where = f'host_keys."{kid}"'
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: must be a table with public_key_file, issuers and tenants")
    unknown = sorted(set(entry) - {"public_key_file", "issuers", "tenants"})
    if unknown:
        raise ConfigError(f"{where}: unknown setting '{unknown[0]}'")
    try:
        key = load_public_key((base / _require(entry, "public_key_file", str, where)).read_bytes())
    except (OSError, ValueError, TypeError):
        raise ConfigError(f"{where}: the key cannot be loaded") from None
    return TrustedHost(key, issuers=_strings(entry, "issuers", where, required=True),
                       tenants=_strings(entry, "tenants", where, required=True))


def _seconds(table: Mapping[str, Any], key: str, default: float) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 3600:
        raise ConfigError(f"transport: '{key}' must be a number of seconds, above 0 and at most 3600")
    return float(value)


def _transport(table: Mapping[str, Any]) -> TransportConfig:
    defaults = TransportConfig()
    unknown = sorted(set(table) - set(TransportConfig.__dataclass_fields__))
    if unknown:
        raise ConfigError(f"transport: unknown setting '{unknown[0]}'")
    smallest = 2 * _ARGUMENTS_MAX_BYTES  # an argument object just over the contract's cap must still reach its check
    message = _optional(table, "max_message_bytes", int, defaults.max_message_bytes, "transport")
    if message < smallest:
        raise ConfigError(f"transport: 'max_message_bytes' must be at least {smallest}")
    counts = {name: _positive(table, name, getattr(defaults, name)) for name in (
        "http_max_connections", "http_unauthenticated_connections", "http_unauthenticated_per_source",
        "http_max_sessions", "http_sessions_per_principal",
    )}
    if counts["http_unauthenticated_per_source"] > counts["http_unauthenticated_connections"]:
        raise ConfigError(
            "transport: 'http_unauthenticated_per_source' must not exceed 'http_unauthenticated_connections'"
        )
    idle = table.get("http_session_idle_minutes", defaults.http_session_idle_minutes)
    if isinstance(idle, bool) or not isinstance(idle, int | float) or not 0 < idle <= 1440:
        raise ConfigError(
            "transport: 'http_session_idle_minutes' must be a number of minutes, above 0 and at most 1440"
        )
    deadlines = {name: _seconds(table, name, getattr(defaults, name)) for name in (
        "http_header_timeout_seconds", "http_body_timeout_seconds", "http_first_byte_timeout_seconds",
    )}
    settings: dict[str, Any] = {**deadlines, **counts}
    return replace(defaults, max_message_bytes=message, http_session_idle_minutes=float(idle), **settings)


def _positive(table: Mapping[str, Any], key: str, default: int) -> int:
    value = _optional(table, key, int, default, "transport")
    if value < 1:
        raise ConfigError(f"transport: '{key}' must be positive")
    return int(value)


def _synchronous(server: Mapping[str, Any]) -> str:
    level = _optional(server, "synchronous", str, DEFAULT_SYNCHRONOUS, "server")
    if level not in SYNCHRONOUS_LEVELS:
        raise ConfigError(f"server: 'synchronous' must be one of {', '.join(SYNCHRONOUS_LEVELS)}")
    return level


def _limits(data: Mapping[str, Any]) -> ResourceLimits:
    try:
        return parse_limits(_optional(data, "quotas", dict, {}, "file"), _optional(data, "expiry", dict, {}, "file"))
    except SettingError as problem:
        raise ConfigError(str(problem)) from None


def load_config(path: Path) -> ServerConfig:
    path = Path(path).resolve()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:  # the operator's own file: naming it is what lets them fix it
        raise ConfigError(f"cannot read the configuration {path}: {exc.strerror or type(exc).__name__}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"the configuration {path} is not valid TOML: {exc}") from None
    base = path.parent
    server = _require(data, "server", dict, "file")
    keys = {kid: _host_key(kid, entry, base) for kid, entry in _require(data, "host_keys", dict, "file").items()}
    try:
        kek = load_kek(base / _require(server, "kek_file", str, "server"))
    except (OSError, ValueError):
        raise ConfigError("server: 'kek_file' cannot be loaded") from None
    bearer_file = server.get("http_bearer_token_file")
    bearer = (base / bearer_file).read_text(encoding="utf-8").strip() if bearer_file else None
    scopes = {}
    for index, entry in enumerate(data.get("scopes", [])):
        scope_config = _scope(entry, index)
        if scope_config.scope in scopes:
            raise ConfigError(f"scopes[{index}]: this tenant and workspace appear twice")
        scopes[scope_config.scope] = scope_config
    return ServerConfig(
        path=path,
        audience=_require(server, "audience", str, "server"),
        store=base / _require(server, "store", str, "server"),
        kek=kek,
        trusted_keys=keys,
        http_bearer_token=bearer,
        scopes=scopes,
        synchronous=_synchronous(server),
        transport=_transport(_optional(data, "transport", dict, {}, "file")),
        limits=_limits(data),
        confirmation=_confirmation(_optional(data, "confirmation", dict, {}, "file")),
        store_url=_store_url(_optional(data, "store", dict, {}, "file")),
        postgres=_postgres(_optional(data, "store", dict, {}, "file")),
    )


STORE_SCHEMES = ("sqlite:", "postgresql://", "postgres://")


def _store_url(table: Mapping[str, Any]) -> str | None:
    unknown = sorted(set(table) - {"url", *POSTGRES_KEYS})
    if unknown:
        raise ConfigError(f"store: unknown setting '{unknown[0]}'")
    url = _optional(table, "url", str, None, "store")
    if url is not None and not url.startswith(STORE_SCHEMES):
        raise ConfigError("store: 'url' must start with sqlite:, postgresql:// or postgres://")
    if url is not None and url.startswith("sqlite:") and url != "sqlite:":
        # The SQLite store's place is the server directory's; a path here would be silently ignored.
        raise ConfigError("store: 'url' for SQLite is exactly sqlite:, with nothing after it")
    if url is not None and not url.startswith("sqlite:"):
        _parses_as_postgres(url)
    return None if url is None or url.startswith("sqlite:") else url


def _postgres(table: Mapping[str, Any]) -> PostgresSettings:
    try:
        return parse_postgres_settings(table)
    except SettingError as problem:
        raise ConfigError(str(problem)) from None


def _parses_as_postgres(url: str) -> None:
    """A URL libpq would refuse is refused here, by a constant message: its text may hold a password."""
    try:
        from psycopg.conninfo import conninfo_to_dict  # only a PostgreSQL deployment needs psycopg

        conninfo_to_dict(url)
    except ImportError:
        return  # the store itself reports the missing driver
    except Exception:
        raise ConfigError("store: 'url' is not a valid PostgreSQL URL") from None
