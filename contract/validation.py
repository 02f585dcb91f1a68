"""The shared argument oracle: closed schemas plus the rules JSON Schema cannot say.

The reference server refuses arguments with it and the conformance harness
predicts verdicts with it, so the two cannot drift apart. Each failure is a
value carrying the rule it breaks, the error code that rule produces (see
spec/rules.json) and the JSON Pointer of the offending value.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeGuard

import rfc8785
from jsonschema import ValidationError

from engram_mcp.contract._canonical import canonical_bytes
from engram_mcp.contract._loader import Contract, load
from engram_mcp.contract._vocabulary import utf8_length

_INSTANT_SHAPE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z\Z")

Check = Callable[[Any, "datetime | None"], Iterator["Violation"]]


@dataclass(frozen=True)
class Violation:
    rule: str
    code: str
    path: str  # JSON Pointer into the arguments ("" is the whole object)

    def __str__(self) -> str:
        return f"{self.rule} at {self.path or '/'} ({self.code})"


@dataclass(frozen=True)
class Verdict:
    violations: tuple[Violation, ...]
    code: str | None  # the error code a server must send, None when valid

    @property
    def valid(self) -> bool:
        return not self.violations

    @property
    def rules(self) -> frozenset[str]:
        return frozenset(v.rule for v in self.violations)


def pointer(parts: Any) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


# -- checks that need code -----------------------------------------------

_CHECKS: dict[str, Check] = {}


def _check(rule_id: str) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        _CHECKS[rule_id] = fn
        return fn

    return register


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _ids(items: Any, key: str) -> list[tuple[int, Any]]:
    return [(i, _dict(item).get(key)) for i, item in enumerate(_list(items)) if isinstance(_dict(item).get(key), str)]


def _payload(args: Any) -> dict[str, Any]:
    return _dict(_dict(args).get("payload"))


def _citation_ids(args: Any) -> set[str]:
    return {cid for _, cid in _ids(_payload(args).get("citations"), "citation_id")}


def _walk_strings(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str]]:
    if isinstance(node, str):
        yield path, node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield path + (key,), key
            yield from _walk_strings(value, path + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk_strings(value, path + (i,))


@_check("unicode_scalars")
def _unicode_scalars(args: Any, now: datetime | None) -> Iterator[Violation]:
    for path, text in _walk_strings(args):
        if utf8_length(text) is None:
            yield Violation("unicode_scalars", "", pointer(path))


def serialized_size(args: Any) -> int:
    """UTF-8 length of the canonical (RFC 8785) form.

    RFC 8785 has no form for integers beyond ±(2^53−1) or for NaN; such
    arguments are measured in compact JSON instead, and the schema refuses them.
    """
    try:
        return len(canonical_bytes(args, normalize=False))
    except (rfc8785.IntegerDomainError, rfc8785.FloatDomainError):
        return len(json.dumps(args, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


@_check("arguments_size")
def _arguments_size(args: Any, now: datetime | None) -> Iterator[Violation]:
    if serialized_size(args) > load().limit("arguments.max_bytes"):
        yield Violation("arguments_size", "", "")


def _duplicates(items: Any, key: str, base: str) -> Iterator[str]:
    seen: set[str] = set()
    for i, value in _ids(items, key):
        if value in seen:
            yield f"{base}/{i}/{key}"
        seen.add(value)


@_check("unique_citation_ids")
def _unique_citations(args: Any, now: datetime | None) -> Iterator[Violation]:
    for path in _duplicates(_payload(args).get("citations"), "citation_id", "/payload/citations"):
        yield Violation("unique_citation_ids", "", path)


@_check("unique_component_ids")
def _unique_components(args: Any, now: datetime | None) -> Iterator[Violation]:
    for path in _duplicates(_payload(args).get("components"), "component_id", "/payload/components"):
        yield Violation("unique_component_ids", "", path)


@_check("component_citations_resolve")
def _component_citations(args: Any, now: datetime | None) -> Iterator[Violation]:
    known = _citation_ids(args)
    for i, component in enumerate(_list(_payload(args).get("components"))):
        for j, cid in enumerate(_list(_dict(component).get("citation_ids"))):
            if isinstance(cid, str) and cid not in known:
                yield Violation("component_citations_resolve", "", f"/payload/components/{i}/citation_ids/{j}")


def _primary_component(args: Any) -> dict[str, Any] | None:
    payload = _payload(args)
    wanted = payload.get("primary_component_id")
    for component in _list(payload.get("components")):
        if isinstance(component, dict) and component.get("component_id") == wanted:
            return component
    return None


@_check("primary_component_resolves")
def _primary_resolves(args: Any, now: datetime | None) -> Iterator[Violation]:
    if isinstance(_payload(args).get("primary_component_id"), str) and _primary_component(args) is None:
        yield Violation("primary_component_resolves", "", "/payload/primary_component_id")


def _event_citation(args: Any) -> Any:
    return _dict(_payload(args).get("primary_event")).get("citation_id")


@_check("primary_event_citation_resolves")
def _event_resolves(args: Any, now: datetime | None) -> Iterator[Violation]:
    cid = _event_citation(args)
    if isinstance(cid, str) and cid not in _citation_ids(args):
        yield Violation("primary_event_citation_resolves", "", "/payload/primary_event/citation_id")


@_check("primary_event_citation_in_primary_component")
def _event_in_primary(args: Any, now: datetime | None) -> Iterator[Violation]:
    cid, primary = _event_citation(args), _primary_component(args)
    if isinstance(cid, str) and primary is not None and cid not in _list(primary.get("citation_ids")):
        yield Violation("primary_event_citation_in_primary_component", "", "/payload/primary_event/citation_id")


@_check("evidence_citations_resolve")
def _evidence_citations(args: Any, now: datetime | None) -> Iterator[Violation]:
    known = _citation_ids(args)
    for j, cid in enumerate(_list(_dict(_dict(args).get("evidence")).get("citation_ids"))):
        if isinstance(cid, str) and cid not in known:
            yield Violation("evidence_citations_resolve", "", f"/evidence/citation_ids/{j}")


def utf16_key(text: str) -> bytes:
    """Sort key giving UTF-16 code-unit order, the order upstream compares strings in."""
    return text.encode("utf-16-be", "surrogatepass")


@_check("family_refs_sorted")
def _family_refs(args: Any, now: datetime | None) -> Iterator[Violation]:
    refs = _list(_dict(_payload(args).get("reconciliation")).get("family_refs"))
    for i in range(1, len(refs)):
        a, b = refs[i - 1], refs[i]
        if isinstance(a, str) and isinstance(b, str) and utf16_key(a) >= utf16_key(b):
            yield Violation("family_refs_sorted", "", f"/payload/reconciliation/family_refs/{i}")


def _is_safe_int(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and float(value).is_integer()


@_check("valid_time_order")
def _valid_time(args: Any, now: datetime | None) -> Iterator[Violation]:
    vt = _dict(_payload(args).get("valid_time"))
    t, t_end = vt.get("t"), vt.get("t_end")
    if _is_safe_int(t) and _is_safe_int(t_end) and t_end < t:
        yield Violation("valid_time_order", "", "/payload/valid_time/t_end")


def instant(moment: datetime) -> str:
    """The contract's instant form: UTC, millisecond precision, fixed width."""
    moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


