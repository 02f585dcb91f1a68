"""The target's conformance profile: how to bind calls, and the scopes, principals and policies it serves.

A profile states facts about the target's configuration; a check works in the
scope that fits the tools it calls (``Profile.scope_for``) and picks the others it
needs by role (``_needs.ROLES``); it is SKIPPED with the reason when the profile
has no scope in that role. The format is schemas/data/profile.schema.json,
documented key by key in spec/profile.md; a profile that breaks it is refused
with the file, the key path and the line. A run without a profile uses
``Profile.absent()``: no scope, no binding, so every check that needs a host
identity is skipped with what a profile would unlock.
"""

from __future__ import annotations

import difflib
import json
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engram_mcp.conformance._errors import ConformanceError
from engram_mcp.conformance._needs import ADMIT, CAPTURE, GET, ROLES, SEARCH, TOOLS, short
from engram_mcp.conformance._words import spoken
from engram_mcp.contract import load

ALL_TOOLS = frozenset(TOOLS)
ACCEPTS_BENIGN = frozenset({"accept", "secret-scan"})
REJECTS_SECRETS = frozenset({"reject", "secret-scan"})


NEEDS_PROFILE = "needs a conformance profile (--profile)"
CONFIRMATION_DEFAULTS = {key: spec["default"] for key, spec in
                         load().data_schema("profile")["properties"]["confirmation"]["properties"].items()
                         if "default" in spec}


class ProfileError(ConformanceError):
    """The profile cannot be used; the message names the setting."""


@dataclass(frozen=True)
class ScopeProfile:
    tenant: str
    workspace: str
    memory: bool
    principals: Mapping[str, frozenset[str]]
    admission_policy: str
    allow_retain: bool
    consented_families: tuple[str, ...]
    confirm_capture: bool
    confirm_admission: bool
    confirmation_ttl_seconds: int
    retention_ceiling_seconds: int
    capture_denied: frozenset[str] = frozenset()  # granted capture, without capture authority here

    @property
    def label(self) -> str:
        return f"{self.tenant}/{self.workspace}"

    @property
    def policy_tools(self) -> frozenset[str]:
        """The tools this scope's confirm_* keys switch on: the scope's set for spec/tools.json's "policy" tools."""
        switched = {"engram_memory_capture": self.confirm_capture,
                    "engram_memory_request_admission": self.confirm_admission}
        return frozenset(tool for tool, on in switched.items() if on)

    def principal_with(self, tools: frozenset[str] | set[str]) -> str | None:
        """A principal granted at least these tools (and able to capture, if capture is among them),
        preferring the one granted the most."""
        fits = [p for p, granted in self.principals.items() if set(tools) <= granted
                and not (CAPTURE in tools and p in self.capture_denied)]
        return max(fits, key=lambda p: (len(self.principals[p]), p), default=None)

    def limited_principal(self) -> str | None:
        """A principal granted some tools but not all six."""
        return next((p for p, g in sorted(self.principals.items()) if g and g != ALL_TOOLS), None)


