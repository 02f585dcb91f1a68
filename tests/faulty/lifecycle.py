"""Faulty variants: lifecycle, visibility and search. Each lets a record be seen where the lifecycle forbids it or
serves a search wrongly: pending candidates found by search, forgotten records still read from a cache or a page,
tombstones dropped, rejections or withdrawals bent, records or cursors crossing scopes, host policies ignored, and
the capability policy, cursors, budgets and limits of a search read loosely.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from engram_mcp.contract import profile_digest
from engram_mcp.reference import _search as search_index
from engram_mcp.reference._envelope import Refusal
from engram_mcp.reference._journal import scope_of
from engram_mcp.reference._policy import AcceptAll, ScopePolicy, SecretScan
from engram_mcp.reference._ports import Scope, Sealed
from tests.faulty.catalog import ADMIT, CAPTURE, FORGET, GET, SEARCH, WITHDRAW, sqlite, variant
from tests.variant_server import Seams

Operation = Callable[..., dict[str, Any]]
Ranked = Callable[[Any, Scope, str, int], list[str]]
RecordKey = tuple[str, str, str]  # (tenant, workspace, record_id)


def changed_policies(seams: Seams, change: Callable[[ScopePolicy], ScopePolicy]) -> None:
    """Each scope's policy passed through ``change``, wherever the server reads it."""
    seams.port("policies", lambda policies: lambda scope: change(policies(scope)))


