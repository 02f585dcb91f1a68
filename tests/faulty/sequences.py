"""Faulty variants: sequences and concurrency. Each defect shows in a combination of calls, or in calls from several
sessions at once, more than in one call: a withdrawn candidate's key freed, a retry with another reason replayed, a
ranking that network permission changes, a receipt naming the record read before, a refused capture's key reserved,
a bad cursor restarting, a budget or limit ignored, a key reserved late, a read cache each process keeps to itself.
"""

from __future__ import annotations

import copy
import json
import secrets
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext

from engram_mcp.reference._envelope import Refusal
from engram_mcp.reference._ports import Scope
from engram_mcp.reference.server import CallContext
from tests.faulty.catalog import (
    BUDGET_MAX,
    CAPTURE,
    FORGET,
    GET,
    LIMIT_MAX,
    SEARCH,
    WITHDRAW,
    claimed_purpose,
    variant,
)
from tests.variant_server import Seams, Served

Operation = Callable[..., dict[str, Any]]
Ranked = Callable[[Any, Scope, str, int], list[str]]
Params = types.CallToolRequestParams


# -- sequence variants: defects only a combination of calls shows (caught by exploration, not by fixed checks) ----


def _value_of(envelope: dict[str, Any]) -> dict[str, Any]:
    value = (envelope.get("output") or {}).get("value") if envelope.get("ok") is True else None
    return value if isinstance(value, dict) else {}


def _text_at(arguments: Any, name: str) -> str | None:
    """A string argument, or None: a schema-mutation case may send a list or an object where a key belongs, and a
    fault must not turn that into a crash the harness would read as a second defect."""
    value = arguments.get(name) if isinstance(arguments, dict) else None
    return value if isinstance(value, str) else None


def _code_of(envelope: dict[str, Any]) -> Any:
    failure = envelope.get("error") if envelope.get("ok") is False else None
    return failure.get("code") if isinstance(failure, dict) else None


@variant("withdraw-frees-capture-key", breaks=["EMC-IDEM-005"], caught_by=["explore.sequences"], era="modern",
         sequence_only=True)
def withdraw_frees_capture_key(seams: Seams) -> None:
    """Withdrawing a candidate releases the key it was captured under: the same capture again then makes a new
    candidate instead of answering duplicate_exact (and other content under it, instead of DIGEST_CONFLICT)."""
    captured: dict[str, str] = {}  # candidate_id -> the key it was captured under
    freed: set[str] = set()

    async def fresh_key(request: ServerRequestContext, params: Params) -> Params:
        arguments = params.arguments
        key = _text_at(arguments, "idempotency_key")
        if params.name == CAPTURE and isinstance(arguments, dict) and key in freed:
            runs_as_fresh = {**arguments, "idempotency_key": f"{key}-{secrets.token_hex(4)}"}
            return params.model_copy(update={"arguments": runs_as_fresh})
        return params

    def rewrite(request: ServerRequestContext, params: Params, envelope: dict[str, Any]) -> dict[str, Any]:
        arguments = params.arguments or {}
        value = _value_of(envelope)
        key, withdrawn = _text_at(arguments, "idempotency_key"), _text_at(arguments, "candidate_id")
        if params.name == CAPTURE and isinstance(value.get("candidate_id"), str) and key is not None:
            captured.setdefault(value["candidate_id"], key)
        if params.name == WITHDRAW and value and withdrawn in captured:
            freed.add(captured[withdrawn])
        return envelope

    seams.before.append(fresh_key)
    seams.rewrites.append(rewrite)


