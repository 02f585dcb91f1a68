"""The reference server's admission policies.

``SecretScan`` is the default. Contract §4 (EMC-SEC-001) lists what must never be
stored: secrets, credentials, tokens, API or signing keys, passwords, connection
strings, ``.env`` values, session cookies and the host's own binding
credentials. A candidate carrying any of them anywhere in its capture is
rejected before it is admitted. The other policies give a fixed answer, for
tests and for hosts that adjudicate every candidate by hand.

Detection rules, so that a false positive or a miss can be argued from here:

* Families that recognise a token by its own shape (key prefixes, PEM armour,
  JWTs) match on the shape alone.
* Families that recognise a secret by its *name* (``password=…``, ``DB_TOKEN=…``,
  cookies, URLs with a password) capture the value in a group called ``value``.
  The hit counts unless that value is a placeholder: empty, a reference
  (``$VAR``, ``${VAR}``, ``%s``, ``{{x}}``, ``<x>``, ``[REDACTED]``), a mask
  (``****``), a literal such as ``null``/``true``, a file path (the secret lives
  in the file), a dotted name in code (``self.password``), or an identifier
  named after what it holds (``password=password``, ``token=access_token``).
  Code such as ``password=getpass()`` or ``token=env["X"]`` is not captured at all.
* Where prose is likely (``Password: required for admins``, ``Bearer tokens
  expire``), the capture is a group called ``token`` and it must also look
  random: at least 8 characters with a digit, an inner capital or a symbol.
  So ``password: hunter2xyz`` is rejected, while a shorter value after a bare
  colon counts only when quoted (``password: "hunter2"``).
* ``.env`` lines count only when the sensitive word ends the name
  (``DB_PASSWORD``, ``STRIPE_SECRET_KEY``, also ``SECRET_KEY_BASE``-style
  encodings): ``MAX_TOKEN_COUNT=5`` or ``PASSWORD_MIN_LENGTH=12`` name a
  property of a secret, not the secret, whatever their value; a digit-only
  value under a name that does end in the word (``DB_PASSWORD=123456``) is a
  secret like any other.
* The scan is linear in the input: names start only where a run of name
  characters starts, and repetitions that could backtrack are possessive or bounded.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from types import MappingProxyType
from typing import Any, Final

from ._ports import AdmissionDecision, AdmissionPolicy, CandidateView, Decision


@dataclass(frozen=True)
class ScopePolicy:
    """The host's policy for one scope, from the server configuration: its admission policy among the rest."""

    admission: AdmissionPolicy
    allow_retain: bool
    retention_ceiling: timedelta
    consented_families: frozenset[str]
    confirm_capture: bool
    confirm_admission: bool
    confirmation_ttl: timedelta

# Names under which a secret is commonly assigned in code, config and prose.
_SECRET_NAME = (
    r"(?:password|passwd|pwd|passphrase|secret|token|apikey|api[_-]?key"
    r"|(?:access|secret|private|signing|encryption|master)[_-]?key)"
)
# An unquoted value, or a ${VAR} reference; a call or subscript right after it
# (getpass(), env["X"]) makes it code.
_BARE_VALUE = r"""\$\{[^}\s]*\}|[^\s"'`,;&(){}\[\]<>]++(?![(\[])"""
_QUOTED_VALUE = r""""[^"\n]*"|'[^'\n]*'"""
# Header and token alphabets: base64, base64url and the RFC 6750 token68 set.
_TOKEN68 = r"[A-Za-z0-9._~+/=-]"