@dataclass(frozen=True)
class Profile:
    path: Path | None
    audience: str
    binding: Mapping[str, Any]
    http_headers: Mapping[str, str]
    scopes: tuple[ScopeProfile, ...]
    purpose_ref: str
    raw: Mapping[str, Any] = field(default_factory=dict)
    given: bool = True  # False without a host identity: no --profile, or a profile with no [binding]
    # [confirmation]: the modes the harness tests, each with its own checks; an older profile means server-initiated.
    confirmation_modes: frozenset[str] = frozenset(CONFIRMATION_DEFAULTS["modes"])
    reference_ttl_seconds: int = load().limit("confirmation.ttl.max")

    def without(self, tools: frozenset[str]) -> Profile:
        """This profile with ``tools`` granted to no one: what a target that does not serve them can be judged by."""
        return replace(self, scopes=tuple(replace(s, principals={p: granted - tools for p, granted in
                                                                  s.principals.items()}) for s in self.scopes))

    @classmethod
    def absent(cls) -> Profile:
        """The profile of a run without one: it binds nothing and serves no role."""
        return cls(path=None, audience="", binding={}, http_headers={}, scopes=(),
                   purpose_ref=BINDING_DEFAULTS["purpose_ref"], given=False)

    def lacks(self, role: str) -> str:
        """Why a check that needs a scope (or principal) in this role cannot run, and what would unlock it; ``role``
        is a name of ``_needs.ROLES`` or words that say what the check needs."""
        words = ROLES.get(role, role)
        if not self.given:
            return f"{NEEDS_PROFILE}: the check needs {words}"
        where = self.path.name if self.path else "the profile"
        return f"the check needs {words}: {where} has none (spec/profile.md says how to add one)"

    # -- roles ---------------------------------------------------------------

    def find(self, predicate: Callable[[ScopeProfile], bool]) -> ScopeProfile | None:
        return next((s for s in self.scopes if predicate(s)), None)

    def scope_for(self, tools: Iterable[str] = ()) -> ScopeProfile | None:
        """The scope a check works in: memory on, one principal granted every tool the check calls (and the
        authority to capture, when it captures), none of those tools gated by the host's policy, and benign content
        admitted when it asks for admission. A check that calls no tool needs a memory-on scope with a principal."""
        tools = frozenset(tools)
        return self.find(
            lambda s: s.memory and bool(s.principals) and s.principal_with(tools) is not None
            and not (CAPTURE in tools and s.confirm_capture) and not (ADMIT in tools and s.confirm_admission)
            and (ADMIT not in tools or s.admission_policy in ACCEPTS_BENIGN)
        )

    @staticmethod
    def scope_words(tools: Iterable[str] = ()) -> str:
        """What ``scope_for(tools)`` looks for, in the words a reason uses."""
        tools = frozenset(tools)
        if not tools:
            return "a scope with memory on and a principal"
        gated = [t for t in (CAPTURE, ADMIT) if t in tools]
        return (f"a principal granted {short(sorted(tools, key=TOOLS.index))} in a scope with memory on"
                + (f", where {short(gated)} {'needs' if len(gated) == 1 else 'need'} no human confirmation"
                   if gated else "")
                + (" and benign content is admitted" if ADMIT in tools else ""))

    def role(self, name: str, home: ScopeProfile | None = None) -> Any:
        """The scope (or scope and principal) the profile gives a role of ``_needs.ROLES``, or None."""
        return {
            "second-workspace": lambda: self.sibling_workspace(home),
            "second-tenant": lambda: self.other_tenant(home),
            "memory-off": self.opted_out,
            "gated-capture": self.gated_capture,
            "gated-admission": self.gated_admission,
            "adjudicating": self.adjudicating,
            "secret-rejecting": self.rejecting_secrets,
            "capture-denied": self.capture_denied,
            "limited-principal": lambda: home.limited_principal() if home is not None else None,
            "second-principal": lambda: None if home is None else next(
                (p for p in sorted(home.principals) if p != home.principal_with(set())), None),
        }[name]()

    def sibling_workspace(self, home: ScopeProfile | None = None) -> ScopeProfile | None:
        home = home or self.scope_for()
        if home is None:
            return None
        return self.find(
            lambda s: s.memory and s.tenant == home.tenant and s.workspace != home.workspace and bool(s.principals)
        )

    def other_tenant(self, home: ScopeProfile | None = None) -> ScopeProfile | None:
        home = home or self.scope_for()
        if home is None:
            return None
        return self.find(lambda s: s.memory and s.tenant != home.tenant and bool(s.principals))

    def opted_out(self) -> ScopeProfile | None:
        return self.find(lambda s: not s.memory)

    def gated_capture(self) -> ScopeProfile | None:
        return self.find(lambda s: s.memory and s.confirm_capture and s.principal_with({CAPTURE}) is not None)

    def gated_admission(self) -> ScopeProfile | None:
        return self.find(lambda s: s.memory and s.confirm_admission and s.principal_with({CAPTURE, ADMIT}) is not None)

    def adjudicating(self) -> ScopeProfile | None:
        return self.find(lambda s: s.memory and s.admission_policy == "adjudicate"
                         and s.principal_with({CAPTURE, ADMIT}) is not None
                         and not s.confirm_capture and not s.confirm_admission)

    def capture_denied(self) -> tuple[ScopeProfile, str] | None:
        """A scope with memory on and a principal granted capture there without the authority to capture."""
        return next(((s, p) for s in self.scopes if s.memory for p in sorted(s.capture_denied)
                     if CAPTURE in s.principals.get(p, frozenset())), None)

    def rejecting_secrets(self) -> ScopeProfile | None:
        return self.find(lambda s: s.memory and s.admission_policy in REJECTS_SECRETS and not s.confirm_capture
                         and not s.confirm_admission and s.principal_with({CAPTURE, ADMIT, GET, SEARCH}) is not None)


