"""The ``vllm serve`` line of one instance: environment, arguments and ``--kv-transfer-config``,
as the plan's vLLM release reads them.

Release facts (each checked against vLLM's source in tests/test_deploy_vllm.py):

- The connector's ``kv_connector_extra_config`` and environment come from its module in
  ``deployment/connectors/`` (MoRIIO's mode, backend and host keys per release; NIXL's side
  channel).
- Aggregated instances (one engine doing both phases) get no ``--kv-transfer-config`` and no
  connector environment: a router spreads requests over them.
- ``--quantization fp8`` (online FP8 quantization of a 16-bit checkpoint) when the plan sized
  the weights as FP8 but the checkpoint is not: without it vLLM loads the 16-bit weights.
- The flags used (``--tensor-parallel-size``, ``--pipeline-parallel-size``,
  ``--data-parallel-size`` (``-local``, ``--data-parallel-start-rank``, ``-address``,
  ``-rpc-port``), ``--enable-expert-parallel``, ``--headless``, ``--port``,
  ``--gpu-memory-utilization``, ``--kv-cache-dtype``, ``--served-model-name``,
  ``--kv-transfer-config``) exist in every supported release; ``--nnodes``, ``--node-rank``,
  ``--master-addr`` from 0.11.1.

This module is the one launch-line maker: ``pdtp deploy`` (scripts, manifests, JSON),
``Plan.vllm_commands()`` (what ``pdtp solve`` prints), ``replan`` and the deploy diff all take
their lines from :func:`launch`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._shell import command_line
from ..errors import InvalidArgumentError
from ..layout import Layout
from .adapter import PlannedInstance, PlanView
from .connectors import connector_of
from .ports import InstancePorts, PortBases
from .versions import Version

# `vllm serve --nnodes/--node-rank/--master-addr` (multi-node without Ray) from 0.11.1.
MULTINODE_SINCE = Version(0, 11, 1)
# vLLM's ROCm platform refuses HIP_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES that differ, so on
# AMD both are set (an inherited CUDA_VISIBLE_DEVICES would otherwise stop the instance).
_AMD_DEVICE_ENVS = ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
# vLLM's DP coordinator and torch.distributed rendezvous ports of a multi-node instance
# (vLLM's defaults 29550 and 29501, moved per instance by its first device on its first node).
DP_RPC_PORT_BASE = 29550
MASTER_PORT_BASE = 29600


def layout_args(layout: Layout) -> list[str]:
    """The ``vllm serve`` arguments of one instance's layout."""
    argv = ["--tensor-parallel-size", str(layout.tp)]
    if layout.pp > 1:
        argv += ["--pipeline-parallel-size", str(layout.pp)]
    if layout.dp > 1:
        argv += ["--data-parallel-size", str(layout.dp)]
    if layout.ep:
        argv.append("--enable-expert-parallel")
    return argv


def multinode_args(layout: Layout, nodes: int, rank: int, address: str, ordinal: int) -> list[str]:
    """What one node of an instance spanning ``nodes`` whole nodes adds: data-parallel ranks
    split evenly over the nodes (``--data-parallel-size-local``; the first node runs the API
    server and the DP coordinator, the others ``--headless`` from their start rank), or
    pipeline stages over the nodes (vLLM's multiprocessing multi-node launch: ``--nnodes``,
    ``--node-rank``, ``--master-addr``; vLLM >= 0.11.1)."""
    if nodes <= 1:
        return []
    if layout.dp > 1:
        local = layout.dp // nodes
        argv = [
            "--data-parallel-size-local",
            str(local),
            "--data-parallel-address",
            address,
            "--data-parallel-rpc-port",
            str(DP_RPC_PORT_BASE + ordinal),
        ]
        if rank > 0:
            argv = ["--headless", "--data-parallel-start-rank", str(rank * local), *argv]
        return argv
    argv = [
        "--nnodes",
        str(nodes),
        "--node-rank",
        str(rank),
        "--master-addr",
        address,
        "--master-port",
        str(MASTER_PORT_BASE + ordinal),
    ]
    return ["--headless", *argv] if rank > 0 else argv


@dataclass(frozen=True)
class Launch:
    """One instance's launch: ``env`` (name, value) pairs, then ``argv`` (``vllm serve …``)."""

    env: tuple[tuple[str, str], ...]
    argv: tuple[str, ...]
    kv_transfer_config: dict[str, Any]

    @property
    def command(self) -> str:
        """The shell line (every value quoted): ``NAME=value … vllm serve …``."""
        return command_line(self.argv, dict(self.env))

    def to_dict(self) -> dict[str, Any]:
        return {
            "env": dict(self.env),
            "argv": list(self.argv),
            "kv_transfer_config": self.kv_transfer_config,
            "command": self.command,
        }


def launch(
    view: PlanView,
    inst: PlannedInstance,
    ports: InstancePorts,
    *,
    version: Version,
    host: str,
    proxy_host: str,
    bases: PortBases,
    backend: str | None,
    visible_devices: bool = True,
    leader_host: str | None = None,
) -> Launch:
    """``host`` is the address peers reach this instance at (a node's address, or
    ``$(POD_IP)`` in Kubernetes); ``backend`` the connector's transport (None: its own
    choice). ``visible_devices=False`` leaves device selection to a device plugin. An instance
    spanning nodes meets at ``leader_host`` (its first node): DP ranks with
    ``--data-parallel-size-local`` / ``--data-parallel-address``, pipeline stages with
    ``--nnodes`` / ``--node-rank`` / ``--master-addr`` (vLLM >= 0.11.1); the other nodes run
    ``--headless``."""
    env: list[tuple[str, str]] = []
    if visible_devices:
        devices = ",".join(map(str, inst.devices))
        names = _AMD_DEVICE_ENVS if view.vendor == "AMD" else (view.visible_devices_env,)
        env += [(name, devices) for name in names]
    role = view.prefill_role if inst.role == "prefill" else view.decode_role
    config: dict[str, Any] = {"kv_connector": view.kv_connector, "kv_role": role}
    conn = None if inst.aggregated else connector_of(view.kv_connector)
    if conn is None:
        config = {}
    else:
        extra, conn_env = conn.transfer(
            view,
            inst,
            ports,
            version=version,
            host=host,
            proxy_host=proxy_host,
            bases=bases,
            backend=backend,
        )
        env += conn_env
        if extra is not None:
            config["kv_connector_extra_config"] = extra
    argv = ["vllm", "serve", view.model_ref, *layout_args(inst.layout)]
    if inst.parts > 1:
        if inst.dp == 1 and version < MULTINODE_SINCE:
            raise InvalidArgumentError(
                f"{inst.name}: pipeline stages over {inst.parts} nodes need vLLM >= "
                f"{MULTINODE_SINCE} (--nnodes/--node-rank), got {version}; use a newer release "
                "or a Ray cluster"
            )
        argv += multinode_args(
            inst.layout, inst.parts, inst.part, leader_host or host, min(inst.devices)
        )
    argv += ["--port", str(ports.http)]
    argv += ["--gpu-memory-utilization", f"{view.gpu_memory_utilization:g}"]
    if view.quantization is not None:
        argv += ["--quantization", view.quantization]
    if view.kv_dtype == "fp8":
        argv += ["--kv-cache-dtype", "fp8"]
    if view.served_model_name is not None:
        argv += ["--served-model-name", view.served_model_name]
    if conn is not None:
        argv += conn.transfer_argv(config)
        argv += conn.engine_args(view, version)
    return Launch(tuple(env), tuple(argv), config)
