"""KV-connector profiles, per vLLM release.

vLLM's connector rules change between releases, so a connector is a name *and* a vLLM version:
``resolve_connector("nixl", vllm_version="0.20.0")``. The rules themselves are rows of data in
the Rust core (``src/connector/``), each holding for a range of releases and proven against
vLLM's own code of every release (``tests/data/golden/``); this module names and resolves
them. ``Connector.key`` (``"nixl@0.20.0"``) is the string every ``_core`` function takes.

A connector is one object in the core (its name, engine, vendors, roles and rules per
release) and one module in ``pdtp/deployment/connectors/`` (how it is launched); this module
and that package are the only places that know connectors by name.

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
    #: The serving engine whose releases key the rules (``"vllm"``, ``"sglang"``); for an
    #: SGLang connector ``vllm_version`` and ``rules_version`` are SGLang releases.
    engine: str = "vllm"
    #: How output names the engine (``"vLLM"``, ``"SGLang"``).
    engine_label: str = "vLLM"
    #: Other names that resolve to this connector.
    aliases: tuple[str, ...] = ()
    #: The only GPU vendor its worker starts on (None: any).
    gpu_vendor: str | None = None
    #: The vendor whose GPU types it may pair with each other (None: one GPU type only).
    mixes_vendor: str | None = None
    #: The GPU vendors on which pdtp picks it when no connector is named.
    default_for: tuple[str, ...] = ()
    #: Where the engine's rules take TP sizes only (not layouts): what the sizes mean.
    tp_only: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @property
    def engine_version(self) -> str:
        """The engine release the rules are of (``vllm_version`` holds it for every engine)."""
        return self.vllm_version

    @property
    def label(self) -> str:
        """``"moriio (READ mode), vLLM 0.33.0"``: what check/solve output prints."""
        mode = f" ({self.mode.upper()} mode)" if self.mode else ""
        newer = (
            f" (rules of {self.rules_version}, the newest pdtp knows)"
            if self.rules_version != self.vllm_version
            else ""
        )
        return f"{self.name}{mode}, {self.engine_label} {self.vllm_version}{newer}"

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
        engine=info.engine,
        engine_label=info.engine_label,
        aliases=tuple(info.aliases),
        gpu_vendor=info.gpu_vendor,
        mixes_vendor=info.mixes_vendor,
        default_for=tuple(info.default_for),
        tp_only=info.tp_only,
    )


def connector_names() -> list[str]:
    """vLLM's connectors (what defaults, listings and ``--connector`` offer); SGLang's
    backends (``sglang-*``) resolve too but run in another engine: :func:`all_connector_names`."""
    return [n for n in _core.connector_names() if _resolve(n).engine == "vllm"]


def all_connector_names() -> list[str]:
    """Every connector the core knows, of every engine."""
    return list(_core.connector_names())


def _known_names() -> dict[str, str]:
    """Every name and alias -> the connector's name."""
    return _names_of(tuple(all_connector_names()))


