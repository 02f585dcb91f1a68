"""The suite's view of one target in one era: calls bound by the host, argument builders, evidence.

Checks speak to the target only through World, so every call is bound,
confirmed and recorded the same way, and a broken prerequisite surfaces as
BLOCKED with its reason instead of as a cascade of unexplained failures.
"""

from __future__ import annotations

import itertools
import secrets
import string
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from engram_mcp.conformance._checks import Blocked, HarnessError, pin, require
from engram_mcp.conformance._connect import Connection, Reply
from engram_mcp.conformance._findings import BROKEN_REQUIREMENTS, MODEL_BLAME_ALONE
from engram_mcp.conformance._host import (
    Answer,
    ConfirmationReferences,
    Confirmer,
    HostBinding,
)
from engram_mcp.conformance._needs import short
from engram_mcp.conformance._profile import Profile, ScopeProfile
from engram_mcp.conformance._tracker import Intent, plant
from engram_mcp.conformance._words import quoted, spoken
from engram_mcp.contract import load, record_id
from engram_mcp.contract.model import Judgement

T = TypeVar("T")

DIGEST = "sha256:" + "ab" * 32
SEARCH, GET = "engram_memory_search", "engram_memory_get"
_counter = itertools.count(1)
RETRIES, RETRY_PAUSE = 2, 0.2  # a retriable answer is asked again this often, after this pause (seconds) and more
MODEL_EVIDENCE = 12  # the judgements one check's evidence lists


def _retriable(reply: Reply) -> bool:
    """An answer the contract tells the caller to retry: a retriable refusal that decided nothing."""
    judgement = reply.judgement
    return (isinstance(judgement, Judgement) and not judgement.conclusive and judgement.seen.kind == "refusal"
            and judgement.seen.retriable is True)


def unique(prefix: str = "m") -> str:
    """A fresh token: unique within the run, and unlikely anywhere else."""
    return f"{prefix}{next(_counter):04d}{secrets.token_hex(6)}"


def fresh_key() -> str:
    return "conformance-key-" + unique("k")


def unknown_record() -> str:
    """A well-formed record id nobody issued."""
    return record_id("sha256:" + secrets.token_hex(32))


def unknown_candidate() -> str:
    """A well-formed candidate id nobody issued."""
    return "candidate_" + secrets.token_hex(32)


def planted_credential() -> str:
    """Credential-shaped text made up at run time, never a real secret: an access key id and a password. The host
    knows what it planted (its secret scan is expected to find it)."""
    alphabet = string.ascii_uppercase + string.digits
    return plant("the deploy user " + "AK" + "IA" + "".join(secrets.choice(alphabet) for _ in range(16))
                 + " signs in with " + "pass" + "word: " + "hunter" + "2xyz .")


def capture_arguments(purpose_ref: str, *, text: str | None = None, key: str | None = None,
                      **payload_extra: Any) -> dict[str, Any]:
    """Valid capture arguments with one decision component citing one source."""
    payload = {
        "schema_version": 2,
        "purpose_ref": purpose_ref,
        "valid_time": {"t": 1_700_000_000_000},
        "components": [{"component_id": "component:decision", "kind": "decision",
                        "text": text or f"Decision {unique('d')}: keep the ledger in one database.",
                        "citation_ids": ["citation:source"]}],
        "primary_component_id": "component:decision",
        "primary_event": {"at": 1_700_000_000_000, "type_ref": "event:decided", "citation_id": "citation:source"},
        "citations": [{"citation_id": "citation:source", "source_ref": "source:conformance",
                       "locator": {"scheme": "document", "value": "conformance#1"}, "content_digest": DIGEST}],
        **payload_extra,
    }
    return {
        "idempotency_key": key or fresh_key(),
        "payload": payload,
        "evidence": {
            "evidence_ref": "evidence:conformance",
            "evidence_digest": DIGEST,
            "citation_ids": ["citation:source"],
        },
    }


@dataclass
class Evidence:
    """What a check saw, for the report. Values are redacted when the report is written."""

    items: dict[str, Any] = field(default_factory=dict)

    def add(self, key: str, value: Any) -> None:
        self.items[key] = value


