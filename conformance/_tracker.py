"""The model of contract 1.0.0 watching a run: every tools/call the harness sends is judged as it comes back.

The harness is the host, so it knows each call's context: the binding it minted (recorded here when it was
minted), the confirmation it gave or withheld, the deadline it set, what it planted in a capture. The
tracker turns that into the model's ``Call``, reads the answer as an ``Observation`` and asks the model
(``engram_mcp.contract.model``) whether the contract allows it, advancing one shared state for the run: every
session of every era speaks to the same store. A check asserts on the judgements of the calls it cares about
(``World.expect``); the run-wide check ``model.every-call`` reports any other call the contract did not allow.

A call whose binding the harness did not mint (a forged one) or whose confirmation it cannot vouch for is
judged with what the host knows, or not at all; it never makes the model guess.

Calls that run side by side on purpose (explore.concurrent) are not judged in arrival order: the one shared
state would blame a correct server for an order it never chose. A session with a ``HistoryRecorder`` hands its
calls there instead, with their times, for a linearizability check (``_linearize``); the shared state never
sees them, so the entities such calls touch are their own.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from engram_mcp.conformance._linearize import Operation
from engram_mcp.conformance._profile import Profile, ScopeProfile
from engram_mcp.contract import load
from engram_mcp.contract.binding import CONFIRMATION_REF_META_KEY
from engram_mcp.contract.model import (
    DECISIONS,
    Call,
    Confirmation,
    Decision,
    HostFacts,
    Judgement,
    Model,
    Observation,
    Scope,
    ScopeFacts,
    State,
    judged,
    observed,
)

SKEW_MS = load().limit("binding.clock_skew") * 1000
PURPOSED = ("engram_memory_search", "engram_memory_get", "engram_memory_capture")
REFUSED_REFERENCE = "declined-by-the-host"  # what _host.ReferenceConfirmation sends where the human declines

# What the harness planted in captures (fake credentials made at run time): the host's secret scan knows them.
_PLANTED: set[str] = set()
_PLANTED_LOCK = threading.Lock()


def plant(text: str) -> str:
    """Register text the harness made up to look like a credential, and return it."""
    with _PLANTED_LOCK:
        _PLANTED.add(text)
    return text


def _strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, Mapping):
        return [text for value in node.values() for text in _strings(value)]
    if isinstance(node, list):
        return [text for item in node for text in _strings(item)]
    return []


def _carries_planted(payload: Any, evidence: Any) -> bool:
    texts = _strings(payload) + _strings(evidence)
    with _PLANTED_LOCK:
        planted = list(_PLANTED)
    return any(secret in text for secret in planted for text in texts)


def _admission(policy: str) -> Any:
    """What the host's admission policy decides, as the profile describes the host."""
    fixed: dict[str, frozenset[Decision]] = {"accept": frozenset({"accepted"}), "reject": frozenset({"rejected"}),
                                             "adjudicate": frozenset({"pending_adjudication"})}
    if policy in fixed:
        return lambda payload, evidence: fixed[policy]
    if policy == "secret-scan":  # benign content admitted; what the scan makes of a planted credential is its own
        return lambda payload, evidence: DECISIONS if _carries_planted(payload, evidence) else frozenset({"accepted"})
    return lambda payload, evidence: DECISIONS


def scope_of(scope: ScopeProfile) -> Scope:
    return Scope(scope.tenant, scope.workspace)


def facts_from_profile(profile: Profile) -> HostFacts:
    scopes = {}
    for s in profile.scopes:
        ceiling = s.retention_ceiling_seconds * 1000 if s.retention_ceiling_seconds > 0 else None
        scopes[scope_of(s)] = ScopeFacts(
            memory=s.memory, grants=dict(s.principals), gated=s.policy_tools, allow_retain=s.allow_retain,
            retention_ceiling_ms=ceiling, consented_families=frozenset(s.consented_families),
            capture_denied=frozenset(s.capture_denied), admission=_admission(s.admission_policy))
    return HostFacts(scopes, clock_skew_ms=SKEW_MS)


@dataclass(frozen=True)
class Bound:
    """What a binding the harness minted says: scope, principal, purpose and deadline."""

    scope: Scope
    principal: str
    purpose: str
    deadline: float | None = None
    trusted: bool | None = True  # None: a binding only this project's profile refuses (an audit id of another form)


