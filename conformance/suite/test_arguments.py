"""Closed schemas, fuzzed: valid arguments are never refused, invalid ones always are, with the right code.

The argument oracle of engram_mcp.contract is the judge. For every case a check
sends, the oracle's verdict at the moment of sending decides what the target
must answer:

- oracle-valid arguments are never refused as INVALID_SCHEMA or INVALID_DIGEST.
  Any other envelope is fine here (success, NOT_FOUND, gate_failed, a policy
  refusal...), and so is -32603 when the case carries a purpose other than the
  bound one, since the purpose is checked after the arguments (host wiring 1.5).
  Valid arguments that make the target report a fault of its own (a store
  failure or an unknown mutation outcome), still after one retry, were not
  accepted either, and count as refused; so does an error result that carries
  no envelope to say why, and any other JSON-RPC error. (Whether a result is a
  well-formed envelope is for the envelope.* checks to say.)
- oracle-invalid arguments are refused with exactly the oracle's code
  (INVALID_SCHEMA beats INVALID_DIGEST). Arguments that are not a JSON object
  may also be refused with JSON-RPC -32602: the MCP SDK's own request layer
  answers so before any tool code runs, and no memory is touched either way.
- oracle-invalid arguments that only a pin refuses (_pins: a candidate_id
  outside this project's form, a capability_policy lacking a member) need not be
  refused at the contract level: the id may be NOT_FOUND (never a success), the
  policy may succeed. The pinned code is judged apart, scored at --level pins.

The cases come from engram_mcp.conformance._fuzz (list them with
``python -m engram_mcp.conformance._fuzz``); one check covers one family, per
tool. Cases run in the check's scope. Every confirmation a case might trigger
is declined, valid mutation cases carry idempotency keys of their own, and the
targets of request_admission, withdraw and forget cases are ids nothing ever
issued, so no case can change memory that another check relies on. Valid
captures do leave pending candidates behind, which nothing can read.

Cases an MCP SDK session cannot carry (raw bytes, lone surrogates, NaN) are
listed but not sent, and counted in the evidence. Each failing check prints up
to ten wrong cases with their arguments and a command that runs it again.
"""

from __future__ import annotations

import collections
import secrets
import shlex
import threading
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from engram_mcp.conformance import _checks, _pins
from engram_mcp.conformance import _fuzz as fuzz
from engram_mcp.conformance._arguments_drawing import DRAWN, Drawing
from engram_mcp.conformance._checks import check, not_applicable, require
from engram_mcp.conformance._connect import Reply
from engram_mcp.conformance._findings import BROKEN_RULES, BROKEN_TOOLS
from engram_mcp.conformance._needs import CASE_TOOL
from engram_mcp.conformance._words import spoken
from engram_mcp.conformance._world import World
from engram_mcp.contract import load

CONTRACT = load()
TOOLS = fuzz.TOOLS
TOOL_IDS = [t.removeprefix("engram_memory_") for t in TOOLS]
REFUSALS = frozenset({"INVALID_SCHEMA", "INVALID_DIGEST"})
# What a target reports when valid arguments broke it rather than its store or policy.
FAULTS = frozenset({"STORE_UNAVAILABLE", "MUTATION_OUTCOME_UNKNOWN", "JOURNAL_CORRUPT", "BLOB_MISSING"})
EXPECTED_RETRIABLE = frozenset({"RANKING_UNAVAILABLE"})  # an answer to lexical_and_semantic, not a hiccup
UNTRUSTED = CONTRACT.protocol_errors["trusted_context_unavailable"].jsonrpc_code
INVALID_PARAMS = -32602  # the MCP SDK's answer to tools/call params it cannot parse
WORKERS = 2  # calls in flight at once: enough to overlap the two ends of a stdio pipe
RETRIES = 1  # a retriable refusal (e.g. RATE_LIMITED) is tried again after a pause
SHOWN = 50  # failing cases spelled out in a message (the reports keep up to 60 lines of it)
# A slow target must not hold the run hostage: a check stops sending after CHECK_BUDGET seconds,
# and once the module has spent ERA_BUDGET seconds in one era its remaining checks are BLOCKED.
# A check cut short FAILS on what it saw, or is BLOCKED when what it saw was right.
CHECK_BUDGET = 30.0
ERA_BUDGET = 150.0
_SPENT: dict[tuple[int, str], list[float]] = {}
_SALT = secrets.token_hex(6)  # keeps this run's idempotency keys apart from any earlier run's


