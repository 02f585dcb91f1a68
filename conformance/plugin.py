"""The conformance suite as a pytest plugin (public).

Installed, the package registers this module under the ``pytest11`` entry
point ``engram_mcp.conformance.plugin``; ``-p engram_mcp.conformance.plugin``
loads it where plugin autoloading is off. It stays idle, and light, until a
run names its target::

    pytest --pyargs engram_mcp.conformance.suite --target stdio:'my-server' --profile host.toml

This module only adds the options; with ``--target`` it loads the hooks and
fixtures (``_plugin``), which pull in the MCP client. ``run_suite`` runs the
suite in-process and returns an Outcome (the judged exit code and the Run);
``run_of(config)`` gives a session's Run.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import pytest

from engram_mcp.conformance import _defaults

if TYPE_CHECKING:
    from engram_mcp.conformance._plugin import Outcome, run_of, run_suite
    from engram_mcp.conformance._run import Result, Run, ServerInfo

__all__ = ["Outcome", "Result", "Run", "ServerInfo", "run_of", "run_suite"]
HOOKS = "engram_mcp.conformance._plugin"
# Calls per era that exploration (explore.*) makes: the default budget, and the one --deep raises it to.
EXPLORE_DEFAULT, EXPLORE_DEEP, REPLAY_CHECK = _defaults.EXPLORE_DEFAULT, _defaults.EXPLORE_DEEP, _defaults.REPLAY_CHECK
# Public names, imported on first use so that an autoloaded plugin costs nothing in unrelated pytest runs.
_LAZY = {"Outcome": HOOKS, "run_of": HOOKS, "run_suite": HOOKS, "Result": "engram_mcp.conformance._run",
         "Run": "engram_mcp.conformance._run", "ServerInfo": "engram_mcp.conformance._run"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__} has no attribute {name}")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("engram", "Engram memory over MCP conformance")
    group.addoption("--target", help="stdio:CMD or an http(s):// URL of the MCP endpoint under test")
    group.addoption("--profile", help="the target's conformance profile (TOML, spec/profile.md); without one, only "
                                      "the checks that need no host identity run")
    group.addoption("--era", choices=["legacy", "modern", "both"], default="both",
                    help="MCP protocol eras to test: legacy (initialize, up to 2025-11-25), modern (2026-07-28)")
    group.addoption("--select", action="append", default=[],
                    help="run only checks whose id or requirement id starts with this")
    group.addoption("--tool", action="append", default=[], metavar="NAME",
                    help="run only the checks whose cases call this tool, and those that judge every tool served")
    group.addoption("--fail-fast", action="store_true", help="stop at the first check that fails")
    group.addoption("--seed", type=int, default=0, help="seed for generated cases (0: a fixed default)")
    group.addoption("--examples", type=int, default=25, help="generated cases per tool and mode")
    group.addoption("--score-unverified", action="store_true",
                    help="score requirements the contract marks unverified too")
    group.addoption("--expected-failures",
                    help="baseline file: check ids (check, check@era or check@era[case]) expected to fail")
    group.addoption("--report-dir", help="write report.jsonl, certificate.md, report.html and badge.json here")
    group.addoption("--call-timeout", type=float, default=30.0, help="seconds to wait for any one reply")
    group.addoption("--level", choices=["contract", "pins"], default="contract", type=_defaults.level_name,
                    help="contract: score the contract's requirements and the wiring the harness needs as host; "
                         "pins: score this project's pins too")
    group.addoption("--deep", action="store_true", help="also run the checks that wait long (a 300 s confirmation "
                                                         "TTL, expiry windows) instead of leaving them not exercised")
    group.addoption("--explore", type=int, default=None, metavar="N",
                    help=f"calls per era in generated call sequences (default {EXPLORE_DEFAULT}, "
                         f"{EXPLORE_DEEP} with --deep; 0 turns exploration off)")
    group.addoption("--explore-trace", help="write every explored call and its judgement to this JSON lines file")
    group.addoption("--replica", action="append", default=[], metavar="URL",
                    help="another endpoint of the same service (an HTTP replica): concurrent clients are spread "
                         "over the target and its replicas")
    group.addoption("--replay", help="re-run the counterexample in this file (conformance replay)")
    group.addoption("--explore-shrink", type=int, default=60, metavar="N",
                    help="executions a failed exploration may spend shrinking its counterexample (0: none)")


NEEDS_TARGET = ("the Engram conformance suite judges a target: give --target (stdio:COMMAND or an http(s) URL) and, "
                "for every check that needs a host identity, --profile FILE (or run `conformance --target …`)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Idle means idle: another project's tests are left alone, but the suite collected without a target is a
    usage error, said once, not one missing-fixture error per check."""
    if not config.getoption("--target") and any(item.get_closest_marker("engram_check") for item in items):
        raise pytest.UsageError(NEEDS_TARGET)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "engram_check(id, requirements): a conformance check")
    config.addinivalue_line("markers", "engram_sessions(*kinds): extra sessions the check uses (raw, "
                            "without-elicitation, watched, concurrent), opened in the background once the preflight "
                            "has passed")
    if config.getoption("--target"):
        config.pluginmanager.import_plugin(HOOKS)  # a no-op when -p loaded it already