def redigested(value: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    """A search value with other records, its response digest computed again."""
    value = {k: v for k, v in value.items() if k != "response_digest"} | {"records": records}
    return value | {"response_digest": profile_digest("search-response", value)}


# -- lifecycle and visibility ------------------------------------------------------------------------------------


@variant("expiry-ignored", breaks=["EMC-LIFE-001"], caught_by=["lifecycle.forget-expired"], era="legacy")
def expiry_ignored(seams: Seams) -> None:
    """A capture's retention.expires_at is judged at the edge but never stored: the record outlives it."""

    def make(capture: Operation) -> Operation:
        def keep_forever(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            retention = args.get("payload", {}).get("retention")
            if isinstance(retention, dict) and "expires_at" in retention:
                args = copy.deepcopy(args)
                del args["payload"]["retention"]["expires_at"]
            return capture(caller, args, now)

        return keep_forever

    seams.wrap_operation(CAPTURE, make)


@variant("pending-visible-in-search", breaks=["EMC-LIFE-001"], caught_by=["search.only-current"], era="modern")
def pending_visible_in_search(seams: Seams) -> None:
    """Search also matches pending candidates (indexed at capture, not at admission)."""

    def pending_records(caller: Any) -> Iterator[dict[str, Any]]:
        engine = seams.server.engine
        with sqlite(seams.server).read() as db:
            rows = db.execute("SELECT * FROM candidates WHERE tenant = ? AND workspace = ? AND state = 'pending' "
                              "ORDER BY created_cursor", (caller.tenant, caller.workspace)).fetchall()
        for row in rows:
            opened = json.loads(engine.cipher.open(Sealed(row["ciphertext"], row["wrapped_key"]),
                                                   scope=scope_of(caller), candidate_id=row["candidate_id"]))
            yield opened["record"]

    def make(search: Operation) -> Operation:
        def with_pending(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            value = search(caller, args, now)
            if "page_cursor" in args:
                return value
            wanted = set(search_index.query_tokens(args["query"]))
            records = list(value["records"])
            for record in pending_records(caller):
                words = set(search_index.query_tokens(" ".join(search_index.field_texts(record))))
                if wanted & words:
                    rank = len(records) + 1
                    records.append({**seams.server.engine.recall.packet_of(record),
                                    "score": search_index.fused_score(rank), "rank": rank})
            return value if len(records) == len(value["records"]) else redigested(value, records)

        return with_pending

    seams.wrap_operation(SEARCH, make)


@variant("get-cache-outlives-forget", breaks=["EMC-FGT-002"], caught_by=["lifecycle.forget"], era="legacy")
def get_cache_outlives_forget(seams: Seams) -> None:
    """get serves from a read cache that forget does not invalidate."""
    cache: dict[RecordKey, dict[str, Any]] = {}

    def make(get: Operation) -> Operation:
        def cached(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            key = (caller.tenant, caller.workspace, args["record_id"])
            try:
                value = get(caller, args, now)
            except Refusal as refusal:
                if refusal.code == "NOT_FOUND" and key in cache:
                    return cache[key]
                raise
            cache[key] = value
            return value

        return cached

    seams.wrap_operation(GET, make)


@variant("forget-search-keeps-serving", breaks=["EMC-FGT-002"], caught_by=["lifecycle.forget"], era="modern")
def forget_search_keeps_serving(seams: Seams) -> None:
    """forget answers `projection_invalidation: "complete"`, yet search keeps serving the record it returned before."""
    served: dict[RecordKey, dict[str, Any]] = {}  # the last packet served of each record
    forgotten: set[RecordKey] = set()

    def remember(search: Operation) -> Operation:
        def stale(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            value = search(caller, args, now)
            scope = (caller.tenant, caller.workspace)
            for packet in value["records"]:
                served[(*scope, packet["record"]["record_id"])] = packet
            ghosts = [served[key] for key in sorted(forgotten) if key[:2] == scope and key in served]
            if not ghosts:
                return value
            records = [*value["records"], *ghosts][: args.get("limit", 10)]
            return redigested(value, [{**packet, "rank": rank} for rank, packet in enumerate(records, start=1)])

        return stale

    def note(forget: Operation) -> Operation:
        def noting(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            value = forget(caller, args, now)
            forgotten.add((caller.tenant, caller.workspace, args["record_id"]))
            return value

        return noting

    seams.wrap_operation(SEARCH, remember)
    seams.wrap_operation(FORGET, note)


@variant("forget-keeps-no-tombstone", breaks=["EMC-ADM-007"],
         caught_by=["lifecycle.forgotten-content-adjudicated"], era="modern")
def forget_keeps_no_tombstone(seams: Seams) -> None:
    """Forget drops the tombstone digest, so re-captured forgotten content is accepted silently."""

    def make(forget: Operation) -> Operation:
        def forgetful(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            value = forget(caller, args, now)
            with sqlite(seams.server).write() as db:
                db.execute("DELETE FROM tombstones WHERE tenant = ? AND workspace = ? AND payload_digest IN "
                           "(SELECT payload_digest FROM records WHERE tenant = ? AND workspace = ? AND record_id = ?)",
                           (caller.tenant, caller.workspace, caller.tenant, caller.workspace, args["record_id"]))
            return value

        return forgetful

    seams.wrap_operation(FORGET, make)


# Set while an admission decides on a candidate whose content was forgotten: the policy, which sees only the
# candidate's view, reads it from here.
_TOMBSTONED_CANDIDATE: ContextVar[bool] = ContextVar("tombstoned_candidate", default=False)


class _HoldsForgottenContent:
    """An admission policy that turns every decision on forgotten content into adjudication, rejections too."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.policy_id, self.policy_version = inner.policy_id, inner.policy_version

    def decide(self, candidate: Any) -> Any:
        decided = self.inner.decide(candidate)
        return dataclasses.replace(decided, decision="adjudicate") if _TOMBSTONED_CANDIDATE.get() else decided


@variant("rejection-turned-adjudication", breaks=["EMC-ADM-008"], caught_by=["lifecycle.forgotten-content-rejected"],
         era="modern")
def rejection_turned_adjudication(seams: Seams) -> None:
    """Content equal to a forgotten record is held for adjudication whatever the policy decided, a rejection too."""

    def tombstoned(caller: Any, candidate_id: Any) -> bool:
        with sqlite(seams.server).read() as db:
            return db.execute(
                "SELECT 1 FROM candidates c JOIN tombstones t ON t.tenant = c.tenant AND t.workspace = c.workspace "
                "AND t.payload_digest = c.payload_digest WHERE c.tenant = ? AND c.workspace = ? "
                "AND c.candidate_id = ?", (caller.tenant, caller.workspace, candidate_id)).fetchone() is not None

    def make(admit: Operation) -> Operation:
        def holding(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            token = _TOMBSTONED_CANDIDATE.set(tombstoned(caller, args["candidate_id"]))
            try:
                return admit(caller, args, now)
            finally:
                _TOMBSTONED_CANDIDATE.reset(token)

        return holding

    changed_policies(seams, lambda policy: dataclasses.replace(policy,
                                                               admission=_HoldsForgottenContent(policy.admission)))
    seams.wrap_operation(ADMIT, make)


@variant("withdraw-accepted-allowed", breaks=["EMC-LIFE-006"], caught_by=["lifecycle.withdraw-accepted"], era="legacy")
def withdraw_accepted_allowed(seams: Seams) -> None:
    """Withdraw of an accepted candidate succeeds instead of ILLEGAL_TRANSITION."""

    def make(withdraw: Operation) -> Operation:
        def lenient(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            try:
                return withdraw(caller, args, now)
            except Refusal as refusal:
                if refusal.code != "ILLEGAL_TRANSITION":
                    raise
            with sqlite(seams.server).write() as db:
                db.execute(
                    "UPDATE candidates SET state = 'pending' WHERE tenant = ? AND workspace = ? AND candidate_id = ?",
                    (caller.tenant, caller.workspace, args["candidate_id"]),
                )
            return withdraw(caller, args, now)

        return lenient

    seams.wrap_operation(WITHDRAW, make)


@variant("search-crosses-scopes", breaks=["EMC-HOST-005"], caught_by=["lifecycle.tenant-isolation"], era="modern")
def search_crosses_scopes(seams: Seams) -> None:
    """Search ranks the records of every scope in the store, not only the bound one."""

    def everywhere(ranked: Ranked) -> Ranked:
        def ranking(reader: Any, scope: Scope, query: str, valid_as_of: int) -> list[str]:
            scopes = [scope] + [Scope(r["tenant"], r["workspace"]) for r in reader.sql.execute(
                "SELECT DISTINCT tenant, workspace FROM records") if Scope(r["tenant"], r["workspace"]) != scope]
            return [rid for s in scopes for rid in ranked(reader, s, query, valid_as_of)]

        return ranking

    def in_any_scope(ranked_record: Callable[..., Any]) -> Callable[..., Any]:
        def record(reader: Any, caller: Any, rid: str) -> Any:
            row = reader.sql.execute("SELECT tenant, workspace FROM records WHERE record_id = ?", (rid,)).fetchone()
            return reader.record(Scope(row["tenant"], row["workspace"]), rid)

        return record

    seams.override("recall", "ranked", everywhere)
    seams.override("recall", "ranked_record", in_any_scope)


@variant("secret-scan-off", breaks=["EMC-SEC-002"], caught_by=["secrets.never-admitted"], era="legacy", expect="WARN")
def secret_scan_off(seams: Seams) -> None:
    """Scopes configured to scan for secrets admit everything."""

    def lax(policy: ScopePolicy) -> ScopePolicy:
        scans = isinstance(policy.admission, SecretScan)
        return dataclasses.replace(policy, admission=AcceptAll()) if scans else policy

    changed_policies(seams, lax)


@variant("retain-without-permission", breaks=["EMC-RET-003"], caught_by=["lifecycle.retain-permission"], era="modern")
def retain_without_permission(seams: Seams) -> None:
    """derivative_rule retain is accepted in every scope, whatever the host allows."""
    changed_policies(seams, lambda policy: dataclasses.replace(policy, allow_retain=True))


# -- search ------------------------------------------------------------------------------------------------------


@variant("semantic-falls-back-to-lexical", breaks=["EMC-SRCH-008"],
         caught_by=["search.semantic-unavailable"], era="legacy")
def semantic_falls_back_to_lexical(seams: Seams) -> None:
    """lexical_and_semantic is answered with the lexical ranking when no semantic channel exists."""

    def make(search: Operation) -> Operation:
        def fallback(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            policy = args.get("capability_policy")
            if isinstance(policy, dict) and policy.get("minimum_channels") == "lexical_and_semantic":
                args = {**args, "capability_policy": {**policy, "minimum_channels": "lexical"}}
            return search(caller, args, now)

        return fallback

    seams.wrap_operation(SEARCH, make)


@variant("cursor-leaks-scope", breaks=["EMC-HOST-005"], caught_by=["search.cursor-isolation"], era="modern")
def cursor_leaks_scope(seams: Seams) -> None:
    """A page cursor carries its chain's binding: sent under another scope's binding, it goes on with the chain of
    the scope that minted it."""
    minted: dict[str, Any] = {}  # cursor -> the binding whose chain minted it

    def make(search: Operation) -> Operation:
        def chained(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            cursor = args.get("page_cursor")
            caller = minted.get(cursor, caller) if isinstance(cursor, str) else caller
            value = search(caller, args, now)
            if "next_page_cursor" in value:
                minted[value["next_page_cursor"]] = caller
            return value

        return chained

    seams.wrap_operation(SEARCH, make)


@variant("cursor-serves-forgotten", breaks=["EMC-FGT-002"], caught_by=["search.cursor-after-forget"], era="legacy")
def cursor_serves_forgotten(seams: Seams) -> None:
    """Every page of a search is computed with its first page and served from that cache, which forget does not
    reach."""
    pages: dict[str, dict[str, Any]] = {}

    def make(search: Operation) -> Operation:
        def cached(caller: Any, args: dict[str, Any], now: Any) -> dict[str, Any]:
            cursor = args.get("page_cursor")
            if isinstance(cursor, str) and cursor in pages:
                return copy.deepcopy(pages[cursor])
            value = following = search(caller, args, now)
            while "next_page_cursor" in following and len(pages) < 10_000:
                after = following["next_page_cursor"]
                following = pages[after] = search(caller, {**args, "page_cursor": after}, now)
            return value

        return cached

    seams.wrap_operation(SEARCH, make)