_DRAWINGS: dict[tuple[int, int, str], Drawing] = {}
_BUILT: dict[tuple[str, str, int, int, str], tuple[fuzz.Case, ...]] = {}


def _wanted(session: pytest.Session) -> bool:
    for item in session.items:
        marker = item.get_closest_marker("engram_check")
        if marker and str(marker.args[0]).startswith("arguments.schemathesis"):
            return True
    return False


@pytest.fixture(scope="module", autouse=True)
def drawing(request: pytest.FixtureRequest, harness: Any) -> Iterator[None]:
    """Start drawing as soon as the module starts, when the run includes the schemathesis checks."""
    key = (harness.seed, harness.examples, harness.profile.purpose_ref)
    if key not in _DRAWINGS and _wanted(request.session):
        _DRAWINGS[key] = Drawing(*key)
    yield
    held = _DRAWINGS.get(key)
    if held is not None:
        held.stop()


def generated(family: str, tool: str, seed: int, examples: int, purpose: str) -> tuple[fuzz.Case, ...]:
    """A family's cases, generated once per run and shared by both eras."""
    if family in DRAWN:
        key = (seed, examples, purpose)
        if key not in _DRAWINGS:
            _DRAWINGS[key] = Drawing(*key)
        return _DRAWINGS[key].cases(family, tool)
    built = (family, tool, seed, examples, purpose)
    if built not in _BUILT:
        _BUILT[built] = tuple(fuzz.cases(family, tool, seed=seed, examples=examples, purpose=purpose))
    return _BUILT[built]


@dataclass
class Sent:
    case: fuzz.Case
    arguments: Any
    valid: bool
    code: str | None
    reply: Reply


def _clock_dependent(tool: str, arguments: Any) -> bool:
    try:
        return tool == fuzz.CAPTURE and isinstance(arguments["payload"]["retention"]["expires_at"], str)
    except (KeyError, TypeError):
        return False


def _prepare(world: World, case: fuzz.Case, index: int) -> tuple[Any, bool, str | None]:
    """The arguments to send and the verdict they must get, judged now."""
    arguments = case.arguments
    if case.family == "fixtures":
        arguments = fuzz.bind_purpose(case.tool, arguments, world.profile.purpose_ref, only=fuzz.FIXTURE_PURPOSE)
    salted = fuzz.with_salted_key(case.tool, arguments, f"{_SALT}-{world.era}-{case.family}-{index}")
    if case.valid:
        arguments = salted
    elif salted is not arguments and _same_verdict(case.tool, arguments, salted):
        # An invalid case gets a key of its own too, unless the key is what makes it invalid: a key another
        # case used (and a server may have bound, even by refusing it) would let DIGEST_CONFLICT decide first.
        arguments = salted
    # Binding the purpose and salting the key never change a valid case's verdict (see _fuzz); only the clock can.
    if not _clock_dependent(case.tool, arguments):
        return arguments, case.valid, case.code
    verdict = fuzz.oracle().verdict(case.tool, arguments, now=fuzz.utc_now())
    return arguments, verdict.valid, verdict.code


def _same_verdict(tool: str, arguments: Any, salted: Any) -> bool:
    # Judged without the clock (the oracle remembers those verdicts): no clock rule reads the key, so the
    # clock's part of the two verdicts is the same whenever it is judged.
    before, after = (fuzz.oracle().verdict(tool, a) for a in (arguments, salted))
    return (before.code, before.violations) == (after.code, after.violations)