PATTERNS: Final[Mapping[str, re.Pattern[str]]] = MappingProxyType(
    {
        # PEM, OpenSSH and PGP private-key armour: the header alone says key material follows.
        "private_key": re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"),
        # AWS access key ids, long-term (AKIA) and temporary (ASIA): half of a credential pair.
        "aws_access_key_id": re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])"),
        # GitHub's documented prefixes: classic PAT, OAuth, user/server-to-server, refresh; fine-grained PAT.
        "github_token": re.compile(r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"),
        # Slack app, bot, user, refresh and legacy tokens.
        "slack_token": re.compile(r"(?<![A-Za-z0-9])xox[abprs]-[A-Za-z0-9-]{10,}"),
        # Stripe live secret and restricted keys; publishable keys are public by design.
        "stripe_secret_key": re.compile(r"(?<![A-Za-z0-9_])[sr]k_live_[A-Za-z0-9]{16,}"),
        # Google API keys have a fixed prefix and length.
        "google_api_key": re.compile(r"(?<![A-Za-z0-9_-])AIza[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])"),
        # sk-, sk-proj-, sk-ant-… keys. A digit is required so that long hyphenated slugs pass.
        "openai_style_key": re.compile(r"(?<![A-Za-z0-9_-])sk-(?=[A-Za-z0-9_-]*[0-9])[A-Za-z0-9_-]{20,}"),
        # A JWT is a bearer credential: a base64url JSON header ("eyJ" is '{"') and two more segments.
        "jwt": re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
        # An Authorization header with its credential (Basic carries user:password in base64).
        "authorization_header": re.compile(
            rf"(?i)\bauthorization[\"']?[ \t]*[:=][ \t]*[\"']?(?:bearer|basic|token)[ \t]+(?P<token>{_TOKEN68}{{8,}})"
        ),
        # "Bearer <token>" anywhere, e.g. a curl line quoted in a decision.
        "bearer_token": re.compile(rf"(?i)(?<![A-Za-z0-9_-])bearer[ \t]+(?P<token>{_TOKEN68}{{20,}})"),
        # scheme://user:password@host: database, broker and HTTP URLs with a password in them.
        "credentials_url": re.compile(
            r"(?i)(?<![A-Za-z0-9+.-])[a-z][a-z0-9+.-]*://[^\s:/?#@\"'<>]*:(?P<value>[^\s/?#@\"'<>]+)@[^\s/?#@\"'<>]"
        ),
        # name=value, name => value, "name": "value"; an unquoted "name: value" is prose-prone, so token.
        # Names start only at the start of a run, which keeps the scan linear on adversarial input.
        "password_assignment": re.compile(
            rf"(?i)(?<![A-Za-z0-9_.-])(?:[a-z0-9]++[_.-])*{_SECRET_NAME}[\"']?[ \t]*"
            rf"(?:(?:=>|=(?!=)|:(?=[ \t]*[\"']))[ \t]*(?P<value>{_QUOTED_VALUE}|{_BARE_VALUE})"
            rf"|:[ \t]*(?P<token>{_BARE_VALUE}))"
        ),
        # .env lines whose name ends in the sensitive word (optionally plus an encoding suffix). KEY names
        # that are public or structural by design (PUBLIC_KEY, PUBLISHABLE_KEY, PRIMARY_KEY, SORT_KEY…) pass.
        "env_secret": re.compile(
            r"(?m)^[ \t]*(?:export[ \t]+)?(?:[A-Z0-9]+_)*"
            r"(?:(?<!PUBLIC_)(?<!PUBLISHABLE_)(?<!SITE_)(?<!PRIMARY_)(?<!FOREIGN_)(?<!SORT_)(?<!PARTITION_)"
            r"(?<!HASH_)(?<!RANGE_)(?<!CACHE_)(?<!IDEMPOTENCY_)KEYS?"
            r"|SECRETS?|TOKENS?|PASSWORD|PASSWD|PASS|PWD|PASSPHRASE|CREDENTIALS?|APIKEY)"
            rf"(?:_(?:BASE|B64|BASE64|HEX|PEM|JSON|RAW))?[ \t]*=(?!=)[ \t]*(?P<value>{_QUOTED_VALUE}|{_BARE_VALUE})"
        ),
        # Cookie / Set-Cookie headers carrying a session cookie (session, sessionid, PHPSESSID, JSESSIONID,
        # ASP.NET_SessionId, laravel_session, connect.sid, sid…). Pairs are skipped whole and never past
        # the next header, and each name is read once (lookahead, then possessive): the scan stays linear.
        "session_cookie": re.compile(
            r"(?im)\b(?:set-)?cookie[\"']?[ \t]*:[ \t]*[\"']?"
            r"(?:(?![^;\n]*?cookie[\"']?[ \t]*:)[^;\n]{0,4096}+;[ \t]*){0,64}?"
            r"(?=[A-Za-z0-9_.-]*?sess|(?:[A-Za-z0-9_-]+\.)?sid=)[A-Za-z0-9_.-]++=(?P<value>[^;\s,\"']+)"
        ),
        # The host's own binding credential, by its header / _meta key name.
        "host_binding": re.compile(
            rf"(?i)sentropic\.engram\.memory/host-binding[\"']?[ \t]*[:=]?[ \t]*[\"']?(?P<token>{_TOKEN68}{{8,}})"
        ),
    }
)

# For each family, lowercase fragments of which any match contains at least one. A candidate whose ASCII text
# holds none of them cannot match that family, so its pattern is not run. Applied only to ASCII text: there,
# lowercasing is exactly what case-insensitive matching does (non-ASCII text runs every pattern).
_NEEDS: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        "private_key": ("-----begin ",),
        "aws_access_key_id": ("akia", "asia"),
        "github_token": ("gh", "github_pat_"),
        "slack_token": ("xox",),
        "stripe_secret_key": ("k_live_",),
        "google_api_key": ("aiza",),
        "openai_style_key": ("sk-",),
        "jwt": ("eyj",),
        "authorization_header": ("authorization",),
        "bearer_token": ("bearer",),
        "credentials_url": ("://",),
        "password_assignment": ("pass", "pwd", "secret", "token", "key"),
        "env_secret": ("key", "secret", "token", "pass", "pwd", "credential"),
        "session_cookie": ("cookie",),
        "host_binding": ("host-binding",),
    }
)

