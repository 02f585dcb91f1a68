"""Digests and ids bound to the binding: operation targets and digests, scope and capture ids."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engram_mcp.contract._canonical import candidate_id, profile_digest
from engram_mcp.contract.binding._model import CAPTURE_SEQUENCE, Binding, _contract

# -- digests and ids bound to the binding ----------------------------------


def operation_target(tool: str, arguments: Mapping[str, Any]) -> str | None:
    """The value of the tool's target argument (spec/tools.json), or None."""
    name = _contract.tools[tool].target
    return None if name is None else arguments.get(name)


def _scoped(kind: str, tool: str, target: str | None, arguments: Mapping[str, Any], binding: Binding) -> str:
    # Arguments reach here already valid (host wiring, order of checks), so
    # canonical JSON never meets an unsafe integer or a lone surrogate.
    return profile_digest(
        kind,
        {
            "capability": tool,
            "target": target,
            "arguments": dict(arguments),
            "principal": binding.principal,
            "tenant": binding.tenant,
            "workspace": binding.workspace,
        },
    )


def operation_digest(tool: str, target: str | None, arguments: Mapping[str, Any], binding: Binding) -> str:
    """What a human approves: this tool, on this target, with exactly these arguments, for this principal."""
    return _scoped("operation", tool, target, arguments, binding)


def idempotency_intent(tool: str, target: str | None, arguments: Mapping[str, Any], binding: Binding) -> str:
    """The hash a principal-scoped idempotency key is reserved against (the key itself left out)."""
    rest = {k: v for k, v in arguments.items() if k != "idempotency_key"}
    return _scoped("idempotency-intent", tool, target, rest, binding)


def scope_ref(binding: Binding) -> str:
    """The engine scope_ref this layer writes into every captured payload."""
    return profile_digest("scope", {"tenant": binding.tenant, "workspace": binding.workspace})


def capture_source_ref(binding: Binding) -> str:
    return profile_digest(
        "capture-source",
        {"tenant": binding.tenant, "workspace": binding.workspace, "principal": binding.principal},
    )


def capture_candidate_id(binding: Binding, idempotency_key: str) -> str:
    """The candidate_id a capture gets: the upstream identity, with the source scoping keys per principal."""
    return candidate_id(capture_source_ref(binding), CAPTURE_SEQUENCE, idempotency_key)


def journal_event_id(binding: Binding, idempotency_key: str) -> str:
    """The journal event id of a mutation: never the raw key, which upstream journals treat as global."""
    value = {
        "tenant": binding.tenant,
        "workspace": binding.workspace,
        "principal": binding.principal,
        "idempotency_key": idempotency_key,
    }
    return "evt_" + profile_digest("journal-event-id", value).removeprefix("sha256:")