class Binder:
    """The host's _meta for one scope and principal, minted again when it is half-way to expiry."""

    REFRESH = 20.0  # seconds; the test host mints bindings for a minute

    def __init__(self, world: World, scope: Any, principal: str) -> None:
        self.world, self.scope, self.principal = world, scope, principal
        self._meta: dict[str, Any] | None = None
        self._minted = 0.0
        self._lock = threading.Lock()

    def meta(self) -> dict[str, Any]:
        with self._lock:
            if self._meta is None or time.monotonic() - self._minted > self.REFRESH:
                self._meta, self._minted = self.world.meta(self.scope, self.principal), time.monotonic()
            return self._meta


def _send(world: World, binder: Binder, case: fuzz.Case, index: int) -> Sent:
    arguments, valid, code = _prepare(world, case, index)
    reply = world.call(case.tool, arguments, meta=binder.meta(), answer="decline")
    for attempt in range(RETRIES):
        error = (reply.envelope or {}).get("error") if isinstance(reply.envelope, dict) else None
        transient = isinstance(error, dict) and error.get("retriable") is True
        if not transient or error.get("code") in EXPECTED_RETRIABLE:
            break
        time.sleep(0.1 * (attempt + 1))
        reply = world.call(case.tool, arguments, meta=binder.meta(), answer="decline")
    return Sent(case, arguments, valid, code, reply)


def _send_raw(world: World, harness: Any, binder: Binder, case: fuzz.Case) -> Sent:
    """Send a case as JSON text over a raw session (lone surrogates); the target must refuse it."""
    reply = harness.raw(world.era).call(case.tool, case.arguments, binder.meta())
    return Sent(case, case.arguments, case.valid, case.code, reply)


NO_ENVELOPE_ERROR = "an isError result without an envelope"
NO_ENVELOPE = "a result without an envelope"


def _outcome(reply: Reply) -> str:
    """What the target answered, in one short phrase: success, an error code, or what came instead."""
    if reply.kind == "error":
        return f"JSON-RPC {spoken((reply.error or {}).get('code'))}"
    if reply.kind != "result":
        return reply.kind
    envelope = reply.envelope
    if isinstance(envelope, dict) and envelope.get("ok") is True:
        return "success"
    if isinstance(envelope, dict) and envelope.get("ok") is False:
        error = envelope.get("error")
        return str(error.get("code")) if isinstance(error, dict) else "a failure envelope without an error"
    return NO_ENVELOPE_ERROR if (reply.result or {}).get("isError") is True else NO_ENVELOPE


def _purpose_differs(world: World, tool: str, arguments: Any) -> bool:
    path = fuzz.purpose_path(tool)
    try:
        return path is not None and fuzz.get_at(arguments, path) != world.profile.purpose_ref
    except (KeyError, IndexError, TypeError):
        return False


def _problem(world: World, sent: Sent) -> str | None:
    """Why the reply is wrong for the verdict, or None when it is right."""
    outcome = _outcome(sent.reply)
    if sent.case.pins:
        return _pinned_problem(world, sent, outcome)
    return _valid_problem(world, sent, outcome) if sent.valid else _invalid_problem(sent, outcome)


def _pinned_problem(world: World, sent: Sent, outcome: str) -> str | None:
    """A case whose verdict only a pin decides: any answer the contract allows is right at its level (see
    _pins); the oracle's own answer is judged apart, as the pin."""
    allowed = _pins.allowed(sent.case.tool, sent.arguments)
    if outcome in allowed:
        return None
    names_nothing = CONTRACT.tools[sent.case.tool].target is not None  # the cases' targets are ids nothing issued
    if _pins.ACCEPTED in allowed and _valid_problem(world, sent, outcome) is None and not (
            names_nothing and outcome == "success"):
        return None
    codes = sorted(str(c) for c in allowed if c is not None)
    expected = " or ".join([*codes, *(["an answer to valid arguments"] if _pins.ACCEPTED in allowed else [])])
    return f"expected {expected}, got {outcome}"