# Values that stand for a secret without being one (see the module docstring).
_PLACEHOLDER = re.compile(
    r"""(?ix)
    ^(?: $
       | \$[a-z_{(]                                     # $VAR ${VAR} $(cmd)
       | %(?:\([a-z_]+\))?[sdr] $                        # %s %(password)s
       | \{\{[^{}]*\}\} $ | \{[\w.-]*\} $                  # {{ password }} {password}
       | <[^<>]*> $ | \[[\w\s-]*\] $                       # <your-key> [REDACTED]
       | ([*x•.…-])\1* $                                # a mask: ****, xxxx, ...
       | (?:null|none|nil|undefined|true|false|yes|no|on|off
           |redacted|masked|hidden|omitted|placeholder|n/a|tbd|todo) $
       | (?:~|\.{1,2})? / [\w.-]+ (?:/[\w.-]+)* /? $    # a file path: the secret lives in the file
       | [a-z_]+ (?:\.[a-z_]+)+ $                       # a dotted name in code: self.password
       | (?:[a-z]+_)* (?:password|passwd|pass|pwd|secret|token|key|api_?key) (?:_[a-z]+)* $
    )""",
)
# Random-looking: a digit, an inner capital (camel or base64) or a symbol.
_RANDOMISH = re.compile(r"[0-9]|[a-z][A-Z]|[!@#$%^&*+=?~/\\|]")
_MIN_TOKEN = 8


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    return value.strip()


def _is_literal(value: str) -> bool:
    return _PLACEHOLDER.match(_unquote(value)) is None


def _looks_random(token: str) -> bool:
    token = _unquote(token)
    return len(token) >= _MIN_TOKEN and _RANDOMISH.search(token) is not None and _is_literal(token)


def _matches(pattern: re.Pattern[str], text: str) -> bool:
    for match in pattern.finditer(text):
        groups = match.groupdict()
        if groups.get("token") is not None:
            hit = _looks_random(groups["token"])
        elif groups.get("value") is not None:
            hit = _is_literal(groups["value"])
        else:
            hit = True
        if hit:
            return True
    return False


def _strings(node: Any) -> Iterator[str]:
    """Every string in a JSON-like tree: values, keys, and each ``"key": "value"`` pair,
    so that a secret named only by its key is still seen."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
            if not item.isascii():
                yield unicodedata.normalize("NFKC", item)  # full-width and compatibility look-alikes
        elif isinstance(item, Mapping):
            for key, value in item.items():
                if isinstance(key, str):
                    stack.append(key)
                    if isinstance(value, str):
                        stack.append(f'"{key}": "{value[:256]}"')
                stack.append(value)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def _decision(policy: AdmissionPolicy, decision: Decision) -> AdmissionDecision:
    return AdmissionDecision(decision=decision, policy_id=policy.policy_id, policy_version=policy.policy_version)


class AcceptAll:
    policy_id = "reference/accept"
    policy_version = "1"

    def decide(self, candidate: CandidateView) -> AdmissionDecision:
        return _decision(self, "accept")


class RejectAll:
    policy_id = "reference/reject"
    policy_version = "1"

    def decide(self, candidate: CandidateView) -> AdmissionDecision:
        return _decision(self, "reject")


class AlwaysAdjudicate:
    """Leaves every candidate to a human, as the upstream local administrator did."""

    policy_id = "reference/adjudicate"
    policy_version = "1"

    def decide(self, candidate: CandidateView) -> AdmissionDecision:
        return _decision(self, "adjudicate")


class SecretScan:
    """Rejects a candidate that carries a secret anywhere in its capture; accepts the rest."""

    policy_id = "reference/secret-scan"
    policy_version = "1"

    def findings(self, candidate: CandidateView) -> list[str]:
        """The families found, in table order; never the matched content."""
        texts = [*_strings(candidate.payload), *_strings(candidate.evidence)]
        joined = "\n".join(texts)
        folded = joined.lower() if joined.isascii() else None
        return [
            name
            for name, pattern in PATTERNS.items()
            if (folded is None or any(fragment in folded for fragment in _NEEDS[name]))
            and any(_matches(pattern, t) for t in texts)
        ]

    def decide(self, candidate: CandidateView) -> AdmissionDecision:
        return _decision(self, "reject" if self.findings(candidate) else "accept")


POLICIES: Final[Mapping[str, Callable[[], AdmissionPolicy]]] = MappingProxyType(
    {
        "accept": AcceptAll,
        "reject": RejectAll,
        "adjudicate": AlwaysAdjudicate,
        "secret-scan": SecretScan,
    }
)
DEFAULT_POLICY: Final = "secret-scan"


def policy_named(name: str) -> AdmissionPolicy:
    """A fresh policy by its short name; KeyError names the known ones."""
    try:
        factory = POLICIES[name]
    except KeyError:
        raise KeyError(f"unknown admission policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None
    return factory()
