"""NIXL (``NixlConnector``, pull mode): how ``pdtp deploy`` launches it, per release.

Release facts (each checked against vLLM's source in tests/test_deploy_vllm.py):

- NIXL advertises ``VLLM_NIXL_SIDE_CHANNEL_HOST`` (default ``localhost``: unreachable from
  another node) and listens on ``VLLM_NIXL_SIDE_CHANNEL_PORT``: in vLLM 0.11.0 each TP rank at
  ``VLLM_NIXL_SIDE_CHANNEL_PORT + dp_rank · tp_size + tp_rank``; from 0.11.1 one listener per
  engine at ``VLLM_NIXL_SIDE_CHANNEL_PORT + data-parallel rank/index``.
- The proxy: ``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py``, given every
  prefill and decode instance's host and HTTP port (same options in every supported release).
- Data parallel: the router picks a request's prefill engine and passes its id to decode,
  which handshakes lazily with each prefill engine a request names.
- Hybrid models (Mamba-type layers), 0.20.0 on: the worker moves the Mamba conv state by
  sub-projection and asserts the DS conv-state layout at start (``assert
  is_conv_state_dim_first()``, 0.20.0 ``nixl/worker.py:154``); vLLM defaults to SD, so every
  instance gets ``VLLM_SSM_CONV_STATE_LAYOUT=DS`` (pdtp's check warns ``needs_setting``).
- The hybrid KV-cache manager, 0.18.0-0.21.x: NixlConnector supports it, but vLLM turns it off
  for any ``--kv-transfer-config`` unless launched with ``--no-disable-hybrid-kv-cache-manager``
  (0.18.0 ``vllm/config/vllm.py:1163``; 0.22.0 on it stays on for a connector that supports
  it): without the flag a model with Mamba-type layers fails at engine start and
  sliding-window layers move every block. Instances of such models get the flag (pdtp's
  check warns ``hybrid_kv_cache_manager_off``, ``needs_setting``). Before 0.18.0 no flag
  helps: pdtp refuses Mamba-type models there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..versions import Version
from .base import KvConnector, Pairing, ProxySpec, port_offset

if TYPE_CHECKING:
    from ..adapter import PlannedInstance, PlanView
    from ..ports import InstancePorts, PortBases

# NIXL's side channel became one listener per engine after 0.11.0 (per TP rank before).
NIXL_ONE_LISTENER_SINCE = Version(0, 11, 1)
# NIXL asserts the DS Mamba conv-state layout for hybrid models from 0.20.0 (see above).
NIXL_MAMBA_DS_SINCE = Version(0, 20, 0)
MAMBA_CONV_LAYOUT_ENV = ("VLLM_SSM_CONV_STATE_LAYOUT", "DS")
# The releases whose hybrid KV-cache manager stays on with NIXL only with HMA_FLAG.
NIXL_HMA_FLAG_RELEASES = (Version(0, 18, 0), Version(0, 22, 0))
HMA_FLAG = "--no-disable-hybrid-kv-cache-manager"
NIXL_PROXY_PATH = "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py"


class Nixl(KvConnector):
    names = ("nixl", "nixl-legacy")
    display = "NIXL"
    proxy_kind = "nixl"

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
        assert ports.side_channel is not None
        # Peers reach this instance's side channel at the host's address (the default,
        # localhost, works on one node only).
        env = [
            ("VLLM_NIXL_SIDE_CHANNEL_HOST", host),
            ("VLLM_NIXL_SIDE_CHANNEL_PORT", str(ports.side_channel)),
        ]
        if view.hybrid and version >= NIXL_MAMBA_DS_SINCE:
            env.append(MAMBA_CONV_LAYOUT_ENV)
        return None, env

    def engine_args(self, view: PlanView, version: Version) -> list[str]:
        since, until = NIXL_HMA_FLAG_RELEASES
        if (view.hybrid or view.sliding) and since <= version < until:
            return [HMA_FLAG]
        return []

    def instance_ports(self, bases: PortBases, slot: int) -> dict[str, int]:
        return {"side_channel": bases.nixl_side_channel + slot}

    def bound_ports(
        self,
        version: Version,
        owner: str,
        ports: InstancePorts,
        tp: int,
        dp: int,
        dps: range,
    ) -> list[tuple[int, str]]:
        assert ports.side_channel is not None
        if version >= NIXL_ONE_LISTENER_SINCE:
            return [(ports.side_channel + d, f"NIXL side channel (dp {d})") for d in dps]
        return [
            (ports.side_channel + port_offset(d, t, tp), f"NIXL side channel (dp {d}, tp {t})")
            for d in dps
            for t in range(tp)
        ]

    def proxy(
        self, version: Version, bases: PortBases, backends: list[Any], listen_host: str
    ) -> ProxySpec:
        prefill = [b for b in backends if b.role == "prefill"]
        decode = [b for b in backends if b.role == "decode"]
        args = ["--host", listen_host, "--port", str(bases.proxy_http)]
        args += ["--prefiller-hosts", *(b.host for b in prefill)]
        args += ["--prefiller-ports", *(str(b.port) for b in prefill)]
        args += ["--decoder-hosts", *(b.host for b in decode)]
        args += ["--decoder-ports", *(str(b.port) for b in decode)]
        return ProxySpec(
            source_path=NIXL_PROXY_PATH,
            args=tuple(args),
            pip_packages=("fastapi", "httpx", "uvicorn"),
            needs_vllm=False,
            discovery_port=None,
            kind=self.proxy_kind,
        )

    def describe_proxy(self, discovery_port: int | None) -> str:
        return (
            "vLLM's NIXL reference proxy: it sends each request to a prefill instance, then to a "
            "decode instance (round robin over the instances listed below)."
        )

    def restart_proxy(self, stops: bool, proxy_changes: bool) -> str:
        return "vLLM's NIXL proxy only knows the instances it was started with"

    def pairing(self, prefill_dp: int) -> Pairing:
        return Pairing(
            "the prefill engine id in kv_transfer_params (the router picks it)", prefill_dp, False
        )


CONNECTOR = Nixl()
