"""Lexical search pieces: tokens, per-scope FTS5 tables, scores and paging cursors.

Each scope has its own FTS5 table, so another scope's records are neither
matched nor counted in BM25's statistics: nothing about them leaks into order
or score.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from engram_mcp.contract import profile_digest
from engram_mcp.contract.binding import Binding, Sealer, StateRejected
from engram_mcp.reference._ports import RankingProfile, Scope

PROFILE = "reference_fts5_bm25"
PROFILE_VERSION = "1.0.0"
SCORING_FORMULA = "engram-memory-mcp:fts5-bm25-rrf:v1"
FIELDS = ("primary_text", "decision_text", "evidence_text", "context_text", "citations_text")
# BM25 weights per field, in FIELDS order (the upstream offline profile's weights).
FIELD_WEIGHTS = (3.0, 2.0, 1.5, 1.0, 0.5)
RRF_K = 60
MAX_CANDIDATES = 2000  # matches ranked per request, as the upstream recall caps them
# Matches fetched from the index per search, beyond the limit, for the records a validity filter drops;
# a search that needs more fetches again, FETCH_GROWTH times as many.
OVERFETCH, FETCH_GROWTH = 256, 4
CURSOR_AAD = b"engram-memory-mcp/page-cursor/v1"
LEXICAL_WEIGHT, RECENCY_WEIGHT = 0.85, 0.15

_TOKEN = re.compile(r"\w+")
_SHORT_LATIN = re.compile(r"[a-z]{1,2}")


def fts_table(scope: Scope) -> str:
    """A table name derived from the scope's digest (hex only: safe to splice into SQL)."""
    return "fts_" + profile_digest("scope", {"tenant": scope.tenant, "workspace": scope.workspace})[7:39]


def create_table_sql(scope: Scope) -> str:
    columns = ", ".join(FIELDS)
    return (
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {fts_table(scope)} USING fts5 "
        f"({columns}, tokenize = 'unicode61 remove_diacritics 2')"
    )


def secure_delete_sql(table: str) -> str:
    """Make ``table``'s deletes remove the row's terms from the index in place (FTS5, SQLite 3.42+).

    Without it a delete only appends a marker and the text stays in the index
    until a merge rewrites it; the setting persists in the table.
    """
    return f"INSERT INTO {table} ({table}, rank) VALUES ('secure-delete', 1)"


def ranked_matches_sql(table: str) -> str:
    """The matches that score at least as well as the ``fetch``-th best, joined to their records.

    Weighted BM25 is computed once per match inside the index; only the matches
    up to the ``fetch``-th best score, the whole run of matches tied with it
    included, reach the join and the sort, each with whether it is searchable
    now. Parameters: the match expression, fetch, valid_as_of (ms) twice,
    valid_as_of as an instant.
    """
    weights = ", ".join(str(w) for w in FIELD_WEIGHTS)
    return (
        f"WITH matches AS MATERIALIZED (SELECT rowid, bm25({table}, {weights}) AS score FROM {table} "
        f"WHERE {table} MATCH ?1), "
        "cut AS (SELECT score FROM matches ORDER BY score LIMIT 1 OFFSET ?2 - 1) "
        "SELECT r.record_id, m.score, r.state = 'accepted_current' AND r.valid_from <= ?3 "
        "AND (r.valid_to IS NULL OR r.valid_to >= ?4) AND (r.expires_at IS NULL OR r.expires_at > ?5) AS searchable "
        "FROM matches m JOIN records r ON r.rowid = m.rowid "
        "WHERE m.score <= COALESCE((SELECT score FROM cut), 1e308) ORDER BY m.score, r.record_id"
    )


def top_ranked(rows: list[tuple[str, float, int]], fetch: int, limit: int) -> list[str] | None:
    """The first ``limit`` searchable ids by (score, record id), or None when more matches are needed.

    ``rows`` hold every match that scores at least as well as the ``fetch``-th
    best, in (score, record id) order, so their searchable ids are the answer's
    exact beginning. Fewer than ``fetch`` rows means they are every match.
    """
    searchable_ids = [rid for rid, _, searchable in rows if searchable]
    return searchable_ids[:limit] if len(rows) < fetch or len(searchable_ids) >= limit else None