@variant("retry-other-reason-replays", breaks=["EMC-IDEM-007"], caught_by=["explore.sequences"], era="legacy")
def retry_other_reason_replays(seams: Seams) -> None:
    """A withdraw or forget retried under its key with another reason is answered as a replay of the first call,
    instead of DIGEST_CONFLICT."""
    first: dict[tuple[str, Any], tuple[Any, dict[str, Any]]] = {}  # (tool, key) -> (target, first envelope)

    def rewrite(request: ServerRequestContext, params: Params, envelope: dict[str, Any]) -> dict[str, Any]:
        if params.name not in (WITHDRAW, FORGET):
            return envelope
        arguments = params.arguments or {}
        held = (params.name, _text_at(arguments, "idempotency_key"))
        target = _text_at(arguments, "record_id") or _text_at(arguments, "candidate_id")
        if _value_of(envelope):
            first.setdefault(held, (target, copy.deepcopy(envelope)))
        elif _code_of(envelope) == "DIGEST_CONFLICT" and held in first and first[held][0] == target:
            earlier = copy.deepcopy(first[held][1])
            earlier["output"]["value"]["replayed"] = True
            return earlier
        return envelope

    seams.rewrites.append(rewrite)


# Set while a search asked with network: allow runs: the ranking, which does not see the arguments, reads it here.
_NETWORK_ALLOWED: ContextVar[bool] = ContextVar("network_allowed", default=False)


@variant("network-allow-changes-ranking", breaks=["EMC-SRCH-007"], caught_by=["search.capability-policy"],
         era="modern")
