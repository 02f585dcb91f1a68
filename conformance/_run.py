"""The run model: one conformance run, its identity and what every check concluded.

The plugin fills it; reports, the console and the certificate read it. It lives
apart from the plugin so that readers never import pytest hooks (and the
``_report`` -> plugin import cycle is gone).

Fields readers rely on (beyond the run's options):

- ``started_at`` / ``finished_at``: aware UTC datetimes (``finished_at`` is
  None until the session ends);
- ``server_info``: era -> ServerInfo, what the target called itself in its
  opening exchange (``serverInfo`` of initialize, or the serverInfo ``_meta``
  of server/discover); ``server_identity`` joins them into one line;
- ``select``: the ``--select`` prefixes, in the order given (``selected`` says
  whether there were any);
- ``profile_digest``: ``sha256:<hex>`` of the profile file's bytes, None
  without a profile;
- ``harness_version``: the installed package's version;
- ``transports``: MCP transport names, ``stdio`` or ``streamable-http``;
- ``target_identity``: the target as reports and the certificate name it (``target.label``, or
  ``reference (NAME VERSION)`` for the bundled reference, whose command names a scratch directory);
- ``exit_code``: the judged verdict as an exit code, set when the session ends.

A Result's ``case`` tells repeated checks apart: the parametrised case of the
check without its era (``forget-content``, ``tool2-limit-3``), or None when the
check runs once per era. ``Result.label`` is ``check@era[case]``. A failing Result's
``message`` is its one-line verdict and ``detail`` the rest of what the check said
(the offending results it names), which the reports show as evidence.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engram_mcp.conformance._background import Background
from engram_mcp.conformance._checks import Status
from engram_mcp.conformance._connect import ERAS, Connection, Era, Target
from engram_mcp.conformance._defaults import harness_version
from engram_mcp.conformance._findings import is_bundled_reference
from engram_mcp.conformance._fuzz.vocabulary import GET
from engram_mcp.conformance._head_start import HeadStarts
from engram_mcp.conformance._host import ConfirmationReferences, Confirmer, HostBinding
from engram_mcp.conformance._pool import OneAtATime, SessionPool
from engram_mcp.conformance._profile import Profile
from engram_mcp.conformance._raw import RawSession
from engram_mcp.conformance._tracker import Tracker
from engram_mcp.conformance._words import spoken

CONCURRENT_CLIENTS = 3  # the sessions explore.concurrent drives side by side
# The transport names the MCP specification uses, per kind of target.
TRANSPORTS = {"stdio": "stdio", "http": "streamable-http"}
_DISCOVER_SERVER_INFO = "io.modelcontextprotocol/serverInfo"  # where server/discover results carry it


def file_digest(path: Path) -> str:
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


def profile_digest(profile: Profile | None) -> str | None:
    """The digest of the profile file as given, so a report names exactly the host wiring it ran under."""
    if profile is None or profile.path is None:
        return None
    return file_digest(profile.path)


def as_era(era: str) -> Era:
    """A protocol era by name; checks receive theirs as a plain pytest parameter."""
    for known in ERAS:
        if known == era:
            return known
    raise ValueError(f"unknown protocol era {spoken(era)}")


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class ServerInfo:
    """What the target said it is (Implementation: name and version; title when it gives one)."""

    name: str
    version: str
    title: str | None = None

    @classmethod
    def from_handshake(cls, era: str, handshake: dict[str, Any]) -> ServerInfo | None:
        found = handshake.get("serverInfo") if era == "legacy" else None
        if not isinstance(found, dict):
            meta = handshake.get("_meta")
            found = meta.get(_DISCOVER_SERVER_INFO) if isinstance(meta, dict) else None
        if not isinstance(found, dict) or not isinstance(found.get("name"), str):
            return None
        title = found.get("title")
        return cls(found["name"], str(found.get("version", "")), title if isinstance(title, str) else None)

    def __str__(self) -> str:
        return f"{self.name} {self.version}".strip()


@dataclass
class Result:
    check_id: str
    requirements: tuple[str, ...]
    era: str | None
    status: Status
    nodeid: str
    duration: float
    message: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    pins: dict[str, list[str]] = field(default_factory=dict)  # profile requirement -> failed pin messages
    case: str | None = None  # the parametrised case without its era; None when the check runs once per era
    detail: str = ""  # a failure's lines after its one-line verdict (message), bounded: see _status.failure_detail
    raw: Status | None = None  # what the check's own assertions concluded, when the status shown differs (PIN)
    tools: tuple[str, ...] = ()  # the Engram tools this case calls (its declaration, ``_needs``)
    missing: tuple[str, ...] = ()  # those the run could not give it (not served, or granted to no principal)

    @property
    def not_applicable(self) -> bool:
        """The requirement has nothing to exercise in this run (N/A): never a gap."""
        return self.underlying is Status.NA

    @property
    def underlying(self) -> Status:
        return self.raw or self.status

    @property
    def family(self) -> str:
        """The check's family: its id up to the first dot (``search`` for ``search.stale-cursor``)."""
        return self.check_id.split(".", 1)[0]

    @property
    def label(self) -> str:
        """Readable and unique within a run: ``check@era[case]``."""
        return self.check_id + (f"@{self.era}" if self.era else "") + (f"[{self.case}]" if self.case else "")