def index_words(texts: tuple[str, ...]) -> set[str] | None:
    """The words FTS5 indexed for these texts (lowercased), or None when they are not plain ASCII.

    ASCII text is tokenized alike here and by unicode61 (letters and digits, anything else separates);
    other text would need its folding rules (diacritics, case), so callers treat None as "any word".
    """
    text = "\n".join(texts)
    if not text.isascii():
        return None
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def query_tokens(query: str) -> list[str]:
    """Lowercased word tokens, one- and two-letter Latin words dropped, first occurrence kept."""
    tokens = [t for t in _TOKEN.findall(query.lower()) if not _SHORT_LATIN.fullmatch(t)]
    return list(dict.fromkeys(tokens))


def match_expression(tokens: list[str]) -> str:
    # Tokens are \w+ only, so quoting them cannot inject FTS5 syntax.
    return " OR ".join(f'"{t}"' for t in tokens)


def field_texts(record: dict[str, Any]) -> tuple[str, ...]:
    components = record["components"]
    by_kind = {
        kind: "\n".join(c["text"] for c in components if c["kind"] == kind)
        for kind in ("decision", "evidence", "context")
    }
    primary = next(c["text"] for c in components if c["component_id"] == record["primary_component_id"])
    citations = "\n".join(c["source_ref"] for c in record["citations"])
    return (primary, by_kind["decision"], by_kind["evidence"], by_kind["context"], citations)


def fused_score(rank: int) -> float:
    """Reciprocal-rank score in (0, 1]; recency is 1 for every current record."""
    lexical = (1 / (RRF_K + rank)) / (1 / (RRF_K + 1))
    score = LEXICAL_WEIGHT * lexical + RECENCY_WEIGHT
    # The top score is exactly 1: as the int 1, its canonical form is the C encoder's (RFC 8785 writes 1.0 as 1).
    return int(score) if score.is_integer() else score


def profile_config_digest() -> str:
    return profile_digest(
        "profile-config",
        {
            "profile": PROFILE,
            "fields": list(FIELDS),
            "field_weights": list(FIELD_WEIGHTS),
            "rrf_k": RRF_K,
            "weights": {"lexical": LEXICAL_WEIGHT, "recency": RECENCY_WEIGHT},
        },
    )


RANKING = RankingProfile(PROFILE, PROFILE_VERSION, SCORING_FORMULA, profile_config_digest())


def page_request_digest(binding: Binding, query: str, purpose_ref: str, limit: int, max_packet_bytes: int,
                        capability_policy: dict[str, str]) -> str:
    """What a cursor is bound to: the request with defaults applied, and who asked it."""
    return profile_digest(
        "page-request",
        {"query": query, "purpose_ref": purpose_ref, "limit": limit, "max_packet_bytes": max_packet_bytes,
         "capability_policy": capability_policy, "principal": binding.principal,
         "tenant": binding.tenant, "workspace": binding.workspace},
    )


@dataclass(frozen=True)
class PageCursor:
    """What a next_page_cursor pins: the request, the snapshot and the position in it."""

    request: str
    profile: str
    valid_as_of: int
    system_as_of: int
    offset: int
    ordered_ids_digest: str


class CursorSealer:
    """Seals cursors so a client can copy them but never read, alter or mint one."""

    def __init__(self, key: bytes) -> None:
        self._sealer = Sealer(key, associated_data=CURSOR_AAD)

    def seal(self, cursor: PageCursor) -> str:
        return self._sealer.seal(asdict(cursor))

    def open(self, token: str) -> PageCursor | None:
        """The cursor, or None when it is malformed or was not sealed here."""
        try:
            return PageCursor(**self._sealer.open(token))
        except (StateRejected, TypeError, ValueError):
            return None