@_check("expires_after_capture")
def _expires(args: Any, now: datetime | None) -> Iterator[Violation]:
    expires = _dict(_dict(_payload(args).get("retention"))).get("expires_at")
    if now is None or not isinstance(expires, str) or not _INSTANT_SHAPE.match(expires):
        return  # the schema reports malformed instants
    # Fixed-width instants sort as the times they name (year 0000 included).
    if expires <= instant(now):
        yield Violation("expires_after_capture", "", "/payload/retention/expires_at")


# -- schema errors -> rules ----------------------------------------------


class _Classifier:
    """Maps a jsonschema error to the rule that owns it (spec/rules.json)."""

    def __init__(self, contract: Contract) -> None:
        self._origin = contract.schema_origin
        self._by_schema: list[tuple[int, frozenset[str], str]] = []
        self._by_keyword: dict[str, str] = {}
        for rule in contract.rules.values():
            if rule.mechanism not in ("schema", "keyword"):
                continue
            if rule.schema is not None:
                target = contract.resolve(rule.schema)
                self._by_schema.append((id(target), frozenset(rule.keywords), rule.id))
            else:
                for keyword in rule.keywords:
                    self._by_keyword.setdefault(keyword, rule.id)

    def rule(self, error: ValidationError) -> str:
        schema = id(self._origin(error.schema))
        for target, keywords, rule_id in self._by_schema:
            if schema == target and error.validator in keywords:
                return rule_id
        return self._by_keyword.get(str(error.validator), "schema_keyword")