@dataclass(frozen=True)
class Intent:
    """What the host meant by a call beyond its binding: its stance on the confirmation (None: as the call's way of
    confirming says), whether a host reference carries it, what its own policy decides, whether it owns the query."""

    confirmation: Confirmation | None = None
    reference: bool | None = None
    decisions: frozenset[Decision] | None = None
    exhaustive: bool = False


@dataclass(frozen=True)
class Sent:
    """One tools/call as it left and came back."""

    era: str
    tool: str
    arguments: Any
    meta: Mapping[str, Any] | None
    answer: str
    input_responses: Mapping[str, Any] | None
    request_state: str | None
    approving: Mapping[str, Any] | None  # what the host's approving answer looks like, to recognise it
    kind: str
    result: Mapping[str, Any] | None
    error: Mapping[str, Any] | None
    asked: bool
    started: float  # epoch seconds when it was sent
    intent: Intent | None = None
    elicitation: bool = True  # whether the session declared it can be asked for a confirmation


@dataclass(frozen=True)
class Violation:
    era: str
    label: str
    judgement: Judgement


@dataclass
class Tracker:
    """One run's model state, shared by every session; thread-safe."""

    profile: Profile
    model: Model = field(init=False)
    state: State = field(default_factory=State)
    judged: Counter[str] = field(default_factory=Counter)  # situations judged, for the evidence
    violations: list[Violation] = field(default_factory=list)
    _bindings: dict[tuple[str, str], Bound] = field(default_factory=dict)
    _claimed: set[int] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.model = Model(facts_from_profile(self.profile))

    def narrow(self, profile: Profile) -> None:
        """Judge from now on by ``profile``'s facts: the grants of the tools the target does not serve dropped."""
        with self._lock:
            self.profile = profile
            self.model = Model(facts_from_profile(profile))

    # -- the host's side ----------------------------------------------------------------------------------------

    def minted(self, meta: Mapping[str, Any], bound: Bound) -> None:
        with self._lock:
            for key, value in _texts(meta):
                self._bindings[(key, value)] = bound

    def bound(self, meta: Mapping[str, Any] | None) -> Bound | None:
        if not meta:
            return None
        with self._lock:
            return next((self._bindings[pair] for pair in _texts(meta) if pair in self._bindings), None)

    # -- judging ----------------------------------------------------------------------------------------------------

    def described(self, sent: Sent) -> tuple[Call, Observation] | None:
        """The call as the model sees it and the answer it got; None for a call the host cannot describe."""
        bound = self.bound(sent.meta)
        if bound is None or not isinstance(sent.arguments, dict):
            return None
        seen = (Observation("none", asked=sent.asked) if sent.kind in ("timeout", "cancelled")
                else observed(sent.result, sent.error, question=sent.kind == "input_required", asked=sent.asked))
        return self._call(sent, bound), seen

    def observe(self, sent: Sent) -> Judgement | None:
        """Judge one call and advance the run's state; None for a call the host cannot describe."""
        described = self.described(sent)
        if described is None:
            return None
        call, seen = described
        with self._lock:
            judgement, self.state = judged(self.model, self.state, call, seen)
            self.judged[judgement.expectation.situation] += 1
            if not judgement.allowed:
                label = f"{sent.tool.removeprefix('engram_memory_')}: {judgement.expectation.describe}"
                self.violations.append(Violation(sent.era, label, judgement))
        return judgement

    def claim(self, judgement: Judgement) -> None:
        """A check reports this judgement itself: the run-wide check leaves it out."""
        with self._lock:
            self._claimed.add(id(judgement))

    def unclaimed(self, era: str) -> list[Violation]:
        with self._lock:
            return [v for v in self.violations if v.era == era and id(v.judgement) not in self._claimed]

    def _call(self, sent: Sent, bound: Bound) -> Call:
        intent = sent.intent or Intent()
        confirmation, reference = self._confirmation(sent, intent)
        arguments = sent.arguments
        purpose_ok = sent.tool not in PURPOSED or _purpose(sent.tool, arguments) in (None, bound.purpose)
        return Call(sent.tool, arguments, bound.scope, bound.principal, int(sent.started * 1000),
                    binding=bound.trusted, purpose_ok=purpose_ok,
                    deadline_passed=_deadline_passed(bound.deadline, sent.started), confirmation=confirmation,
                    reference=reference, decisions=intent.decisions, exhaustive=intent.exhaustive)

    def _confirmation(self, sent: Sent, intent: Intent) -> tuple[Confirmation, bool]:  # noqa: PLR0911 - one per way
        carried = (sent.meta or {}).get(CONFIRMATION_REF_META_KEY)
        reference = intent.reference if intent.reference is not None else carried is not None
        if carried is None and (not sent.elicitation or "server-initiated" not in self.profile.confirmation_modes):
            return "absent", False  # no reference, and no way for the server to ask: the call cannot be confirmed
        if intent.confirmation is not None:
            return intent.confirmation, reference
        if carried is not None:  # a reference the host sent: one that approves nothing, or one it does not vouch for
            return ("declined" if carried == REFUSED_REFERENCE else "unknown"), True
        if sent.era == "legacy":
            return ("approved" if sent.answer == "accept" else "declined"), False
        if sent.input_responses is None:
            return "approved", False  # the host would approve when asked; a server that does not ask runs unconfirmed
        if dict(sent.input_responses) != dict(sent.approving or {}):
            return "declined", False
        return "unknown", False  # an approving answer, with a state the host cannot vouch for


