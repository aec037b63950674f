"""KV-connector profiles. The rules themselves are rows of data in the Rust core
(``src/connector.rs``); this module lists them and resolves user-given names."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import cache
from typing import Any

from . import _core
from .errors import UnknownNameError


@dataclass(frozen=True)
class Connector:
    """One KV connector's identity and the vLLM settings that launch it."""

    name: str
    kv_connector: str
    prefill_role: str
    decode_role: str
    requires_replicated_heads: bool
    summary: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@cache
def _all() -> tuple[Connector, ...]:
    return tuple(Connector(**d) for d in _core.connectors())


def connectors() -> list[Connector]:
    """Every connector pdtp knows, in the order the core lists them."""
    return list(_all())


def connector_names() -> list[str]:
    return [c.name for c in _all()]


def resolve_connector(name: Any) -> Connector:
    """The profile called ``name`` (case-insensitive; ``_`` and ``-`` alike)."""
    if isinstance(name, Connector):
        return name
    if not isinstance(name, str):
        raise TypeError(f"connector must be a string, got {type(name).__name__} {name!r}")
    key = name.strip().lower().replace("_", "-")
    for c in _all():
        if c.name == key:
            return c
    names = connector_names()
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise UnknownNameError(f"connector must be one of {', '.join(names)}, got {name!r}{hint}")