@dataclass
class Run:
    """One conformance run: the target, the host, the connections and what every check concluded."""

    target: Target
    profile: Profile
    host: HostBinding
    confirmer: Confirmer
    eras: tuple[Era, ...]
    seed: int
    examples: int
    strict: bool
    baseline: frozenset[str]
    report_dir: Path | None
    timeout: float
    level: str = "contract"  # which requirements are scored: contract (+ wiring), or profile (everything)
    deep: bool = False  # run the checks that wait long (confirmation TTL, expiry windows)
    explore: int = 0  # calls per era in generated call sequences (0: exploration off)
    explore_trace: Path | None = None  # where every explored call is written, when asked
    replicas: tuple[Target, ...] = ()  # other endpoints of the same service, for concurrent clients
    replay: Path | None = None  # a counterexample file to re-run (conformance replay)
    explore_shrink: int = 60  # executions a failed exploration may spend shrinking its counterexample
    selected: bool = False  # a --select run: a partial report, never a certificate
    select: tuple[str, ...] = ()  # the --select prefixes
    tools: tuple[str, ...] = ()  # the --tool names: only the checks of these tools run
    fail_fast: bool = False  # --fail-fast: the run stops at the first check that fails
    started_at: datetime = field(default_factory=utc_now)
    finished_at: datetime | None = None
    server_info: dict[str, ServerInfo] = field(default_factory=dict)  # era -> what the target called itself
    profile_digest: str | None = None
    harness_version: str = field(default_factory=harness_version)
    transports: tuple[str, ...] = ()  # filled from the target when left empty
    exit_code: int | None = None  # the judged verdict, once the session has ended
    connections: dict[str, Connection] = field(default_factory=dict)
    extra: list[Connection] = field(default_factory=list)
    without_elicitation: dict[str, Connection] = field(default_factory=dict)  # era -> the one such extra session
    ahead: OneAtATime = field(init=False)  # opens the sessions opened ahead, one at a time
    pool: SessionPool[Connection] = field(init=False)  # sessions opened ahead for the concurrent and background ones
    unreachable: str | None = None
    unsupported_eras: dict[str, str] = field(default_factory=dict)  # era -> why the target refused it
    notes: list[str] = field(default_factory=list)  # what the preflight learned that the verdict alone does not say
    profile_refused: bool = False  # the target refuses every binding of the profile: nothing was judged
    not_engram: str | None = None  # why the target is no Engram memory server at all (none of the six tools)
    results: list[Result] = field(default_factory=list)
    raw_sessions: dict[str, RawSession] = field(default_factory=dict)
    watched_sessions: dict[str, RawSession] = field(default_factory=dict)  # era -> the transport checks' session
    _raw_lock: threading.Lock = field(default_factory=threading.Lock)
    _watched_lock: threading.Lock = field(default_factory=threading.Lock)  # apart: a raw session opens meanwhile
    _extra_lock: threading.Lock = field(default_factory=threading.Lock)
    _closed: bool = False  # the run has ended: no session opens any more
    references: ConfirmationReferences | None = None  # the host-reference mode, when the profile declares it
    head_starts: HeadStarts = field(default_factory=HeadStarts)  # checks opened early so their waits overlap
    background: Background = field(default_factory=Background)  # checks run whole on a session of their own
    clocks_begun: set[str] = field(default_factory=set)  # eras whose head starts and background checks have begun
    tracker: Tracker | None = None  # the contract model judging every tools/call, when the run has a host identity
    # Which of the six tools the target serves (``_preflight.learn_served``): True, False, or None when the harness
    # could not tell (no profile, or no principal granted the tool); how it was learnt, in words, beside it.
    served: dict[str, bool | None] = field(default_factory=dict)
    served_how: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.transports:
            self.transports = (TRANSPORTS.get(self.target.kind, self.target.kind),)
        if self.profile_digest is None:
            self.profile_digest = profile_digest(self.profile)
        self.ahead = OneAtATime("sessions-opened-ahead")  # every session opened before a check asks for it
        self.pool = SessionPool(self._open_pooled, self.ahead.submit)

    @property
    def target_identity(self) -> str:
        """The target as the reports and the certificate name it: its stdio command or URL; for
        ``--target reference``, whose command names a scratch directory gone after the run, the stable
        ``reference (NAME VERSION)`` with the name and version the server gave (just ``reference`` when
        it gave none)."""
        if is_bundled_reference(self.target.label):
            return f"reference ({self.server_identity})" if self.server_identity else "reference"
        return self.target.label

    @property
    def server_identity(self) -> str | None:
        """One line for banners: the name and version the target gave (per era when they differ)."""
        named = {era: str(info) for era, info in self.server_info.items()}
        if not named:
            return None
        if len(set(named.values())) == 1:
            return next(iter(named.values()))
        return "; ".join(f"{era}: {text}" for era, text in named.items())

    def connection(self, era: str) -> Connection:
        return self.connections[era]

    def open_extra(self, era: str, *, elicitation: bool) -> Connection:
        """Another session, e.g. one that declares no elicitation capability; closed with the run."""
        conn = Connection(self.target, as_era(era), self.confirmer, elicitation=elicitation, timeout=self.timeout,
                          tracker=self.tracker)
        conn.open()
        self.extra.append(conn)
        return conn

    def raw(self, era: str) -> RawSession:
        """A raw JSON-RPC session in this era, for what no SDK session can carry (opened once)."""
        with self._raw_lock:
            if self._closed:
                raise RuntimeError("the run is over: no raw session opens now")
            if era not in self.raw_sessions:
                session = RawSession(self.target, as_era(era), self.timeout)
                try:
                    session.open()
                except BaseException:
                    session.close()  # a target that started and then failed the handshake is not left running
                    raise
                self.raw_sessions[era] = session
            return self.raw_sessions[era]

    def watched(self, era: str) -> RawSession:
        """A fresh raw session in this era watched from the target's first byte, then closed: what the target wrote
        while it listed its tools, answered one unbound call and exited (run once per era, for the transport checks).
        """
        with self._watched_lock:
            if self._closed:
                raise RuntimeError("the run is over: no raw session opens now")
            if era not in self.watched_sessions:
                # A process of its own: a banner is written before any session the run shares exists.
                session = RawSession(self.target, as_era(era), self.timeout)
                try:
                    session.open()
                    session.list_tools({})
                    session.call(GET, {}, {})
                finally:
                    session.close()
                self.watched_sessions[era] = session
            return self.watched_sessions[era]

    def background_session(self, era: str) -> Connection:
        """A session of its own for one background check (``_background``), which answers elicitations: one from
        the pool when it has one, else opened outside the lock, so that the background checks' sessions open side
        by side."""
        return self.concurrent_session(era)

    def concurrent_session(self, era: str, target: Target | None = None) -> Connection:
        """A session of its own for one concurrent client, with the target or a replica of it; it answers
        elicitations. One from the pool (``reserve_sessions``) when it has one for the target; else opened outside
        the lock, so that several open side by side; one opened as the run closes is closed too."""
        if target is None or target == self.target:
            lent = self.pool.borrow(era)
            if lent is not None:
                lent.client, lent.confirm_by_reference, lent.recorder = "session", None, None  # as if new
                return lent
        with self._extra_lock:
            if self._closed:
                raise RuntimeError("the run is over: no session opens now")
        return self._open_kept(target or self.target, era)

    def give_back(self, era: str, sessions: list[Connection]) -> None:
        """Return the concurrent clients' sessions to the pool for the background checks, those still sound: with
        the target itself over stdio (a server may end an HTTP session left idle), and whose last call was
        answered (none may still be at work in the server)."""
        for conn in sessions:
            if conn.target == self.target and self.target.kind == "stdio" and not conn.consecutive_timeouts:
                self.pool.give_back(era, conn)

    def reserve_sessions(self, era: str, count: int) -> None:
        """Have ``count`` sessions of the pool open ahead in ``era`` on a stdio target (over HTTP they open when
        asked for: a server may end a session left idle)."""
        if self.target.kind == "stdio" and era in self.connections:
            self.pool.reserve(era, count)

    def session_without_elicitation(self, era: str) -> Connection:
        """The one extra session per era that declares no elicitation capability (opened once)."""
        with self._extra_lock:
            if self._closed:
                raise RuntimeError("the run is over: no session opens now")
            if era not in self.without_elicitation:
                self.without_elicitation[era] = self.open_extra(era, elicitation=False)
            return self.without_elicitation[era]

    def warm(self, kinds: set[str]) -> None:
        """Open the extra sessions of these kinds (raw, without-elicitation, watched, concurrent) for every era
        spoken, in the background and one at a time (``_pool.OneAtATime``), so their targets start while checks
        run; a failure to open is met again (and reported) by the check that asks for the session."""
        openers = {"raw": self.raw, "without-elicitation": self.session_without_elicitation, "watched": self.watched}
        for era in list(self.connections):  # in the order the checks will ask for them
            for kind in ("raw", "without-elicitation", "watched"):
                if kind in kinds:
                    self.ahead.submit(functools.partial(openers[kind], era))
            if "concurrent" in kinds and self.explore:
                self.reserve_sessions(era, CONCURRENT_CLIENTS)

    def _open_pooled(self, era: str) -> Connection:
        return self._open_kept(self.target, era)

    def _open_kept(self, target: Target, era: str) -> Connection:
        """A new session that answers elicitations, kept to be closed with the run (closed at once if it ends)."""
        conn = Connection(target, as_era(era), self.confirmer, elicitation=True, timeout=self.timeout,
                          tracker=self.tracker)
        conn.open()
        with self._extra_lock:
            if not self._closed:
                self.extra.append(conn)
                return conn
        conn.close()
        raise RuntimeError("the run is over: no session opens now")

    def close(self) -> None:
        # Waits for a session being opened in the background, so that it is closed too.
        with self._raw_lock, self._extra_lock, self._watched_lock:
            self._closed = True
        self.ahead.close()
        self.pool.close()
        # Side by side: each waits for its target process to exit.
        sessions: list[Connection | RawSession] = [*self.connections.values(), *self.extra,
                                                   *self.raw_sessions.values()]
        closing = [threading.Thread(target=session.close, name="close-session") for session in sessions]
        for thread in closing:
            thread.start()
        for thread in closing:
            thread.join()