@dataclass
class World:
    conn: Connection
    host: HostBinding
    confirmer: Confirmer
    profile: Profile
    evidence: Evidence
    references: ConfirmationReferences | None = None  # set when the profile declares the host-reference mode
    # The tools the check declares for this case (``_needs``): its scope is one that fits them, and a call of any
    # other of the six is the harness's mistake. None: a world no check declared (the harness's own calls).
    tools: frozenset[str] | None = None
    served: Mapping[str, bool | None] = field(default_factory=dict)  # what the preflight learnt (``Run.served``)

    @property
    def era(self) -> str:
        return self.conn.era

    # -- scopes ------------------------------------------------------------------

    def need(self, found: T | None, role: str) -> T:
        """A scope (or principal) the check needs; SKIP when the profile has none in that role (a name of
        ``_needs.ROLES``, or words that say what the check needs)."""
        import pytest

        if found is None:
            pytest.skip(self.profile.lacks(role))
        return found

    def role(self, name: str) -> Any:
        """The scope (or scope and principal) of a role of ``_needs.ROLES``; SKIP when the profile has none."""
        return self.need(self.profile.role(name, self.profile.scope_for(self.tools or ())), name)

    @property
    def scope(self) -> ScopeProfile:
        """The check's own scope: memory on, one principal granted every tool the check calls, none of them gated
        and benign content admitted where it asks for admission (``Profile.scope_for``)."""
        tools = self.tools or frozenset()
        return self.need(self.profile.scope_for(tools), self.profile.scope_words(tools))

    def principal(self, scope: ScopeProfile, tools: set[str] | frozenset[str] | None = None) -> str:
        import pytest

        name = scope.principal_with(set(tools or ()))
        if name is None:
            pytest.skip(f"the check needs a principal of {scope.label} granted {short(sorted(tools or ()))}: "
                        "the profile grants them to none")
        return name

    def serves(self, *tools: str) -> bool:
        """Whether the target serves these tools, as far as the preflight learnt (a tool it could not tell counts)."""
        return all(self.served.get(tool) is not False for tool in tools)

    # -- calls -------------------------------------------------------------------

    def meta(self, scope: ScopeProfile | None = None, principal: str | None = None, purpose: str | None = None,
             tool: str | None = None) -> dict[str, Any]:
        scope = scope or self.scope
        principal = principal or self.principal(scope, {tool} if tool else None)
        return self.host.meta(scope, principal, purpose=purpose)

    def call(self, tool: str, arguments: Any, *, scope: ScopeProfile | None = None, principal: str | None = None,
             meta: Mapping[str, Any] | None = None, answer: Answer = "accept", confirm: bool = True,
             timeout: float | None = None, deadline: float | None = None, intent: Intent | None = None) -> Reply:
        """tools/call as the host would send it. In 2026-07-28 a confirmation request is answered
        with ``answer`` and retried once, unless ``confirm`` is False. An answer the contract model finds
        retriable (RATE_LIMITED, say) is retried, as the contract tells a caller to, before it is returned."""
        stance = self.stance(answer)
        if intent is not None:  # what the caller says, over what its way of confirming says
            stance = Intent(intent.confirmation or stance.confirmation,
                            stance.reference if intent.reference is None else intent.reference,
                            intent.decisions, intent.exhaustive)
        for attempt in range(RETRIES + 1):
            reply = self._call_once(tool, arguments, scope, principal, meta, answer, confirm, timeout, deadline,
                                    stance)
            if not _retriable(reply) or attempt == RETRIES:
                return reply
            time.sleep(RETRY_PAUSE * (attempt + 1))
        return reply

    def _call_once(self, tool: str, arguments: Any, scope: ScopeProfile | None, principal: str | None,
                   meta: Mapping[str, Any] | None, answer: Answer, confirm: bool, timeout: float | None,
                   deadline: float | None, stance: Intent) -> Reply:
        if self.tools is not None and tool in load().tools and tool not in self.tools:
            raise HarnessError(f"the check calls {tool}, which its declaration (@check uses=…) leaves out: a "
                               "defect of the harness, fixed in the suite")
        retry_meta = meta
        if meta is None:
            scope = scope or self.scope
            principal = principal or self.principal(scope, {tool})
            self._require_offered(tool, scope, principal)
            meta = self.host.meta(scope, principal, deadline=deadline)
        reply = self.conn.call(tool, arguments, meta, answer=answer, timeout=timeout, intent=stance)
        if reply.kind == "input_required" and confirm and answer != "silence":
            if retry_meta is None:  # the retry is a call of its own, with its own audit id (EMC-HP-053)
                retry_meta = self.host.meta(scope, principal,  # type: ignore[arg-type]  # set above: meta was None
                                            deadline=deadline)
            reply = self.conn.call(tool, arguments, retry_meta, input_responses=self.confirmer.input_responses(answer),
                                   request_state=(reply.result or {}).get("requestState"), timeout=timeout,
                                   intent=stance)
        return reply

    def stance(self, answer: Answer = "accept") -> Intent:
        """The host's stance on a call's confirmation: it approves what it is asked (or sends a reference for
        exactly this call, to a target confirmed by reference only), or it declines."""
        return Intent(confirmation="approved" if answer == "accept" else "declined",
                      reference=True if self.conn.confirm_by_reference is not None else None)

    def expect(self, reply: Reply, what: str = "", *, model_alone: bool = False) -> Judgement:
        """Assert that the contract allows the answer ``reply`` got, in the state the calls so far led to.

        A wrong answer fails the check with the model's verdict (the situation, the answer seen, what the contract
        allows there) and blames the requirements it breaks, beside the check's own (``model_alone``: only the
        model's, for a check whose requirements are alternatives the model tells apart); an answer only this
        project's profile would not give is recorded against its pin, which only --level pins scores."""
        judgement = reply.judgement
        if not isinstance(judgement, Judgement):
            raise RuntimeError(f"{what or 'the call'} was sent outside what the contract model can judge")
        tracker = self.conn.tracker
        if tracker is not None:
            tracker.claim(judgement)
        seen = self.evidence.items.setdefault("model", [])
        if len(seen) < MODEL_EVIDENCE:
            seen.append({"situation": judgement.expectation.situation, "seen": judgement.seen.describe(),
                         "allowed": judgement.expectation.allowed_text(), "verdict": "allowed" if judgement.allowed
                         else "not allowed", **({"pins": [p.requirement for p in judgement.pins]}
                                               if judgement.pins else {})})
        lead = f"{what}: " if what else ""
        if not judgement.expectation.judged:  # a call the model cannot judge (its target's state is in doubt)
            return judgement
        if not judgement.conclusive and judgement.allowed:
            raise Blocked(f"{lead}{judgement.expectation.describe}: the target answered {judgement.seen.describe()} "
                          "(no definite answer, even when asked again)")
        if not judgement.allowed:
            broken = self.evidence.items.setdefault(BROKEN_REQUIREMENTS, [])
            broken.extend(r for r in judgement.broken if r not in broken)
            if model_alone:
                self.evidence.add(MODEL_BLAME_ALONE, True)
            raise AssertionError("\n".join([lead + judgement.message(), *(f"- {p}" for p in judgement.problems)]))
        for problem in judgement.pins:
            pin(problem.requirement, False, lead + problem.text)
        return judgement

    def search(self, query: str, *, scope: ScopeProfile | None = None, principal: str | None = None,
               owned: bool = False, **options: Any) -> Reply:
        """engram_memory_search for ``query``; ``owned`` says the harness owns every record it can match (a marker
        word made up for the check), so the model knows what it must find."""
        arguments = {"query": query, "purpose_ref": self.profile.purpose_ref, **options}
        return self.call(SEARCH, arguments, scope=scope, principal=principal,
                         intent=Intent(exhaustive=True) if owned else None)

    def get(self, record_id: str, *, scope: ScopeProfile | None = None, principal: str | None = None,
            **options: Any) -> Reply:
        return self.call(GET, {"record_id": record_id, "purpose_ref": self.profile.purpose_ref, **options},
                         scope=scope, principal=principal)

    def found(self, reply: Reply, what: str = "search") -> list[str]:
        """The record ids of a search page the contract allows; BLOCKED when the answer is no page."""
        self.expect(reply, what)
        value = self.value(reply, what)
        return [entry.get("record", {}).get("record_id") for entry in value.get("records", [])
                if isinstance(entry, dict) and isinstance(entry.get("record"), dict)]

    def offered(self, scope: ScopeProfile, principal: str) -> frozenset[str]:
        """The tools the target lists for this binding (asked once per session, scope and principal)."""
        key = (scope.tenant, scope.workspace, principal)
        if key not in self.conn.offered:
            reply = self.conn.list_tools(self.host.meta(scope, principal))
            tools = (reply.result or {}).get("tools", []) if reply.kind == "result" else []
            self.conn.offered[key] = _names(tools)
        return self.conn.offered[key]

    def _require_offered(self, tool: str, scope: ScopeProfile, principal: str) -> None:
        """A check that needs a tool the target does not offer is not applicable: SKIP, with the reason."""
        import pytest

        if tool in load().tools and tool not in self.offered(scope, principal):
            pytest.skip(f"the target does not offer {tool} to {principal} in {scope.label}")

    def require_offered_unbound(self, tool: str) -> None:
        """Without a host identity, the only view of the tools is tools/list with no binding: SKIP when it lists
        tools but not this one (a target that lists none unbound, as memory is off by default, may still offer it)."""
        import pytest

        if ("", "", "") not in self.conn.offered:
            reply = self.conn.list_tools(None)
            tools = (reply.result or {}).get("tools", []) if reply.kind == "result" else []
            self.conn.offered[("", "", "")] = _names(tools)
        listed = self.conn.offered[("", "", "")]
        if listed and tool not in listed:
            pytest.skip(f"the target does not offer {tool} (it lists other tools to a client without a binding)")

    def value(self, reply: Reply, what: str) -> dict[str, Any]:
        """The success value of a reply that a later step depends on; BLOCKED otherwise."""
        envelope = reply.envelope
        require(reply.kind == "result" and isinstance(envelope, dict) and envelope.get("ok") is True,
                f"{what} did not succeed: it was answered {reply.said()}")
        value = envelope.get("output", {}).get("value")
        require(isinstance(value, dict), f"{what} returned no value")
        return value

    # -- prerequisites -----------------------------------------------------------

    def capture(self, *, scope: ScopeProfile | None = None, principal: str | None = None,
                text: str | None = None, **extra: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        scope = scope or self.scope
        arguments = capture_arguments(self.profile.purpose_ref, text=text, **extra)
        reply = self.call("engram_memory_capture", arguments, scope=scope, principal=principal)
        return arguments, self.value(reply, "capture")

    def admit(
        self, candidate_id: str, *, scope: ScopeProfile | None = None, principal: str | None = None
    ) -> dict[str, Any]:
        reply = self.call(
            "engram_memory_request_admission",
            {"candidate_id": candidate_id, "idempotency_key": fresh_key()},
            scope=scope,
            principal=principal,
        )
        return self.value(reply, "request_admission")["outcome"]

    def accepted_record(
        self, *, text: str | None = None, scope: ScopeProfile | None = None
    ) -> tuple[str, dict[str, Any]]:
        """A record admitted into the scope: (record_id, capture arguments)."""
        scope = scope or self.scope
        principal = self.principal(scope, {"engram_memory_capture", "engram_memory_request_admission"})
        arguments, captured = self.capture(scope=scope, principal=principal, text=text)
        outcome = self.admit(captured["candidate_id"], scope=scope, principal=principal)
        if outcome.get("status") != "accepted" or "record_id" not in outcome:
            raise Blocked(f"admission of benign content in {scope.label} was {spoken(outcome.get('status'))}, "
                          "not accepted")
        return outcome["record_id"], arguments


def _names(tools: Any) -> frozenset[str]:
    """The names a tools/list result gives; an entry without a string name offers nothing."""
    return frozenset(t["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str))


# The pin on each protocol error's exact text: the contract names the error by its code and words, the profile
# pins the text (spec/host-wiring.md, Terms).
EXACT_TEXT_PIN = {"trusted_context_unavailable": "EMC-HP-077", "unknown_tool": "EMC-HP-018"}


def refused_with(reply: Reply, name: str, what: str) -> None:
    """Assert that ``reply`` is the protocol error ``name`` of spec/errors.json, as the contract asks: its JSON-RPC
    code, and a message that carries the contract's words for it. The exact text (nothing around it, no part of
    the call) is this project's pin, judged apart."""
    error = load().protocol_errors[name]
    wanted = f"the JSON-RPC error {error.jsonrpc_code} {quoted(error.message)}"
    assert reply.kind == "error" and reply.error is not None, f"{what} was answered {reply.said()}, where the " \
        f"contract wants {wanted}"
    code, message = reply.error.get("code"), reply.error.get("message")
    assert code == error.jsonrpc_code, f"{what} was answered {reply.said()}, where the contract wants {wanted}"
    assert isinstance(message, str) and error.message.lower() in message.lower(), (
        f"{what} was answered {reply.said()}: the message does not carry the contract's words for the error, "
        f"{quoted(error.message)}")
    pin(EXACT_TEXT_PIN[name], message == error.message,
        f"{what} was answered with the message {quoted(message)}, not exactly {quoted(error.message)}")


ANSWERS_KEPT = 6  # raw answers a failing check's evidence keeps: those the model did not allow, then the last ones


def answers_since(conn: Connection, start: int) -> list[dict[str, Any]]:
    """What the calls a session made since its ``start``-th were answered, raw (the reports bound and redact it):
    the answers the contract model did not allow or could not read first, then the last ones."""
    calls = conn.calls[start:]
    unexpected = [reply for _, reply in calls if reply.judgement is None or not reply.judgement.allowed
                  or reply.judgement.seen.kind == "unreadable"]
    kept = list(dict.fromkeys(id(reply) for reply in [*unexpected, *(reply for _, reply in calls[-3:])]))
    by_id = {id(reply): (tool, reply) for tool, reply in calls}
    return [{"tool": by_id[key][0], **by_id[key][1].wire()} for key in kept[:ANSWERS_KEPT]]
