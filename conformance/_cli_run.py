"""The main run's command line: its options, and the suite run they become.

Shared by ``conformance`` itself and the subcommands that run the suite on its behalf (``replay``, ``diff``).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from engram_mcp.conformance._defaults import (
    ATTESTATION_FILE,
    EXPLORE_DEEP,
    EXPLORE_DEFAULT,
    check_ids,
    harness_version,
    level_name,
    modules_for,
)
from engram_mcp.conformance._ids import read_baseline, requirement_ids, unknown_baseline_errors, unknown_prefix_errors
from engram_mcp.conformance._needs import ERAS, TOOLS, short, tool_name
from engram_mcp.contract import load
from engram_mcp.contract._words import quoted

if TYPE_CHECKING:
    from engram_mcp.conformance._run import Run

DESCRIPTION = f"conformance: certify an MCP endpoint against Engram memory over MCP {load().version}."
EPILOG = """exit codes:
  0  conformant: every scored MUST of the level was exercised and passed in every era the target speaks
     (with --expected-failures: no failure beyond the baseline)
  1  a scored MUST failed
  2  usage error (among them an id given to --select, --expected-failures or explain that names nothing)
  3  target unreachable, profile refused or not fitting the target, or environment error
  4  stale baseline: an expected failure now passes
  5  incomplete: a scored MUST was left SKIP, BLOCKED or not run (every --select run is at best incomplete)
  6  not an Engram memory server: the target answers MCP but offers none of the six tools