class HistoryRecorder:
    """The calls of sessions that run side by side, kept as a history (``_linearize``) instead of judged one by
    one on the run's shared state; thread-safe."""

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker
        self._operations: list[Operation] = []
        self._lock = threading.Lock()

    def record(self, client: str, sent: Sent, invoked: float, returned: float | None) -> None:
        """One call, invoked and returned at these monotonic times (returned None: no answer came)."""
        described = self.tracker.described(sent)
        if described is None:
            return
        call, seen = described
        with self._lock:
            self._operations.append(Operation(client, call, seen, invoked, returned))

    def take(self) -> list[Operation]:
        """What was recorded since the last take, in order of invocation."""
        with self._lock:
            taken, self._operations = self._operations, []
        return sorted(taken, key=lambda op: op.invoked)


def _texts(meta: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """The string members of a _meta object by their path: a host adapter may nest its binding (say under
    ``{"context": {"binding": …}}``), and the call is known by it all the same."""
    found: list[tuple[str, str]] = []
    for key, value in meta.items():
        path = f"{prefix}{key}"
        if isinstance(value, str):
            found.append((path, value))
        elif isinstance(value, Mapping):
            found += _texts(value, path + "/")
    return found


def _purpose(tool: str, arguments: Mapping[str, Any]) -> Any:
    if tool == "engram_memory_capture":
        payload = arguments.get("payload")
        return payload.get("purpose_ref") if isinstance(payload, Mapping) else None
    return arguments.get("purpose_ref")


def _deadline_passed(deadline: float | None, sent_at: float) -> bool | None:
    """Whether a deadline had passed when the call arrived, on any clock within the skew (None: not surely)."""
    if deadline is None:
        return False
    late = (sent_at - deadline) * 1000
    if late > SKEW_MS:
        return True
    return False if late < -SKEW_MS else None


AUDIT_MIN, AUDIT_MAX = load().limit("audit_id.min_chars"), load().limit("audit_id.max_chars")


def _audit_id_in_profile_form(audit_id: str | None) -> bool:
    """The profile's form of an audit id (EMC-HP-072): the contract says only that the host binds one."""
    return audit_id is None or (AUDIT_MIN <= len(audit_id) <= AUDIT_MAX
                                and all("!" <= ch <= "~" for ch in audit_id))


class RecordingHost:
    """The run's host adapter, telling the tracker about every binding it mints; otherwise the adapter itself."""

    def __init__(self, inner: Any, tracker: Tracker, purpose_ref: str) -> None:
        self._inner, self._tracker, self._purpose = inner, tracker, purpose_ref

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def meta(self, scope: ScopeProfile, principal: str, *, purpose: str | None = None, session: str = "conformance",
             audit_id: str | None = None, deadline: float | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = self._inner.meta(scope, principal, purpose=purpose, session=session, audit_id=audit_id,
                                                deadline=deadline)
        trusted = True if _audit_id_in_profile_form(audit_id) else None  # a form only the profile refuses
        self._tracker.minted(meta, Bound(scope_of(scope), principal, purpose or self._purpose, deadline, trusted))
        return meta


def with_intent(reply: Any, judgement: Judgement | None) -> Any:
    return replace(reply, judgement=judgement) if judgement is not None else reply
