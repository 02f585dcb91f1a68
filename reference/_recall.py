"""Recall: get and search, their packets, the packet budget and the rank receipt.

Reads only, each in one consistent snapshot of the store; the store ranks
(its ``ranking`` profile is named in every receipt) and this module pages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property, lru_cache
from typing import Any

from engram_mcp.contract import (
    ZERO_DIGEST,
    canonical_array,
    canonical_bytes,
    canonical_object,
    load,
    profile_digest,
    profile_digest_and_size,
    receipt_digest,
)
from engram_mcp.contract.binding import Binding, scope_ref
from engram_mcp.contract.validation import instant
from engram_mcp.reference import _search as search_index
from engram_mcp.reference._envelope import Refusal
from engram_mcp.reference._journal import authorization, scope_of
from engram_mcp.reference._ports import MemoryStore, Scope, StoredRecord, StoreReader

# Worst cases for the fields of a read that grow with the store: a cursor or a time at the largest safe integer.
_LARGEST_INTEGER = 2**53 - 1
_OVERHEADS_KEPT = 1024  # callers and id forms whose read overhead is remembered


def epoch_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


class Recall:
    """The two reads, over a store and the key that seals page cursors."""

    def __init__(self, store: MemoryStore, cursors: search_index.CursorSealer) -> None:
        self.store = store
        self.cursors = cursors
        self.contract = load()
        self._overheads: dict[tuple[Any, ...], int] = {}  # readable_at_largest_budget's, per id form and caller

    def visible_record(self, reader: StoreReader, caller: Binding, rid: str, now: datetime) -> StoredRecord:
        """A record the caller may read now; NOT_FOUND through one path otherwise."""
        found = reader.record(scope_of(caller), rid)
        if found is None or not current(found, now):
            raise Refusal("NOT_FOUND")
        return found

    def packet(self, found: StoredRecord) -> dict[str, Any]:
        if found.body is None:  # tombstoned: never visible, so never packed
            raise Refusal("NOT_FOUND")
        return self.packet_of(found.body)

    @staticmethod
    def packet_of(record: dict[str, Any]) -> dict[str, Any]:
        record = dict(record)
        redacted = list(_REDACTED)
        for pointer in redacted:
            record.pop(pointer[1:], None)
        redaction = _redaction_digest(record["record_id"], record["record_digest"])
        return {"record": record, "redacted_fields": redacted, "redaction_receipt_digest": redaction}

    def readable_at_largest_budget(self, caller: Binding, record: dict[str, Any], now: datetime) -> bool:
        """Whether get, and a search page holding it alone, can serve this record at max_packet_bytes.max.

        Both values are the record's packet beside members whose size does not depend
        on the record's content (digests, the largest cursors and times, its id); so a
        value's size is the packet's plus an overhead, measured once per id form and
        caller (``_overhead``), and the packet alone is serialised here.
        """
        return _size(self.packet_of(record)) + self._overhead(caller, record, now) <= self.contract.limit(
            "max_packet_bytes.max")

    def _overhead(self, caller: Binding, record: dict[str, Any], now: datetime) -> int:
        """Bytes that get, or a one-record search page at its worst, add to a record's packet: the larger.

        Measured on a skeleton of the record (its id and digest alone): every member
        besides the packet's is of the same size for any record with ids of the same
        lengths, and a packet's members join a value's without changing size.
        """
        rid, digest = record["record_id"], record["record_digest"]
        key = (len(rid), len(digest), caller.tenant, caller.workspace, caller.principal, caller.purpose_ref)
        found = self._overheads.get(key)
        if found is None:
            skeleton = self.packet_of({"record_id": rid, "record_digest": digest})
            found = max(_size(value) for value in self._worst_values(caller, skeleton, now)) - _size(skeleton)
            if len(self._overheads) >= _OVERHEADS_KEPT:
                self._overheads.clear()
            self._overheads[key] = found
        return found

    def _worst_values(self, caller: Binding, packet: dict[str, Any], now: datetime) -> list[dict[str, Any]]:
        """get's value and a one-record search page's, with every field that grows with the store at its largest."""
        worst = _PageContext(
            query="", purpose_ref=caller.purpose_ref, limit=self.contract.limit("search.limit.max"),
            budget=self.contract.limit("max_packet_bytes.max"), capability=DEFAULT_CAPABILITY,
            snapshot=_LARGEST_INTEGER, valid_as_of=_LARGEST_INTEGER,
            ranked_ids=[packet["record"]["record_id"]] * search_index.MAX_CANDIDATES, ordered_digest=ZERO_DIGEST,
            page_request=ZERO_DIGEST, now=now, candidates_digest=ZERO_DIGEST,  # a digest's size never varies
        )
        entry = {**packet, "score": _LONGEST_SCORE, "rank": search_index.MAX_CANDIDATES}
        return [self._get_value(caller, packet, now, _LARGEST_INTEGER, _LARGEST_INTEGER),
                self._page_value(caller, worst, [entry], search_index.MAX_CANDIDATES)]

    def _get_value(
        self, caller: Binding, packet: dict[str, Any], now: datetime, snapshot: int, valid_as_of: int
    ) -> dict[str, Any]:
        return self._sized_get_value(caller, packet, now, snapshot, valid_as_of)[0]

    def _sized_get_value(
        self, caller: Binding, packet: dict[str, Any], now: datetime, snapshot: int, valid_as_of: int
    ) -> tuple[dict[str, Any], int]:
        """get's value, and its size as sent (``_size``), from one serialisation."""
        granted = authorization(caller, "engram_memory_get")
        read_receipt = {
            "record_id": packet["record"]["record_id"],
            "record_digest": packet["record"]["record_digest"],
            "valid_as_of": valid_as_of,
            "system_as_of": str(snapshot),
            "validated_through_cursor": str(snapshot),
            "authorization_receipt_digest": granted,
            "revalidation_receipt_digest": receipt_digest(
                "authorization-revalidation",
                {
                    "record_ids": [packet["record"]["record_id"]],
                    "valid_as_of": valid_as_of,
                    "system_as_of": str(snapshot),
                },
                "revalidation_receipt_digest",
            ),
            "checked_at": instant(now),
        }
        read_receipt["receipt_digest"] = profile_digest("read-receipt", read_receipt)
        value = {**packet, "read_receipt": read_receipt}
        value["packet_digest"], size = profile_digest_and_size("get-packet", value, "packet_digest")
        return value, size

    def get(self, caller: Binding, args: dict[str, Any], now: datetime) -> dict[str, Any]:
        budget = args.get("max_packet_bytes", self.contract.limit("max_packet_bytes.default"))
        with self.store.snapshot() as reader:
            found = self.visible_record(reader, caller, args["record_id"], now)
            snapshot = reader.scope_cursor(scope_of(caller))
        value, size = self._sized_get_value(caller, self.packet(found), now, snapshot, epoch_ms(now))
        if size > budget:
            raise Refusal("PROJECTION_OVERSIZED")
        return value

    def search(self, caller: Binding, args: dict[str, Any], now: datetime) -> dict[str, Any]:
        capability = args.get("capability_policy", DEFAULT_CAPABILITY)
        if capability["minimum_channels"] != "lexical":
            raise Refusal("RANKING_UNAVAILABLE")  # no semantic channel here, and no silent fallback
        limit = args.get("limit", self.contract.limit("search.limit.default"))
        budget = args.get("max_packet_bytes", self.contract.limit("max_packet_bytes.default"))
        page_request = search_index.page_request_digest(
            caller, args["query"], args["purpose_ref"], limit, budget, capability
        )
        with self.store.snapshot() as reader:
            snapshot = reader.scope_cursor(scope_of(caller))
            pinned = None
            if "page_cursor" in args:
                pinned = self.cursors.open(args["page_cursor"])
                if pinned is None or (pinned.request, pinned.system_as_of) != (page_request, snapshot):
                    raise Refusal("STALE_PAGE")
                offset, valid_as_of = pinned.offset, pinned.valid_as_of
            else:
                offset, valid_as_of = 0, epoch_ms(now)
            ranked_ids = self.ranked(reader, scope_of(caller), args["query"], valid_as_of)
            ordered_digest = receipt_digest("recall-ordered", {"ordered_ids": ranked_ids}, "ordered_ids_digest")
            if pinned is not None and pinned.ordered_ids_digest != ordered_digest:
                raise Refusal("STALE_PAGE")
            context = _PageContext(
                query=args["query"],
                purpose_ref=args["purpose_ref"],
                limit=limit,
                budget=budget,
                capability=capability,
                snapshot=snapshot,
                valid_as_of=valid_as_of,
                ranked_ids=ranked_ids,
                ordered_digest=ordered_digest,
                page_request=page_request,
                now=now,
            )
            return self._fill_page(reader, caller, context, offset)

    def _fill_page(
        self, reader: StoreReader, caller: Binding, context: _PageContext, offset: int
    ) -> dict[str, Any]:
        """The page from ``offset``: as many records as the limit and the budget allow, in rank order.

        The budget covers the whole value. A packet fits when the value with it stays
        within budget, counting a cursor only if records would remain after it. A
        record whose packet could not fit even alone is left out, its rank skipped,
        so it never hides the records after it (EMC-SRCH-013); a larger budget serves
        it. Only when no remaining match fits is the search PROJECTION_OVERSIZED.
        """
        rowids = context.ranked_ids
        if offset >= len(rowids):
            return self._page_value(caller, context, [], None)  # nothing matched: the one empty success
        budget = context.budget
        bare = self._sized_page_value(caller, context, [], None)[1]
        cursor_cost = self._sized_page_value(caller, context, [], len(rowids))[1] - bare
        packets: list[dict[str, Any]] = []
        packed: list[bytes] = []  # each packet's canonical bytes, measured once and joined into the page's
        used, position = bare, offset
        next_fits = False  # the record at ``position`` is known to fit a page alone: the look-ahead is answered

        def fits_alone(packet: dict[str, Any], at: int) -> bool:
            return bare + _size(packet) + (cursor_cost if at + 1 < len(rowids) else 0) <= budget

        def entry(at: int) -> dict[str, Any]:
            return {
                **self.packet(self.ranked_record(reader, caller, rowids[at])),
                "score": search_index.fused_score(at + 1),
                "rank": at + 1,
            }

        while position < len(rowids) and len(packets) < context.limit:
            packet = entry(position)
            raw = canonical_bytes(packet, normalize=False)
            size = len(raw) + (1 if packets else 0)
            if used + size + (cursor_cost if position + 1 < len(rowids) else 0) <= budget:
                packets.append(packet)
                packed.append(raw)
                used += size
            elif fits_alone(packet, position):
                next_fits = True
                break  # the next page starts with it
            position += 1
        # A cursor is given only if a record that can be served remains: skip the oversized ones now.
        while not next_fits and position < len(rowids) and not fits_alone(entry(position), position):
            position += 1
        if not packets:
            raise Refusal("PROJECTION_OVERSIZED")  # never an empty page, with or without a cursor
        next_offset = position if position < len(rowids) else None
        value, size = self._sized_page_value(caller, context, packets, next_offset, packed)
        while size > budget and len(packets) > 1:  # a longer cursor offset can cost a digit
            next_offset = packets.pop()["rank"] - 1
            packed.pop()
            value, size = self._sized_page_value(caller, context, packets, next_offset, packed)
        return value

    def _page_value(
        self, caller: Binding, context: _PageContext, packets: list[dict[str, Any]], next_offset: int | None
    ) -> dict[str, Any]:
        return self._sized_page_value(caller, context, packets, next_offset)[0]

    def _sized_page_value(
        self,
        caller: Binding,
        context: _PageContext,
        packets: list[dict[str, Any]],
        next_offset: int | None,
        packed: list[bytes] | None = None,
    ) -> tuple[dict[str, Any], int]:
        """A page's value, and its size as sent (``_size``), from one serialisation.

        ``packed``, when given, holds each packet's canonical bytes (as ``_fill_page`` measured them): the
        page's bytes are joined from them and its other members' rather than serialised whole again.
        """
        value: dict[str, Any] = {
            "records": packets,
            "rank_receipt": self._rank_receipt(caller, context, [p["record"]["record_id"] for p in packets]),
        }
        if next_offset is not None:
            value["next_page_cursor"] = self.cursors.seal(
                search_index.PageCursor(
                    context.page_request,
                    self.store.ranking.name,
                    context.valid_as_of,
                    context.snapshot,
                    next_offset,
                    context.ordered_digest,
                )
            )
        if packed is None:
            packed = [canonical_bytes(packet, normalize=False) for packet in packets]
        members = {key: canonical_bytes(member, normalize=False) for key, member in value.items() if key != "records"}
        raw = canonical_object({**members, "records": canonical_array(packed)})
        value["response_digest"], size = profile_digest_and_size("search-response", value, "response_digest", raw=raw)
        return value, size

    def ranked_record(self, reader: StoreReader, caller: Binding, rid: str) -> StoredRecord:
        """A ranked id's record, read in the snapshot that ranked it."""
        found = reader.record(scope_of(caller), rid)
        if found is None:  # the store ranked an id its own snapshot does not hold: a store defect
            raise LookupError("a ranked record is missing from its snapshot")
        return found

    def ranked(self, reader: StoreReader, scope: Scope, query: str, valid_as_of: int) -> list[str]:
        """Ids of the current matches in the scope, best first, at most MAX_CANDIDATES."""
        tokens = search_index.query_tokens(query)
        return reader.search(scope, tokens, valid_as_of, search_index.MAX_CANDIDATES) if tokens else []

    def _rank_receipt(self, caller: Binding, context: _PageContext, page_ids: list[str]) -> dict[str, Any]:
        fixed = context.fixed_digests  # the request's digests, the same on every page value built for it
        if not fixed:
            request = {
                "query": context.query,
                "purpose_ref": context.purpose_ref,
                "profile": self.store.ranking.name,
                "valid_as_of": context.valid_as_of,
                "system_as_of": str(context.snapshot),
                "capability_policy": context.capability,
                "budgets": {
                    "max_candidates": search_index.MAX_CANDIDATES,
                    "max_results": context.limit,
                    "max_packet_bytes": context.budget,
                },
            }
            fixed["request"] = receipt_digest("recall-request", request, "request_digest")
            fixed["authorization"] = authorization(caller, "engram_memory_search")
            fixed["snapshot"] = profile_digest(
                "snapshot", {"scope": scope_ref(caller), "system_as_of": str(context.snapshot)}
            )
        receipt = {
            "request_digest": fixed["request"],
            "authorization_receipt_digest": fixed["authorization"],
            "profile": self.store.ranking.name,
            "profile_version": self.store.ranking.version,
            "profile_config_digest": self.store.ranking.config_digest,
            "valid_as_of": context.valid_as_of,
            "system_as_of": str(context.snapshot),
            "snapshot_id": f"scope-snapshot-{context.snapshot}",
            "snapshot_digest": fixed["snapshot"],
            "candidate_count": len(context.ranked_ids),
            "candidate_ids_digest": context.candidate_ids_digest,
            "scoring_formula_ref": self.store.ranking.scoring_formula,
            "ordered_ids_digest": context.ordered_digest,
            "revalidation_receipt_digest": receipt_digest(
                "authorization-revalidation",
                {"record_ids": page_ids, "valid_as_of": context.valid_as_of, "system_as_of": str(context.snapshot)},
                "revalidation_receipt_digest",
            ),
            "projection_receipt_digests": [],
            "issued_at": instant(context.now),
        }
        receipt["receipt_digest"] = receipt_digest("rank-receipt", receipt)
        return receipt


