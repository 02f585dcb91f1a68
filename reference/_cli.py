"""engram-reference: init a configuration, serve it over stdio or HTTP, verify its store."""

from __future__ import annotations

import argparse
import logging
import secrets
import shlex
import sys
from pathlib import Path
from typing import Any

from engram_mcp.reference._config import ConfigError, load_config

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="engram-reference",
        description="The reference MCP server for Engram memory over MCP, contract 1.0.0.",
    )
    parser.add_argument("--version", action=_VersionAction)
    commands = parser.add_subparsers(dest="command", required=True)
    init = commands.add_parser("init", help="write server.toml, conformance-profile.toml and keys into DIR")
    init.add_argument("directory", type=Path)
    init.add_argument("--force", action="store_true", help="overwrite an existing configuration")
    init.add_argument("--store", metavar="URL", help="[store] url: postgresql://… for a shared PostgreSQL store")
    init.add_argument("--tools", metavar="LIST", help="grant only these tools (search,get): a server in the making")
    serve = commands.add_parser("serve", help="serve over stdio, or streamable HTTP with --http")
    serve.add_argument("--config", type=Path, required=True)
    serve.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP on this address")
    verify = commands.add_parser("verify", help="check the store's integrity and the journals' hash chains")
    verify.add_argument("--config", type=Path, required=True)
    return parser


class _VersionAction(argparse.Action):
    """--version, with the version line looked up only when asked for: the lookup scans every installed
    distribution, which each server start would otherwise pay."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **_: Any) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0,
                         help="show the version and the contract's, then exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(_version_line())
        parser.exit()


def _version_line() -> str:
    from importlib import metadata

    from engram_mcp.contract import CONTRACT_VERSION

    # The distribution that installed this package, found by its import name rather than typed again.
    names = metadata.packages_distributions().get(__name__.partition(".")[0], [])
    try:
        installed = metadata.version(names[0]) if names else "0+unknown"
    except metadata.PackageNotFoundError:
        installed = "0+unknown"
    return f"engram-reference {installed} (contract {CONTRACT_VERSION})"


def _installed(script: str, module: str) -> list[str]:
    """A command of this installation that runs as printed, whatever is on PATH: the script beside this Python
    (a virtual environment need not be activated), or ``python -m`` where there is none (a source tree)."""
    beside = Path(sys.executable).with_name(script)
    return [str(beside)] if beside.exists() else [sys.executable, "-m", module]


def _next_step(directory: Path) -> str:
    config, profile = (directory / "server.toml").resolve(), (directory / "conformance-profile.toml").resolve()
    serve = shlex.join([*_installed("engram-reference", "engram_mcp.reference"), "serve", "--config", str(config)])
    certify = shlex.join([*_installed("conformance", "engram_mcp.conformance"), "--target", f"stdio:{serve}",
                          "--profile", str(profile)])
    return f"next: certify the server this configuration serves with\n  {certify}"


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) <= 65_535:
        raise ValueError("--http takes HOST:PORT")
    return host.strip("[]"), int(port)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="engram-reference: %(message)s")
    try:
        if args.command == "init":
            from engram_mcp.reference._init import ALL_TOOLS, served_tools, write_configuration

            tools = served_tools(args.tools) if args.tools is not None else ALL_TOOLS
            if (args.directory / "server.toml").exists() and not args.force:
                print(f"engram-reference: {args.directory / 'server.toml'} exists (use --force)", file=sys.stderr)
                return EXIT_USAGE
            written = write_configuration(args.directory, seed=secrets.token_hex(4), store_url=args.store,
                                          tools=tools)
            for path in written:
                print(path)
            sys.stdout.flush()
            print(_next_step(args.directory), file=sys.stderr)  # stdout stays the list of files written
            return EXIT_OK
        config = load_config(args.config)
        if args.command == "verify":
            from engram_mcp.reference._verify import inspect_store

            findings = inspect_store(config)
            for problem in findings.problems:
                print(f"FAIL {problem}")
            for warning in findings.warnings:
                print(f"WARN {warning}")
            for erasure in findings.pending_erasures:
                print(f"PENDING {erasure}")  # not a failure: the server finishes it once no reader pins the old bytes
            problems = findings.problems
            verified = "store verified: integrity ok, journal chain ok, audit chain ok"
            print("store verification failed" if problems else verified)
            return EXIT_FAILED if problems else EXIT_OK
        from engram_mcp.reference._serve import serve_http, serve_stdio

        if args.http:
            host, port = _address(args.http)
            serve_http(config, host, port)
        else:
            serve_stdio(config)
        return EXIT_OK
    except (ConfigError, ValueError) as problem:
        print(f"engram-reference: {problem}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
