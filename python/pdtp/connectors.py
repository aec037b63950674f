"""KV-connector profiles, per vLLM release.

vLLM's connector rules change between releases, so a connector is a name *and* a vLLM version:
``resolve_connector("nixl", vllm_version="0.20.0")``. The rules themselves are rows of data in
the Rust core (``src/connector/``), each holding for a range of releases and proven against
vLLM's own code of every release (``tests/data/golden/``); this module names and resolves
them. ``Connector.key`` (``"nixl@0.20.0"``) is the string every ``_core`` function takes.

Versions: any release from the oldest known (:data:`VLLM_RELEASES`) on. A version newer than
the newest known uses the newest known rules (:attr:`Connector.rules_version` says which).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from . import _core
from ._validate import public_api
from .errors import ArgumentTypeError, InvalidArgumentError, UnknownNameError

#: Every vLLM release pdtp's golden data covers, oldest first.
VLLM_RELEASES: tuple[str, ...] = tuple(_core.vllm_releases())
#: The release ``vllm_version=None`` means: the newest pdtp knows.
DEFAULT_VLLM_VERSION: str = VLLM_RELEASES[-1]


@dataclass(frozen=True)
class Connector:
    """One KV connector at one vLLM version: its identity, the vLLM settings that launch it
    and which release's rules apply."""

    name: str
    #: The vLLM version asked for (default: :data:`DEFAULT_VLLM_VERSION`).
    vllm_version: str
    #: The release whose rules apply: ``vllm_version`` itself, or the newest known release
    #: when ``vllm_version`` is newer than every release pdtp knows.
    rules_version: str
    #: What ``_core`` functions take: ``"name@version"``.
    key: str
    kv_connector: str
    prefill_role: str
    decode_role: str
    #: ``"read"`` or ``"write"`` for MoRIIO (set explicitly in the launch line), else ``None``.
    mode: str | None
    #: MoRIIO's replicated-KV-head guard applies to unequal TP sizes.
    requires_replicated_heads: bool
    summary: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @property
    def label(self) -> str:
        """``"moriio (READ mode), vLLM 0.33.0"``: what check/solve output prints."""
        mode = f" ({self.mode.upper()} mode)" if self.mode else ""
        newer = (
            f" (rules of {self.rules_version}, the newest pdtp knows)"
            if self.rules_version != self.vllm_version
            else ""
        )
        return f"{self.name}{mode}, vLLM {self.vllm_version}{newer}"

    def labelled(self, note: str | None) -> str:
        """:attr:`label` with why pdtp picked it (``"the default on NVIDIA GPUs"``)."""
        return f"{self.label} ({note})" if note else self.label


@cache
def _resolve(key: str) -> Connector:
    info = _core.resolve_connector(key)
    return Connector(
        name=info.name,
        vllm_version=info.vllm_version,
        rules_version=info.rules_version,
        key=info.key,
        kv_connector=info.kv_connector,
        prefill_role=info.prefill_role,
        decode_role=info.decode_role,
        mode=info.mode,
        requires_replicated_heads=info.requires_replicated_heads,
        summary=info.summary,
    )


def connector_names() -> list[str]:
    return list(_core.connector_names())


@public_api
def connectors(vllm_version: str | None = None) -> list[Connector]:
    """Every connector pdtp knows, at ``vllm_version`` (default: the newest release); a
    connector that release does not have (MoRIIO before 0.14.0, nixl-legacy after 0.13.0)
    is left out."""
    out = []
    for name in connector_names():
        try:
            out.append(resolve_connector(name, vllm_version))
        except (UnknownNameError, InvalidArgumentError):
            if vllm_version is None:
                raise
    return out


@public_api
def resolve_connector(name: Any, vllm_version: str | None = None) -> Connector:
    """The profile of connector ``name`` at ``vllm_version``.

    ``name`` is a connector name (case-insensitive; ``_`` and ``-`` alike), a key
    ``"name@X.Y.Z"``, or a :class:`Connector`. ``vllm_version`` (``"0.33.0"``) defaults to
    the version in the key, else :data:`DEFAULT_VLLM_VERSION`; ``nixl-legacy`` defaults to
    the last release before NIXL accepted prefill TP > decode TP. Raises
    :class:`~pdtp.errors.UnknownNameError` for an unknown name and
    :class:`~pdtp.errors.InvalidArgumentError` for a version pdtp does not cover (the message
    lists the supported range).

    >>> c = resolve_connector("moriio")
    >>> c.key, c.mode, c.kv_connector
    ('moriio@0.33.0', 'read', 'MoRIIOConnector')
    """
    if isinstance(name, Connector):
        if vllm_version is None or vllm_version == name.vllm_version:
            return name
        name = name.name
    if not isinstance(name, str):
        raise ArgumentTypeError(f"connector must be a string, got {type(name).__name__} {name!r}")
    if vllm_version is not None and not isinstance(vllm_version, str):
        raise ArgumentTypeError(
            f"vllm_version must be a string like '0.33.0', got "
            f"{type(vllm_version).__name__} {vllm_version!r}"
        )
    base, _, keyed = name.partition("@")
    if keyed and vllm_version is not None and keyed.strip() != vllm_version.strip():
        raise InvalidArgumentError(
            f"connector {name!r} names vLLM {keyed} but vllm_version={vllm_version!r}: give one"
        )
    version = vllm_version if vllm_version is not None else (keyed or None)
    norm = base.strip().lower().replace("_", "-")
    names = connector_names()
    if norm not in names:
        import difflib  # only for the error's suggestion

        close = difflib.get_close_matches(norm, names, n=3, cutoff=0.3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UnknownNameError(f"connector must be one of {', '.join(names)}, got {base!r}{hint}")
    return _resolve(norm if version is None else f"{norm}@{version.strip()}")


#: The connector pdtp picks when none is named, per GPU vendor: MoRIIO needs AMD's MoRI
#: (ROCm only), so NVIDIA GPUs get NIXL.
DEFAULT_CONNECTOR: dict[str, str] = {"AMD": "moriio", "NVIDIA": "nixl"}


def default_connector(vendors: Any) -> tuple[str, str]:
    """The connector for GPUs of ``vendors`` (``"AMD"``/``"NVIDIA"``, one or several) when
    none is named, and the note the output prints: ``moriio`` when every GPU is AMD, else
    ``nixl`` (it runs on both; MoRIIO fails on NVIDIA GPUs when the engine starts).

    >>> default_connector(["NVIDIA"])
    ('nixl', 'the default on NVIDIA GPUs')
    """
    found = sorted({vendors} if isinstance(vendors, str) else set(vendors))
    if found == ["AMD"]:
        return DEFAULT_CONNECTOR["AMD"], "the default on AMD GPUs"
    if found == ["NVIDIA"]:
        return DEFAULT_CONNECTOR["NVIDIA"], "the default on NVIDIA GPUs"
    return DEFAULT_CONNECTOR["NVIDIA"], "the default for a pool with NVIDIA GPUs"


def gpu_violation(connector: Connector, vendor: str) -> Any:
    """The connector's refusal of GPUs of ``vendor`` (a :class:`~pdtp.violations.Violation`:
    MoRIIO off AMD raises vLLM's ``RuntimeError`` at engine start), or ``None``."""
    from .violations import core_violation

    raw = _core.connector_gpu_violation(connector.key, vendor)
    return None if raw is None else core_violation(raw)