def _record_pins(results: list[Sent]) -> None:
    """The oracle's own answer to a pinned case, judged apart as the profile requirement (--level pins)."""
    for sent in results:
        if not sent.case.pins:
            continue
        outcome = _outcome(sent.reply)
        held = outcome == sent.code if not sent.valid else _pinned_valid(outcome)
        for requirement in sent.case.pins:
            _checks.pin(requirement, held, f"{sent.case.tool} {spoken(sent.case.label)}: expected "
                                           f"{sent.code or 'the arguments accepted'}, got {outcome}")


def _pinned_valid(outcome: str) -> bool:
    """This profile accepts the arguments: anything but a refusal of them is its answer."""
    return outcome not in REFUSALS


def _record_broken(world: World, wrong: list[Sent], *, every_case_sent: bool) -> None:
    """The rules and tools of the wrongly answered cases: the report blames only the requirements they carry.

    Only when every case was sent: the others are then judged passed by these cases, which a cut run cannot say."""
    if every_case_sent and wrong and all(sent.case.rules for sent in wrong):
        world.evidence.add(BROKEN_RULES, sorted({rule for sent in wrong for rule in sent.case.rules}))
        world.evidence.add(BROKEN_TOOLS, sorted({sent.case.tool for sent in wrong}))


def _valid_problem(world: World, sent: Sent, outcome: str) -> str | None:
    """Valid arguments are never refused as invalid, nor break the target; any other answer is for other checks."""
    if outcome in REFUSALS:
        return f"valid arguments refused as {outcome}"
    if outcome in FAULTS:
        return f"valid arguments made the call fail with {outcome}, again on a retry"
    if outcome == f"JSON-RPC {UNTRUSTED}" and _purpose_differs(world, sent.case.tool, sent.arguments):
        return None
    if sent.reply.kind != "result" or outcome == NO_ENVELOPE_ERROR:
        return f"valid arguments answered with {outcome}"
    return None  # a success, or a refusal for another reason: the envelope checks judge its shape


def _invalid_problem(sent: Sent, outcome: str) -> str | None:
    if outcome == sent.code:
        return None
    if not isinstance(sent.arguments, dict) and outcome in ("INVALID_SCHEMA", f"JSON-RPC {INVALID_PARAMS}"):
        return None
    if sent.case.unsendable == fuzz.LONE_SURROGATE and sent.reply.kind == "error":
        return None  # I-JSON lets a receiver refuse the whole message as unreadable (EMC-ENC-009)
    return f"expected {sent.code or 'the arguments accepted'}, got {outcome}"


def reproduce(harness: Any, check_id: str, era: str) -> str:
    return shlex.join(["conformance", "--target", harness.target.label, "--profile", str(harness.profile.path),
                       "--select", check_id, "--seed", str(harness.seed), "--examples", str(harness.examples),
                       "--era", era])