subcommands: 'conformance list', 'conformance explain ID', 'conformance keygen FILE',
'conformance replay FILE --target T' (exit 1: the counterexample still fails, 0: it no longer does),
'conformance diff --target A --target B' (exit 1: the first step where their answers diverge),
'conformance verify-certificate FILE --key PUBLIC [--report report.jsonl]',
'conformance sign REPORT_DIR --key KEY' (sign after the run, so the target never runs beside the key),
'conformance bearer-bridge --upstream URL --listen HOST:PORT --token-file FILE [--bind-as PROFILE]'
(adds the bearer token, and a host binding, for HTTP clients that cannot send them)."""


def run_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="conformance", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    parser.add_argument("--target", required=True, help="stdio:CMD, an http(s):// URL, or reference")
    parser.add_argument("--profile", type=Path, help="the target's conformance profile (spec/profile.md); without "
                        "one only the checks that need no host identity run (the reference's is generated)")
    parser.add_argument("--era", choices=["legacy", "modern", "both"], default="both")
    parser.add_argument("--select", action="append", default=[], help="check or requirement id prefix (repeatable)")
    parser.add_argument("--tool", action="append", default=[], metavar="NAME",
                        help="only the checks whose cases call this tool (search or engram_memory_search; "
                             "repeatable), and those that judge every tool the target serves: a partial report")
    parser.add_argument("--fail-fast", action="store_true", help="stop at the first check that fails")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--examples", type=int, default=25, help="generated cases per tool and mode")
    parser.add_argument("--strict", action="store_true", help="score unverified requirements too")
    parser.add_argument("--expected-failures", type=Path, help="baseline of check ids expected to fail")
    parser.add_argument("--report-dir", type=Path, help="where to write the reports")
    parser.add_argument("--call-timeout", type=float, default=30.0)
    parser.add_argument("--level", choices=["contract", "pins"], default="contract", type=level_name,
                        help="contract (default): the contract's requirements plus the wiring the harness needs to act "
                             "as host; pins: this project's pins too (spec/refinement.json, the host wiring's choices)")
    parser.add_argument("--deep", action="store_true",
                        help="also run the checks that wait long (a confirmation TTL over 10 s, expiry windows)")
    parser.add_argument("--explore", type=int, metavar="N", help="calls per era in generated call sequences "
                        f"(default {EXPLORE_DEFAULT}, {EXPLORE_DEEP} with --deep; 0 turns exploration off)")
    parser.add_argument("--explore-trace", type=Path, metavar="FILE",
                        help="write every explored call and its judgement to this JSON lines file")
    parser.add_argument("--replica", action="append", default=[], metavar="URL",
                        help="another HTTP endpoint of the same service: concurrent clients are spread over them")
    parser.add_argument("--replay", type=Path, help=argparse.SUPPRESS)  # conformance replay FILE sets it
    parser.add_argument("--explore-shrink", type=int, help=argparse.SUPPRESS)  # conformance diff: 0
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per check")
    parser.add_argument("--format", choices=["text", "json"], default="text",
                        help="json: print only the summary as one JSON object on stdout (the console goes to stderr)")
    parser.add_argument("--sign-key", type=Path, metavar="KEY",
                        help=f"Ed25519 private key (PEM): sign the run as an in-toto attestation, "
                             f"REPORT_DIR/{ATTESTATION_FILE} (needs --report-dir)")
    parser.add_argument("--version", action="version", version=version_line())
    return parser


def usage_problems(args: argparse.Namespace) -> list[str]:
    """What makes the command line unusable, judged from the contract's data alone (spec/checks.json, the
    requirement catalog, the tools): a mistyped id or tool is said at once, before the harness loads."""
    problems = unknown_prefix_errors(args.select, check_ids() | requirement_ids())
    problems += [f"--tool {quoted(tool)} names none of the six tools (they are {short(TOOLS)}, with or without "
                 "the engram_memory_ prefix)" for tool in args.tool if tool_name(tool) is None]
    if not (args.target == "reference" or args.target.startswith(("stdio:", "http://", "https://"))):
        problems.append("--target takes stdio:CMD, an http(s):// URL, or reference")
    if args.expected_failures is not None:
        try:
            baseline = read_baseline(args.expected_failures)
        except (OSError, UnicodeDecodeError) as unreadable:
            problems.append(f"--expected-failures: cannot read {args.expected_failures} "
                            f"({getattr(unreadable, 'strerror', None) or 'not UTF-8 text'})")
        else:
            problems += unknown_baseline_errors(baseline, check_ids(), ERAS)
    return problems


def version_line() -> str:
    return f"conformance {harness_version()} (contract {load().version})"


def reference_target(workdir: Path) -> tuple[str, Path]:
    """A fresh configuration of the bundled reference server, served over stdio."""
    from engram_mcp.reference.init import write_configuration

    write_configuration(workdir, seed="demo")
    command = [sys.executable, "-m", "engram_mcp.reference", "serve", "--config", str(workdir / "server.toml")]
    return "stdio:" + shlex.join(command), workdir / "conformance-profile.toml"


# The plugin's options that this command line passes on as they are: (attribute, plugin option); a flag is passed
# when set, a list once per value, any other value when given. --strict is the plugin's --score-unverified.
PASSED_ON = (("select", "--select"), ("tool", "--tool"), ("fail_fast", "--fail-fast"),
             ("strict", "--score-unverified"), ("deep", "--deep"), ("explore", "--explore"),
             ("explore_trace", "--explore-trace"), ("replica", "--replica"), ("replay", "--replay"),
             ("explore_shrink", "--explore-shrink"), ("expected_failures", "--expected-failures"),
             ("report_dir", "--report-dir"))  # junit.xml is one of the run's reports (_junit.py)


def pytest_options(args: argparse.Namespace, target: str, profile: Path | None) -> list[str]:
    """The plugin's options for this run (run_suite adds the pytest plumbing)."""
    options = [
        "--target", target, "--era", args.era,
        "--seed", str(args.seed), "--examples", str(args.examples), "--call-timeout", str(args.call_timeout),
        "--level", args.level,
    ]
    if profile is not None:
        options += ["--profile", str(profile)]
    for attribute, option in PASSED_ON:
        value = getattr(args, attribute)
        if value is True:
            options.append(option)
        elif isinstance(value, list):
            options += [part for item in value
                        for part in (option, tool_name(item) or item if attribute == "tool" else item)]
        elif value is not None and value is not False:
            options += [option, str(value)]
    return options


def judge(args: argparse.Namespace) -> tuple[int, Run | None]:
    """Run the suite; the exit code the plugin judged, and the run (None when pytest stopped before judging)."""
    from engram_mcp.conformance.plugin import run_suite

    with tempfile.TemporaryDirectory(prefix="engram-conformance-") as scratch:
        target, profile = args.target, args.profile
        if target == "reference":
            target, generated = reference_target(Path(scratch) / "reference")
            profile = profile or generated
        outcome = run_suite(pytest_options(args, target, profile), verbose=args.verbose,
                            modules=modules_for(args.select, [tool_name(t) or t for t in args.tool]))
    return outcome.exit_code, outcome.run if outcome.run is not None and outcome.run.exit_code is not None else None
