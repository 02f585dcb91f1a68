"""Faulty variants: arguments, and refusals that must name themselves and leave nothing behind. Each parses the
arguments more leniently than the contract allows (unknown members ignored, null read as left out, a bound counted
in characters or off by one, the clock judged before the replay lookup), or answers a refusal as something else: an
empty success, a retriable error, a refused capture stored anyway.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from engram_mcp.contract import profile_digest
from engram_mcp.contract.validation import Verdict
from engram_mcp.reference._envelope import Refusal
from engram_mcp.reference.server import CallContext
from tests.faulty.catalog import (
    CAPTURE,
    CONTRACT,
    HOST_OWNED,
    OPAQUE_MAX,
    SEARCH,
    ChangedOracle,
    at,
    error_rewrite,
    filter_verdicts,
    named,
    opaque_names,
    variant,
)
from tests.variant_server import Seams, Served, Step

Operation = Callable[..., dict[str, Any]]

# -- arguments -------------------------------------------------------------------------------------------


@variant("extra-field-ignored", breaks=["EMC-HOST-002"],
         caught_by=["arguments.unknown-members", "arguments.schemathesis-negative"], era="modern")
def extra_field_ignored(seams: Seams) -> None:
    """Unknown argument members are ignored, not refused (a deny-list still stops host-owned names)."""

    def forgive(tool: str, arguments: Any, violation: Any) -> bool:
        if violation.rule != "closed_schema":
            return False
        try:
            holder = at(arguments, violation.path)
        except (KeyError, IndexError, TypeError, ValueError):
            return False
        return isinstance(holder, dict) and not (set(holder) & HOST_OWNED)

    filter_verdicts(seams, forgive)


@variant("null-optional-tolerated", breaks=["EMC-HOST-003"], caught_by=["arguments.null"], era="legacy")
def null_optional_tolerated(seams: Seams) -> None:
    """null for an optional top-level argument is read as 'left out' (Optional[...] = None)."""

    async def tolerant(call: CallContext, serve: Step) -> Served:
        arguments = call.arguments
        if isinstance(arguments, dict):
            required = set(CONTRACT.input_schema(call.tool).get("required", []))
            call.arguments = {k: v for k, v in arguments.items() if v is not None or k in required}
        return await serve(call)

    seams.around.append(tolerant)


@variant("opaque-ref-counts-characters", breaks=["EMC-ENC-001"], caught_by=["arguments.utf8-boundaries"], era="modern")
def opaque_ref_counts_characters(seams: Seams) -> None:
    """Opaque references are bounded in characters, not UTF-8 bytes (200 x U+20AC = 600 bytes passes)."""
    opaque = opaque_names()

    def forgive(tool: str, arguments: Any, violation: Any) -> bool:
        if violation.rule != "utf8_bytes" or named(violation.path) not in opaque:
            return False
        try:
            value = at(arguments, violation.path)
        except (KeyError, IndexError, TypeError, ValueError):
            return False
        return isinstance(value, str) and 1 <= len(value) <= OPAQUE_MAX

    filter_verdicts(seams, forgive)


@variant("idempotency-key-15-bytes", breaks=["EMC-IDEM-002"], caught_by=["idempotency.key-bounds"], era="legacy")
def idempotency_key_15_bytes(seams: Seams) -> None:
    """An idempotency key of 15 bytes is accepted (an off-by-one in the lower bound)."""

    def forgive(tool: str, arguments: Any, violation: Any) -> bool:
        if violation.rule != "utf8_bytes" or violation.path != "/idempotency_key":
            return False
        key = arguments.get("idempotency_key") if isinstance(arguments, dict) else None
        return isinstance(key, str) and len(key.encode("utf-8", "surrogatepass")) == 15

    filter_verdicts(seams, forgive)


# -- refusals that must name themselves and leave nothing behind ----------------------------------------------------


@variant("ranking-failure-empty-success", breaks=["EMC-SRCH-012"], caught_by=["search.no-match"], era="legacy")
def ranking_failure_empty_success(seams: Seams) -> None:
    """A search requiring semantic ranking, which no channel can give, is answered as an empty success."""

    def make(search: Operation) -> Operation:
        def hollow(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            policy = args.get("capability_policy")
            if not (isinstance(policy, dict) and policy.get("minimum_channels") == "lexical_and_semantic"):
                return search(caller, args, now)
            value = search(caller, {**args, "capability_policy": {**policy, "minimum_channels": "lexical"}}, now)
            value = {k: v for k, v in value.items() if k not in ("next_page_cursor", "response_digest")}
            value["records"] = []
            value["response_digest"] = profile_digest("search-response", value)
            return value

        return hollow

    seams.wrap_operation(SEARCH, make)


@variant("oversized-marked-retriable", breaks=["EMC-ERR-002"], caught_by=["envelope.error-codes"], era="modern",
         select=["envelope.error-codes", "search.oversized-record"])
def oversized_marked_retriable(seams: Seams) -> None:
    """PROJECTION_OVERSIZED is sent with retriable true, though the table says the same call cannot succeed."""

    def change(request: Any, params: Any, envelope: dict[str, Any], error: dict[str, Any]) -> None:
        if error.get("code") == "PROJECTION_OVERSIZED":
            error["retriable"] = True

    error_rewrite(seams, change)


@variant("refused-capture-kept", breaks=["EMC-CAP-013"],
         caught_by=["lifecycle.retain-permission", "lifecycle.reconciliation-consent", "lifecycle.retention-ceiling"],
         era="legacy")
def refused_capture_kept(seams: Seams) -> None:
    """A capture the host's policy refuses is still stored, minus what the policy objected to, under its key."""

    def make(capture: Operation) -> Operation:
        def keeping(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            try:
                return capture(caller, args, now)
            except Refusal as refusal:
                if refusal.code == "UNAUTHORIZED":
                    payload = {k: v for k, v in args["payload"].items() if k not in ("retention", "reconciliation")}
                    with contextlib.suppress(Refusal):
                        capture(caller, {**args, "payload": payload}, now)
                raise

        return keeping

    seams.wrap_operation(CAPTURE, make)


@variant("retry-rejudged-by-clock", breaks=["EMC-IDEM-013"], caught_by=["idempotency.retry-after-expiry"],
         era="modern")
def retry_rejudged_by_clock(seams: Seams) -> None:
    """The clock rule runs before the replay lookup: a capture retried after its expires_at passed is INVALID_SCHEMA."""

    def clocked(oracle: Any) -> ChangedOracle:
        # The verdict before the replay lookup is asked without a clock; this one reads it anyway.
        def with_clock(tool: str, arguments: Any, now: Any, judged: Verdict) -> Verdict:
            verdict: Verdict = oracle.verdict(tool, arguments, now=now or datetime.now(UTC))
            return verdict

        return ChangedOracle(oracle, with_clock)

    seams.port("oracle", clocked)
