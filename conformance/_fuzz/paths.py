"""Paths into JSON values, and copies edited at a path.

A path is a tuple of object keys and array indices. Every edit returns a deep
copy, so one base value can seed many cases. Standard library only (shared with
tools/make_fixtures.py).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

Path = tuple[str | int, ...]


def get_at(node: Any, path: Path) -> Any:
    for step in path:
        node = node[step]
    return node


def put(base: Any, path: Path, value: Any) -> Any:
    """A deep copy of base with the value at path set (added when missing)."""
    if not path:
        return copy.deepcopy(value)
    out = copy.deepcopy(base)
    get_at(out, path[:-1])[path[-1]] = copy.deepcopy(value)
    return out


def drop(base: Any, path: Path) -> Any:
    """A deep copy of base without the member (or item) at path."""
    out = copy.deepcopy(base)
    del get_at(out, path[:-1])[path[-1]]
    return out


def edit(base: Any, change: Callable[[Any], object]) -> Any:
    """A deep copy of base after change has mutated it in place."""
    out = copy.deepcopy(base)
    change(out)
    return out


def rename(node: Any, old: str, new: str) -> Any:
    """A copy with every string value equal to old replaced by new (keys untouched)."""
    if isinstance(node, str):
        return new if node == old else node
    if isinstance(node, list):
        return [rename(item, old, new) for item in node]
    if isinstance(node, dict):
        return {key: rename(value, old, new) for key, value in node.items()}
    return node


def label_of(path: Path) -> str:
    """A readable path: payload.components[0].text; the root is (arguments)."""
    text = "".join(f"[{step}]" if isinstance(step, int) else f".{step}" for step in path)
    return text.lstrip(".") or "(arguments)"


def walk(node: Any, path: Path = ()) -> Iterator[tuple[Path, Any]]:
    """Every value with its path, in document order: a container before what it holds."""
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from walk(value, path + (key,))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from walk(item, path + (i,))


def object_paths(node: Any) -> list[Path]:
    """Every path that holds a JSON object, the arguments themselves first."""
    return [path for path, value in walk(node) if isinstance(value, dict)]


def member_paths(node: Any) -> list[Path]:
    """Every object member, at every depth (a member's path ends with its key)."""
    return [path for path, _ in walk(node) if path and isinstance(path[-1], str)]


def array_paths(node: Any) -> list[Path]:
    """Every path that holds an array."""
    return [path for path, value in walk(node) if isinstance(value, list)]


def string_paths(node: Any) -> list[Path]:
    """Every path that holds a string."""
    return [path for path, value in walk(node) if isinstance(value, str)]
