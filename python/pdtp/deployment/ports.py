"""Every port a deployment binds, derived the way vLLM derives it, proven disjoint per node.

An instance is given a few base ports in its launch; each of its ranks then binds ports vLLM
derives from them:

- the HTTP API server binds ``--port`` (once per instance);
- MoRIIO (every release since 0.14.0): each (DP rank, TP rank) binds its handshake listener at
  ``handshake_port + get_port_offset(dp_rank, tp_rank)`` and its notify socket at
  ``notify_port + get_port_offset(dp_rank, tp_rank)`` (``MoRIIOConfig.from_vllm_config`` in
  ``moriio_common.py``, ``side_channel_port`` in ``moriio_connector.py``). Note that vLLM
  calls ``get_port_offset`` *without* ``tp_size``, so the offset is ``dp_rank + tp_rank``,
  not ``dp_rank · tp_size + tp_rank``;
- NIXL in vLLM 0.11.0: each TP rank listens at ``VLLM_NIXL_SIDE_CHANNEL_PORT + dp_rank ·
  tp_size + tp_rank``; from 0.11.1 one listener per engine at ``VLLM_NIXL_SIDE_CHANNEL_PORT +
  data-parallel rank/index``.

So each port family gets ``base + the instance's first device number on its node``: every
offset above is smaller than the instance's device count (``dp + tp − 1 ≤ dp · tp``), so an
instance's ports stay inside its own device span and instances sharing a node never meet —
whatever their TP sizes. :func:`check_disjoint` proves it for every deployment anyway, rank by
rank. Ports vLLM picks itself (``get_open_port()``: MoRIIO's ``local_kv_port`` and
``local_ping_port``, engine-internal sockets) come from the OS's ephemeral range (Linux:
32768-60999), so the fixed ports stay below it.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import Any

from .._validate import short_repr
from ..errors import ArgumentTypeError, InvalidArgumentError
from .adapter import MORIIO, NIXL, PlannedInstance
from .versions import Version

EPHEMERAL_START = 32768
# vLLM's example bases leave 200 ports between families (MoRIIO handshake 6300, notify 6500).
SPREAD_ABOVE = 200
# NIXL's side channel became one listener per engine after 0.11.0 (per TP rank before).
NIXL_ONE_LISTENER_SINCE = Version(0, 11, 1)
# MoRIIO folds a rank's global data_parallel_rank to its rank on the node
# (``fold_local_rank(data_parallel_rank, data_parallel_size_local)`` before
# ``get_port_offset`` in ``MoRIIOConfig.from_vllm_config``): the headless node of a
# multi-node DP instance binds handshake_port + 0.. again. Read in the 0.32.0 and 0.33.0
# sources; older releases are taken to bind the global rank.
MORIIO_FOLDS_DP_RANK_SINCE = Version(0, 32, 0)


@dataclass(frozen=True)
class PortBases:
    """First port of each family; an instance adds its first device number on its node.
    ``proxy_http`` / ``proxy_discovery`` are the proxy's HTTP port and MoRIIO's registration
    (``proxy_ping_port``) port, vLLM's example defaults."""

    http: int = 8100
    moriio_handshake: int = 6300
    moriio_notify: int = 6500
    nixl_side_channel: int = 5600
    proxy_http: int = 10001
    proxy_discovery: int = 36367

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if (
                isinstance(v, bool)
                or not isinstance(v, numbers.Integral)
                or not 1024 <= int(v) <= 65535
            ):
                raise InvalidArgumentError(
                    f"ports.{f.name} must be an integer in [1024, 65535], got {short_repr(v)}"
                )
            object.__setattr__(self, f.name, int(v))  # a numpy int must still write as JSON

    @classmethod
    def for_node(cls, gpus_per_node: int) -> PortBases:
        """The default bases for nodes of ``gpus_per_node`` GPUs: vLLM's example ports up to
        200 GPUs a node (each family spans one port per GPU); on larger nodes the families
        are laid out one node-width apart from 1100, so none overlaps another (and all stay
        below the ephemeral range, up to the 1,024 GPUs a node pdtp accepts)."""
        if gpus_per_node <= SPREAD_ABOVE:
            return cls()
        s = gpus_per_node
        return cls(
            nixl_side_channel=1100,
            moriio_handshake=1100 + s,
            moriio_notify=1100 + 2 * s,
            http=1100 + 3 * s,
        )

    @classmethod
    def of(cls, value: Any, gpus_per_node: int = 8) -> PortBases:
        """``value`` (None, a :class:`PortBases` or a dict of some fields) as bases; fields
        not given take :meth:`for_node`'s defaults."""
        if value is None:
            return cls.for_node(gpus_per_node)
        if isinstance(value, PortBases):
            return value
        if isinstance(value, dict):
            allowed = [f.name for f in fields(cls)]
            unknown = sorted(set(map(str, value)) - set(allowed))
            if unknown:
                raise InvalidArgumentError(
                    f"ports has unknown field(s) {unknown}; allowed: {', '.join(allowed)}"
                )
            return replace(cls.for_node(gpus_per_node), **value)
        raise ArgumentTypeError(
            f"ports must be a pdtp.deployment.PortBases or a dict, got {type(value).__name__}"
        )