def run_family(world: World, harness: Any, check_id: str, family: str, tool: str) -> None:
    """Send every sendable case of a family for a tool, then assert on all of them at once."""
    scope = world.scope
    principal = world.principal(scope, {tool})
    world._require_offered(tool, scope, principal)  # the cases are sent with meta=, which World.call does not vet
    cases = generated(family, tool, harness.seed, harness.examples, world.profile.purpose_ref)
    if not cases:
        not_applicable(f"{tool} has no argument this family applies to")
    # A lone surrogate is valid JSON text that no SDK session can serialise: a raw session sends it.
    raw = {id(c) for c in cases if c.unsendable == fuzz.LONE_SURROGATE}
    sendable = [c for c in cases if not c.unsendable or id(c) in raw]
    unsent = collections.Counter(c.unsendable for c in cases if c.unsendable and id(c) not in raw)
    world.evidence.add("cases", len(cases))
    if unsent:
        world.evidence.add("not_sent", dict(unsent))
    if not sendable:
        pytest.skip(f"none of the {len(cases)} cases can be sent through an MCP SDK session: "
                    + "; ".join(sorted(unsent)))
    if family == "fixtures" and len(harness.eras) > 1:
        # The corpus is long and the same in every era: each era sends every other case, so that one
        # run sends all of it once. A run restricted to one era sends it all.
        share = harness.eras.index(world.era)
        sendable = sendable[share::len(harness.eras)]
        world.evidence.add("corpus_share", f"case {share}, then one case in every {len(harness.eras)} after it")
    binder = Binder(world, scope, principal)
    spent = _SPENT.setdefault((id(harness), world.era), [0.0])
    require(spent[0] < ERA_BUDGET, f"this module's time budget for the {world.era} era ({ERA_BUDGET:.0f} s) is spent: "
            "the target answers too slowly for every case to be sent")
    started = time.monotonic()
    deadline = started + min(CHECK_BUDGET, ERA_BUDGET - spent[0])

    def send(item: tuple[int, fuzz.Case]) -> Sent | None:
        if time.monotonic() >= deadline or world.conn.stalled:
            return None  # out of time, or the target stopped answering: judge what was sent
        if id(item[1]) in raw:
            return _send_raw(world, harness, binder, item[1])
        return _send(world, binder, item[1], item[0])

    with warnings.catch_warnings(), ThreadPoolExecutor(max_workers=WORKERS) as pool:
        # The connection silences pydantic's complaint about unschematic arguments per call; with calls in
        # flight together those per-call filters restore each other's state, so silence it for the batch.
        warnings.filterwarnings("ignore", category=UserWarning, module="pydantic")
        answered = list(pool.map(send, enumerate(sendable)))
    spent[0] += time.monotonic() - started
    results = [sent for sent in answered if sent is not None]
    problems = [(sent, why) for sent in results if (why := _problem(world, sent)) is not None]
    _record_pins(results)
    world.evidence.add("sent", len(results))
    world.evidence.add("valid_sent", sum(1 for s in results if s.valid))
    world.evidence.add("outcomes", dict(collections.Counter(_outcome(s.reply) for s in results)))
    world.evidence.add("wrong", len(problems))
    _record_broken(world, [sent for sent, _ in problems], every_case_sent=len(results) == len(sendable))
    if problems:
        first, why = problems[0]
        command = reproduce(harness, check_id, world.era)
        lines = [f"{len(problems)} of {len(results)} {family} cases for {tool} were answered wrongly in the "
                 f"{world.era} era; first: {spoken(first.case.label)}: {why}. Reproduce: {command}"]
        for sent, why in problems[:SHOWN]:
            lines.append(f"- {sent.case.label}: {why}")
            lines.append(f"    arguments: {fuzz.describe(sent.arguments)}")
        if len(problems) > SHOWN:
            lines.append(f"... and {len(problems) - SHOWN} more")
        raise AssertionError("\n".join(lines))
    require(len(results) == len(sendable), f"only {len(results)} of {len(sendable)} cases were sent before the time "
            f"budget ({CHECK_BUDGET:.0f} s a check) ran out or the target stopped answering; none was answered wrongly")


def _tools() -> Any:
    return pytest.mark.parametrize("tool", TOOLS, ids=TOOL_IDS)


# -- the checks ---------------------------------------------------------------------------------------


@check("arguments.fixtures", "EMC-ENC-008", uses=CASE_TOOL)
@pytest.mark.engram_sessions("raw")  # the corpus's lone surrogates go over raw sessions
@_tools()
def test_the_fixture_corpus(world: World, harness: Any, tool: str) -> None:
    """Every labelled case of fixtures/arguments/<tool>.json gets the verdict the oracle gives it.

    The corpus touches nearly every argument rule; it is scored against the
    general one (a keyword failure is INVALID_SCHEMA, and only a failure is), so
    that one wrong answer does not mark every specific requirement failed.
    The families below score the specific requirements. When both eras run, each
    sends every other case of the corpus, so a run sends the whole corpus once.
    Cases over 32 KiB are left to utf8-boundaries, capture-shape and size-boundary,
    which send the same bounds."""
    run_family(world, harness, "arguments.fixtures", "fixtures", tool)


