"""The one reader of the contract's data files.

Everything the server and the harness know about contract 1.0.0 — tools,
schemas, error table, limits, rules, requirements, fixtures — is read here,
from files shipped inside the package, with no network.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache, cached_property
from importlib import resources
from importlib.resources.abc import Traversable
from types import MappingProxyType
from typing import Any

import referencing
import referencing.jsonschema
from jsonschema import Draft202012Validator

CONTRACT_VERSION = "1.0.0"
SCHEMA_BASE = f"https://engram-mcp.invalid/schemas/{CONTRACT_VERSION}/"

_PACKAGES = ("engram_mcp.schemas", "engram_mcp.spec", "engram_mcp.fixtures")


@dataclass(frozen=True)
class Tool:
    name: str
    title: str
    description: str
    mutability: str  # read-only | append | state-transition
    target: str | None  # the argument naming the tool's target, if any
    confirmation: str  # never | always | policy
    idempotent: bool


@dataclass(frozen=True)
class ToolError:
    code: str
    retriable: bool
    action: str
    tools: tuple[str, ...]
    message: str


@dataclass(frozen=True)
class ProtocolError:
    name: str
    jsonrpc_code: int
    message: str
    section: str
    when: str


@dataclass(frozen=True)
class Limit:
    id: str
    value: int
    unit: str
    bound: str  # minimum | maximum | default
    section: str
    description: str
    locations: tuple[tuple[str, str], ...]  # (schema file, JSON pointer)


@dataclass(frozen=True)
class Rule:
    id: str
    code: str
    mechanism: str  # schema | keyword | check
    section: str
    tools: tuple[str, ...] | str  # "*" for every tool
    title: str
    decision: str
    keywords: tuple[str, ...] = ()
    schema: str | None = None
    limit: str | None = None
    needs_clock: bool = False

    def applies_to(self, tool: str) -> bool:
        return self.tools == "*" or tool in self.tools


def _files(package: str) -> Iterator[tuple[str, Traversable]]:
    """Yield (relative path, file) for every JSON or Markdown file of a data package."""

    def walk(node: Traversable, prefix: str) -> Iterator[tuple[str, Traversable]]:
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            if child.is_dir():
                if not child.name.startswith("__"):
                    yield from walk(child, f"{prefix}{child.name}/")
            elif child.name.endswith((".json", ".md")):
                yield f"{prefix}{child.name}", child

    yield from walk(resources.files(package), "")


def _schema_id(resource: referencing.Resource[Any]) -> str:
    """Every contract schema is registered under its own ``$id``; one without is a broken bundle."""
    uri = resource.id()
    if uri is None:
        raise ValueError("a contract schema has no $id")
    return uri


class Contract:
    """Contract 1.0.0, loaded once from the package data."""

    version = CONTRACT_VERSION

    def __init__(self) -> None:
        self._raw: dict[str, dict[str, bytes]] = {}
        self._origins: dict[int, Any] = {}  # id of an input validator's schema node -> the node it copies

    def _package(self, package: str) -> dict[str, bytes]:
        """A data package's files, read on first use: a server never reads the fixtures (megabytes of them)."""
        files = self._raw.get(package)
        if files is None:
            files = self._raw[package] = {path: file.read_bytes() for path, file in _files(package)}
        return files

    # -- raw documents -------------------------------------------------
    def document(self, package: str, path: str) -> Any:
        """A JSON data file, parsed afresh (callers may mutate their copy)."""
        return json.loads(self._package(f"engram_mcp.{package}")[path])

    def text(self, package: str, path: str) -> str:
        return self._package(f"engram_mcp.{package}")[path].decode("utf-8")

    def paths(self, package: str) -> list[str]:
        return sorted(self._package(f"engram_mcp.{package}"))

    @cached_property
    def digest(self) -> str:
        """SHA-256 over every shipped data file: the contract hash in reports."""
        h = hashlib.sha256()
        for package in _PACKAGES:
            for path, content in sorted(self._package(package).items()):
                h.update(f"{package}/{path}\0".encode())
                h.update(hashlib.sha256(content).digest())
        return "sha256:" + h.hexdigest()

    # -- schemas -------------------------------------------------------
    @cached_property
    def schema_files(self) -> Mapping[str, dict[str, Any]]:
        """Every schema under schemas/, keyed by its path relative to schemas/."""
        return MappingProxyType(
            {path: self.document("schemas", path) for path in self.paths("schemas")}
        )

    @cached_property
    def registry(self) -> referencing.Registry:
        resources_ = [
            referencing.Resource.from_contents(
                schema, default_specification=referencing.jsonschema.DRAFT202012
            )
            for schema in self.schema_files.values()
        ]
        return referencing.Registry().with_resources(
            (_schema_id(resource), resource) for resource in resources_
        ).crawl()

    def schema_uri(self, path: str) -> str:
        return SCHEMA_BASE + path

    def resolve(self, uri: str) -> Any:
        """The contents behind an absolute or schemas/-relative reference."""
        if "://" not in uri:
            uri = SCHEMA_BASE + uri
        return self.registry.resolver().lookup(uri).contents

    def input_schema(self, tool: str) -> dict[str, Any]:
        return self.schema_files[f"tools/{tool}.input.json"]

    def value_schema(self, tool: str) -> dict[str, Any]:
        """This project's closed value schema of a tool (the profile's shapes, EMC-ENV-007)."""
        return self.schema_files[f"tools/{tool}.value.json"]

    def contract_value_schema(self, tool: str) -> dict[str, Any]:
        """A tool's value as the contract states it (EMC-ENV-004): its members and fixed values, open otherwise."""
        return self.schema_files[f"contract/{tool}.value.json"]

    # -- tools, errors, limits, rules ----------------------------------
    @cached_property
    def tools(self) -> Mapping[str, Tool]:
        data = self.document("spec", "tools.json")
        return MappingProxyType({t["name"]: Tool(**t) for t in data["tools"]})

    @cached_property
    def errors(self) -> Mapping[str, ToolError]:
        data = self.document("spec", "errors.json")
        return MappingProxyType(
            {
                e["code"]: ToolError(
                    code=e["code"],
                    retriable=e["retriable"],
                    action=e["action"],
                    tools=tuple(e["tools"]),
                    message=e["message"],
                )
                for e in data["tool_errors"]
            }
        )

    @cached_property
    def error_actions(self) -> Mapping[str, str]:
        return MappingProxyType(self.document("spec", "errors.json")["actions"])

    @cached_property
    def protocol_errors(self) -> Mapping[str, ProtocolError]:
        data = self.document("spec", "errors.json")
        return MappingProxyType(
            {e["name"]: ProtocolError(**e) for e in data["protocol_errors"]}
        )

    def errors_for(self, tool: str) -> list[ToolError]:
        return [e for e in self.errors.values() if tool in e.tools]

    @cached_property
    def limits(self) -> Mapping[str, Limit]:
        data = self.document("spec", "limits.json")
        return MappingProxyType(
            {
                item["id"]: Limit(
                    **{k: v for k, v in item.items() if k != "locations"},
                    locations=tuple((loc["schema"], loc["pointer"]) for loc in item["locations"]),
                )
                for item in data["limits"]
            }
        )

    def limit(self, limit_id: str) -> int:
        return self.limits[limit_id].value

    @cached_property
    def rules(self) -> Mapping[str, Rule]:
        data = self.document("spec", "rules.json")
        out = {}
        for item in data["rules"]:
            fields = dict(item)
            tools = fields.pop("tools")
            fields["tools"] = tools if tools == "*" else tuple(tools)
            fields["keywords"] = tuple(fields.get("keywords", ()))
            out[item["id"]] = Rule(**fields)
        return MappingProxyType(out)

    @cached_property
    def code_precedence(self) -> tuple[str, ...]:
        return tuple(self.document("spec", "rules.json")["precedence"])

    # -- validators ----------------------------------------------------
    def validator(self, schema: dict[str, Any]) -> Draft202012Validator:
        from engram_mcp.contract._vocabulary import ContractValidator

        return ContractValidator(schema, registry=self.registry)

    @cache
    def input_validator(self, tool: str) -> Draft202012Validator:
        """The Python validator of a tool's arguments, over its schema with every reference inlined (an error's
        ``schema`` is a copy: ``schema_origin`` gives the contract's own subschema)."""
        from engram_mcp.contract._bundle import inline_for_validation

        try:
            tree, origins = inline_for_validation(self.input_schema(tool), self.registry)
        except ValueError:  # a layout inlining cannot keep in place: the referenced schema, looked up as it goes
            return self.validator(self.input_schema(tool))
        self._origins.update(origins)
        return self.validator(tree)

    def schema_origin(self, node: Any) -> Any:
        """The contract's subschema a node of an input validator's schema was copied from (else the node itself)."""
        return self._origins.get(id(node), node)

    @cache
    def input_validity(self, tool: str) -> Callable[[Any], bool]:
        """The compiled fast check of a tool's arguments: True only for arguments the schema accepts."""
        return self.validity(self.input_schema(tool))

    def validity(self, schema: dict[str, Any]) -> Callable[[Any], bool]:
        """A compiled check of ``schema`` that answers True only for values ``validator(schema)`` accepts."""
        from engram_mcp.contract._compiled import compiled_validity

        return compiled_validity(self, schema)

    @cache
    def output_validator(self, tool: str) -> Draft202012Validator:
        return self.validator(self.advertised_output_schema(tool))

    # -- what a server advertises --------------------------------------
    @cache
    def advertised_input_schema(self, tool: str) -> dict[str, Any]:
        from engram_mcp.contract._bundle import inline

        return inline(self.input_schema(tool), self.registry)

    @cache
    def advertised_output_schema(self, tool: str) -> dict[str, Any]:
        from engram_mcp.contract._bundle import specialise_envelope

        return specialise_envelope(self, tool)

    # -- requirements and fixtures -------------------------------------
    @cached_property
    def requirements(self) -> dict[str, Any]:
        return self.document("spec", "requirements.json")

    @cached_property
    def refinement(self) -> dict[str, Any]:
        """How this project's profile narrows the answers the contract model allows (spec/refinement.json)."""
        return self.document("spec", "refinement.json")

    def fixture(self, path: str) -> Any:
        return self.document("fixtures", path)

    def data_schema(self, name: str) -> dict[str, Any]:
        """A schema that validates one of the project's own data files."""
        return self.schema_files[f"data/{name}.schema.json"]


@cache
def load() -> Contract:
    """The contract, loaded once per process."""
    return Contract()
