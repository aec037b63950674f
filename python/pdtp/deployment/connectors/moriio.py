"""MoRIIO (``MoRIIOConnector``, AMD's MoRI): how ``pdtp deploy`` launches it, per release.

Release facts (each checked against vLLM's source in tests/test_deploy_vllm.py):

- MoRIIO ships from 0.14.0. Its mode: until 0.22.x only the environment variable
  ``VLLM_MORIIO_CONNECTOR_READ_MODE`` selects READ; from 0.23.0 only
  ``kv_connector_extra_config.read_mode`` does (the variable is ignored). WRITE is the default
  in every release, so pdtp always states the mode. The transport ``backend`` key exists from
  0.22.0 (RDMA only before); ``host_ip`` from 0.24.0 (before, the advertised address is
  ``VLLM_HOST_IP`` or whatever ``get_ip()`` guesses).
- Ports: each (DP rank, TP rank) binds its handshake listener at ``handshake_port +
  get_port_offset(dp_rank, tp_rank)`` and its notify socket at ``notify_port +
  get_port_offset(dp_rank, tp_rank)`` (``MoRIIOConfig.from_vllm_config`` in
  ``moriio_common.py``, ``side_channel_port`` in ``moriio_connector.py``): vLLM calls
  ``get_port_offset`` *without* ``tp_size``, so the offset is ``dp_rank + tp_rank``.
- The proxy: ``moriio_toy_proxy_server.py`` from vLLM's examples. Instances register
  themselves (heartbeats to ``proxy_ip:proxy_ping_port``, carrying their HTTP address,
  handshake/notify address, TP size and transfer mode) and the proxy embeds both peers'
  addresses in each request id — the MoRIIO handshake needs it. It lives in
  ``examples/online_serving/disaggregated_serving/`` until 0.20.x and
  ``examples/disaggregated/disaggregated_serving/`` from 0.21.0; it takes ``--port`` from
  0.21.0 (10001 fixed before) and ``--service-discovery-port`` from 0.33.0 (36367 fixed
  before); it imports vLLM itself from 0.18.0 and hypercorn from 0.26.0.
- Data parallel: the router pins a request's prefill DP rank
  (``kv_transfer_params["remote_dp_rank"]``); every decode rank handshakes with every
  prefill DP rank at startup.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from ...errors import InvalidArgumentError
from ..versions import Version
from .base import KvConnector, Pairing, ProxySpec, port_offset

if TYPE_CHECKING:
    from ..adapter import PlannedInstance, PlanView
    from ..ports import InstancePorts, PortBases

MORIIO_SINCE = Version(0, 14, 0)
MORIIO_BACKEND_KEY_SINCE = Version(0, 22, 0)
MORIIO_READ_MODE_KEY_SINCE = Version(0, 23, 0)
MORIIO_HOST_IP_KEY_SINCE = Version(0, 24, 0)
MORIIO_READ_MODE_ENV = "VLLM_MORIIO_CONNECTOR_READ_MODE"
# MoRIIO folds a rank's global data_parallel_rank to its rank on the node
# (``fold_local_rank(data_parallel_rank, data_parallel_size_local)`` before
# ``get_port_offset`` in ``MoRIIOConfig.from_vllm_config``): the headless node of a
# multi-node DP instance binds handshake_port + 0.. again. Read in the 0.32.0 and 0.33.0
# sources; older releases are taken to bind the global rank.
MORIIO_FOLDS_DP_RANK_SINCE = Version(0, 32, 0)
MORIIO_EXAMPLES_MOVED = Version(0, 21, 0)
MORIIO_PORT_OPTION_SINCE = Version(0, 21, 0)
MORIIO_DISCOVERY_OPTION_SINCE = Version(0, 33, 0)
MORIIO_IMPORTS_VLLM_SINCE = Version(0, 18, 0)
MORIIO_HYPERCORN_SINCE = Version(0, 26, 0)
MORIIO_REGEX = (Version(0, 16, 0), Version(0, 19, 1))  # releases importing `regex`
# The proxy's fixed ports before they became options (vLLM's defaults ever since).
MORIIO_FIXED_HTTP_PORT = 10001
MORIIO_FIXED_DISCOVERY_PORT = 36367
# The pdtp names of MoRIIO's WRITE mode (every other name of this module is READ mode).
WRITE_NAMES = ("moriio-write",)


@lru_cache(maxsize=4096)
def moriio_offsets(version: Version, dp_rank: int, tp_rank: int, tp: int) -> tuple[int, int]:
    """``(bound, dialed)``: the offset from ``handshake_port`` MoRIIO rank (dp_rank, tp_rank)
    binds, and the one a peer dials to reach it, as release ``version`` derives them (the
    Rust core's per-release facts, proven against vLLM's code by the layout golden data: the
    bind adds the ranks in every release; the dial adds them before 0.27.0 and strides by TP
    from 0.27.0)."""
    from ... import _core

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
    with TP > 1 in every release so far) is left to ``check_disjoint``, which names both;
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


def _fixed(field: str, given: int, fixed: int, version: Version) -> None:
    if given != fixed:
        raise InvalidArgumentError(
            f"ports.{field} must be {fixed} with vLLM {version}: its MoRIIO proxy has that port "
            f"fixed, got {given}"
        )


class MoRIIO(KvConnector):
    names = ("moriio", *WRITE_NAMES)
    display = "MoRIIO"
    proxy_kind = "moriio"
    since = MORIIO_SINCE
    registers_with_proxy = True

    def read_mode(self, name: str, given: bool | None) -> bool | None:
        # pdtp checks "moriio" with READ-mode rules; "moriio-write" is WRITE mode.
        return given if given is not None else name not in WRITE_NAMES

    def why_backend_restarts(self, old: str | None, new: str | None) -> str:
        return (
            f"MoRIIO's backend changes from {old} to {new} (xgmi moves KV within one node "
            "only; deploy with backend='rdma' / --backend rdma to grow past one node without "
            "restarts)"
        )

    def label(self, read_mode: bool | None) -> str:
        return f"MoRIIO {'READ' if read_mode else 'WRITE'} mode"

    def transfer(
        self,
        view: PlanView,
        inst: PlannedInstance,
        ports: InstancePorts,
        *,
        version: Version,
        host: str,
        proxy_host: str,
        bases: PortBases,
        backend: str | None,
    ) -> tuple[dict[str, Any] | None, list[tuple[str, str]]]:
        env: list[tuple[str, str]] = []
        extra: dict[str, Any] = {
            "proxy_ip": proxy_host,
            "proxy_ping_port": bases.proxy_discovery,
            "http_port": ports.http,
            "handshake_port": ports.handshake,
            "notify_port": ports.notify,
        }
        mode = "true" if view.read_mode else "false"
        if version >= MORIIO_READ_MODE_KEY_SINCE:
            extra["read_mode"] = mode
        else:
            env.append((MORIIO_READ_MODE_ENV, mode))
        if version >= MORIIO_BACKEND_KEY_SINCE and backend is not None:
            extra["backend"] = backend
        if version >= MORIIO_HOST_IP_KEY_SINCE:
            extra["host_ip"] = host
        else:
            env.append(("VLLM_HOST_IP", host))
        return extra, env

    def backend(
        self,
        placed: tuple[PlannedInstance, ...],
        version: Version,
        requested: str | None,
    ) -> tuple[str | None, str]:
        """MoRIIO's transport and why (RDMA across nodes; xGMI when one node suffices)."""
        if version < MORIIO_BACKEND_KEY_SINCE:
            if requested == "xgmi":
                raise InvalidArgumentError(
                    f"backend xgmi needs vLLM {MORIIO_BACKEND_KEY_SINCE} or later (MoRIIO in "
                    f"{version} has RDMA only)"
                )
            return None, f"MoRIIO in vLLM {version} transfers over RDMA only (no backend key)"
        one_node = len({i.node for i in placed}) == 1
        if requested == "xgmi" and not one_node:
            raise InvalidArgumentError(
                "backend xgmi works within one node; this plan spans several"
            )
        if requested is not None:
            return requested, ""
        if not one_node:
            return "rdma", "backend rdma: instances on different nodes exchange KV over the NICs"
        prefill_tp = max((i.tp for i in placed if i.role == "prefill"), default=0)
        decode_tp = max((i.tp for i in placed if i.role == "decode"), default=0)
        if decode_tp > prefill_tp:
            return "rdma", (
                "backend rdma although one node holds everything: MoRIIO's xGMI transfer fails "
                "when the decode TP is larger than the prefill TP (vLLM's MoRIIO guide)"
            )
        return "xgmi", (
            "backend xgmi: every instance is on one node, so KV moves over the GPU fabric "
            "(growing beyond this node restarts every instance on RDMA; backend='rdma' avoids "
            "that)"
        )

    def k8s_backend(self, version: Version) -> str | None:
        return "rdma" if version >= MORIIO_BACKEND_KEY_SINCE else None

    def host_notes(self, not_ip: list[str]) -> list[str]:
        if not not_ip:
            return []
        return [
            f"MoRIIO advertises each instance's host ({', '.join(not_ip)}) to its peers for "
            "the KV transfer: give the nodes' IP addresses on the RDMA network if those "
            "names resolve elsewhere"
        ]

    def instance_ports(self, bases: PortBases, slot: int) -> dict[str, int]:
        return {"handshake": bases.moriio_handshake + slot, "notify": bases.moriio_notify + slot}

    def bound_ports(
        self,
        version: Version,
        owner: str,
        ports: InstancePorts,
        tp: int,
        dp: int,
        dps: range,
    ) -> list[tuple[int, str]]:
        assert ports.handshake is not None and ports.notify is not None
        check_moriio_dials(owner, version, tp, dp)
        fold = dps.start if version >= MORIIO_FOLDS_DP_RANK_SINCE else 0
        out = []
        for d in dps:
            for t in range(tp):
                # vLLM passes no tp_size here (see the module docstring).
                off = moriio_offsets(version, d - fold, t, tp)[0]
                out.append((ports.handshake + off, f"MoRIIO handshake (dp {d}, tp {t})"))
                out.append((ports.notify + off, f"MoRIIO notify (dp {d}, tp {t})"))
        return out

    def proxy_ports(self, bases: PortBases) -> list[tuple[int, str]]:
        return [(bases.proxy_discovery, "MoRIIO registration (proxy_ping_port)")]

    def proxy(
        self, version: Version, bases: PortBases, backends: list[Any], listen_host: str
    ) -> ProxySpec:
        folder = (
            "examples/disaggregated/disaggregated_serving"
            if version >= MORIIO_EXAMPLES_MOVED
            else "examples/online_serving/disaggregated_serving"
        )
        args: list[str] = []
        if version >= MORIIO_PORT_OPTION_SINCE:
            args += ["--port", str(bases.proxy_http)]
        else:
            _fixed("proxy_http", bases.proxy_http, MORIIO_FIXED_HTTP_PORT, version)
        if version >= MORIIO_DISCOVERY_OPTION_SINCE:
            args += ["--service-discovery-port", str(bases.proxy_discovery)]
        else:
            _fixed("proxy_discovery", bases.proxy_discovery, MORIIO_FIXED_DISCOVERY_PORT, version)
        packages = ["quart", "aiohttp", "msgpack", "pyzmq"]
        if MORIIO_REGEX[0] <= version <= MORIIO_REGEX[1]:
            packages.append("regex")
        if version >= MORIIO_HYPERCORN_SINCE:
            packages.append("hypercorn")
        return ProxySpec(
            source_path=f"{folder}/moriio_toy_proxy_server.py",
            args=tuple(args),
            pip_packages=tuple(packages),
            needs_vllm=version >= MORIIO_IMPORTS_VLLM_SINCE,
            discovery_port=bases.proxy_discovery,
            kind=self.proxy_kind,
        )

    def describe_proxy(self, discovery_port: int | None) -> str:
        return (
            f"vLLM's MoRIIO reference proxy: instances register with it on port "
            f"{discovery_port} (heartbeats), it routes each request to a prefill, then a "
            f"decode instance."
        )

    def readme_mode(self, read_mode: bool | None) -> str:
        flag = "true" if read_mode else "false"
        return f' (`"read_mode": "{flag}"`, stated explicitly: vLLM\'s default is WRITE)'

    def restart_proxy(self, stops: bool, proxy_changes: bool) -> str:
        if stops:
            return "vLLM's MoRIIO proxy keeps routing to instances that stopped"
        return super().restart_proxy(stops, proxy_changes)

    def pairing(self, prefill_dp: int) -> Pairing:
        return Pairing(
            'kv_transfer_params["remote_dp_rank"] (the router pins it)', prefill_dp, True
        )


CONNECTOR = MoRIIO()