def _defaults(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {key: spec["default"] for key, spec in schema["properties"].items() if "default" in spec}


# Defaults live in the schema, once; the TTL's is the contract's own limit.
SCOPE_DEFAULTS = {**_defaults(load().data_schema("profile")["$defs"]["scope"]),
                  "confirmation_ttl_seconds": load().limit("confirmation.ttl.max")}
BINDING_DEFAULTS = _defaults(load().data_schema("profile")["properties"]["binding"])


def _scope(entry: Mapping[str, Any]) -> ScopeProfile:
    # The schema has checked every type; here only defaults are filled in.
    values = {**SCOPE_DEFAULTS, **entry}
    return ScopeProfile(
        tenant=values["tenant"],
        workspace=values["workspace"],
        memory=values["memory"],
        principals={p: frozenset(tools) for p, tools in values["principals"].items()},
        admission_policy=values["admission_policy"],
        allow_retain=values["allow_retain"],
        consented_families=tuple(values["consented_families"]),
        confirm_capture=values["confirm_capture"],
        confirm_admission=values["confirm_admission"],
        confirmation_ttl_seconds=values["confirmation_ttl_seconds"],
        retention_ceiling_seconds=values["retention_ceiling_seconds"],
        capture_denied=frozenset(values["capture_denied_principals"]),
    )


def _parse(path: Path) -> tuple[str, dict[str, Any]]:
    """The profile's text and its TOML data; a syntax error names the file, line and column."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read the profile ({exc.strerror or type(exc).__name__})") from None
    except UnicodeDecodeError:
        raise ProfileError(f"{path}: the profile is not UTF-8 text") from None
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        where = _TOML_POSITION.search(str(exc))
        reason = _TOML_POSITION.sub("", str(exc)).strip()
        place = f"{path}:{where['line']}:{where['column']}" if where else str(path)
        raise ProfileError(f"{place}: TOML syntax error: {reason}") from None


def validate_profile_data(data: Mapping[str, Any], text: str, path: Path | str) -> list[str]:
    """Every way the data breaks the profile schema, one line each: file:line: key.path: what is wrong."""
    lines = TomlLines(text)
    problems = []
    validator = load().validator(load().data_schema("profile"))
    for error in sorted(
        validator.iter_errors(data), key=lambda e: (lines.line(tuple(e.absolute_path)) or 0, str(e.absolute_path))
    ):
        at = tuple(error.absolute_path)
        for key_path, message in _explain(error, at):
            line = lines.line(key_path)
            problems.append(f"{path}:{line}: {dotted(key_path) or '(top level)'}: {message}" if line
                            else f"{path}: {dotted(key_path) or '(top level)'}: {message}")
    problems += [_at(path, lines, key_path, message) for key_path, message in _over_the_ttl_ceiling(data)]
    return problems


# The contract's ceiling on a confirmation's life (§0, EMC-GATE-004): no schema keyword can read it from
# spec/limits.json, so the loader holds every TTL a profile declares to the limit itself.
TTL_CEILING = load().limit("confirmation.ttl.max")
TTL_CEILING_RULE = "EMC-GATE-004: a confirmation lives at most confirmation.ttl.max"


def _over_the_ttl_ceiling(data: Mapping[str, Any]) -> list[tuple[KeyPath, str]]:
    """(key path, message) for each declared TTL above the contract's ceiling; wrong types are the schema's."""
    declared: list[tuple[KeyPath, Any]] = []
    confirmation = data.get("confirmation")
    if isinstance(confirmation, Mapping):
        declared.append((("confirmation", "reference_ttl_seconds"), confirmation.get("reference_ttl_seconds")))
    scopes = data.get("scopes")
    for index, scope in enumerate(scopes if isinstance(scopes, list) else []):
        if isinstance(scope, Mapping):
            declared.append((("scopes", index, "confirmation_ttl_seconds"), scope.get("confirmation_ttl_seconds")))
    return [(key_path, f"must be at most {TTL_CEILING}, not {value} ({TTL_CEILING_RULE})")
            for key_path, value in declared
            if isinstance(value, int) and not isinstance(value, bool) and value > TTL_CEILING]


def load_profile(path: Path) -> Profile:
    path = Path(path).resolve()
    text, data = _parse(path)
    problems = validate_profile_data(data, text, path)
    if problems:
        raise ProfileError(
            "the profile is not valid (spec/profile.md documents every key):\n  " + "\n  ".join(problems)
        )
    lines = TomlLines(text)
    base = path.parent
    headers = _http_headers(data.get("http", {}), base, path, lines)
    if "binding" not in data:  # transport settings only: a run without a host identity
        return replace(Profile.absent(), path=path, http_headers=headers, raw=data)
    binding = {**BINDING_DEFAULTS, **data["binding"]}
    binding["private_key_file"] = str(base / binding["private_key_file"])
    if not Path(binding["private_key_file"]).is_file():
        raise ProfileError(_at(path, lines, ("binding", "private_key_file"),
                               f"no such file: {binding['private_key_file']}"))
    return Profile(
        path=path,
        audience=data["target"]["audience"],
        binding=binding,
        http_headers=headers,
        scopes=tuple(_scope(entry) for entry in data.get("scopes", [])),
        purpose_ref=binding["purpose_ref"],
        raw=data,
        **_confirmation(data.get("confirmation", {})),
    )


def _confirmation(table: Mapping[str, Any]) -> dict[str, Any]:
    """The [confirmation] facts as Profile fields; the schema has checked them, absent keys keep the defaults."""
    out: dict[str, Any] = {}
    if "modes" in table:
        out["confirmation_modes"] = frozenset(table["modes"])
    if "reference_ttl_seconds" in table:
        out["reference_ttl_seconds"] = table["reference_ttl_seconds"]
    return out


def _http_headers(http: Mapping[str, Any], base: Path, path: Path, lines: TomlLines) -> dict[str, str]:
    headers = dict(http.get("headers", {}))
    if "bearer_token_file" in http:
        token_path = base / http["bearer_token_file"]
        try:
            headers["Authorization"] = "Bearer " + token_path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            raise ProfileError(_at(path, lines, ("http", "bearer_token_file"), f"cannot read {token_path}")) from None
    return headers


def _at(path: Path | str, lines: TomlLines, key_path: KeyPath, message: str) -> str:
    line = lines.line(key_path)
    return f"{path}:{line}: {dotted(key_path)}: {message}" if line else f"{path}: {dotted(key_path)}: {message}"


# -- what a schema error means, in the profile's words -------------------------------

_TOML_POSITION = re.compile(r"\s*\(at line (?P<line>\d+), column (?P<column>\d+)\)")
_TYPE_WORDS = {"boolean": "a boolean (true or false, unquoted)", "string": "a string", "integer": "an integer",
               "array": "an array", "object": "a table", "number": "a number"}


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"the string {json.dumps(value)[:60]}"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return type(value).__name__  # TOML dates and times


def _explain(error: Any, at: KeyPath) -> list[tuple[KeyPath, str]]:  # noqa: PLR0911 - one return per schema keyword
    """(key path, message) pairs for one schema error."""
    schema, instance = error.schema, error.instance
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        known = sorted(schema.get("properties", {}))
        out = []
        for key in sorted(set(instance) - set(known)):
            guess = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {spoken(guess[0])}?" if guess else f"this table takes {', '.join(known)}"
            out.append(((*at, key), f"unknown key ({hint})"))
        return out
    if error.validator == "dependentRequired" and isinstance(instance, dict):
        return [((*at, needed), f"required key is missing (a profile with [{key}] needs it)")
                for key, needs in error.validator_value.items() if key in instance
                for needed in needs if needed not in instance]
    if error.validator == "required":
        missing = [k for k in error.validator_value if isinstance(instance, dict) and k not in instance]
        return [((*at, k), "required key is missing") for k in missing] or [(at, error.message)]
    if error.validator == "type":
        expected = error.validator_value
        names: list[str] = expected if isinstance(expected, list) else [expected]
        words = " or ".join(_TYPE_WORDS.get(t, t) for t in names)
        return [(at, f"must be {words}, not {_kind(instance)}")]
    if error.validator == "enum":
        return [
            (at, f"must be one of {', '.join(json.dumps(v) for v in error.validator_value)}, not {_kind(instance)}")
        ]
    if error.validator == "minimum":
        return [(at, f"must be at least {error.validator_value}, not {instance}")]
    if error.validator == "maximum":
        return [(at, f"must be at most {error.validator_value}, not {instance}")]
    if error.validator == "minItems":
        return [(at, "must not be empty")]
    if error.validator == "minLength":
        return [(at, "must not be empty")]
    if error.validator == "uniqueItems":
        return [(at, "lists an item twice")]
    return [(at, error.message)]


# -- key paths and their lines ---------------------------------------------------------

KeyPath = tuple[str | int, ...]
_BARE = re.compile(r"[A-Za-z0-9_-]+")


def dotted(key_path: KeyPath) -> str:
    """scopes[0].principals."agent one" — a key path as a reader writes it."""
    out = ""
    for part in key_path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            name = part if _BARE.fullmatch(part) else json.dumps(part)
            out += f".{name}" if out else name
    return out


def _split_key(text: str) -> tuple[tuple[str, ...], str] | None:
    """A dotted TOML key at the start of text: (its parts, the rest of the text), or None."""
    parts: list[str] = []
    rest = text.lstrip()
    while True:
        if rest.startswith('"'):
            match = re.match(r'"((?:[^"\\]|\\.)*)"', rest)
            if not match:
                return None
            try:
                parts.append(json.loads(match.group(0)))
            except ValueError:
                parts.append(match.group(1))
        elif rest.startswith("'"):
            match = re.match(r"'([^']*)'", rest)
            if not match:
                return None
            parts.append(match.group(1))
        else:
            match = _BARE.match(rest)
            if not match:
                return None
            parts.append(match.group(0))
        rest = rest[match.end():].lstrip()
        if not rest.startswith("."):
            return tuple(parts), rest
        rest = rest[1:].lstrip()


class TomlLines:
    """The line on which each key path of a TOML text is defined, found by a light scan.

    tomllib reports no positions, so the scan follows table headers, arrays of
    tables and ``key =`` lines. A path defined inside an inline value (an
    inline table, a multi-line array) falls back to the nearest key above it.
    """

    def __init__(self, text: str) -> None:
        self.lines: dict[KeyPath, int] = {}
        arrays: dict[tuple[str, ...], int] = {}  # array-of-tables path -> index of its last element
        table: KeyPath = ()
        depth = 0  # open brackets of a multi-line value: its lines define no key
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if depth > 0:
                depth = max(0, depth + _brackets(line))
                continue
            if not line or line.startswith("#"):
                continue
            if line.startswith("["):
                is_array = line.startswith("[[")
                parsed = _split_key(line[2:] if is_array else line[1:])
                if parsed is None:
                    continue
                names = parsed[0]
                if is_array:
                    arrays[names] = arrays.get(names, -1) + 1
                table = self._resolve(names, arrays)
                self.lines.setdefault(table[:-1] if is_array else table, number)
                self.lines[table] = number
                continue
            parsed = _split_key(line)
            if parsed is None or not parsed[1].startswith("="):
                continue
            self.lines.setdefault((*table, *parsed[0]), number)
            depth = max(0, _brackets(parsed[1][1:]))

    @staticmethod
    def _resolve(names: tuple[str, ...], arrays: Mapping[tuple[str, ...], int]) -> KeyPath:
        path: list[str | int] = []
        for i, name in enumerate(names):
            path.append(name)
            if names[: i + 1] in arrays:
                path.append(arrays[names[: i + 1]])
        return tuple(path)

    def line(self, key_path: KeyPath) -> int | None:
        for end in range(len(key_path), 0, -1):
            if key_path[:end] in self.lines:
                return self.lines[key_path[:end]]
        return None


def _brackets(value: str) -> int:
    """How many brackets or braces a value line leaves open (strings and comments ignored)."""
    value = re.sub(r'"(?:[^"\\]|\\.)*"|\'[^\']*\'', "", value).split("#", 1)[0]
    return value.count("[") + value.count("{") - value.count("]") - value.count("}")