DEFAULT_CAPABILITY = {"minimum_channels": "lexical", "network": "forbid"}
_LONGEST_SCORE = 0.12345678901234568  # a score with as many digits as a float can print


@dataclass(frozen=True)
class _PageContext:
    """What one search request fixes for every page value built while answering it."""

    query: str
    purpose_ref: str
    limit: int
    budget: int
    capability: dict[str, str]
    snapshot: int
    valid_as_of: int
    ranked_ids: list[str]
    ordered_digest: str
    page_request: str
    now: datetime
    candidates_digest: str | None = None  # given when known; else computed from ranked_ids on first use
    fixed_digests: dict[str, str] = field(default_factory=dict, compare=False)  # filled by the first page value

    @cached_property
    def candidate_ids_digest(self) -> str:
        if self.candidates_digest is not None:
            return self.candidates_digest
        return receipt_digest("recall-candidates", {"candidate_ids": sorted(self.ranked_ids)}, "candidate_ids_digest")


_REDACTED = ("/scope_ref",)  # the bound scope is the host's, never the agent's
_REDACTIONS_KEPT = 1024  # records whose redaction digest is remembered


@lru_cache(maxsize=_REDACTIONS_KEPT)  # a record's is the same on every read, and searches pack the same records
def _redaction_digest(record_id: str, record_digest: str) -> str:
    return receipt_digest(
        "recall-redaction",
        {
            "record_id": record_id,
            "source_record_digest": record_digest,
            "policy_version": "1",
            "redacted_fields": list(_REDACTED),
        },
        "redaction_receipt_digest",
    )


def _size(value: Any) -> int:
    """Bytes a value counts against max_packet_bytes: its canonical form, as sent."""
    return len(canonical_bytes(value, normalize=False))


def expired(found: StoredRecord, now: datetime) -> bool:
    return found.expires_at is not None and found.expires_at <= instant(now)


def current(found: StoredRecord, now: datetime) -> bool:
    ms = epoch_ms(now)
    return (
        found.state == "accepted_current"
        and found.valid_from <= ms
        and (found.valid_to is None or ms <= found.valid_to)
        and not expired(found, now)
    )