# -- the oracle ------------------------------------------------------------


class ArgumentOracle:
    def __init__(self, contract: Contract | None = None) -> None:
        self.contract = contract or load()
        self._classifier = _Classifier(self.contract)
        missing = {r.id for r in self.contract.rules.values() if r.mechanism == "check"} - set(_CHECKS)
        if missing:
            raise RuntimeError(f"rules without an implementation: {', '.join(sorted(missing))}")
        self._recent: OrderedDict[tuple[str, str], Verdict] = OrderedDict()
        self._recent_lock = threading.Lock()

    def verdict(self, tool: str, arguments: Any, *, now: datetime | None = None) -> Verdict:
        """Judge a tool's arguments. ``now`` is the capture time; without it, clock rules are skipped.

        A verdict without the clock is a pure function of the arguments, and one call is often judged twice (by a
        check and by the model of the run, or a retry by the server): the recent small ones are remembered, keyed
        by their exact JSON text (key order kept, so even the order of the violations is the same)."""
        key = _memo_key(tool, arguments) if now is None else None
        if key is not None:
            with self._recent_lock:
                known = self._recent.get(key)
                if known is not None:
                    self._recent.move_to_end(key)
                    return known
        judged = self._judge(tool, arguments, now)
        if key is not None:
            with self._recent_lock:
                self._recent[key] = judged
                if len(self._recent) > MEMO_ENTRIES:
                    self._recent.popitem(last=False)
        return judged

    def _judge(self, tool: str, arguments: Any, now: datetime | None) -> Verdict:
        rules = self.contract.rules
        found: list[Violation] = []
        # Unencodable text and oversize bodies are judged first: later layers assume neither.
        for rule_id in ("unicode_scalars", "arguments_size"):
            found.extend(self._run(rule_id, arguments, now))
            if found:
                return self.verdict_of(found)
        if not self.contract.input_validity(tool)(arguments):  # the errors only for arguments that have some
            for error in self.contract.input_validator(tool).iter_errors(arguments):
                for leaf in _leaves(error):
                    rule_id = self._classifier.rule(leaf)
                    found.append(Violation(rule_id, rules[rule_id].code, pointer(leaf.absolute_path)))
        for rule in rules.values():
            if (
                rule.mechanism == "check"
                and rule.id not in ("unicode_scalars", "arguments_size")
                and rule.applies_to(tool)
            ):
                found.extend(self._run(rule.id, arguments, now))
        return self.verdict_of(found)

    def clock_verdict(self, tool: str, arguments: Any, *, now: datetime) -> Verdict:
        """Only the rules that need the clock, judged at ``now``. A server applies them to a first
        execution, after its replay lookup: a retry keeps what its first call resolved (EMC-IDEM-013)."""
        found: list[Violation] = []
        for rule in self.contract.rules.values():
            if rule.mechanism == "check" and rule.needs_clock and rule.applies_to(tool):
                found.extend(self._run(rule.id, arguments, now))
        return self.verdict_of(found)

    def _run(self, rule_id: str, arguments: Any, now: datetime | None) -> Iterator[Violation]:
        code = self.contract.rules[rule_id].code
        for v in _CHECKS[rule_id](arguments, now):
            yield Violation(v.rule, code, v.path)

    def verdict_of(self, found: list[Violation]) -> Verdict:
        """The verdict these violations make: each once, the code the contract's precedence puts first."""
        unique = tuple(dict.fromkeys(found))
        codes = {v.code for v in unique}
        code = next((c for c in self.contract.code_precedence if c in codes), None)
        return Verdict(unique, code)


MEMO_ENTRIES, MEMO_MAX_CHARS = 2000, 6000  # at most ~12 M characters of keys; bigger arguments are judged afresh


def _memo_key(tool: str, arguments: Any) -> tuple[str, str] | None:
    try:
        # ensure_ascii off: escaped, a lone surrogate pair and the character it spells would be one key
        text = json.dumps(arguments, ensure_ascii=False, allow_nan=True)
    except (TypeError, ValueError, RecursionError):  # not JSON data (or too deep to write): judged afresh
        return None
    return (tool, text) if len(text) <= MEMO_MAX_CHARS else None


def _leaves(error: ValidationError) -> Iterator[ValidationError]:
    """The innermost errors: a failed oneOf/anyOf/allOf says less than its branches."""
    if error.context:
        for child in error.context:
            yield from _leaves(child)
    else:
        yield error
