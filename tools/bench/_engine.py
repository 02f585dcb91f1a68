"""The reference engine in process, built from a server configuration exactly as the server builds it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from engram_mcp.conformance._world import capture_arguments
from engram_mcp.contract.binding import Binding
from engram_mcp.reference._core import Engine
from engram_mcp.reference._policy import ScopePolicy
from engram_mcp.reference._ports import MemoryStore, Scope, StoreReader, StoreTransaction
from engram_mcp.reference.server import ServerConfig, build_ports, load_config

T = TypeVar("T")
PURPOSE = "purpose:conformance"  # the purpose the generated configuration's profile names
MAIN_SCOPE = Scope("acme", "research")  # the generated configuration's ungated, admitting scope
PRINCIPAL = "agent-full"
ADMITTED = {"accepted", "duplicate_exact"}


def caller(tenant: str = MAIN_SCOPE.tenant, workspace: str = MAIN_SCOPE.workspace) -> Binding:
    return Binding(tenant=tenant, workspace=workspace, principal=PRINCIPAL, agent_id="bench", session="bench",
                   purpose_ref=PURPOSE, issuer="conformance-host", audience="bench", issued_at=0, expires_at=0,
                   token_id="bench")


class BatchedStore:
    """The configured store, but while ``batch`` runs, every unit of work the engine asks for joins one open
    store transaction: a builder commits many engine operations at once, each still going through the engine's
    own capture and admission code. A refusal inside a batch aborts the build (the batch rolls back)."""

    def __init__(self, store: MemoryStore) -> None:
        self.inner = store
        self._open: StoreTransaction | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def transaction(self, work: Callable[[StoreTransaction], T]) -> T:
        return work(self._open) if self._open is not None else self.inner.transaction(work)

    @contextmanager
    def snapshot(self) -> Iterator[StoreReader]:
        if self._open is not None:
            yield self._open
        else:
            with self.inner.snapshot() as reader:
                yield reader

    def batch(self, steps: Callable[[], None]) -> None:
        def unit(tx: StoreTransaction) -> None:
            self._open = tx
            try:
                steps()
            finally:
                self._open = None

        self.inner.transaction(unit)

    def close(self) -> None:
        self.inner.close()


def open_engine(directory: Path, *, batched: bool = False,
                policy_scope: Scope | None = None) -> tuple[Engine, ServerConfig, MemoryStore]:
    """An engine on the store of the configuration in ``directory``; ``policy_scope`` gives every scope that
    scope's policy (stores spread over tenants the configuration does not list)."""
    config = load_config(directory / "server.toml")
    ports = build_ports(config)
    store: MemoryStore = BatchedStore(ports.store) if batched else ports.store
    policies: Callable[[Scope], ScopePolicy] = config.policy_for
    if policy_scope is not None:
        fixed = config.policy_for(policy_scope)
        policies = lambda scope: fixed  # noqa: E731 - one policy for every scope
    engine = Engine(store, ports.cipher, policies, config.derived_key("page-cursor"),
                    digest_key=config.derived_key("stored-digest"), limits=config.limits)
    return engine, config, store


def capture_and_admit(engine: Engine, who: Binding, text: str, key: str, now: datetime | None = None) -> str:
    """Capture one record and request its admission; the admitted record's id (raises on anything else)."""
    moment = now or datetime.now(UTC)
    captured = engine.call("engram_memory_capture", who, capture_arguments(PURPOSE, text=text, key=f"c-{key}"), moment)
    if captured.value is None:
        raise RuntimeError(f"capture refused: {captured.code}")
    admitted = engine.call("engram_memory_request_admission", who,
                           {"candidate_id": captured.value["candidate_id"], "idempotency_key": f"a-{key}"}, moment)
    outcome = (admitted.value or {}).get("outcome", {})
    if outcome.get("status") not in ADMITTED:
        raise RuntimeError(f"admission refused: {admitted.code or outcome.get('status')}")
    return str(outcome["record_id"])
