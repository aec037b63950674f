"""Deploy output formats: one module per format in this package, each defining ``FORMAT``
(a :class:`Format`: its name, what it writes, and how it renders a
:class:`pdtp.Deployment` as files). ``Deployment.files``/``write`` and ``pdtp deploy
--format`` read this registry, so a new format is one module here (found by name, like the
connectors' deploy modules); :func:`register` adds one at run time.

>>> from pdtp.deployment.formats import names
>>> names()
('json', 'k8s', 'scripts')
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import import_module
from typing import TYPE_CHECKING

from ...errors import InvalidArgumentError

if TYPE_CHECKING:
    from ..build import Deployment

__all__ = ["Format", "format_of", "formats", "names", "register"]


@dataclass(frozen=True)
class Format:
    """One deploy output format: ``render`` maps a deployment to ``{file name: text}``."""

    name: str
    summary: str
    render: Callable[[Deployment], dict[str, str]]


_added: dict[str, Format] = {}


@cache
def _modules() -> tuple[Format, ...]:
    out = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        fmt = getattr(import_module(f"{__name__}.{info.name}"), "FORMAT", None)
        if isinstance(fmt, Format):
            out.append(fmt)
    return tuple(out)


def formats() -> tuple[Format, ...]:
    """Every format: this package's modules, then the :func:`register`-ed ones."""
    return (*_modules(), *_added.values())


def names() -> tuple[str, ...]:
    return tuple(f.name for f in formats())


def format_of(name: object) -> Format:
    """The format called ``name``; anything else names the formats there are."""
    for f in formats():
        if name == f.name:
            return f
    raise InvalidArgumentError(f"format must be one of {', '.join(names())}, got {name!r}")


def register(fmt: Format) -> Format:
    """Add a format at run time (a module in this package needs no call)."""
    if not isinstance(fmt, Format):
        raise InvalidArgumentError(f"register takes a Format, got {type(fmt).__name__}")
    if fmt.name in names():
        raise InvalidArgumentError(f"a format named {fmt.name!r} exists")
    _added[fmt.name] = fmt
    return fmt