@check("arguments.utf8-boundaries", "EMC-ENC-001", "EMC-SRCH-001", "EMC-CAP-005", "EMC-CAP-009", "EMC-IDEM-002",
       uses=CASE_TOOL)
@_tools()
def test_byte_bounds_are_counted_in_utf8(world: World, harness: Any, tool: str) -> None:
    """Every byte-bounded string at its bounds is accepted and one byte beyond is refused, in 1- to 4-byte text."""
    run_family(world, harness, "arguments.utf8-boundaries", "utf8-boundaries", tool)


@check("arguments.nfc", "EMC-ENC-002", "EMC-ENC-010", "EMC-IDEM-002", uses=CASE_TOOL)
@_tools()
def test_references_and_keys_must_be_nfc_free_text_need_not(world: World, harness: Any, tool: str) -> None:
    """A non-NFC reference or key is refused, not normalised; the same spelling in free text is accepted."""
    run_family(world, harness, "arguments.nfc", "nfc", tool)


@check("arguments.lone-surrogates", "EMC-ENC-009", uses=CASE_TOOL)
@pytest.mark.engram_sessions("raw")
@_tools()
def test_a_lone_surrogate_is_refused(world: World, harness: Any, tool: str) -> None:
    """A lone surrogate in a value or a key is refused with INVALID_SCHEMA.

    The MCP SDK session cannot serialise such text (pydantic refuses it, and the
    failure closes the client transport), so these cases are listed but not sent
    until the harness can write raw JSON-RPC."""
    run_family(world, harness, "arguments.lone-surrogates", "lone-surrogates", tool)


@check("arguments.safe-integers", "EMC-CAP-001", "EMC-CAP-004", "EMC-SRCH-002", "EMC-SRCH-004", uses=CASE_TOOL)
@_tools()
def test_integers_are_bounded_by_the_safe_range(world: World, harness: Any, tool: str) -> None:
    """±(2^53-1) are accepted where an integer goes; 2^53, 1.5, strings and booleans are refused."""
    run_family(world, harness, "arguments.safe-integers", "safe-integers", tool)


@check("arguments.zero-fractions", "EMC-ENC-012", uses=CASE_TOOL)
@_tools()
def test_a_zero_fraction_counts_as_the_integer(world: World, harness: Any, tool: str) -> None:
    """1.0 (and any integral number written with a fraction) is accepted where an integer goes."""
    run_family(world, harness, "arguments.zero-fractions", "zero-fractions", tool)


@check("arguments.digests", "EMC-ENC-007", "EMC-ENC-011", uses=CASE_TOOL)
@_tools()
def test_digest_near_misses_are_invalid_digest(world: World, harness: Any, tool: str) -> None:
    """A malformed digest is INVALID_DIGEST, unless a schema failure comes with it (INVALID_SCHEMA wins)."""
    run_family(world, harness, "arguments.digests", "digests", tool)


@check("arguments.identifiers", "EMC-GET-001", "EMC-LIFE-003", "EMC-ENC-008", uses=CASE_TOOL)
@_tools()
def test_identifier_near_misses_are_refused(world: World, harness: Any, tool: str) -> None:
    """Record and candidate id near-misses, and each kind of id in the other's slot, are INVALID_SCHEMA."""
    run_family(world, harness, "arguments.identifiers", "identifiers", tool)


@check("arguments.capture-shape", "EMC-CAP-005", "EMC-CAP-006", "EMC-CAP-009", "EMC-CAP-011", uses=CASE_TOOL)
@_tools()
def test_capture_arrays_hold_their_item_bounds(world: World, harness: Any, tool: str) -> None:
    """Components, citations and id lists at their item bounds are accepted; one beyond, empty or repeated is
    refused."""
    run_family(world, harness, "arguments.capture-shape", "capture-shape", tool)


@check("arguments.cross-references", "EMC-CAP-002", "EMC-CAP-007", "EMC-CAP-008", "EMC-CAP-010", "EMC-CAP-011",
       uses=CASE_TOOL)