def network_allow_changes_ranking(seams: Seams) -> None:
    """network: allow is read as licence for a remote re-ranker: the matches come back in another order."""

    def reranked(ranked: Ranked) -> Ranked:
        def ranking(reader: Any, scope: Scope, query: str, valid_as_of: int) -> list[str]:
            order = ranked(reader, scope, query, valid_as_of)
            return order[::-1] if _NETWORK_ALLOWED.get() else order

        return ranking

    def make(search: Operation) -> Operation:
        def allowing(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            policy = args.get("capability_policy")
            token = _NETWORK_ALLOWED.set(isinstance(policy, dict) and policy.get("network") == "allow")
            try:
                return search(caller, args, now)
            finally:
                _NETWORK_ALLOWED.reset(token)

        return allowing

    seams.override("recall", "ranked", reranked)
    seams.wrap_operation(SEARCH, make)


@variant("get-receipt-names-last-read", breaks=["EMC-GET-002"], caught_by=["get.record-id"], era="legacy")
def get_receipt_names_last_read(seams: Seams) -> None:
    """Read receipts come from a cache keyed by the session: a get's receipt names the record read before it."""
    last: list[str] = []

    def make(get: Operation) -> Operation:
        def cached(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            value = get(caller, args, now)
            receipt = value.get("read_receipt")
            if isinstance(receipt, dict):
                asked = receipt.get("record_id")
                if last and last[-1] != asked:
                    value = {**value, "read_receipt": {**receipt, "record_id": last[-1]}}
                last.append(str(asked))
            return value

        return cached

    seams.wrap_operation(GET, make)


@variant("purpose-refusal-reserves-key", breaks=["EMC-HOST-008"], caught_by=["binding.purpose-mismatch"],
         era="legacy")
def purpose_refusal_reserves_key(seams: Seams) -> None:
    """A capture refused for its purpose_ref still reserves its idempotency key: the corrected call conflicts."""
    spent: set[tuple[str, str, str, str]] = set()

    def key_of(caller: Any, arguments: Any) -> tuple[str, str, str, str]:
        return caller.tenant, caller.workspace, caller.principal, str(arguments.get("idempotency_key"))

    async def reserving(call: CallContext, serve: Callable[[CallContext], Any]) -> Served:
        if call.tool == CAPTURE and claimed_purpose(call.tool, call.arguments) not in (None, call.binding.purpose_ref):
            spent.add(key_of(call.binding, call.arguments))
        return await serve(call)

    def make(capture: Operation) -> Operation:
        def conflicting(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            if key_of(caller, args) in spent:
                raise Refusal("DIGEST_CONFLICT")
            return capture(caller, args, now)

        return conflicting

    seams.around.append(reserving)
    seams.wrap_operation(CAPTURE, make)


@variant("bad-cursor-restarts", breaks=["EMC-SRCH-010", "EMC-HP-050"], caught_by=["search.stale-cursor"], era="modern")
def bad_cursor_restarts(seams: Seams) -> None:
    """A page cursor that does not open is read as offset 0: the first page again."""

    def make(search: Operation) -> Operation:
        def restart(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            if "page_cursor" in args and seams.server.engine.recall.cursors.open(args["page_cursor"]) is None:
                args = {k: v for k, v in args.items() if k != "page_cursor"}
            return search(caller, args, now)

        return restart

    seams.wrap_operation(SEARCH, make)


@variant("packet-budget-ignored", breaks=["EMC-SRCH-005"], caught_by=["search.packet-budget"], era="legacy")
def packet_budget_ignored(seams: Seams) -> None:
    """Search packs pages against the largest budget, whatever max_packet_bytes asked for."""

    def make(search: Operation) -> Operation:
        return lambda caller, args, now: search(caller, {**args, "max_packet_bytes": BUDGET_MAX}, now)

    seams.wrap_operation(SEARCH, make)


@variant("limit-ignored", breaks=["EMC-SRCH-003"], caught_by=["search.limit"], era="modern")
def limit_ignored(seams: Seams) -> None:
    """Search fills every page up to the largest limit, whatever limit asked for."""

    def make(search: Operation) -> Operation:
        return lambda caller, args, now: search(caller, {**args, "limit": LIMIT_MAX}, now)

    seams.wrap_operation(SEARCH, make)


# -- concurrency variants -----------------------------------------------------------------------------------------
# Defects only calls from several sessions at once show: each stdio session is a server process of its own, all of
# them on one SQLite store. Exploration (explore.concurrent) races such calls; no fixed check does.

KEY_PAUSE = 0.1  # seconds between looking a capture's key up and reserving it


@variant("key-reserved-after-a-pause", breaks=["EMC-IDEM-005"], caught_by=["explore.concurrent"], era="modern",
         sequence_only=True)
def key_reserved_after_a_pause(seams: Seams) -> None:
    """A capture's key is looked up, then reserved only after a pause: concurrent first uses both take effect."""

    def key_free(caller: Any, args: dict[str, Any]) -> bool:
        engine = seams.server.engine
        with engine.store.snapshot() as reader:
            return engine.lifecycle.replay_of(reader, CAPTURE, caller, args) is None

    def make(capture: Operation) -> Operation:
        def late(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            if not key_free(caller, args):  # a plain replay: the key was reserved before this call looked
                return capture(caller, args, now)
            time.sleep(KEY_PAUSE)
            value = capture(caller, args, now)
            if value.get("status") == "duplicate_exact":  # another first use won the pause: this one trusts its look
                own = f"{args['idempotency_key']}#{secrets.token_hex(4)}"  # a fresh key, so a fresh candidate
                value = capture(caller, {**args, "idempotency_key": own}, now)
            return value

        return late

    seams.wrap_operation(CAPTURE, make)


@variant("read-cache-per-process", breaks=["EMC-FGT-002"], caught_by=["explore.concurrent"], era="legacy",
         sequence_only=True)
def read_cache_per_process(seams: Seams) -> None:
    """get serves from a per-process read cache; a forget clears it in its own process only, not in the others."""
    cache: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {}  # record -> the get's arguments -> value

    def make_get(get: Operation) -> Operation:
        def cached(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            held = cache.setdefault((caller.tenant, caller.workspace, args["record_id"]), {})
            asked = json.dumps([caller.principal, args], sort_keys=True)
            if asked not in held:
                held[asked] = get(caller, args, now)
            return held[asked]

        return cached

    def make_forget(forget: Operation) -> Operation:
        def invalidating(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            cache.pop((caller.tenant, caller.workspace, args["record_id"]), None)
            return forget(caller, args, now)

        return invalidating

    seams.wrap_operation(GET, make_get)
    seams.wrap_operation(FORGET, make_forget)
