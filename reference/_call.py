"""One tool call's context, carried explicitly from the MCP edge to the store's unit of work.

The edge builds a ``CallContext`` once the binding is trusted and the tool granted; every later step
(admission, replay, the gate, the engine, the mutation's unit of work) receives it as an argument. The
engine sees it only through ``UnitHooks``: the audit row a successful mutation commits with itself,
and the last word (cancellation, approval age, deadline) asked once the store's lock is held.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from engram_mcp.contract import load
from engram_mcp.contract.binding import Binding, approval_too_old, deadline_passed
from engram_mcp.reference._audit import AuditJournal
from engram_mcp.reference._envelope import Outcome, Refusal
from engram_mcp.reference._ports import StoreTransaction

log = logging.getLogger("engram_mcp.reference")

_CONTRACT = load()

# Where a call's deadline is judged (EMC-HP-054, EMC-HP-055): on arrival, again once a confirmation was
# answered, again before an ungated call's commit, and last inside the unit of work once it holds the lock.
DeadlineStage = Literal["arrival", "after-confirmation", "before-commit", "in-unit"]


class Deadlines(Protocol):
    """Whether a call's host deadline has passed, asked at each stage of the call."""

    def passed(self, call: CallContext, stage: DeadlineStage) -> bool: ...


class BindingDeadlines:
    """The binding's own deadline, judged alike at every stage."""

    def passed(self, call: CallContext, stage: DeadlineStage) -> bool:
        return deadline_passed(call.binding)


class CancelProbe(Protocol):
    def is_set(self) -> bool: ...


class NeverCancelled:
    def is_set(self) -> bool:
        return False


class UnitHooks(Protocol):
    """What a mutation's unit of work asks of the call it serves."""

    def last_word(self) -> None:
        """Raise a Refusal when the call must not commit after all (asked once the store's lock is held)."""

    def write_audit(self, tx: StoreTransaction) -> None:
        """Write the call's audit row inside the unit of work, so both commit or neither."""


def unforeseen(tool: str) -> Outcome:
    """The constant outcome of an unexpected failure: a mutation may or may not have happened."""
    mutating = _CONTRACT.tools[tool].mutability != "read-only"
    return Outcome(code="MUTATION_OUTCOME_UNKNOWN" if mutating else "STORE_UNAVAILABLE")


@dataclass(eq=False)
class CallContext:
    """One tools/call from the trusted binding on: who calls, what, under which auditId, and its journal row.

    ``written`` and ``journaled`` track the call's audit row: written by a successful mutation inside its
    own unit of work, else by ``settle`` on the worker thread that ran the call, so a call costs one
    hand-off to a thread, not one more for its journal."""

    tool: str
    binding: Binding
    audit_id: str
    arguments: Mapping[str, Any]
    now: datetime
    journal: AuditJournal
    deadlines: Deadlines
    request: Any = None  # the SDK's request context (meta, session, protocol era); None off the MCP edge
    params: Any = None  # the SDK's CallToolRequestParams as received
    cancelled: CancelProbe = field(default_factory=NeverCancelled)
    approved_at: float | None = None  # the approval a gate gave, whose execution window runs to the commit
    written: bool = False
    journaled: bool = False

    # -- UnitHooks ------------------------------------------------------------------------------------

    def last_word(self) -> None:
        if self.cancelled.is_set():
            raise Refusal("CANCELLED")
        if self.approved_at is not None and approval_too_old(self.approved_at):
            raise Refusal("gate_failed")
        if self.deadline_passed("in-unit"):
            raise Refusal("DEADLINE_EXCEEDED")

    def write_audit(self, tx: StoreTransaction) -> None:
        self.journal.append_in(tx, self.audit_id, self.binding, self.tool, "ok")
        self.written = True

    # -- the edge's bookkeeping -----------------------------------------------------------------------

    def deadline_passed(self, stage: DeadlineStage) -> bool:
        return self.deadlines.passed(self, stage)

    def forget_writes(self) -> None:
        """Whatever the unit of work did, the call is journaled as it ended (after an unforeseen failure)."""
        self.written = self.journaled = False

    def settle(self, outcome: Outcome) -> Outcome:
        """Journal the call as it ended, on the worker thread; a cancelled call is left to the edge, which
        journals it as cancelled. An unrecorded call cannot be vouched for, so a failed write answers the
        constant unforeseen outcome."""
        if self.written and outcome.ok:
            self.journaled = True
            return outcome
        if self.cancelled.is_set():
            return outcome
        try:
            self.journal.append(self.audit_id, self.binding, self.tool, outcome.code or "ok")
        except Exception:
            log.exception("audit journal write failed")
            return unforeseen(self.tool)
        self.journaled = True
        return outcome
