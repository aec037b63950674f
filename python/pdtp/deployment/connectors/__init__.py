"""One module per KV connector: everything ``pdtp deploy`` writes for it (the
``--kv-transfer-config`` JSON, environment variables, the ports its ranks bind, the proxy in
front, how data-parallel ranks pair, what output calls it). The rest of pdtp asks this
registry; nothing else branches on a connector's name or class.

A new connector is one module here defining ``CONNECTOR`` (a :class:`KvConnector`) — the
registry finds it — plus its object in the Rust core (``src/connector/``), which holds its
name, vLLM class, roles, vendors and rules per release.

>>> from pdtp.deployment.connectors import connector_of
>>> connector_of("NixlConnector").display
'NIXL'
"""

from __future__ import annotations

import pkgutil
from functools import cache
from importlib import import_module

from ...errors import InvalidArgumentError
from .base import KvConnector, Pairing, ProxySpec, plan_read_mode, port_offset

__all__ = [
    "KvConnector",
    "Pairing",
    "ProxySpec",
    "connector_of",
    "connectors",
    "kv_connectors",
    "named",
    "plan_read_mode",
    "port_offset",
    "register",
]

_EXTRA: list[KvConnector] = []


@cache
def _modules() -> tuple[KvConnector, ...]:
    """Every module of this package that defines ``CONNECTOR``, in name order."""
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name == "base" or info.name.startswith("_"):
            continue
        conn = getattr(import_module(f"{__name__}.{info.name}"), "CONNECTOR", None)
        if isinstance(conn, KvConnector):
            found.append(conn)
    return tuple(found)


def connectors() -> tuple[KvConnector, ...]:
    """Every connector ``pdtp deploy`` launches (the package's modules, then any
    :func:`register`-ed)."""
    return (*_modules(), *_EXTRA)


def register(conn: KvConnector) -> KvConnector:
    """Add a connector defined outside this package (its names must be new)."""
    taken = {n for c in connectors() for n in c.names}
    if not conn.names or taken & set(conn.names):
        raise InvalidArgumentError(f"connector names {conn.names} are empty or taken")
    _EXTRA.append(conn)
    return conn


def kv_connectors() -> tuple[str, ...]:
    """vLLM's class names of every connector deploy launches."""
    return tuple(dict.fromkeys(c.kv_connector for c in connectors()))


def connector_of(kv_connector: str) -> KvConnector:
    """The connector of vLLM class ``kv_connector``; :class:`~pdtp.errors.InvalidArgumentError`
    naming the classes deploy writes launch settings for otherwise."""
    for c in connectors():
        if c.kv_connector == kv_connector:
            return c
    raise InvalidArgumentError(
        f"plan 'kv_connector' must be {' or '.join(kv_connectors())} for pdtp deploy, got "
        f"{kv_connector!r}"
    )


def named(name: str) -> KvConnector | None:
    """The connector that launches pdtp connector ``name``, or the one whose default name
    ``name`` extends (``"moriio-x"``: a MoRIIO mode the rules do not name yet); else None."""
    for c in connectors():
        if name in c.names:
            return c
    for c in connectors():
        if name.startswith(f"{c.names[0]}-"):
            return c
    return None
