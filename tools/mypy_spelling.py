"""A mypy plugin: no f-string of the harness spells a value the Python way.

The harness's sentences are read by people who may never have written Python: ``None``, ``True``, a list's
brackets or a dict's braces in a verdict say nothing to them (``conformance._words.spoken`` says a JSON value in
words). mypy reads each ``{value}`` of an f-string as ``"{:{}}".format(value, spec)``, so this hook sees the
value's inferred type and reports, under the error code ``python-spelling``, a value that may be None, a bool, a
container (dict, list, tuple, set) or any value shown with ``!r``. It judges only the modules whose sentences
reach a user (``CHECKED``); an f-string that builds no sentence (a file name, a JSON path, a test id) silences
the code on its line, saying why.
"""

from __future__ import annotations

from collections.abc import Callable

from mypy.errorcodes import ErrorCode
from mypy.nodes import CallExpr, MemberExpr, StrExpr
from mypy.plugin import MethodContext, Plugin
from mypy.types import (
    AnyType,
    Instance,
    LiteralType,
    NoneType,
    ProperType,
    TupleType,
    Type,
    TypedDictType,
    UnionType,
    get_proper_type,
)

PYTHON_SPELLING = ErrorCode("python-spelling", "A value spelt the Python way in a sentence", "General")
CHECKED = ("engram_mcp.conformance", "engram_mcp.contract")
# Types whose str() is Python syntax: brackets, braces, parentheses.
CONTAINERS = frozenset({
    "builtins.dict", "builtins.list", "builtins.tuple", "builtins.set", "builtins.frozenset",
    "typing.Mapping", "typing.Sequence", "typing.MutableMapping", "collections.abc.Mapping",
    "collections.abc.Sequence", "collections.abc.Set", "collections.abc.Collection", "typing.Collection",
    "typing.AbstractSet", "collections.OrderedDict", "collections.defaultdict", "collections.Counter",
})
F_STRING_PIECES = {"{:{}}": "", "{!r:{}}": "!r", "{!s:{}}": "", "{!a:{}}": "!a"}


def python_spelt(value: ProperType) -> str | None:
    """What in ``value``'s type would be spelt the Python way, or None when nothing would."""
    if isinstance(value, UnionType):
        found = next(filter(None, (python_spelt(get_proper_type(item)) for item in value.items)), None)
        return f"{found} (one of its types)" if found is not None else None
    found = None
    if isinstance(value, NoneType):
        found = "None"
    elif isinstance(value, LiteralType):
        found = "a bool" if value.fallback.type.fullname == "builtins.bool" else None
    elif isinstance(value, TupleType | TypedDictType):
        found = "a container"
    elif isinstance(value, Instance):
        names = {base.fullname for base in value.type.mro}
        if "builtins.bool" in names:
            found = "a bool"
        elif names & CONTAINERS and "builtins.str" not in names:
            found = f"a {value.type.name}"
    return found


def _judge(ctx: MethodContext) -> Type:
    call = ctx.context
    if not (isinstance(call, CallExpr) and isinstance(call.callee, MemberExpr)
            and isinstance(call.callee.expr, StrExpr) and call.callee.expr.value in F_STRING_PIECES):
        return ctx.default_return_type
    if not _checked(ctx):
        return ctx.default_return_type
    conversion = F_STRING_PIECES[call.callee.expr.value]
    if conversion:
        ctx.api.fail(f"f-string shows a value with {conversion}, a Python repr: say it with spoken()", call,
                     code=PYTHON_SPELLING)
        return ctx.default_return_type
    if ctx.arg_types and ctx.arg_types[0]:
        value = get_proper_type(ctx.arg_types[0][0])
        if not isinstance(value, AnyType):
            found = python_spelt(value)
            if found is not None:
                ctx.api.fail(f"f-string shows {found} the Python way: say it with spoken() or in words", call,
                             code=PYTHON_SPELLING)
    return ctx.default_return_type


def _checked(ctx: MethodContext) -> bool:
    tree = getattr(ctx.api, "tree", None)  # the checker's module; a plugin interface that lacks it judges nothing
    return bool(tree is not None and tree.fullname.startswith(CHECKED))


class SpellingPlugin(Plugin):
    def get_method_hook(self, fullname: str) -> Callable[[MethodContext], Type] | None:
        return _judge if fullname == "builtins.str.format" else None


def plugin(version: str) -> type[Plugin]:
    return SpellingPlugin