@cache
def _names_of(names: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for name in names:
        out[name] = name
        for alias in _resolve(name).aliases:
            out[alias] = name
    return out


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
    norm = base.strip().lower().replace("_", "-")
    known = _known_names()
    label = _resolve(known[norm]).engine_label if norm in known else "vLLM"
    if keyed and vllm_version is not None and keyed.strip() != vllm_version.strip():
        raise InvalidArgumentError(
            f"connector {name!r} names {label} {keyed} but "
            f"{'sglang_version' if label == 'SGLang' else 'vllm_version'}={vllm_version!r}: "
            "give one"
        )
    version = vllm_version if vllm_version is not None else (keyed or None)
    names = all_connector_names()
    if norm not in known:
        import difflib  # only for the error's suggestion

        close = difflib.get_close_matches(norm, list(known), n=3, cutoff=0.3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UnknownNameError(f"connector must be one of {', '.join(names)}, got {base!r}{hint}")
    norm = known[norm]
    return _resolve(norm if version is None else f"{norm}@{version.strip()}")


def engine_connector(connector: Any, **versions: str | None) -> tuple[Any, str | None]:
    """``(connector, vllm_version)`` for the calls that take every engine's release keyword
    (``vllm_version=``, ``sglang_version=``: :func:`pdtp.engine.version_options`): another
    engine's release goes into the connector's key (``"sglang-nixl@0.5.9"``), which every
    later step resolves. A release keyword of an engine other than the connector's is an
    :class:`~pdtp.errors.InvalidArgumentError`.

    >>> engine_connector("sglang-nixl", vllm_version=None, sglang_version="0.5.9")
    ('sglang-nixl@0.5.9', None)
    """
    from .engine import DEFAULT_ENGINE, ENGINES

    by_option = {e.version_option: e for e in ENGINES.values()}
    for option, version in versions.items():
        if option not in by_option:
            raise ArgumentTypeError(f"unexpected keyword argument {option!r}")
        if version is not None and not isinstance(version, str):
            example = ENGINES[by_option[option].name].default_version
            raise ArgumentTypeError(
                f"{option} must be a string like {example!r}, got "
                f"{type(version).__name__} {version!r}"
            )
    name = connector.name if isinstance(connector, Connector) else connector
    runs_in = connector.engine if isinstance(connector, Connector) else None
    if isinstance(name, str):
        norm = name.partition("@")[0].strip().lower().replace("_", "-")
        known = _known_names()
        runs_in = _resolve(known[norm]).engine if norm in known else runs_in
    given = {by_option[o]: v for o, v in versions.items() if v is not None}
    default = ENGINES[DEFAULT_ENGINE]
    for eng, version in given.items():
        if eng.name == (runs_in or DEFAULT_ENGINE):
            continue
        if eng.name == DEFAULT_ENGINE and runs_in is not None:
            theirs = ENGINES[runs_in]
            raise InvalidArgumentError(
                f"connector {name!r} runs in {theirs.label}: give {theirs.version_option}=, "
                f"not {eng.version_option}={version!r}"
            )
        else:
            names = [n for n in all_connector_names() if _resolve(n).engine == eng.name]
            raise InvalidArgumentError(
                f"{eng.version_option}={version!r} is for {eng.label}'s connectors "
                f"({', '.join(names)}), got connector={name!r}"
            )
    own = given.pop(default, None)
    if not given:
        return connector, own
    ((eng, version),) = given.items()
    return resolve_connector(name, version.strip()).key, None


def register_connector(
    name: str,
    *,
    kv_connector: str,
    rules_of: str,
    prefill_role: str = "kv_both",
    decode_role: str = "kv_both",
    summary: str = "",
    gpu_vendor: str | None = None,
    mixes_vendor: str | None = None,
    mode: str | None = None,
    aliases: tuple[str, ...] = (),
) -> Connector:
    """Add a connector to the core for the rest of the process: vLLM class
    ``kv_connector``, the ``kv_role`` of each side, the rules of the known connector
    ``rules_of`` (a new kind of rule is code in ``src/connector/`` and ``src/check.rs``),
    the only vendor it starts on and the vendor whose GPU types it pairs. It then checks
    and plans like a built-in one; ``pdtp deploy`` launches it once a module for its class
    is registered (:func:`pdtp.deployment.connectors.register`). Raises
    :class:`~pdtp.errors.InvalidArgumentError` naming the field at fault."""
    text = {"name": name, "kv_connector": kv_connector, "rules_of": rules_of}
    text.update(prefill_role=prefill_role, decode_role=decode_role, summary=summary)
    optional = {"gpu_vendor": gpu_vendor, "mixes_vendor": mixes_vendor, "mode": mode}
    for field, value in [*text.items(), *((k, v) for k, v in optional.items() if v is not None)]:
        if not isinstance(value, str):
            raise ArgumentTypeError(f"{field} must be a string, got {type(value).__name__}")
    if isinstance(aliases, str) or not all(isinstance(a, str) for a in aliases):
        raise ArgumentTypeError("aliases must be a sequence of strings")
    _core.register_connector(
        name,
        kv_connector,
        prefill_role,
        decode_role,
        rules_of,
        summary,
        gpu_vendor,
        mixes_vendor,
        mode,
        list(aliases),
    )
    return resolve_connector(name)


#: The connector pdtp picks when none is named, per GPU vendor (each core object's
#: ``default_for``): MoRIIO needs AMD's MoRI (ROCm only), so NVIDIA GPUs get NIXL.
DEFAULT_CONNECTOR: dict[str, str] = {
    vendor: name for name in connector_names() for vendor in _resolve(name).default_for
}


#: The GPU vendor pdtp assumes without a GPU to go by (``check`` and ``transfer_map`` without
#: ``gpu=``), and so the connector it picks then.
NO_GPU_VENDOR = "AMD"
NO_GPU_CONNECTOR: str = DEFAULT_CONNECTOR[NO_GPU_VENDOR]
#: The connectors ``pdtp plot pairs`` compares by default: each vendor's default.
VENDOR_DEFAULTS: tuple[str, ...] = tuple(dict.fromkeys(DEFAULT_CONNECTOR.values()))


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


def connector_help() -> str:
    """Every connector for ``--help``: ``moriio (READ mode; the default on AMD GPUs), …``."""
    out = []
    for name in connector_names():
        c = _resolve(name)
        notes = [f"{c.mode.upper()} mode"] if c.mode else []
        notes += [f"the default on {v} GPUs" for v in c.default_for]
        if c.gpu_vendor:
            notes.append(f"{c.gpu_vendor} GPUs only")
        out.append(f"{name} ({'; '.join(notes)})" if notes else name)
    return ", ".join(out)


def check_release(vllm_version: str) -> None:
    """Raise unless some connector covers ``vllm_version`` (the error is that of the
    connector covering the most releases, which names the widest range)."""
    widest = max(connector_names(), key=lambda n: len(connectors_releases(n)))
    resolve_connector(widest, vllm_version)


@cache
def connectors_releases(name: str) -> tuple[str, ...]:
    """The releases of :data:`VLLM_RELEASES` connector ``name`` resolves at."""
    out = []
    for release in VLLM_RELEASES:
        try:
            resolve_connector(name, release)
        except InvalidArgumentError:
            continue
        out.append(release)
    return tuple(out)


def gpu_violation(connector: Connector, vendor: str) -> Any:
    """The connector's refusal of GPUs of ``vendor`` (a :class:`~pdtp.violations.Violation`:
    MoRIIO off AMD raises vLLM's ``RuntimeError`` at engine start), or ``None``."""
    from .violations import core_violation

    raw = _core.connector_gpu_violation(connector.key, vendor)
    return None if raw is None else core_violation(raw)
