"""The target's host profile: how to bind calls, and the scopes, principals and policies it serves.

A profile states facts about the target's configuration; checks pick the
scopes they need by role, and are SKIPPED with the reason when the profile
has no scope in that role.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram_mcp.contract import load

ALL_TOOLS = frozenset(load().tools)
ACCEPTS_BENIGN = frozenset({"accept", "secret-scan"})
REJECTS_SECRETS = frozenset({"reject", "secret-scan"})


class ProfileError(Exception):
    """The profile cannot be used; the message names the setting."""


@dataclass(frozen=True)
class ScopeProfile:
    tenant: str
    workspace: str
    memory: bool
    principals: Mapping[str, frozenset[str]]
    admission_policy: str
    allow_retain: bool
    consented_families: tuple[str, ...]
    confirm_capture: bool
    confirm_admission: bool
    confirmation_ttl_seconds: int
    retention_ceiling_seconds: int

    @property
    def label(self) -> str:
        return f"{self.tenant}/{self.workspace}"

    def principal_with(self, tools: frozenset[str] | set[str]) -> str | None:
        """A principal granted at least these tools, preferring the one granted the most."""
        fits = [p for p, granted in self.principals.items() if set(tools) <= granted]
        return max(fits, key=lambda p: (len(self.principals[p]), p), default=None)

    def limited_principal(self) -> str | None:
        """A principal granted some tools but not all six."""
        return next((p for p, g in sorted(self.principals.items()) if g and g != ALL_TOOLS), None)


@dataclass(frozen=True)
class Profile:
    path: Path | None
    audience: str
    binding: Mapping[str, Any]
    http_headers: Mapping[str, str]
    scopes: tuple[ScopeProfile, ...]
    purpose_ref: str
    raw: Mapping[str, Any] = field(default_factory=dict)

    # -- roles ---------------------------------------------------------------

    def find(self, predicate: Callable[[ScopeProfile], bool]) -> ScopeProfile | None:
        return next((s for s in self.scopes if predicate(s)), None)

    @property
    def primary(self) -> ScopeProfile | None:
        """Memory on, every tool granted to one principal, no gate on capture or admission, benign content admitted."""
        return self.find(
            lambda s: s.memory and s.principal_with(ALL_TOOLS) is not None and not s.confirm_capture
            and not s.confirm_admission and s.admission_policy in ACCEPTS_BENIGN
        )

    def sibling_workspace(self) -> ScopeProfile | None:
        primary = self.primary
        if primary is None:
            return None
        return self.find(lambda s: s.memory and s.tenant == primary.tenant and s.workspace != primary.workspace and bool(s.principals))

    def other_tenant(self) -> ScopeProfile | None:
        primary = self.primary
        if primary is None:
            return None
        return self.find(lambda s: s.memory and s.tenant != primary.tenant and bool(s.principals))

    def opted_out(self) -> ScopeProfile | None:
        return self.find(lambda s: not s.memory)

    def gated_capture(self) -> ScopeProfile | None:
        return self.find(lambda s: s.memory and s.confirm_capture and s.principal_with({"engram_memory_capture"}) is not None)

    def adjudicating(self) -> ScopeProfile | None:
        return self.find(lambda s: s.memory and s.admission_policy == "adjudicate"
                         and s.principal_with({"engram_memory_capture", "engram_memory_request_admission"}) is not None
                         and not s.confirm_capture and not s.confirm_admission)

    def rejecting_secrets(self) -> ScopeProfile | None:
        return self.find(lambda s: s.memory and s.admission_policy in REJECTS_SECRETS and not s.confirm_capture
                         and not s.confirm_admission and s.principal_with(ALL_TOOLS) is not None)


def _scope(entry: Mapping[str, Any], index: int) -> ScopeProfile:
    try:
        return ScopeProfile(
            tenant=str(entry["tenant"]),
            workspace=str(entry["workspace"]),
            memory=bool(entry.get("memory", False)),
            principals={str(p): frozenset(tools) for p, tools in entry.get("principals", {}).items()},
            admission_policy=str(entry.get("admission_policy", "unknown")),
            allow_retain=bool(entry.get("allow_retain", False)),
            consented_families=tuple(entry.get("consented_families", [])),
            confirm_capture=bool(entry.get("confirm_capture", False)),
            confirm_admission=bool(entry.get("confirm_admission", False)),
            confirmation_ttl_seconds=int(entry.get("confirmation_ttl_seconds", load().limit("confirmation.ttl.max"))),
            retention_ceiling_seconds=int(entry.get("retention_ceiling_seconds", 0)),
        )
    except (KeyError, TypeError, ValueError):
        raise ProfileError(f"scopes[{index}] is incomplete: tenant and workspace are required") from None


def load_profile(path: Path) -> Profile:
    path = Path(path).resolve()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ProfileError(f"cannot read the profile ({type(exc).__name__})") from None
    base = path.parent
    binding = dict(data.get("binding", {}))
    for key in ("private_key_file",):
        if key in binding:
            binding[key] = str(base / binding[key])
    headers = dict(data.get("http", {}).get("headers", {}))
    token_file = data.get("http", {}).get("bearer_token_file")
    if token_file:
        try:
            headers["Authorization"] = "Bearer " + (base / token_file).read_text(encoding="utf-8").strip()
        except OSError:
            raise ProfileError("http.bearer_token_file cannot be read") from None
    try:
        audience = str(data["target"]["audience"])
    except (KeyError, TypeError):
        raise ProfileError("target.audience is required") from None
    scopes = tuple(_scope(entry, i) for i, entry in enumerate(data.get("scopes", [])))
    return Profile(
        path=path,
        audience=audience,
        binding=binding,
        http_headers=headers,
        scopes=scopes,
        purpose_ref=str(binding.get("purpose_ref", "purpose:conformance")),
        raw=data,
    )
