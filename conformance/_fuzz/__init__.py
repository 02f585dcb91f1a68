"""Argument cases for the closed-schema checks, generated apart from any target.

Generation never talks to a server: every function here returns plain
``Case`` values, so the cases a run would send can be listed and read before
(or without) sending them::

    python -m engram_mcp.conformance._fuzz --tool engram_memory_capture --family utf8-boundaries
    python -m engram_mcp.conformance._fuzz --family schemathesis-negative --seed 7 --examples 25

Each case carries the verdict of the shared argument oracle
(``engram_mcp.contract.ArgumentOracle``) at the time it was built: valid, or
invalid with the error code a server must send. A case whose verdict depends on
the clock (an expiry) is judged again at the moment it is sent. An invalid case
that only a pin refuses names it in ``pins`` (see ``_pins``).

Schema-driven cases are drawn with hypothesis under a fixed seed, ``--examples``
draws per tool and mode, so the same seed gives the same cases on the same code
(see ``families/schemathesis.py`` for why not across versions). Just before
sending, a check may put the bound purpose into a fixture case and give a valid
mutation case an idempotency key of its own (``bind_purpose``, ``salted_key``);
neither ever changes a verdict. ``--full`` prints arguments exactly, in a form
``Case.from_json`` reads back.

Layout
------
``vocabulary``   tool names, characters of each UTF-8 width, digests (shared with tools/make_fixtures.py)
``paths``        paths into JSON values and copies edited at a path (shared with tools/make_fixtures.py)
``schema``       the advertised schema behind a path, and the contract limits cases are sized by
``case``         ``Case`` and the oracle's verdict on it (``judged``), what an SDK session cannot send
``bases``        valid bases with every optional member present, strings of a given byte size
``repair``       drawn positives made valid, the bound purpose put into a case
``registry``     the ``@family(name)`` decorator and ``FAMILIES``
``families/``    one module per family; each module's docstring says what it generates.
                 ``fixtures`` (the labelled corpus under fixtures/arguments/) and
                 ``schemathesis`` (``schemathesis-positive`` and ``-negative``, drawn under a seed)
                 take other inputs than a valid base, so they are called by name, not registered
``kept_draws``   schemathesis draws kept in the user's cache, keyed by everything that decides them
``generate``     ``cases(family, tool)`` for every family name, ``ALL_FAMILIES`` in their order
``markers``      arguments carrying a marker, for the no-reflection checks
``sending``      rewrites applied right before sending (``salted_key``), printable digests
``cli``          the inspection command above
"""

# This module is the package's face: it re-exports the names the checks and tests use.
# ruff: noqa: F401 - the names are imported here to be re-exported, not used

from __future__ import annotations

from .bases import (
    CURSOR,
    DEFAULT_PURPOSE,
    FAR_FUTURE,
    FILLERS,
    FIXTURE_PURPOSE,
    UNKNOWN_CANDIDATE,
    UNKNOWN_RECORD,
    base_arguments,
    canonical_size,
    fill,
    sized_capture,
    with_string,
)
from .case import LONE_SURROGATE, Case, judged, oracle, pinned_by, unsendable, utc_now
from .cli import main
from .families.capture_shape import capture_shape_cases
from .families.cross_references import cross_reference_cases
from .families.digests import DIGEST_NEAR_MISSES, digest_cases
from .families.fixtures import FIXTURE_SIZE_CAP, fixture_cases
from .families.host_owned import HOST_OWNED_NAMES, HOST_OWNED_SPELLINGS, host_owned_cases
from .families.identifiers import identifier_cases
from .families.instants import instant_cases
from .families.integers import integer_cases
from .families.nfc import nfc_cases
from .families.non_object import non_object_cases
from .families.null import null_cases
from .families.required import required_cases
from .families.schemathesis import _drawn, schemathesis_cases
from .families.size import size_cases
from .families.surrogates import surrogate_cases
from .families.utf8 import utf8_cases
from .families.zero_fractions import zero_fraction_cases
from .generate import ALL_FAMILIES, cases
from .markers import Planted, marker_cases
from .paths import (
    Path,
    array_paths,
    drop,
    edit,
    get_at,
    label_of,
    member_paths,
    object_paths,
    put,
    rename,
    string_paths,
)
from .registry import FAMILIES, Generator, family
from .repair import bind_purpose, repair
from .schema import (
    ARGUMENTS_MAX_BYTES,
    COMPONENTS_MAX,
    CONTRACT,
    MAX_SAFE,
    TEXT_MAX,
    byte_bounds,
    is_free_text,
    is_nfc_field,
    is_patterned,
    purpose_path,
    schema_at,
)
from .sending import describe, salted_key, shorten, with_salted_key
from .vocabulary import (
    ADMIT,
    ANGSTROM,
    CAPTURE,
    DIGEST_A,
    DIGEST_B,
    FORGET,
    GET,
    JAMO,
    NFD_E,
    SEARCH,
    TOOLS,
    WIDE,
    WITHDRAW,
)