@dataclass(frozen=True)
class InstancePorts:
    """The ports written into one instance's launch; vLLM derives each rank's from them."""

    http: int
    handshake: int | None = None  # MoRIIO kv_connector_extra_config.handshake_port
    notify: int | None = None  # MoRIIO kv_connector_extra_config.notify_port
    side_channel: int | None = None  # NIXL VLLM_NIXL_SIDE_CHANNEL_PORT

    def to_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name)}


@dataclass(frozen=True)
class BoundPort:
    """One port one process binds: ``owner`` (an instance name or ``"proxy"``) and why."""

    port: int
    owner: str
    purpose: str

    def to_dict(self) -> dict[str, Any]:
        return {"port": self.port, "owner": self.owner, "purpose": self.purpose}


def port_offset(dp_rank: int, tp_rank: int, tp_size: int = 1) -> int:
    """vLLM's ``get_port_offset`` (moriio_common.py): MoRIIO's bind calls it without
    ``tp_size`` in every release; its dial passes ``tp_size`` from 0.27.0
    (:func:`moriio_offsets` takes both from the core, per release)."""
    return dp_rank * tp_size + tp_rank


@lru_cache(maxsize=4096)
def moriio_offsets(version: Version, dp_rank: int, tp_rank: int, tp: int) -> tuple[int, int]:
    """``(bound, dialed)``: the offset from ``handshake_port`` MoRIIO rank (dp_rank, tp_rank)
    binds, and the one a peer dials to reach it, as release ``version`` derives them (the
    Rust core's per-release facts, proven against vLLM's code by the layout golden data: the
    bind adds the ranks in every release; the dial adds them before 0.27.0 and strides by TP
    from 0.27.0)."""
    from .. import _core

    try:
        got = _core.moriio_port_offsets(f"moriio@{version}", dp_rank, tp_rank, tp)
    except Exception:  # a release without MoRIIO: launch refuses it elsewhere
        got = None
    if got is None:
        off = port_offset(dp_rank, tp_rank)
        return off, off
    return got


def check_moriio_dials(owner: str, version: Version, tp: int, dp: int) -> None:
    problem = _dial_problem(version, tp, dp)
    if problem:
        raise InvalidArgumentError(f"{owner}: {problem}")


@lru_cache(maxsize=256)
def _dial_problem(version: Version, tp: int, dp: int) -> str:
    """Raise when a peer would dial one of the instance's MoRIIO ranks at a port that rank
    does not bind (``version``'s dial against its bind). Two ranks binding one offset (DP > 1
    with TP > 1 in every release so far) is left to :func:`check_disjoint`, which names both;
    pdtp's planners give MoRIIO data-parallel instances TP 1, where bind and dial agree."""
    offsets = [moriio_offsets(version, d, t, tp) for d in range(dp) for t in range(tp)]
    if len({bound for bound, _ in offsets}) < len(offsets):
        return ""
    for i, (bound, dialed) in enumerate(offsets):
        if bound != dialed:
            d, t = divmod(i, tp)
            return (
                f"MoRIIO (vLLM {version}) rank (dp {d}, tp {t}) binds "
                f"handshake_port + {bound} but a peer dials + {dialed}: give MoRIIO "
                "data-parallel instances tp=1 (pdtp's planners do)"
            )
    return ""


