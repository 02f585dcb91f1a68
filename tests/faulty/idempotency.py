"""Faulty variants: idempotency. Each gets the replay lookup wrong: a repeated capture stored again, a key reused
for other content replayed instead of refused, keys shared by every principal of a scope, or a replay returned
without being marked as one.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import Any

from engram_mcp.reference._envelope import Refusal
from engram_mcp.reference._journal import as_replay, intent, reserved, scope_of
from tests.faulty.catalog import CAPTURE, variant
from tests.variant_server import Seams

Operation = Callable[..., dict[str, Any]]
ReplayOf = Callable[[Any, str, Any, dict[str, Any]], Any]


@variant("capture-replay-new-candidate", breaks=["EMC-IDEM-005"],
         caught_by=["idempotency.capture-replay"], era="modern")
def capture_replay_new_candidate(seams: Seams) -> None:
    """A repeated capture under the same key and content is stored again as a new candidate."""

    def no_capture_replay(replay_of: ReplayOf) -> ReplayOf:
        def lookup(db: Any, tool: str, caller: Any, arguments: dict[str, Any]) -> Any:
            value = replay_of(db, tool, caller, arguments)
            return None if tool == CAPTURE and value is not None else value

        return lookup

    def make(capture: Operation) -> Operation:
        def recapture(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            with seams.server.store.snapshot() as reader:
                seen = reserved(reader, CAPTURE, caller, args) is not None
            if seen:  # the key is taken, so the store derives a fresh one
                args = {**args, "idempotency_key": f"{args['idempotency_key']}#{secrets.token_hex(4)}"}
            return capture(caller, args, now)

        return recapture

    seams.override("lifecycle", "replay_of", no_capture_replay)
    seams.wrap_operation(CAPTURE, make)


@variant("reused-key-other-content-replays", breaks=["EMC-IDEM-007"],
         caught_by=["idempotency.digest-conflict"], era="legacy")
def reused_key_other_content_replays(seams: Seams) -> None:
    """A key reused for other content, target or tool replays the first result instead of DIGEST_CONFLICT."""

    def key_only(replay_of: ReplayOf) -> ReplayOf:
        def lookup(db: Any, tool: str, caller: Any, arguments: dict[str, Any]) -> Any:
            try:
                return replay_of(db, tool, caller, arguments)
            except Refusal as refusal:
                if refusal.code != "DIGEST_CONFLICT":
                    raise
            found = db.reservation(scope_of(caller), caller.principal, arguments["idempotency_key"])
            return as_replay(tool, found.value)

        return lookup

    seams.override("lifecycle", "replay_of", key_only)


@variant("keys-shared-by-principals", breaks=["EMC-IDEM-004", "EMC-HP-048"],
         caught_by=["idempotency.per-principal"], era="modern")
def keys_shared_by_principals(seams: Seams) -> None:
    """Idempotency keys are looked up per scope, not per principal: another principal's key conflicts."""

    def per_scope(replay_of: ReplayOf) -> ReplayOf:
        def lookup(db: Any, tool: str, caller: Any, arguments: dict[str, Any]) -> Any:
            row = db.sql.execute("SELECT intent, value FROM reservations WHERE tenant = ? AND workspace = ? "
                                 "AND idempotency_key = ? ORDER BY rowid LIMIT 1",
                                 (caller.tenant, caller.workspace, arguments["idempotency_key"])).fetchone()
            if row is None:
                return None
            if row["intent"] != intent(tool, arguments, caller):
                raise Refusal("DIGEST_CONFLICT")
            return as_replay(tool, json.loads(row["value"]))

        return lookup

    seams.override("lifecycle", "replay_of", per_scope)


@variant("replay-not-marked", breaks=["EMC-IDEM-006"], caught_by=["idempotency.mutation-replay"], era="legacy")
def replay_not_marked(seams: Seams) -> None:
    """A replayed admission, withdraw or forget returns the stored result verbatim, replayed still false."""

    def verbatim(replay_of: ReplayOf) -> ReplayOf:
        def lookup(db: Any, tool: str, caller: Any, arguments: dict[str, Any]) -> Any:
            value = replay_of(db, tool, caller, arguments)
            return {**value, "replayed": False} if isinstance(value, dict) and "replayed" in value else value

        return lookup

    seams.override("lifecycle", "replay_of", verbatim)
