"""Host adapters: how the harness binds calls and answers confirmations for one kind of host wiring.

The harness plays the host. The host wiring's own wiring (a signed binding
in ``_meta``, confirmation by form elicitation) is built in as the
``signed-meta`` kind. A server that takes its binding elsewhere is certified by
an adapter for its kind, named in the profile's ``binding.kind``:

* a package declares it under the ``engram_mcp.host_adapters`` entry-point
  group (``my-kind = my_package.module:factory``), or
* code in the same process calls :func:`register`.

A factory takes the loaded :class:`Profile` and returns the pair
``(HostBinding, Confirmer)``; it raises :class:`ProfileError` when the profile
lacks what it needs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import EntryPoint, entry_points
from typing import Protocol

from engram_mcp.conformance._host import (
    FORGERY_WORDS,
    Answer,
    Confirmer,
    ElicitationConfirmer,
    Forgery,
    HostBinding,
    NoBinding,
    SignedMetaBinding,
)
from engram_mcp.conformance._profile import Profile, ProfileError, ScopeProfile
from engram_mcp.conformance._words import spoken

ENTRY_POINT_GROUP = "engram_mcp.host_adapters"
BUILT_IN_KIND = "signed-meta"

__all__ = [
    "BUILT_IN_KIND",
    "ENTRY_POINT_GROUP",
    "FORGERY_WORDS",
    "AdapterFactory",
    "Answer",
    "Confirmer",
    "ElicitationConfirmer",
    "Forgery",
    "HostBinding",
    "Profile",
    "ProfileError",
    "ScopeProfile",
    "SignedMetaBinding",
    "adapter_for",
    "host_from_profile",
    "kinds",
    "register",
    "registered",
]


class AdapterFactory(Protocol):
    """Builds the host for one binding kind from the run's profile."""

    def __call__(self, profile: Profile) -> tuple[HostBinding, Confirmer]: ...


def _signed_meta(profile: Profile) -> tuple[HostBinding, Confirmer]:
    return SignedMetaBinding.from_profile(profile), ElicitationConfirmer()


# Registered in this process; they take precedence over entry points of the same name.
_registry: dict[str, AdapterFactory] = {}


def register(kind: str, factory: AdapterFactory) -> None:
    """Make ``kind`` usable in a profile's ``binding.kind`` for this process."""
    if kind == BUILT_IN_KIND:
        raise ValueError(f"{spoken(BUILT_IN_KIND)} is built in and cannot be replaced")
    _registry[kind] = factory


@contextmanager
def registered(kind: str, factory: AdapterFactory) -> Iterator[None]:
    """:func:`register` for the duration of a block (tests, embedding)."""
    previous = _registry.get(kind)
    register(kind, factory)
    try:
        yield
    finally:
        if previous is None:
            _registry.pop(kind, None)
        else:
            _registry[kind] = previous


def _declared() -> dict[str, EntryPoint]:
    return {point.name: point for point in entry_points(group=ENTRY_POINT_GROUP)}


def kinds() -> list[str]:
    """Every binding kind this process can serve: built in, registered, or declared by an installed package."""
    return sorted({BUILT_IN_KIND, *_registry, *_declared()})


def adapter_for(kind: str) -> AdapterFactory:
    """The factory for ``kind``; a ProfileError names the kinds there are when none serves it."""
    if kind == BUILT_IN_KIND:
        return _signed_meta
    if kind in _registry:
        return _registry[kind]
    matches = list(entry_points(group=ENTRY_POINT_GROUP, name=kind))
    if not matches:
        raise ProfileError(f"binding.kind {spoken(kind)} has no host adapter (known: {', '.join(kinds())}; "
                           f"a package adds one under the {spoken(ENTRY_POINT_GROUP)} entry-point group)")
    try:
        factory = matches[0].load()
    except Exception as exc:  # a broken plugin is named, not shown as a traceback
        raise ProfileError(f"binding.kind {spoken(kind)}: the host adapter {matches[0].value} cannot be loaded "
                           f"({type(exc).__name__})") from None
    if not callable(factory):
        raise ProfileError(f"binding.kind {spoken(kind)}: {matches[0].value} is not callable")
    return factory


def host_from_profile(profile: Profile) -> tuple[HostBinding, Confirmer]:
    """The run's host: the adapter the profile's ``binding.kind`` names, or, without a profile, a host that binds
    nothing (every check needing a host identity then says what a profile would unlock)."""
    if not profile.given:
        return NoBinding(), ElicitationConfirmer()
    return adapter_for(profile.binding["kind"])(profile)