def instance_bound_ports(
    version: Version, kv_connector: str, inst: PlannedInstance, ports: InstancePorts
) -> list[BoundPort]:
    """:func:`bound_ports` of one planned instance (one node of it): an aggregated instance
    binds its HTTP port only; the first node of an instance spanning nodes also binds its
    DP coordinator (``--data-parallel-rpc-port``) or rendezvous (``--master-port``) port."""
    from .launch import DP_RPC_PORT_BASE, MASTER_PORT_BASE

    out = bound_ports(
        version,
        None if inst.aggregated else kv_connector,
        inst.name,
        ports,
        inst.tp,
        inst.dp,
        dp_ranks=inst.local_dp_ranks,
        api=inst.serves_api,
    )
    if inst.parts > 1 and inst.part == 0:
        slot = min(inst.devices)
        if inst.dp > 1:
            out.append(BoundPort(DP_RPC_PORT_BASE + slot, inst.name, "DP coordinator"))
        else:
            out.append(BoundPort(MASTER_PORT_BASE + slot, inst.name, "rendezvous"))
    return out


def instance_ports(kv_connector: str, inst: PlannedInstance, bases: PortBases) -> InstancePorts:
    """The base ports of ``inst``: each family's base plus the instance's first device number
    (unique on its node); an aggregated instance has its HTTP port only."""
    slot = min(inst.devices)
    if inst.aggregated:
        return InstancePorts(http=bases.http + slot)
    if kv_connector == MORIIO:
        return InstancePorts(
            http=bases.http + slot,
            handshake=bases.moriio_handshake + slot,
            notify=bases.moriio_notify + slot,
        )
    return InstancePorts(http=bases.http + slot, side_channel=bases.nixl_side_channel + slot)


def bound_ports(
    version: Version,
    kv_connector: str | None,
    owner: str,
    ports: InstancePorts,
    tp: int,
    dp: int,
    *,
    dp_ranks: range | None = None,
    api: bool = True,
) -> list[BoundPort]:
    """Every port the instance's processes on one node bind, rank by rank, as ``version``
    derives them: its ``dp_ranks`` (default all ``dp``; a headless part of an instance
    spanning nodes binds only its own DP ranks' ports, and no HTTP API: ``api=False``).
    ``kv_connector`` None: no connector (an aggregated instance)."""
    out = [BoundPort(ports.http, owner, "HTTP API (--port)")] if api else []
    dps = range(dp) if dp_ranks is None else dp_ranks
    ranks = [(d, t) for d in dps for t in range(tp)]
    if kv_connector == MORIIO:
        assert ports.handshake is not None and ports.notify is not None
        check_moriio_dials(owner, version, tp, dp)
        fold = dps.start if version >= MORIIO_FOLDS_DP_RANK_SINCE else 0
        for d, t in ranks:
            # vLLM passes no tp_size here (see the module docstring).
            off = moriio_offsets(version, d - fold, t, tp)[0]
            out.append(
                BoundPort(ports.handshake + off, owner, f"MoRIIO handshake (dp {d}, tp {t})")
            )
            out.append(BoundPort(ports.notify + off, owner, f"MoRIIO notify (dp {d}, tp {t})"))
    elif kv_connector == NIXL:
        assert ports.side_channel is not None
        if version >= NIXL_ONE_LISTENER_SINCE:
            for d in dps:
                out.append(BoundPort(ports.side_channel + d, owner, f"NIXL side channel (dp {d})"))
        else:
            for d, t in ranks:
                out.append(
                    BoundPort(
                        ports.side_channel + port_offset(d, t, tp),
                        owner,
                        f"NIXL side channel (dp {d}, tp {t})",
                    )
                )
    return out


def proxy_bound_ports(kv_connector: str | None, bases: PortBases) -> list[BoundPort]:
    out = [BoundPort(bases.proxy_http, "proxy", "proxy HTTP API")]
    if kv_connector == MORIIO:
        out.append(
            BoundPort(bases.proxy_discovery, "proxy", "MoRIIO registration (proxy_ping_port)")
        )
    return out


def check_disjoint(where: str, bound: list[BoundPort]) -> None:
    """Raise when two binds on one host share a port (naming both), or when an instance port
    is outside [1024, 32767] (vLLM's own ports come from the ephemeral range above)."""
    seen: dict[int, BoundPort] = {}
    for b in bound:
        if b.owner != "proxy" and not 1024 <= b.port < EPHEMERAL_START:
            raise InvalidArgumentError(
                f"{where}: {b.owner}'s {b.purpose} would use port {b.port}, outside [1024, "
                f"{EPHEMERAL_START - 1}] (ports above are the OS's ephemeral range, where vLLM "
                "picks its own); lower the port bases (ports=...)"
            )
        other = seen.get(b.port)
        if other is not None:
            raise InvalidArgumentError(
                f"{where}: port {b.port} is bound twice: {other.owner}'s {other.purpose} and "
                f"{b.owner}'s {b.purpose}; spread the port bases (ports=...) further apart"
            )
        seen[b.port] = b
