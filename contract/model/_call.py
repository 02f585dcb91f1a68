"""One call as the model sees it: what the host bound and sent, what the host knows of its own policy, and the
answer that came back.

The host owns the call's context (contract §0): its scope, principal, purpose, deadline and confirmation.
The model therefore takes that context from the host's side — here, the harness acting as host — together
with the facts of the host's own configuration that decide answers (which tools a principal is granted,
which calls need a confirmation, what the admission policy decides). Those facts are the host's, not the
server's: nothing in them comes from a server under test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from engram_mcp.contract._words import answer_words
from engram_mcp.contract.model._state import Scope

Confirmation = Literal["approved", "declined", "absent", "unknown"]
Decision = Literal["accepted", "rejected", "pending_adjudication"]
DECISIONS: frozenset[Decision] = frozenset({"accepted", "rejected", "pending_adjudication"})


@dataclass(frozen=True)
class ScopeFacts:
    """What the host configured for one scope."""

    memory: bool = True
    grants: Mapping[str, frozenset[str]] = field(default_factory=dict)  # principal -> granted tools
    gated: frozenset[str] = frozenset()  # capture and/or request_admission, when the host marks them
    allow_retain: bool = False
    retention_ceiling_ms: int | None = None  # None: the host states none
    consented_families: frozenset[str] = frozenset()
    capture_denied: frozenset[str] = frozenset()  # principals granted capture without capture authority
    # What the host's admission policy decides for a capture (payload, evidence); every decision when unknown.
    admission: Callable[[Mapping[str, Any], Mapping[str, Any]], frozenset[Decision]] = lambda p, e: DECISIONS


@dataclass(frozen=True)
class HostFacts:
    scopes: Mapping[Scope, ScopeFacts] = field(default_factory=dict)
    clock_skew_ms: int = 5_000  # how far the server's clock may be from the host's (binding.clock_skew)

    def of(self, scope: Scope) -> ScopeFacts | None:
        return self.scopes.get(scope)


@dataclass(frozen=True)
class Call:
    """A tools/call as the host sent it.

    ``binding`` says whether the host bound the call with a valid binding (False: none, or one the host forged;
    None: one the contract lets a server refuse or trust). ``deadline_passed`` None means a deadline so near the
    call's arrival that the server's clock may go either way. ``confirmation`` is what the host does about a
    confirmation: approve what it is asked (or carry a reference for exactly this call), decline it, have no way
    to confirm at all, or (unknown) a confirmation the host cannot vouch for either way. ``decisions`` narrows what
    the host's admission policy decides for this call, when the host knows better than its configuration (it saw
    its policy decide the same content). ``exhaustive`` says the caller owns the query: every record it can match
    is one the model knows."""

    tool: str
    arguments: Any
    scope: Scope
    principal: str
    now_ms: int
    binding: bool | None = True  # None: a binding the contract lets the server trust or refuse
    purpose_ok: bool = True
    deadline_passed: bool | None = False  # None: near enough to the server's clock to go either way
    confirmation: Confirmation = "approved"
    reference: bool = False  # the approval travels with the call (a host reference): the server need not ask
    decisions: frozenset[Decision] | None = None
    exhaustive: bool = False


def member(value: Any, key: str) -> Mapping[str, Any]:
    """An object member of a JSON value, or an empty one when it is absent or not an object."""
    found = value.get(key) if isinstance(value, Mapping) else None
    return found if isinstance(found, Mapping) else {}


Kind = Literal["success", "refusal", "protocol", "question", "none", "unreadable"]


@dataclass(frozen=True)
class Observation:
    """The answer a call got, read the way the contract lets a caller read it.

    ``success`` and ``refusal`` are envelopes (ok true or false); ``protocol`` a JSON-RPC error; ``question``
    a request for input (a confirmation asked for in the 2026-07-28 era, no effect yet); ``none`` no answer;
    ``unreadable`` a result that is no envelope at all (the envelope checks judge it). ``asked`` says whether
    the server asked the host anything during the call. ``said`` is the answer in plain words, as it came over
    the wire (``_words.answer_words``), for the kinds a word or a code does not tell: a JSON-RPC error with its
    message, a result that is no envelope with what it held."""

    kind: Kind
    code: Any = None
    retriable: bool | None = None
    value: Mapping[str, Any] | None = None
    asked: bool = False
    said: str = field(default="", compare=False)

    @property
    def outcome(self) -> str:
        """One word for the answer: ``ok``, the envelope's code, ``jsonrpc:CODE``, or the kind."""
        if self.kind == "success":
            return "ok"
        if self.kind == "refusal":
            return str(self.code)
        if self.kind == "protocol":
            return f"jsonrpc:{self.code}"
        return self.kind

    def describe(self) -> str:
        if self.kind in ("protocol", "unreadable") and self.said:
            return self.said
        if self.kind != "success" or not isinstance(self.value, Mapping):
            return self.outcome
        value = self.value
        status = value.get("status") or (value.get("outcome") or {}).get("status") \
            or (value.get("receipt") or {}).get("to_state")
        shown = [f"ok ({status})" if status else "ok"]
        if "replayed" in value:
            shown.append(f"replayed {str(value['replayed']).lower()}")
        if "records" in value and isinstance(value["records"], list):
            shown.append(f"{len(value['records'])} record(s)" + (", a cursor" if value.get("next_page_cursor")
                                                                  else ""))
        return ", ".join(shown)


def observed(result: Mapping[str, Any] | None, error: Mapping[str, Any] | None = None, *,  # noqa: PLR0911 - one return per kind of answer
             question: bool = False, asked: bool = False) -> Observation:
    """An Observation from the wire: a tools/call result (structuredContent) or a JSON-RPC error object."""
    if error is not None:
        return Observation("protocol", error.get("code"), asked=asked, said=answer_words(None, error))
    if question:
        return Observation("question", asked=True)
    if result is None:
        return Observation("none", asked=asked)
    envelope = result.get("structuredContent")
    if not isinstance(envelope, Mapping) or not isinstance(envelope.get("ok"), bool):
        return Observation("unreadable", asked=asked, said=answer_words(result, None))
    if envelope["ok"]:
        output = envelope.get("output")
        value = output.get("value") if isinstance(output, Mapping) else None
        if not isinstance(value, Mapping):
            return Observation("unreadable", asked=asked, said="a success envelope whose output holds no value")
        return Observation("success", value=value, asked=asked)
    failure = envelope.get("error")
    if not isinstance(failure, Mapping):
        return Observation("unreadable", asked=asked, said="a refusal envelope without an error object")
    retriable = failure.get("retriable")
    return Observation("refusal", failure.get("code"), retriable if isinstance(retriable, bool) else None,
                       asked=asked)