@_tools()
def test_capture_references_resolve_and_order_holds(world: World, harness: Any, tool: str) -> None:
    """Broken capture references, duplicate ids, unsorted family refs and t_end < t are refused."""
    run_family(world, harness, "arguments.cross-references", "cross-references", tool)


@check("arguments.instants", "EMC-ENC-003", "EMC-ENC-004", "EMC-RET-005", uses=CASE_TOOL)
@_tools()
def test_instants_have_one_shape_and_name_real_times(world: World, harness: Any, tool: str) -> None:
    """Instants outside YYYY-MM-DDTHH:mm:ss.sssZ, naming no real time, or an expiry already past are refused."""
    run_family(world, harness, "arguments.instants", "instants", tool)


@check("arguments.host-owned-fields", "EMC-HOST-001", "EMC-HOST-002", "EMC-GATE-006", "EMC-ADM-006", "EMC-PROV-002",
       "EMC-HP-020", uses=CASE_TOOL)
@_tools()
def test_host_owned_context_is_refused_at_every_level(world: World, harness: Any, tool: str) -> None:
    """Each host-owned name (tenant ... trust, decision, status) at each object level is INVALID_SCHEMA."""
    run_family(world, harness, "arguments.host-owned-fields", "host-owned-fields", tool)


@check("arguments.unknown-members", "EMC-HOST-002", uses=CASE_TOOL)
@_tools()
def test_unknown_members_are_refused_at_every_level(world: World, harness: Any, tool: str) -> None:
    """A member no schema names, added at each object level of a valid call, is INVALID_SCHEMA (closed schemas)."""
    run_family(world, harness, "arguments.unknown-members", "unknown-members", tool)


@check("arguments.null", "EMC-HOST-003", uses=CASE_TOOL)
@_tools()
def test_null_is_refused_everywhere(world: World, harness: Any, tool: str) -> None:
    """null in place of any property, required or optional, and as an array item, is INVALID_SCHEMA."""
    run_family(world, harness, "arguments.null", "null", tool)


@check("arguments.required", "EMC-IDEM-001", "EMC-ENC-008", uses=CASE_TOOL)
@_tools()
def test_missing_required_members_are_refused(world: World, harness: Any, tool: str) -> None:
    """Leaving out a required member (the idempotency key included) is refused; leaving out an optional one is not."""
    run_family(world, harness, "arguments.required", "required", tool)


@check("arguments.size-boundary", "EMC-ENC-005", uses=CASE_TOOL)
@_tools()
def test_arguments_are_capped_on_their_canonical_size(world: World, harness: Any, tool: str) -> None:
    """Exactly arguments.max_bytes canonical bytes is accepted; one byte more is refused."""
    run_family(world, harness, "arguments.size-boundary", "size-boundary", tool)


@check("arguments.non-object", "EMC-ENC-008", uses=CASE_TOOL)
@_tools()
def test_arguments_that_are_not_an_object_are_refused(world: World, harness: Any, tool: str) -> None:
    """Arrays, strings, numbers, booleans and absent arguments are refused: INVALID_SCHEMA, or -32602."""
    run_family(world, harness, "arguments.non-object", "non-object", tool)


# Drawn last: the drawing process then has every earlier check of the era to finish in.


@check("arguments.schemathesis-positive", "EMC-ENC-008", uses=CASE_TOOL)
@_tools()
def test_generated_valid_arguments_are_not_refused(world: World, harness: Any, tool: str) -> None:
    """Schema-generated arguments, repaired to be oracle-valid, are never refused as invalid."""
    run_family(world, harness, "arguments.schemathesis-positive", "schemathesis-positive", tool)


@check("arguments.schemathesis-negative", "EMC-HOST-002", "EMC-ENC-007", "EMC-ENC-008", "EMC-ENC-011", uses=CASE_TOOL)
@_tools()
def test_generated_invalid_arguments_are_refused(world: World, harness: Any, tool: str) -> None:
    """Schema mutations the oracle judges invalid are refused with the oracle's code."""
    run_family(world, harness, "arguments.schemathesis-negative", "schemathesis-negative", tool)
